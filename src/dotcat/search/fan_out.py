"""The fan-out stages over shards: ``dense`` and ``bm25`` asked of every shard and merged.

What :class:`~dotcat.search.sharded.ShardedStages` builds for a folder of shards (see
:mod:`dotcat.search.sharded` for why each merge is the merged index's ranking): the queries are
sent in batches of :data:`BATCH`, each shard answers with its top ``k`` documents, and the lists
are merged by a key that orders them as one index would (:func:`dense_key`, :func:`bm25_key`).
Feedback reads the collection's top documents (each shard's, merged) before the search.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import logging
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from dotcat.index.bm25_global import CollectionStatistics
from dotcat.index.config import BM25Config
from dotcat.progress import progress_bar
from dotcat.search.aggregation import Match
from dotcat.search.dense import DenseRetriever, dense_retriever
from dotcat.search.feedback import (
    RM3,
    Rocchio,
    expanded_query,
    relevance_model,
    rm3_of,
    rocchio_of,
    rocchio_vectors,
)
from dotcat.search.shard import FilterQuery

# (The front's types live in dotcat.search.sharded, which imports this module: annotated Any.)
__all__ = ["FanOutBM25", "FanOutDense", "FanOutStage", "bm25_key", "dense_key", "merge"]

logger = logging.getLogger(__name__)

#: Queries sent to the shards per call (one progress step; the encoder's batch).
BATCH = 256


# -- merging ----------------------------------------------------------------------------------


def merge(
    answers: Sequence[Sequence[Match] | None], k: int, key: Callable[[int, int, Match], tuple]
) -> list[tuple[int, Match]]:
    """The top ``k`` of the shards' rankings (each sorted by ``key``), by ``key``, each with
    its shard: a k-way merge, ``O(k log shards)``."""
    ranked = [_keyed(shard, found, key) for shard, found in enumerate(answers) if found]
    merged = heapq.merge(*ranked, key=lambda entry: entry[0])
    return [(shard, m) for _, shard, m in itertools.islice(merged, k)]


def _keyed(shard: int, found: Sequence[Match], key: Callable) -> Iterator[tuple]:
    """One shard's ranking as ``(key, shard, match)`` (a function: each generator keeps
    its own shard)."""
    return ((key(shard, rank, m), shard, m) for rank, m in enumerate(found))


def dense_key(shard: int, rank: int, match: Match) -> tuple:
    """Score, then shard, then rank: FAISS orders equal scores by id, and ids rise with the
    shards."""
    return (-match.score, shard, rank)


def bm25_key(firsts: Sequence[int]) -> Callable[[int, int, Match], tuple]:
    """Score, then the best row's name (the document's id, or its best passage's collection
    id, ``firsts[shard]`` + its own, as a string): BM25 orders equal scores by it."""

    def key(shard: int, rank: int, match: Match) -> tuple:
        ref = match.passages[0][0] if match.passages else None
        passage = ref is not None and ref.stop is not None
        return (-match.score, str(ref.pid + firsts[shard]) if passage else match.doc_id)

    return key


class _FanOut:
    """What the fan-out stages share: :meth:`search` asks every shard (:meth:`ask`: texts,
    ``k`` and the filter's query -> each shard's answers) and merges each query's lists
    exactly by ``key``; its progress bar says ``desc``."""

    key: Callable[[int, int, Match], tuple] = staticmethod(dense_key)
    #: Whether queries that match no document are logged (as BM25 over one index does).
    warn_unmatched = False

    @property
    def desc(self) -> str:
        return self.name

    def search(
        self,
        queries: Mapping[str, str],
        k: int,
        *,
        show_progress: bool = False,
        admitted: Any = None,
    ) -> dict[str, list[Match]]:
        """Each query's top ``k`` documents of the collection (of those a filter admits,
        where ``admitted`` is given), asked of the shards in batches of :data:`BATCH`; none
        where the filter admits nothing."""
        if admitted is not None and admitted.documents == 0:
            return {q: [] for q in queries}
        within, qids, out = None if admitted is None else admitted.query, list(queries), {}
        with progress_bar(total=len(qids), desc=self.desc, unit="query",
                          enabled=show_progress) as bar:  # fmt: skip
            for start in range(0, len(qids), BATCH):
                chunk = qids[start : start + BATCH]
                answers = self.ask([queries[q] for q in chunk], k, within)
                for i, qid in enumerate(chunk):
                    mine = [a[i] if a is not None else None for a in answers]
                    out[qid] = _kept(self.index, merge(mine, k, self.key))
                bar.update(len(chunk))
        empty = sum(not found for found in out.values())
        if empty and self.warn_unmatched:
            logger.warning("%d of %d queries matched no document", empty, len(out))
        return out


@dataclass(frozen=True)
class FanOutDense(_FanOut):
    """The ``dense`` stage over shards: queries encoded here, searched by every shard, their
    documents merged (Rocchio first, on the collection's top vectors, where asked).

    Attributes:
        retriever: the front's retriever (its ``encoder``, as the one-index stage's).
    """

    retriever: DenseRetriever
    group: Any
    index: Any
    rocchio: Rocchio | None = None
    name: str = "dense"
    desc = "searching"

    @classmethod
    def create(cls, context: Any) -> FanOutDense:
        """Over a folder of shards: the front's encoder, Rocchio where the settings ask."""
        front = context.shared("dense", lambda: dense_retriever(context))
        return cls(front, context.group, context.index, rocchio_of(context.config))

    @property
    def score_kind(self) -> str:
        return self.retriever.score_kind

    def ask(self, texts: list[str], k: int, within: FilterQuery | None) -> list:
        vectors = self.retriever.encoder.encode_queries(texts)
        if self.rocchio is not None:
            vectors = self._rocchio(vectors, within)
        return self.group.call("dense", (vectors, k, within))

    def _rocchio(self, vectors: np.ndarray, within: FilterQuery | None = None) -> np.ndarray:
        """Rocchio's ``q'`` from the collection's top ``docs`` vectors of each query (the
        shards' tops merged by score, then id: :func:`dotcat.search.feedback.rocchio_expand`
        over one index; a filter's documents only, ``within``)."""
        n = self.rocchio.docs
        answers = self.group.call("nearest", (vectors, n, within))
        answers = [a for a in answers if a is not None]
        found = np.zeros((len(vectors), n, vectors.shape[1]), dtype=np.float32)
        present = np.zeros((len(vectors), n), dtype=bool)
        for row in range(len(vectors)):
            pooled = [
                (-float(s), int(i), shard, j)
                for shard, (scores, ids, _) in enumerate(answers)
                for j, (s, i) in enumerate(zip(scores[row], ids[row], strict=True))
                if i >= 0
            ]
            for slot, (_, _, shard, j) in enumerate(sorted(pooled)[:n]):
                found[row, slot], present[row, slot] = answers[shard][2][row, j], True
        return rocchio_vectors(np.asarray(vectors, np.float32), found, present, self.rocchio,
                               self.score_kind)  # fmt: skip


