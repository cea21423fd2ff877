"""Cohen's kappa between assessors, against a computation by hand."""

from __future__ import annotations

import pytest

from dotcat.judging import assessor_agreement


def test_two_assessors_kappa_is_the_hand_computed_one(pooled_store):
    store = pooled_store
    docs = [e.doc_id for e in store.pooled("q1")] + [e.doc_id for e in store.pooled("q2")]
    pairs = [("q1", d) for d in docs[: len(store.pooled("q1"))]]
    pairs += [("q2", d) for d in docs[len(store.pooled("q1")) :]]
    pairs = pairs[:8]
    ann = [0, 1, 2, 3, 0, 0, 2, 1]
    bob = [0, 1, 3, 3, 1, 0, 2, 0]
    for (qid, doc), a, b in zip(pairs, ann, bob, strict=True):
        store.judge(qid, doc, "ann", a)
        store.judge(qid, doc, "bob", b)
    store.judge(pairs[0][0], pairs[0][1], "carl", None)  # a skip: no grade, not compared
    (pair,) = assessor_agreement(store)
    # By hand. Agreed on 5 of 8: p_o = 5/8. Grades of ann: 0 x3, 1 x2, 2 x2, 3 x1; of bob:
    # 0 x3, 1 x2, 2 x1, 3 x2. p_e = (3*3 + 2*2 + 2*1 + 1*2) / 64 = 17/64.
    p_o, p_e = 5 / 8, 17 / 64
    assert (pair.first, pair.second, pair.documents) == ("ann", "bob", 8)
    assert pair.observed == pytest.approx(p_o)
    assert pair.kappa == pytest.approx((p_o - p_e) / (1 - p_e))  # 0.4894
    # Binary (grade > 0): ann 0 1 1 1 0 0 1 1, bob 0 1 1 1 1 0 1 0: agreed 6/8; ann 5 relevant
    # of 8, bob 5: p_e = (3*3 + 5*5) / 64 = 34/64.
    assert pair.binary_kappa == pytest.approx((6 / 8 - 34 / 64) / (1 - 34 / 64))
    # Linear weights (Cohen 1968): disagreement |a - b| / 3; observed 1 - mean = 1 - 3/24.
    expected_disagreement = sum(
        abs(i - j) / 3 * na * nb / 64
        for i, na in enumerate([3, 2, 2, 1]) for j, nb in enumerate([3, 2, 1, 2])
    )  # fmt: skip
    assert pair.weighted_kappa == pytest.approx(1 - (3 / 24) / expected_disagreement)


def test_kappa_is_undefined_when_chance_explains_everything(pooled_store):
    store = pooled_store
    for entry in store.pooled("q1")[:3]:
        store.judge("q1", entry.doc_id, "ann", 0)
        store.judge("q1", entry.doc_id, "bob", 0)
    (pair,) = assessor_agreement(store)
    assert pair.observed == 1.0 and pair.kappa is None
