"""The query pipeline: a first stage, then optional BERT_CAT re-ranking, over one index.

One object answers queries for every caller: ``dotcat search`` (one query, a queries file, or
line by line), ``dotcat serve`` (HTTP) and Python programs. Models and indexes load once, in
the constructor; calls are safe from several threads (they take turns: on a CPU the model
work of one call already uses every core, and the server batches concurrent requests into one
call).

The pipeline composes parts chosen by its settings (:class:`PipelineConfig`):

- a first stage from the registry (:mod:`dotcat.search.stages`): ``dense`` (the index's own
  BERT_DOT and FAISS), ``bm25`` (the BM25 index inside the index directory), ``hybrid`` (both,
  fused as the index recorded on its dev queries, else linear 0.5), or any registered one; ``auto``
  (the default) is hybrid where the index has BM25, else dense: on collections unlike the
  encoder's training data BM25 often beats a dense model, and fusing is the safer default;
- a filter over the documents' fields (:mod:`dotcat.search.filters`), applied inside the
  first stage (every side searches only the admitted documents), so that k documents come
  back whenever k are admitted;
- pseudo-relevance feedback wrapping the side it rewrites (:mod:`dotcat.search.feedback`);
- over an index with passages (:mod:`dotcat.index.passages`), documents ranked from their
  passages (:mod:`dotcat.search.aggregation`: MaxP by default); a result keeps the passages
  that matched it, best first (its snippet's first; in a hybrid, first those of the side that
  gave it the larger share of its fused score);
- re-ranking, a later stage (:class:`~dotcat.search.reranker.Reranker`): the top ``depth``
  re-ordered by the cross-encoder reading each document's best ``rerank_passages`` passages
  (its logit is their highest), mixed with the first stage's score by the weight ``dotcat
  calibrate`` chose on this index's corpus, else the one ``dotcat train cat`` chose on its dev
  split, else the plain logit.

Runs, evaluation and the server's answers stay at the document level; a result carries its
document's fields.
"""

from __future__ import annotations

import copy
import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError
from dotcat.index import document_text, layout
from dotcat.index.manifest import ENCODER_KEYS
from dotcat.options import RUN_K, SHOWN_K
from dotcat.search.aggregation import Match, to_run
from dotcat.search.cluster import ClusterConfig
from dotcat.search.config import PRF_SIDES, PipelineConfig
from dotcat.search.dense import hit
from dotcat.search.facets import count_facets, facet_fields
from dotcat.search.feedback import rm3_of, rocchio_of
from dotcat.search.filters import parse_filter
from dotcat.search.hits import Hit
from dotcat.search.hybrid import index_fusion
from dotcat.search.opening import open_stages
from dotcat.search.reranker import Reranker, advise_calibration, candidate_texts
from dotcat.search.sharded import HitList
from dotcat.search.stages import FirstStage, entry, filters
from dotcat.types import Run

__all__ = ["PipelineConfig", "SearchPipeline"]

logger = logging.getLogger(__name__)


