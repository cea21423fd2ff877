"""Documents ranked from their passages: the aggregation rules, the search that fetches enough,
and the hybrid's passages."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.index.docstore import PassageRef
from dotcat.options import LEAD_MARGIN
from dotcat.search.aggregation import (
    Match,
    aggregate,
    lead_margins,
    rank_documents,
    resolve,
    to_run,
)
from dotcat.search.fusion import Fusion
from dotcat.search.hybrid import fuse_matches, fuse_tiers


def ref(pid: int, doc: str, part: int) -> PassageRef:
    return PassageRef(pid, doc, part, 10 * part, 10 * part + 10)


# A passage ranking, best first: a's best passage is its third, b's its first, c has one.
RANKING = [
    (ref(2, "a", 2), 0.9),
    (ref(5, "b", 0), 0.8),
    (ref(6, "b", 1), 0.7),
    (ref(0, "a", 0), 0.3),
    (ref(9, "c", 0), 0.6),
    (ref(1, "a", 1), 0.2),
]
RANKING.sort(key=lambda p: -p[1])


def scores(matches: list[Match]) -> list[tuple[str, float]]:
    return [(m.doc_id, round(m.score, 6)) for m in matches]


def test_maxp_scores_a_document_by_its_best_passage():
    matches = aggregate(RANKING, "maxp")
    assert scores(matches) == [("a", 0.9), ("b", 0.8), ("c", 0.6)]
    assert [r.pid for r, _ in matches[0].passages] == [2, 0, 1]  # best first
    assert matches[1].passages[0][0].part == 0


def test_firstp_scores_a_document_by_its_first_passage():
    assert scores(aggregate(RANKING, "firstp")) == [("b", 0.8), ("c", 0.6), ("a", 0.3)]


def test_sum_adds_a_document_s_best_passages():
    assert scores(aggregate(RANKING, "sum", top=2)) == [("b", 1.5), ("a", 1.2), ("c", 0.6)]
    assert scores(aggregate(RANKING, "sum", top=3)) == [("b", 1.5), ("a", 1.4), ("c", 0.6)]
    assert scores(aggregate(RANKING, "sum", top=1)) == scores(aggregate(RANKING, "maxp"))


def test_lead_scores_the_first_passage_or_a_later_one_less_the_margin():
    # a: first 0.3, later best 0.9; b: first 0.8, later 0.7; c: one passage, 0.6.
    assert scores(aggregate(RANKING, "lead", margin=0.05)) == [("a", 0.85), ("b", 0.8), ("c", 0.6)]
    assert scores(aggregate(RANKING, "lead", margin=0.5)) == [("b", 0.8), ("c", 0.6), ("a", 0.4)]
    assert scores(aggregate(RANKING, "lead", margin=0.7)) == [("b", 0.8), ("c", 0.6), ("a", 0.3)]
    assert aggregate(RANKING, "lead", margin=0.7)[2].passages[0][0].part == 2  # snippet: best
    later_only = [(ref(4, "d", 3), 0.5)]  # its first passage was below the depth fetched
    assert scores(aggregate(later_only, "lead", margin=0.25)) == [("d", 0.25)]
    margin = np.float32(0.25)  # as lead_margins gives it: a score JSON and Python can carry
    assert all(type(m.score) is float for m in aggregate(RANKING, "lead", margin=margin))


def test_lead_asks_again_until_k_documents_score_above_the_depth_fetched():
    # d's later passages (0.85, 0.8), less the margin 0.5, fall below the first search's last
    # score (0.8), and its first passage (0.05) lies deeper: asked again, d is exact (0.35).
    passages = [(1, 0.9), (2, 0.85), (3, 0.8), (4, 0.6), (5, 0.5), (6, 0.05)]
    where = {1: ref(1, "a", 0), 2: ref(2, "d", 1), 3: ref(3, "d", 2), 4: ref(4, "b", 0),
             5: ref(5, "e", 0), 6: ref(6, "d", 0)}  # fmt: skip
    depths = []

    def search(qids, n):
        depths.append(n)
        return {q: passages[:n] for q in qids}

    found = rank_documents(search, lambda ids: {i: where[i] for i in ids}, ["q"], 2,
                           vectors=6, documents=4, method="lead", margins={"q": 0.5})  # fmt: skip
    assert depths == [3, 6]
    assert scores(found["q"]) == [("a", 0.9), ("b", 0.6)]


def test_auto_is_lead_where_mid_length_documents_were_split_one_by_one_else_maxp():
    assert resolve("auto", {"window": 256, "split_longer_than": 512}) == "lead"
    assert resolve("auto", {"window": 256, "split_longer_than": 4096}) == "maxp"  # the default
    assert resolve("auto", {"window": 128}) == "maxp"
    assert resolve("auto", None) == "maxp"
    assert resolve("firstp", {"window": 256, "split_longer_than": 512}) == "firstp"


def test_lead_margins_are_z_standard_deviations_of_the_query_s_sample_scores():
    sample = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0], [-1.0, 0.0]], dtype=np.float32)
    queries = np.array([[1.0, 0.0], [0.0, 2.0]], dtype=np.float32)
    expected = LEAD_MARGIN * np.array([np.std([1, 0, 1, -1]), np.std([0, 2, 2, 0])])
    index = SimpleNamespace(sample=lambda: sample)
    np.testing.assert_allclose(lead_margins(index, queries), expected, rtol=1e-6)


def test_ties_keep_the_order_in_which_documents_first_appear():
    tied = [(ref(0, "z", 0), 0.5), (ref(1, "y", 0), 0.5), (ref(2, "x", 0), 0.5)]
    assert [m.doc_id for m in aggregate(tied, "maxp")] == ["z", "y", "x"]


def test_unknown_rules_are_refused():
    with pytest.raises(
        DotcatError, match="aggregation must be one of auto, maxp, firstp, lead, sum"
    ):
        aggregate(RANKING, "meanp")
    with pytest.raises(DotcatError, match="aggregate_top"):
        aggregate(RANKING, "sum", top=0)


def test_a_search_short_of_documents_is_asked_again_for_twice_as_many():
    """10 documents of 10 passages each; one query's best 40 passages are all in d0..d3."""
    refs = {d * 10 + p: PassageRef(d * 10 + p, f"d{d}", p) for d in range(10) for p in range(10)}
    crowded = sorted(refs, key=lambda pid: (pid // 10 > 3, pid))  # d0..d3's passages first
    calls = []

    def search(qids, n):
        calls.append(n)
        return {q: [(pid, 1.0 - i / 1000) for i, pid in enumerate(crowded[:n])] for q in qids}

    def locate(pids):
        return {p: refs[p] for p in pids}

    found = rank_documents(search, locate, ["q"], 6, vectors=100, documents=10)
    assert [m.doc_id for m in found["q"]] == ["d0", "d1", "d2", "d3", "d4", "d5"]
    assert calls == [60]  # k x 10 passages per document: enough here
    calls.clear()
    found = rank_documents(search, locate, ["q"], 6, vectors=100, documents=100)
    assert calls == [6, 12, 24, 48, 96]  # one per document at first, doubled until 6 documents
    assert len(found["q"]) == 6


def test_an_exhausted_index_gives_what_it_has():
    refs = {0: PassageRef(0, "a", 0), 1: PassageRef(1, "a", 1)}

    def search(qids, n):
        return {q: [(0, 0.9), (1, 0.5)][:n] for q in qids}

    def locate(pids):
        return {p: refs[p] for p in pids}

    found = rank_documents(search, locate, ["q"], 5, vectors=2, documents=1)
    assert to_run(found) == {"q": [("a", 0.9)]}


def test_hybrid_fuses_document_scores_and_keeps_the_larger_side_s_passage_first():
    dense = [Match("a", 0.9, ((ref(2, "a", 2), 0.9),)), Match("b", 0.5, ((ref(5, "b", 0), 0.5),))]
    bm25 = [Match("b", 12.0, ((ref(6, "b", 1), 12.0),)), Match("a", 1.0, ((ref(0, "a", 0), 1.0),))]
    fused = fuse_matches(Fusion("linear", weight=0.5), dense, bm25)
    # each is first on one side and last on the other: 0.5 each (2/3 on [1/3, 1]), ties by id
    assert [(m.doc_id, m.score) for m in fused] == [("a", 2 / 3), ("b", 2 / 3)]
    by_id = {m.doc_id: m for m in fused}
    # a: all its share from dense (its BM25 is the list's minimum), b: all from BM25
    assert [r.pid for r, _ in by_id["a"].passages] == [2, 0]
    assert [r.pid for r, _ in by_id["b"].passages] == [6, 5]
    whole = [Match.whole("a", 3.0)]
    fused = fuse_matches(Fusion("rrf"), dense[:1], whole)
    assert fused[0].passages[0][0].pid == 2  # a passage before the whole document


@pytest.mark.parametrize("method", ["linear", "rrf"])
def test_fusing_in_tiers_keeps_the_head_of_a_fusion_at_the_depth(method):
    dense = [Match(d, s, ()) for d, s in [("a", 1.0), ("b", 0.9), ("x", 0.1), ("v", 0.0)]]
    bm25 = [Match(d, s, ()) for d, s in [("y", 1.0), ("z", 0.95), ("b", 0.9), ("w", 0.0)]]
    fusion = Fusion(method, weight=0.5)
    # Read whole, b's third place in BM25 lifts it to the top; at depth 2 it has no BM25 share.
    assert fuse_matches(fusion, dense, bm25)[0].doc_id == "b"
    at_depth = [m.doc_id for m in fuse_matches(fusion, dense[:2], bm25[:2])]
    tiered = fuse_tiers(fusion, dense, bm25, depth=2)
    assert [m.doc_id for m in tiered] == [*at_depth, "x", "v", "w"]  # v, w tie: by id
    assert [m.score for m in tiered] == sorted((m.score for m in tiered), reverse=True)
    assert tiered[4].score < tiered[3].score  # the second tier under the first
