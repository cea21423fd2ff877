"""One shard of a collection, searched for a front that merges the shards' answers.

A folder of shard indexes is searched as one index by a front (:mod:`dotcat.search.sharded`) that
sends every batch of queries to each shard and merges what they answer. :class:`ShardSearcher` is
what a shard does. It holds the shard's FAISS index, its doc store and its BM25 index scored with
the collection's statistics (:func:`dotcat.index.bm25_global.with_collection_statistics`), and
answers in the collection's terms:

* FAISS ids are the shard's own in the documents it ranks (the front shifts those it keeps
  by :attr:`ShardSpec.first_vector`, the vectors of the shards before), and the collection's
  (shifted) everywhere else: the vectors it returns, the passages whose texts it is asked for,
  the names of BM25 rows;
* documents are ranked from their passages here (:func:`dotcat.search.aggregation.rank_documents`):
  a document lives whole in one shard, so its passages are all here, and each shard's top-k
  documents merged by score are the collection's top-k;
* BM25 terms travel as the collection's term ids (RM3's expanded queries and its feedback
  documents' terms), which this shard maps to its own;
* a filter travels as the front parsed it once (:data:`FilterQuery`: its SQL over a doc store's
  ``fields`` table, :meth:`dotcat.search.filters.Filter.sql`), and each shard admits its own
  documents from its own fields (:meth:`dotcat.index.dense_index.DenseIndex.admit`, kept for the
  searches that follow) and ranks only those, as one index does (:mod:`dotcat.index.filtered`): a
  document lives in one shard, so the shards' admitted sets make up the collection's.

It runs in the front's process or in a Ray actor (:mod:`dotcat.search.ray_shards`): what it
takes and gives is plain data (NumPy arrays, lists, dicts, dataclasses), which pickles.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from dotcat.errors import DotcatError
from dotcat.index.bm25 import BM25Index, docstore_rows
from dotcat.index.bm25_global import (
    CollectionStatistics,
    ShardStatistics,
    ShardView,
    shard_statistics,
    with_collection_statistics,
)
from dotcat.index.dense_index import DenseIndex
from dotcat.index.docstore import DocStore, PassageRef, StoredDocument
from dotcat.index.fields import FieldInfo
from dotcat.index.filtered import Admitted
from dotcat.index.manifest import DOCSTORE_NAME, Manifest
from dotcat.options import AGGREGATE_TOP, AGGREGATION
from dotcat.search.aggregation import Match
from dotcat.search.config import PipelineConfig
from dotcat.search.dense import rank_vectors
from dotcat.search.feedback import eligible_terms
from dotcat.search.lexical import BM25Stage, load_bm25
from dotcat.search.stages import FirstStage, StageContext, filters, recent

logger = logging.getLogger(__name__)

#: A feedback row: its name (what equal scores are ordered by), score, eligible terms' counts.
FeedbackRow = tuple[str, float, dict[int, float]]
#: A filter as the front sends it: its SQL over a doc store's ``fields`` table and the SQL's
#: parameters (:meth:`dotcat.search.filters.Filter.sql`).
FilterQuery = tuple[str, tuple]


@dataclass(frozen=True)
class ShardSpec:
    """Where a shard is and where it sits in the collection.

    Attributes:
        path: the shard's index directory (on Ray: as every node sees it).
        number: its place in shard order (0 first).
        first_vector: FAISS ids of the shards before it (its ids are shifted by this many).
        first_position: document positions of the shards before it.
        device: where its FAISS index searches (``cpu``, ``cuda``, ``auto``).
        search_params: FAISS search parameters over the shard's own (``nprobe``, ``efSearch``).
        aggregation, aggregate_top: how its documents are ranked from their passages.
    """

    path: str
    number: int
    first_vector: int
    first_position: int
    device: str = "cpu"
    search_params: dict[str, float] = field(default_factory=dict)
    aggregation: str = AGGREGATION
    aggregate_top: int = AGGREGATE_TOP

    @property
    def name(self) -> str:
        return Path(self.path).name


def statistics_of(spec: ShardSpec) -> ShardStatistics | None:
    """A shard's BM25 statistics (None: it has no BM25 index), read without its FAISS index."""
    manifest = Manifest.read(Path(spec.path))
    if not manifest.bm25:
        return None
    bm25 = BM25Index.load(Path(spec.path) / manifest.bm25["dir"], mmap=True)
    return shard_statistics(_counted(bm25, spec, manifest))