class SearchPipeline:
    """Queries in, ranked :class:`Hit` lists out, over one index directory.

    ``SearchPipeline("my-index")`` searches hybrid where the index has BM25 (as ``dotcat
    search`` does); ``SearchPipeline("my-index", rerank="my-cat", depth=50)`` re-ranks.

    Args:
        index_dir: a directory written by ``dotcat index`` or :func:`dotcat.tuning.build_and_tune`.
        config: a :class:`PipelineConfig` (defaults follow the index and the models).
        advise: log the hint to run ``dotcat calibrate`` where a dev-chosen weight meets
            another corpus (False for ``dotcat calibrate`` itself).
        settings: :class:`PipelineConfig` fields, over ``config``.

    Raises:
        DotcatError: a first stage the index cannot serve (BM25 without a BM25 index), or
            any problem loading the index or the models.
    """

    def __init__(
        self,
        index_dir: str | Path | Sequence[str | Path],
        config: PipelineConfig | None = None,
        *,
        advise: bool = True,
        cluster: ClusterConfig | None = None,
        **settings: Any,
    ) -> None:
        config = config or PipelineConfig()
        self.config = config = replace(config, **settings) if settings else config
        self._lock = threading.RLock()
        self._admitted: OrderedDict[str, Any] = OrderedDict()  # filter -> its documents
        # An index directory, or shards (a folder of them, or a list) searched as one index:
        # in this process, or on Ray (dotcat.search.sharded).
        self.stages = open_stages(index_dir, config, cluster)
        self.index_dir, self.index = self.stages.index_dir, self.stages.index
        self.manifest = self.index.manifest
        self.bm25 = self.stages.bm25
        self.first_stage = self.stages.resolve(config.first_stage)
        self.fusion = index_fusion(self.manifest.fusion, config)
        self._check_feedback()
        self.stage()  # built now (the query encoder loaded): the first query should not wait
        if config.filter:
            self.admitted(config.filter)  # checked against the index's fields now
        self.reranker = None
        if config.rerank:
            self.reranker = Reranker.from_config(config, self.manifest.rerank)
            if advise:
                advise_calibration(self.reranker, self.manifest, self.index_dir)
        logger.info("search pipeline over %s: %s", self.index_dir, self.describe())

    def reload(self) -> bool:
        """Move to the generation of the index now in place (an index updated since it was
        opened: ``dotcat add``, ``delete``, a sync, an HTTP write, a rebuild), if it is another.

        The new generation is opened and its first stage built while calls go on over the old
        one; then, between two calls, the pipeline swaps to it whole (a call runs over one
        generation). The models stay: the query encoder where the index's encoder is the same,
        the re-ranker always. Over shards: nothing (False).

        Returns:
            Whether it moved.

        Raises:
            DotcatError: the new generation cannot be opened; the old one keeps answering.
        """
        old = self.stages
        if old.generation_id is None or layout.generation_id(self.index_dir) == old.generation_id:
            return False
        stages = open_stages(self.index_dir, self.config)
        retriever = old.made("dense")
        same = all(stages.manifest.encoder.get(k) == self.manifest.encoder.get(k)
                   for k in ENCODER_KEYS)  # fmt: skip
        if retriever is not None and same:  # the loaded query encoder, over the new index
            moved = copy.copy(retriever)
            moved.index = stages.index
            stages.shared("dense", lambda: moved)
        stages.small_call_threads = old.small_call_threads
        stages.stage(stages.resolve(self.config.first_stage))  # built before the swap
        with self._lock:
            self.stages, self.index, self.manifest = stages, stages.index, stages.manifest
            self.bm25, self.fusion = stages.bm25, index_fusion(stages.manifest.fusion, self.config)
            self.first_stage = stages.resolve(self.config.first_stage)
            self._admitted.clear()
        logger.info("%s: now serving generation %d", self.index_dir, self.manifest.generation)
        return True

    def __repr__(self) -> str:
        reranker = self.reranker.cross_encoder.name if self.reranker else None
        return (
            f"SearchPipeline({str(self.index_dir)!r}, documents={len(self.index)}, "
            f"first_stage={self.first_stage!r}, fusion={self.fusion.describe()!r}, "
            f"encoder={self.manifest.encoder.get('name')!r}, rerank={reranker!r})"
        )

    # -- set-up ------------------------------------------------------------------------------

    def _check_feedback(self) -> None:
        """Feedback rewrites one side; the first stage must read it."""
        missing = [s for s in PRF_SIDES[self.config.prf] if s not in entry(self.first_stage).sides]
        if missing:
            raise DotcatError(
                f"{self.index_dir}: prf {self.config.prf!r} rewrites the {' and '.join(missing)} "
                f"side, and this index's first stage is {self.first_stage!r}"
            )

    def stage(self, name: str | None = None) -> FirstStage:
        """The first stage ``name`` (default: the pipeline's), built on first use."""
        return self.stages.stage(name or self.first_stage)

    @property
    def encoder(self):
        """The index's BERT_DOT query encoder: run from an export without PyTorch where it
        gives the index's query vectors (:mod:`dotcat.models.exported_encoder`), else a loaded
        :class:`dotcat.models.bi_encoder.BiEncoder`."""
        return self.stage("dense").retriever.encoder

    def one_thread_small_calls(self) -> None:
        """Encode single queries (and other small calls) on one intra-op thread.

        For a server: its event loop, and on a shared machine its clients, need a core the
        moment an answer is ready, and OpenMP workers spin-waiting after a two-thread call
        take it (one client's p50 17.6 ms with two threads on a quiet 2-core Zen 4, 14.9 ms
        with one thread while another process held a core).
        """
        self.stages.small_call_threads = 1
        retriever = self.stages.made("dense")
        if retriever is not None:
            retriever.encoder.single_query_threads = 1

    # -- queries -----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = SHOWN_K,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
        filter: str | None = None,
    ) -> list[Hit]:
        """The top ``k`` documents for one query (see :meth:`run` for the options)."""
        return self.search_many([query], k, first_stage=first_stage, rerank=rerank, depth=depth,
                                filter=filter)[0]  # fmt: skip

    def search_many(
        self,
        queries: Sequence[str],
        k: int = SHOWN_K,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
        filter: str | None = None,
    ) -> list[list[Hit]]:
        """:meth:`search` for several queries in one pass: one encoder call, one FAISS
        search, one cross-encoder call (the batching that makes the server scale)."""
        for query in queries:
            if not isinstance(query, str) or not query.strip():
                raise DotcatError("a query is empty; give some words to search for")
        keyed = {str(i): q for i, q in enumerate(queries)}
        with self._lock:  # the documents come from where the search found them (shards)
            found = self.matches(keyed, k, first_stage=first_stage, rerank=rerank, depth=depth,
                                 filter=filter)  # fmt: skip
            needed = {m.doc_id for matches in found.values() for m in matches}
            stored = self.index.store.by_ids(sorted(needed))
            fields = self.index.fields_of([d.pos for d in stored.values()])
            coverage = self.stages.coverage()
        kind = self.score_kind(first_stage=first_stage, rerank=rerank)
        hits = [
            [hit(rank, m, stored[m.doc_id], kind, fields.get(stored[m.doc_id].pos))
             for rank, m in enumerate(found[key], start=1)]
            for key in keyed
        ]  # fmt: skip
        return hits if coverage is None else [HitList(h, coverage) for h in hits]

    def facets(self, hits: Sequence[Hit]) -> dict[str, list[tuple[str, int]]]:
        """The values of the index's few-valued fields among ``hits``, with how many hits
        hold each (:mod:`dotcat.search.facets`)."""
        return count_facets(hits, facet_fields(self.index.field_kinds()))

    def admitted(self, filter: str):
        """The documents a filter admits (:class:`dotcat.index.filtered.Admitted`; over
        shards, :class:`dotcat.search.sharded.ShardedAdmitted`: each shard admits its own),
        found once per filter (the last 32 kept).

        Raises:
            FilterError: a syntax error, a field the index does not have or a value of the
                wrong kind, naming the column and the token.
        """
        with self._lock:
            if filter in self._admitted:
                self._admitted.move_to_end(filter)
                return self._admitted[filter]
            sql, params = parse_filter(filter).sql(self.index.field_kinds())
            admitted = self.index.admit(sql, params)
            if not getattr(admitted, "complete", True):  # a shard left out: count it again
                return admitted
            self._admitted[filter] = admitted
            if len(self._admitted) > 32:
                self._admitted.popitem(last=False)
            return admitted

    def query_cut(self, query: str, first_stage: str | None = None) -> tuple[int, int] | None:
        """``(tokens, kept)`` when the query encoder reads only the first ``kept`` of the
        query's ``tokens`` (its window), else None (a stage that reads no dense side)."""
        stage = self.stages.resolve(first_stage or self.first_stage)
        if "dense" not in entry(stage).sides:
            return None
        encoder = self.encoder
        tokens = encoder.query_tokens(query)
        return (tokens, encoder.max_length) if tokens > encoder.max_length else None

    def score_kind(self, *, first_stage: str | None = None, rerank: bool | None = None) -> str:
        """Which scale a call's scores are on (:data:`dotcat.search.hits.SCORE_KINDS`): the
        cross-encoder's when it re-ranks, else the first stage's."""
        reranks = self.reranker is not None if rerank is None else rerank
        if reranks and self.reranker is not None and self.reranker.alpha > 0:
            return "logit" if self.reranker.alpha == 1.0 else "interpolated"
        return self.stage(first_stage).score_kind

    def run(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
        show_progress: bool = False,
        filter: str | None = None,
    ) -> Run:
        """Ranked ``(doc_id, score)`` lists for ``{query_id: text}``: a TREC run's content.

        Args:
            k: results per query.
            first_stage: this call's first stage (default: the pipeline's).
            rerank: re-rank (default: whenever the pipeline has a cross-encoder).
            depth: this call's re-ranking depth (default: the pipeline's).
            filter: only documents this filter admits (:mod:`dotcat.search.filters`;
                default: the pipeline's ``filter`` setting; ``""``: none).

        Raises:
            DotcatError: ``k`` or ``depth`` < 1, re-ranking asked without a cross-encoder, a
                first stage the index cannot serve, or a filter that cannot run on it.
        """
        return to_run(
            self.matches(queries, k, first_stage=first_stage, rerank=rerank, depth=depth,
                         show_progress=show_progress, filter=filter)
        )  # fmt: skip

    def matches(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
        show_progress: bool = False,
        filter: str | None = None,
    ) -> dict[str, list[Match]]:
        """:meth:`run` with each document's passages that matched (best first)."""
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        reranker = self._reranker(rerank)
        depth = depth if depth is not None else (self.reranker.depth if self.reranker else 0)
        if reranker is not None and depth < 1:
            raise DotcatError(f"depth must be >= 1, got {depth}")
        wanted = max(k, depth) if reranker is not None else k
        text = self.config.filter if filter is None else filter
        with self._lock:  # one generation of the index for the whole call (reload)
            stage = self.stage(first_stage)
            self.stages.begin_call()
            found = self._first_stage(stage, queries, wanted, show_progress, text or None)
            if reranker is not None:
                found = reranker.rerank_matches(
                    found, queries, depth, self.candidate_texts, show_progress
                )
        return {q: docs[:k] for q, docs in found.items()}

    def _first_stage(
        self,
        stage: FirstStage,
        queries: Mapping[str, str],
        k: int,
        show_progress: bool,
        filter: str | None,
    ) -> dict[str, list[Match]]:
        """The first stage's matches, within the documents ``filter`` admits where given
        (none admitted: no match, and no search)."""
        if filter is None:
            return stage.search(queries, k, show_progress=show_progress)
        admitted = self.admitted(filter)
        if admitted.documents == 0:
            return {q: [] for q in queries}
        if not filters(stage):
            raise DotcatError(
                f"first stage {stage.name!r} cannot search within a filter (its search takes "
                "no `admitted`)"
            )
        return stage.search(queries, k, show_progress=show_progress, admitted=admitted)

    def _reranker(self, rerank: bool | None) -> Reranker | None:
        """The re-ranker a call uses: the pipeline's unless ``rerank`` is False."""
        if rerank and self.reranker is None:
            raise DotcatError("re-ranking was asked for, but this pipeline has no cross-encoder")
        return None if rerank is False else self.reranker

    def candidate_texts(
        self, found: Mapping[str, Sequence[Match]], depth: int
    ) -> dict[tuple[str, str], list[str]]:
        """What the cross-encoder reads of each query's top ``depth`` documents
        (:func:`~dotcat.search.reranker.candidate_texts`)."""
        return candidate_texts(self.index, found, depth, self.config.rerank_passages)

    # -- documents and description -----------------------------------------------------------

    def document_texts(self, doc_ids) -> dict[str, str]:
        """id -> ``title + " " + text`` (what the models read) from the index's doc store."""
        docs = self.index.store.by_ids(list(doc_ids))
        return {doc_id: document_text(d.title, d.text) for doc_id, d in docs.items()}

    def document(self, doc_id: str):
        """The stored document with this id, or None."""
        return self.index.store.by_ids([doc_id]).get(doc_id)

    def describe_feedback(self) -> str:
        """``none``, or the feedback on each side (``RM3 (...) + Rocchio (...)``)."""
        rm3 = rm3_of(self.config) if self.bm25 is not None else None
        parts = [f.describe() for f in (rm3, rocchio_of(self.config)) if f]
        return " + ".join(parts) or "none"

    def describe(self) -> dict[str, Any]:
        """What this pipeline does, for logs, ``/info`` and run records."""
        rm3 = rm3_of(self.config) if self.bm25 is not None else None
        rocchio = rocchio_of(self.config)
        return {
            "index": str(self.index_dir),
            "documents": self.index.document_count,
            "passages": self.manifest.passages,
            "aggregation": self.config.aggregation,
            "first_stage": self.first_stage,
            "filter": self.config.filter,
            "stages_available": self.stages.available(),
            "fusion": {**asdict(self.fusion), "description": self.fusion.describe()},
            "feedback": {
                "rm3": asdict(rm3) if rm3 else None,
                "rocchio": asdict(rocchio) if rocchio else None,
                "description": self.describe_feedback(),
            },
            "encoder": self.manifest.encoder,
            "reranker": self.reranker.describe() if self.reranker else None,
            "shards": self.stages.status(),
        }

    def close(self) -> None:
        """Let go of the shards' processes (on Ray); one index needs nothing."""
        self.stages.close()
