"""Documents ranked from their passages: the aggregation, and the search that fetches enough.

An index with passages (:mod:`dotcat.index.passages`) holds one vector (and one BM25 row) per
passage; a first stage ranks passages and a user wants documents. :func:`aggregate` scores each
document from its passages found (Dai and Callan, "Deeper Text Understanding for IR with
Contextual Neural Language Modeling", SIGIR 2019)::

    maxp:    s(d) = max_{p in d} s(p)
    firstp:  s(d) = s(p_1), p_1 the first passage of d
    sum:     s(d) = sum of the n largest s(p), p in d (n = ``top``)
    lead:    s(d) = max(s(p_1), m_d - z * sd_q),   m_d = max_{p in d, p != p_1} s(p)

``lead`` answers MaxP's length bias: a document of many passages has many chances to score
high by chance, so where long documents are split among short ones MaxP ranks them above short
relevant documents (docs/passages.md). Under ``lead`` a document scores its first passage (what
it is about, as a document of one window does) or a later passage less a margin learned
without labels, whichever is higher: ``z`` (:data:`~dotcat.options.LEAD_MARGIN`) standard
deviations ``sd_q`` of the query's scores over an evenly spaced sample of the index's vectors
(:func:`lead_margins`). ``auto``, the default, is ``lead`` on an index that split documents
past fewer than sixteen windows one by one (``--split-over``) and MaxP elsewhere (an index that
split every document: all of many passages, none favoured; or only documents past sixteen
windows, as before); eval/studies/length_bias has the figures.

:func:`rank_documents` asks a first stage for ``k`` times the index's mean passages per
document, so that k documents come out of one search when a query's best passages spread over
documents as the collection's passages do; a query whose passages crowd into fewer documents
is asked again for twice as many, until k documents come out or the index has no more. MaxP
and FirstP are then exact: the i-th document by MaxP is the i-th distinct document down the
passage ranking, the i-th by FirstP the i-th first passage down it; ``lead`` counts only the
documents scored at or above the lowest passage fetched (a first passage not fetched is below
it, so their scores are exact). The sum is over the
passages fetched (a document's passages below the fetched depth count 0).

An index without passages is the same search with one passage per document (each vector a
whole document): k are fetched, and every rule gives the first stage's own ranking.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from dotcat.index.docstore import PassageRef
from dotcat.index.passages import SPLIT_FACTOR, split_longer_than
from dotcat.options import (
    AGGREGATE_TOP,
    AGGREGATION,
    AGGREGATIONS,
    LEAD_MARGIN,
    at_least,
    first_failure,
    one_of,
)
from dotcat.types import Run

#: A passage ranking: ``(FAISS id, score)`` pairs, best first.
PassageRanking = Sequence[tuple[int, float]]


@dataclass(frozen=True)
class Match:
    """A document ranked from its passages.

    Attributes:
        doc_id: the document.
        score: its aggregated score.
        passages: its passages found, with their scores, best first (the first is the one that
            matched: a hit's snippet, the passage a cross-encoder reads).
    """

    doc_id: str
    score: float
    passages: tuple[tuple[PassageRef, float], ...]

    @classmethod
    def whole(cls, doc_id: str, score: float) -> Match:
        """A document matched as a whole, by no passage of the index (BM25's rows, a
        stage of one's own): its one "passage" is the whole text, with no FAISS id (-1)."""
        return cls(doc_id, score, ((PassageRef(-1, doc_id), score),))


def check_aggregation(method: str, top: int) -> None:
    """Raise :class:`~dotcat.errors.SettingError` for an unknown rule or a ``top`` below 1."""
    first_failure([one_of("aggregation", method, AGGREGATIONS), at_least("aggregate_top", top, 1)])


def resolve(method: str, passages: dict | None) -> str:
    """The rule ``auto`` means on an index whose manifest records ``passages``: ``lead`` where
    documents past fewer than :data:`~dotcat.index.passages.SPLIT_FACTOR` windows were split
    one by one (``split_over``), else ``maxp``; any other rule is itself."""
    if method != "auto":
        return method
    longer = split_longer_than(passages)
    return "lead" if longer is not None and longer < SPLIT_FACTOR * passages["window"] else "maxp"


def lead_margins(index, matrix: np.ndarray) -> np.ndarray:
    """``z * sd_q`` for each query vector (rows of ``matrix``): the standard deviation of its
    scores over the index's sample of vectors, times :data:`~dotcat.options.LEAD_MARGIN`."""
    sample = index.sample()
    if not len(sample):
        return np.zeros(len(matrix))
    return LEAD_MARGIN * (np.asarray(matrix, dtype=np.float32) @ sample.T).std(axis=1)


def _lead(passages: list[tuple[PassageRef, float]], margin: float) -> float:
    first = next((s for ref, s in passages if ref.part == 0), -math.inf)
    later = max((s - margin for ref, s in passages if ref.part != 0), default=first)
    return float(max(first, later))  # (a float32 margin's difference: numpy's, not JSON's)


def aggregate(
    ranking: Sequence[tuple[PassageRef, float]],
    method: str = AGGREGATION,
    top: int = AGGREGATE_TOP,
    margin: float = 0.0,
) -> list[Match]:
    """Documents from a passage ranking (best first), best first (see the module docstring;
    ``margin``: ``lead``'s ``z * sd_q``; ``auto`` counts as ``maxp`` here).

    Equal scores keep the order in which their documents first appear in ``ranking``.
    """
    check_aggregation(method, top)
    found: dict[str, list[tuple[PassageRef, float]]] = {}
    for ref, score in ranking:
        if method == "firstp" and ref.part != 0:
            continue
        found.setdefault(ref.doc_id, []).append((ref, float(score)))
    matches = []
    for doc_id, passages in found.items():
        ordered = tuple(sorted(passages, key=lambda p: -p[1]))  # stable: ties keep their order
        if method == "lead":
            value = _lead(passages, margin)
        else:
            value = math.fsum(s for _, s in ordered[:top]) if method == "sum" else ordered[0][1]
        matches.append(Match(doc_id, value, ordered))
    return sorted(matches, key=lambda m: -m.score)  # stable: ties by first appearance


def _exact(matches: list[Match], ranking: Sequence[tuple[PassageRef, float]], method: str) -> int:
    """How many of ``matches`` (aggregated from ``ranking``) are exact: every one, but under
    ``lead`` only those scored at or above the last passage fetched."""
    if method != "lead" or not ranking:
        return len(matches)
    return sum(1 for m in matches if m.score >= ranking[-1][1])


def rank_documents(
    search: Callable[[list[str], int], Mapping[str, PassageRanking]],
    locate: Callable[[list[int]], Mapping[int, PassageRef]],
    qids: Sequence[str],
    k: int,
    *,
    vectors: int,
    documents: int,
    method: str = AGGREGATION,
    top: int = AGGREGATE_TOP,
    margins: Mapping[str, float] | None = None,
) -> dict[str, list[Match]]:
    """The top ``k`` documents of each query, from a first stage that ranks passages.

    Args:
        search: ``search(qids, n)``: each query's top ``n`` passages (fewer where the index
            has fewer that match).
        locate: where passages lie (their documents), by FAISS id.
        vectors, documents: the index's passages and documents (their ratio sets the depth).
        method, top: the aggregation (:func:`aggregate`); ``margins``: ``lead``'s, by query.
    """
    check_aggregation(method, top)
    if vectors == 0:  # every document deleted: nothing to find
        return {qid: [] for qid in qids}
    per_document = max(1.0, vectors / max(documents, 1))
    depth = min(vectors, math.ceil(k * per_document))
    out: dict[str, list[Match]] = {}
    pending = list(qids)
    while pending:
        found = search(pending, depth)
        refs = locate(sorted({pid for q in pending for pid, _ in found.get(q, ())}))
        short = []
        for qid in pending:
            passages = found.get(qid, ())
            ranking = [(refs[pid], score) for pid, score in passages]
            exhausted = len(passages) < depth or depth >= vectors
            margin = margins[qid] if margins is not None else 0.0
            matches = aggregate(ranking, method, top, margin)
            if _exact(matches, ranking, method) < k and not exhausted:
                short.append(qid)
            else:
                out[qid] = matches[:k]
        pending, depth = short, min(vectors, depth * 2)
    return {qid: out[qid] for qid in qids}


def to_run(matches: Mapping[str, Sequence[Match]]) -> Run:
    """The document run of matches: ``{qid: [(doc_id, score), ...]}``."""
    return {qid: [(m.doc_id, m.score) for m in found] for qid, found in matches.items()}