@dataclass(frozen=True)
class FanOutBM25(_FanOut):
    """The ``bm25`` stage over shards: each shard scores with the collection's statistics,
    the documents are merged (RM3 first, on the collection's top rows, where asked)."""

    group: Any
    index: Any
    statistics: CollectionStatistics
    config: BM25Config
    rm3: RM3 | None = None
    name: str = "bm25"
    score_kind: str = "bm25"
    desc = "BM25 search"
    warn_unmatched = True

    @classmethod
    def create(cls, context: Any) -> FanOutBM25:
        """Over a folder of shards: the collection's statistics, RM3 where the settings ask."""
        return cls(context.group, context.index, context.bm25, context.bm25_config,
                   rm3_of(context.config))  # fmt: skip

    def ask(self, texts: list[str], k: int, within: FilterQuery | None) -> list:
        if self.rm3 is None:
            return self.group.call("bm25", (texts, k, within))
        return self.group.call("bm25_weighted", (self._expand(texts, within), k, within))

    def _expand(
        self, texts: list[str], within: FilterQuery | None = None
    ) -> list[dict[int, float]]:
        """RM3's expanded queries (collection term ids -> weights): the collection's top
        ``fb_docs`` rows of each query (the shards' merged, by score then name; a filter's
        documents only, ``within``), their terms' relevance model, mixed with the query
        (:mod:`dotcat.search.feedback`)."""
        ids = [self.query_ids(t) for t in texts]
        counts = [dict(Counter(i)) for i in ids]
        answers = self.group.call("feedback", (counts, self.rm3.fb_docs, within))
        out = []
        for row, query in enumerate(ids):
            pooled = sorted(
                (row_ for answer in answers if answer is not None for row_ in answer[row]),
                key=lambda r: (-r[1], r[0]),
            )[: self.rm3.fb_docs]
            model = relevance_model([(t, s) for _, s, t in pooled], self.rm3.fb_terms)
            out.append(expanded_query(query, model, self.rm3) if query else {})
        return out

    @functools.cached_property
    def key(self) -> Callable[[int, int, Match], tuple]:
        """How the shards' documents are merged (:func:`bm25_key`)."""
        return bm25_key([spec.first_vector for spec in self.group.specs])

    @functools.cached_property
    def tokenizer(self):
        """A tokenizer numbering terms as the collection does (made on first use)."""
        return self.statistics.tokenizer(self.config)

    def query_ids(self, query: str) -> list[int]:
        """The query's terms as collection term ids (repeats kept; unknown terms dropped)."""
        stream = self.tokenizer.streaming_tokenize([query], update_vocab=False, allow_empty=False)
        return next(stream)


@dataclass(frozen=True)
class FanOutStage(_FanOut):
    """Any other registered first stage over shards: built on each shard as on one index
    (:meth:`dotcat.search.shard.ShardSearcher.stage`), each shard's top ``k`` merged by score,
    ties by shard then rank (:func:`dense_key`). Where the stage's scores mean the same in
    every shard, that is the merged index's ranking."""

    name: str
    score_kind: str
    group: Any
    index: Any

    @classmethod
    def create(cls, context: Any, name: str) -> FanOutStage:
        kinds = [kind for kind in context.group.call("score_kind", (name,)) if kind]
        return cls(name, kinds[0] if kinds else "rank", context.group, context.index)

    def ask(self, texts: list[str], k: int, within: FilterQuery | None) -> list:
        return self.group.call("stage", (self.name, texts, k, within))


def _kept(index: Any, merged: list[tuple[int, Match]]) -> list[Match]:
    """The merged documents, their passages' FAISS ids shifted into the collection's
    numbering, each document's shard noted (its texts are fetched from there)."""
    out = []
    for shard, m in merged:
        index.owners[m.doc_id] = shard
        shift = index.group.specs[shard].first_vector
        if shift and any(r.pid >= 0 for r, _ in m.passages):  # (BM25's whole documents: -1)
            moved = [(replace(r, pid=r.pid + shift) if r.pid >= 0 else r, s) for r, s in m.passages]
            m = Match(m.doc_id, m.score, tuple(moved))
        out.append(m)
    return out