def collection_statistics(parts: Sequence[ShardStatistics | None]) -> CollectionStatistics | None:
    """The shards' BM25 statistics summed (None where a shard has no BM25 index)."""
    if not parts or any(p is None for p in parts):
        return None
    return CollectionStatistics.combine(parts)


class ShardSearcher:
    """One shard, searched in the collection's terms (see the module docstring).

    Args:
        spec: the shard and its place.
        view: the collection's BM25 statistics as this shard needs them
            (:meth:`dotcat.index.bm25_global.CollectionStatistics.view`); None: BM25 is not
            searched here (the collection has no BM25 side).
    """

    def __init__(self, spec: ShardSpec, view: ShardView | None = None) -> None:
        self.spec = spec
        self.index = DenseIndex(spec.path, device=spec.device, search_params=spec.search_params)
        self.bm25_index: BM25Index | None = None
        self._admitted: OrderedDict[str, Admitted] = OrderedDict()  # filter -> its documents
        self._context: StageContext | None = None  # (a registered stage's, made on first use)
        if view is not None:
            self._use_statistics(view)
        logger.info("shard %s loaded: %d documents, %d vectors", spec.name,
                    self.index.document_count, len(self.index))  # fmt: skip

    def _use_statistics(self, view: ShardView) -> None:
        bm25 = _counted(load_bm25(Path(self.spec.path), self.index), self.spec, self.index.manifest)
        passages = bool(self.index.manifest.bm25 and "passages" in self.index.manifest.bm25)
        # Rows of a passage index are named by their FAISS ids: shifted, as the merged index's.
        names = [str(int(i) + self.spec.first_vector) for i in bm25.doc_ids] if passages else None
        self.bm25_index = with_collection_statistics(bm25, view, names)
        self._passages = passages
        self._local = {int(g): local for local, g in enumerate(view.ids)}
        self._global = np.asarray(view.ids, dtype=np.int64)
        self._names = names or bm25.doc_ids
        self._eligible = eligible_terms(bm25.vocabulary, view.df, view.documents)

    # -- dense ---------------------------------------------------------------------------------

    def dense(
        self, vectors: np.ndarray, k: int, query: FilterQuery | None = None
    ) -> list[list[Match]]:
        """Each query vector's top ``k`` documents of this shard (as
        :meth:`dotcat.search.dense.DenseRetriever.batch_matches` ranks them), among those
        the filter ``query`` admits where given."""
        rows = {str(i): vector for i, vector in enumerate(vectors)}
        found = rank_vectors(self.index, rows, k, self._within(query), self.spec.aggregation,
                             self.spec.aggregate_top)  # fmt: skip
        return list(found.values())

    def nearest(
        self, vectors: np.ndarray, n: int, query: FilterQuery | None = None
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """FAISS's top ``n`` vectors for each query vector (of the documents the filter
        ``query`` admits, where given): ``(scores, collection ids, vectors)`` (what Rocchio's
        feedback reads; -1 ids pad a shard with fewer)."""
        admitted = self._within(query)
        if len(self.index) == 0 or (admitted is not None and admitted.vectors == 0):
            shape = (len(vectors), 0)
            return np.zeros(shape, np.float32), np.zeros(shape, np.int64), np.zeros(
                (*shape, self.index.dim), np.float32
            )  # fmt: skip
        scores, ids = self.index.search(np.asarray(vectors, dtype=np.float32), n, admitted)
        found = self.index.vectors(ids)
        return scores, np.where(ids >= 0, ids + self.spec.first_vector, -1), found

    # -- BM25 ----------------------------------------------------------------------------------

    def bm25(
        self, queries: Sequence[str], k: int, query: FilterQuery | None = None
    ) -> list[list[Match]]:
        """Each query's top ``k`` documents by BM25 (the query read with this shard's terms:
        a term it lacks scores nothing here anyway), among those the filter ``query`` admits
        where given."""
        return self._ranked(lambda i, n, mask: self.bm25_index.search_one(queries[i], n, mask),
                            len(queries), k, query)  # fmt: skip

    def bm25_weighted(
        self, queries: Sequence[Mapping[int, float]], k: int, query: FilterQuery | None = None
    ) -> list[list[Match]]:
        """Each weighted query's (collection term id -> weight: RM3's expanded query) top
        ``k`` documents: ``sum_t w_t * bm25(t, d)``, as
        :meth:`dotcat.search.feedback.RM3Expander.search_expanded` ranks them (among those
        the filter ``query`` admits, where given)."""

        def rows(i: int, n: int, mask: np.ndarray | None) -> list[tuple[str, float]]:
            top = self._top(self._local_weights(queries[i]), n, mask)
            return [(self.bm25_index.doc_ids[row], score) for row, score in top]

        return self._ranked(rows, len(queries), k, query)

    def _ranked(self, rows, count: int, k: int, query: FilterQuery | None) -> list[list[Match]]:
        """The top ``k`` documents of each of ``count`` queries, ranked by this shard's BM25
        stage (:meth:`dotcat.search.lexical.BM25Stage.rank`) from their rows (``rows(i, n,
        mask)``: query ``i``'s top ``n`` ``(row name, score)`` among the rows ``mask`` admits,
        the filter ``query``'s)."""
        stage, admitted = self._bm25_stage(), self._within(query)
        mask = self._row_mask(admitted)
        qids = [str(i) for i in range(count)]
        found = stage.rank(lambda q, n: rows(int(q), n, mask), qids, k, admitted)
        return [found[q] for q in qids]

    def feedback(
        self, queries: Sequence[Mapping[int, float]], n: int, query: FilterQuery | None = None
    ) -> list[list[FeedbackRow]]:
        """RM3's first search: each weighted query's top ``n`` rows (of the documents the
        filter ``query`` admits, where given), each with its name, its score and its feedback
        terms' counts (collection term ids; see
        :meth:`dotcat.search.feedback.RM3Expander.relevance_model`)."""
        self._bm25_stage()
        mask = self._row_mask(self._within(query))
        out = []
        for weights in queries:
            rows = []
            for row, score in self._top(self._local_weights(weights), n, mask):
                counts = self.bm25_index.term_frequencies(row)
                terms = {int(self._global[t]): c for t, c in counts.items() if self._eligible[t]}
                rows.append((self._names[row], score, terms))
            out.append(rows)
        return out

    def _top(
        self, weights: dict[int, float], n: int, mask: np.ndarray | None = None
    ) -> list[tuple[int, float]]:
        if not weights:
            return []
        return self.bm25_index.top(self.bm25_index.weighted_scores(weights), n, mask)

    def _row_mask(self, admitted: Admitted | None) -> np.ndarray | None:
        """The admitted rows of the BM25 index (its passages, or its documents whole)."""
        if admitted is None:
            return None
        return admitted.mask if self._passages else admitted.document_mask

    def _local_weights(self, weights: Mapping[int, float]) -> dict[int, float]:
        """A query's weights by this shard's term ids (in the query's order; terms this
        shard lacks left out: they score nothing here)."""
        return {self._local[g]: w for g, w in weights.items() if g in self._local}

    def _bm25_stage(self) -> BM25Stage:
        if self.bm25_index is None:
            raise RuntimeError(f"shard {self.spec.name}: BM25 was not set up")
        return BM25Stage(self.bm25_index, self.index, self._passages, self.spec.aggregation,
                         self.spec.aggregate_top)  # fmt: skip

    # -- a registered stage ---------------------------------------------------------------------

    def stage(
        self, name: str, texts: list[str], k: int, query: FilterQuery | None = None
    ) -> list[list[Match]]:
        """Each text's top ``k`` documents of this shard by the registered first stage
        ``name``, built on this shard as on one index (its own
        :class:`~dotcat.search.stages.StageContext`, the shard's settings); among those the
        filter ``query`` admits where given, if the stage takes a filter."""
        stage = self._registered(name)
        queries = {str(i): text for i, text in enumerate(texts)}
        admitted = self._within(query)
        if admitted is None:
            found = stage.search(queries, k)
        elif filters(stage):
            found = stage.search(queries, k, admitted=admitted)
        else:
            raise DotcatError(f"first stage {name!r} cannot search within a filter (its "
                              "search takes no `admitted`)")  # fmt: skip
        return [found.get(q, []) for q in queries]

    def score_kind(self, name: str) -> str:
        """The scale of the registered stage ``name``'s scores, built here."""
        return self._registered(name).score_kind

    def _registered(self, name: str) -> FirstStage:
        if self._context is None:
            config = PipelineConfig(device=self.spec.device, first_stage=name)
            self._context = StageContext(Path(self.spec.path), self.index, None, config)
        return self._context.stage(name)

    # -- fields and filters --------------------------------------------------------------------

    def field_kinds(self) -> dict[str, FieldInfo]:
        """This shard's fields, name -> kind and counts (:mod:`dotcat.index.fields`)."""
        return self.index.field_kinds()

    def field_values(self, names: Sequence[str]) -> dict[str, set[str]]:
        """The distinct values (as text) of this shard's fields ``names``."""
        return self.index.store.field_values(names)

    def fields_of(self, positions: Sequence[int]) -> dict[int, dict]:
        """The fields of this shard's documents at these collection positions (shifted)."""
        shift = self.spec.first_position
        found = self.index.fields_of([int(p) - shift for p in positions])
        return {pos + shift: fields for pos, fields in found.items()}

    def admit(self, query: FilterQuery) -> tuple[int, int]:
        """How many of this shard's documents, and of their vectors, the filter ``query``
        admits (the set kept for the searches that follow)."""
        admitted = self._within(query)
        return admitted.documents, admitted.vectors

    def _within(self, query: FilterQuery | None) -> Admitted | None:
        """The documents the filter ``query`` admits here (None: no filter), found once
        per filter (:func:`~dotcat.search.stages.recent`)."""
        if query is None:
            return None
        sql, params = query
        key = repr((sql, tuple(params)))
        return recent(self._admitted, key, lambda: self.index.admit(sql, list(params)))

    # -- documents -----------------------------------------------------------------------------

    def documents(self, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
        """The stored documents with these ids that this shard holds (positions shifted)."""
        shift = self.spec.first_position
        return {
            doc_id: StoredDocument(doc.pos + shift, doc.id, doc.title, doc.text)
            for doc_id, doc in self.index.store.by_ids(list(doc_ids)).items()
        }

    def passage_texts(self, pids: Sequence[int]) -> dict[int, str]:
        """What the models read of the passages with these collection ids (this shard's)."""
        shift = self.spec.first_vector
        texts = self.index.passage_texts([PassageRef(int(p) - shift, "") for p in pids])
        return {pid + shift: text for pid, text in texts.items()}

    def describe(self) -> dict:
        """The shard and the process serving it (for ``/info``)."""
        return {
            "shard": self.spec.name,
            "number": self.spec.number,
            "documents": self.index.document_count,
            "vectors": len(self.index),
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "node": _ray_node(),
        }


def _ray_node() -> str | None:
    """The Ray node this process runs on (a shard's actor), or None (no Ray here)."""
    ray = sys.modules.get("ray")  # imported by a Ray worker; never imported here
    if ray is None or not ray.is_initialized():
        return None
    return ray.get_runtime_context().get_node_id()


def _counted(bm25: BM25Index, spec: ShardSpec, manifest: Manifest) -> BM25Index:
    """``bm25`` with its term counts: saved beside it, else counted from its doc store's rows
    (an index built before they were kept: once per load, logged)."""
    if bm25.counts is None:
        logger.info("shard %s: counting BM25 terms from its doc store (an older index)", spec.name)
        with DocStore(Path(spec.path) / DOCSTORE_NAME) as store:
            by_passage = "passages" in manifest.bm25  # as it was built (documents whole, or not)
            bm25.counts = bm25.count_terms(docstore_rows(store, by_passage))
    return bm25
