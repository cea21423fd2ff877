"""Documents ranked from their passages: the aggregation rules, the search that fetches enough,
and the hybrid's passages."""

from __future__ import annotations

import pytest

from dotcat.errors import DotcatError
from dotcat.index.docstore import PassageRef
from dotcat.search.aggregation import Match, aggregate, rank_documents, to_run
from dotcat.search.fusion import Fusion
from dotcat.search.hybrid import fuse_matches


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


def test_ties_keep_the_order_in_which_documents_first_appear():
    tied = [(ref(0, "z", 0), 0.5), (ref(1, "y", 0), 0.5), (ref(2, "x", 0), 0.5)]
    assert [m.doc_id for m in aggregate(tied, "maxp")] == ["z", "y", "x"]


def test_unknown_rules_are_refused():
    with pytest.raises(DotcatError, match="aggregation must be one of maxp, firstp, sum"):
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
