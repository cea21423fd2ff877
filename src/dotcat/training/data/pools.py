"""BERT_CAT's training data: negative pools from the first stages it will sit behind.

Gao, Dai & Callan (2021, "Rethink Training of BERT Rerankers in Multi-Stage Retrieval Pipeline",
ECIR, arXiv:2101.08751) train a re-ranker on negatives from its own pipeline's first stage: the
documents it will be asked to re-rank. A query's pool is the top ``depth`` of every first stage
(BM25, a dotcat index of a trained BERT_DOT, or a TREC run file), interleaved by rank, minus the
documents judged relevant (:func:`negative_pools`). Each judged (query, relevant document) pair is
an example (:func:`build_cat_examples`) whose negatives are drawn from its pool every epoch by a
hash (:func:`sample_negatives`), so a resumed or repeated run sees the same groups. The first
stages' fused scores (:func:`teacher_scores`) can teach the re-ranker beside the labels.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from dotcat.data import read_run
from dotcat.errors import DotcatError
from dotcat.search.lexical import bm25_search
from dotcat.search.pipeline import SearchPipeline
from dotcat.search.reranker import minmax, ranked
from dotcat.training.data.examples import seeded_rng
from dotcat.types import Qrels, Run

logger = logging.getLogger(__name__)


def first_stage_run(source: str, data: Any, queries: Mapping[str, str], k: int) -> Run:
    """The top ``k`` of one first stage for ``queries``: ``bm25``, an index dir (ranked as
    ``dotcat search`` ranks it: hybrid where it has BM25, which a re-ranker then sits behind) or
    a run file."""
    if source == "bm25":
        return bm25_search(data.corpus, dict(queries), k=k)
    path = Path(source)
    if (path / "manifest.json").is_file():
        return SearchPipeline(path).run(dict(queries), k=k)
    if path.is_file():
        run = ranked(read_run(path))
        missing = [q for q in queries if q not in run]
        if missing:
            logger.warning("%s: no results for %d of %d queries", path, len(missing), len(queries))
        return {q: run.get(q, [])[:k] for q in queries}
    raise DotcatError(f"first stage {source!r}: not 'bm25', an index directory or a run file")


def negative_pools(runs: Sequence[Run], qrels: Qrels, depth: int) -> dict[str, list[str]]:
    """qid -> the top ``depth`` of every run interleaved by rank, deduplicated, minus relevant.

    >>> runs = [{"q": [("a", 3), ("b", 2)]}, {"q": [("c", 9), ("a", 1)]}]
    >>> negative_pools(runs, {"q": {"b": 1}}, 2)
    {'q': ['a', 'c']}
    """
    pools: dict[str, list[str]] = {}
    for qid in {q for run in runs for q in run}:
        merged = interleave_ranks([[d for d, _ in run.get(qid, [])[:depth]] for run in runs])
        pools[qid] = [d for d in merged if qrels.get(qid, {}).get(d, 0) <= 0]
    return dict(sorted(pools.items()))


def interleave_ranks(lists: Sequence[Sequence[str]]) -> list[str]:
    """The lists merged rank by rank (a1, b1, a2, b2, ...), each id at its first place."""
    ranks = itertools.zip_longest(*lists)
    return list(dict.fromkeys(d for rank in ranks for d in rank if d is not None))


def teacher_scores(runs: Sequence[Run], depth: int) -> dict[str, dict[str, float]]:
    """qid -> doc -> the first stages' fused score: the mean of each run's min-max-normalised
    score over its top ``depth`` (0 where a run does not list the document).

    >>> teacher_scores([{"q": [("a", 3.0), ("b", 1.0)]}, {"q": [("b", 5.0), ("c", 1.0)]}], 2)
    {'q': {'a': 0.5, 'b': 0.5, 'c': 0.0}}
    """
    out: dict[str, dict[str, float]] = {}
    for run in runs:
        for qid, docs in run.items():
            head = docs[:depth]
            norm = minmax(np.asarray([s for _, s in head], dtype=np.float64))
            scores = out.setdefault(qid, {})
            for (doc, _), value in zip(head, norm, strict=True):
                scores[doc] = scores.get(doc, 0.0) + float(value) / len(runs)
    return {q: dict(sorted(d.items())) for q, d in sorted(out.items())}


def group_teacher(
    scores: Mapping[str, float], positive: str, negatives: Sequence[str]
) -> list[float]:
    """The teacher's scores of a group, the positive raised to the best of the group: the
    first stages may miss or under-rate a judged document, and the label is the truth."""
    negs = [scores.get(d, 0.0) for d in negatives]
    return [max([scores.get(positive, 0.0), *negs])] + negs


def sample_negatives(pool: Sequence[str], n: int, *key: object) -> list[str]:
    """``n`` documents of ``pool`` drawn by a hash of ``key`` (with repeats if it is short)."""
    rng = seeded_rng(*key)
    if len(pool) >= n:
        return rng.sample(list(pool), n)
    return [rng.choice(list(pool)) for _ in range(n)]


@dataclass(frozen=True)
class CatExample:
    """A judged (query, relevant document) pair; negatives are drawn per epoch."""

    qid: str
    query: str
    positive_id: str


def build_cat_examples(
    queries: Mapping[str, str],
    qrels: Qrels,
    pools: Mapping[str, Sequence[str]],
    min_relevance: int = 1,
) -> list[CatExample]:
    """One example per (query, document graded ``min_relevance`` or more) whose query has a
    non-empty pool."""
    examples, no_pool = [], 0
    for qid, text in queries.items():
        if not pools.get(qid):
            no_pool += 1
            continue
        for doc, grade in sorted(qrels.get(qid, {}).items()):
            if grade >= min_relevance:
                examples.append(CatExample(qid, text, doc))
    if no_pool:
        logger.warning("%d training queries have no first-stage negative; skipped", no_pool)
    return examples
