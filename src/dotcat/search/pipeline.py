"""The query pipeline: a first stage, then optional BERT_CAT re-ranking, over one index.

One object answers ``dotcat search``, ``dotcat serve`` and Python programs. Models and indexes
load once, in the constructor; calls from several threads take turns (on a CPU one call's model
work already uses every core, and the server batches concurrent requests into one call).

The parts come from its settings (:class:`PipelineConfig`): a first stage from the registry
(:mod:`dotcat.search.stages`; ``auto``, the default, is hybrid where the index has BM25, else
dense: on collections unlike the encoder's training data BM25 often beats a dense model), a
filter applied inside it (:mod:`dotcat.search.filters`: k documents come back whenever k are
admitted), feedback wrapping the side it rewrites (:mod:`dotcat.search.feedback`), documents
ranked from their passages (:mod:`dotcat.search.aggregation`, MaxP by default), and re-ranking
(:class:`~dotcat.search.reranker.Reranker`) of the top ``depth`` by the cross-encoder, mixed with
the first stage's score by the weight ``dotcat calibrate`` or ``train cat`` chose. A result is a
document, with its fields and the passages that matched it, best first.
"""

from __future__ import annotations

import logging
import threading
import unicodedata
from collections.abc import Mapping, Sequence
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any, TypedDict, Unpack

from dotcat.errors import DotcatError, did_you_mean
from dotcat.index import document_text
from dotcat.options import RUN_K, SHOWN_K
from dotcat.search.aggregation import Match, to_run
from dotcat.search.cluster import ClusterConfig
from dotcat.search.config import PipelineConfig, check_query
from dotcat.search.dense import hit
from dotcat.search.facets import count_facets, facet_fields
from dotcat.search.feedback import rm3_of, rocchio_of
from dotcat.search.hits import Hit
from dotcat.search.hybrid import index_fusion
from dotcat.search.opening import open_stages, reopen
from dotcat.search.reranker import Reranker, advise_calibration, candidate_texts
from dotcat.search.sharded import HitList
from dotcat.search.stages import FirstStage, StageContext, entry
from dotcat.types import Run

__all__ = ["CallOptions", "PipelineConfig", "SearchPipeline"]

logger = logging.getLogger(__name__)


class CallOptions(TypedDict, total=False):
    """One call's choices over the pipeline's settings (each left out: the pipeline's).

    Attributes:
        first_stage: this call's first stage.
        rerank: re-rank (default: whenever the pipeline has a cross-encoder; False: not).
        depth: this call's re-ranking depth.
        filter: only documents this filter admits (:mod:`dotcat.search.filters`; ``""``: none).
    """

    first_stage: str | None
    rerank: bool | None
    depth: int | None
    filter: str | None


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
        self._adopt(open_stages(index_dir, config, cluster))  # one index, or shards
        self.index_dir = self.stages.index_dir
        self.stage()  # built now (the query encoder loaded): the first query should not wait
        if config.filter:
            self.stages.admitted(config.filter)  # checked against the index's fields now
        self.reranker = None
        if config.rerank:
            self.reranker = Reranker.from_config(config, self.manifest.rerank)
            if advise:
                advise_calibration(self.reranker, self.manifest, self.index_dir, self.first_stage)
        logger.info("search pipeline over %s: %s", self.index_dir, self.describe())

    def reload(self) -> bool:
        """Move to the generation of the index now in place (after ``dotcat add``, ``delete``,
        a sync, an HTTP write, a rebuild), if it is another; whether it moved (over shards:
        never). The new generation is opened (:func:`~dotcat.search.opening.reopen`) while
        calls go on over the old one, then swapped in whole between two calls; the models stay.

        Raises:
            DotcatError: the new generation cannot be opened; the old one keeps answering.
        """
        stages = reopen(self.stages, self.config)
        if stages is None:
            return False
        with self._lock:
            self._adopt(stages)
        logger.info("%s: now serving generation %d", self.index_dir, self.manifest.generation)
        return True

    def _adopt(self, stages: StageContext) -> None:
        """Search over ``stages`` (one generation of the index, or the shards)."""
        self.stages, self.index, self.manifest = stages, stages.index, stages.manifest
        self.bm25, self.fusion = stages.bm25, index_fusion(stages.manifest.fusion, self.config)
        self.first_stage = stages.resolve(self.config.first_stage)

    def __repr__(self) -> str:
        reranker = self.reranker.cross_encoder.name if self.reranker else None
        return (
            f"SearchPipeline({str(self.index_dir)!r}, documents={len(self.index)}, "
            f"first_stage={self.first_stage!r}, fusion={self.fusion.describe()!r}, "
            f"encoder={self.manifest.encoder.get('name')!r}, rerank={reranker!r})"
        )

    def stage(self, name: str | None = None) -> FirstStage:
        """The first stage ``name`` (default: the pipeline's), built on first use."""
        return self.stages.stage(name or self.first_stage)

    @property
    def encoder(self):
        """The index's BERT_DOT query encoder (an export run without PyTorch where it gives the
        same vectors: :mod:`dotcat.models.exported_encoder`)."""
        return self.stage("dense").retriever.encoder

    def one_thread_small_calls(self) -> None:
        """Encode single queries on one intra-op thread (for a server:
        :meth:`StageContext.one_thread_small_calls
        <dotcat.search.stages.StageContext.one_thread_small_calls>`)."""
        self.stages.one_thread_small_calls()

    def search(self, query: str, k: int = SHOWN_K, **options: Unpack[CallOptions]) -> list[Hit]:
        """The top ``k`` documents for one query (``options``: :class:`CallOptions`)."""
        return self.search_many([query], k, **options)[0]

    def search_many(
        self, queries: Sequence[str], k: int = SHOWN_K, **options: Unpack[CallOptions]
    ) -> list[list[Hit]]:
        """:meth:`search` for several queries in one pass: one encoder call, one FAISS
        search, one cross-encoder call (the batching that makes the server scale)."""
        if isinstance(queries, str):
            raise DotcatError("search_many takes a list of queries; search(query) takes one")
        for query in queries:
            check_query(query)
        keyed = {str(i): q for i, q in enumerate(queries)}
        with self._lock:  # the documents come from where the search found them (shards)
            found = self.matches(keyed, k, **options)
            needed = {m.doc_id for matches in found.values() for m in matches}
            stored = self.index.store.by_ids(sorted(needed))
            fields = self.index.fields_of([d.pos for d in stored.values()])
            coverage = self.stages.coverage()
        kind = self.score_kind(first_stage=options.get("first_stage"), rerank=options.get("rerank"))
        reranked = kind in ("logit", "interpolated")  # the head's scores; below it: its order
        head = (options.get("depth") or self.reranker.depth) if reranked else k
        hits = [[hit(r, m, stored[m.doc_id], kind if r <= head else "order",
                     fields.get(stored[m.doc_id].pos)) for r, m in enumerate(found[key], start=1)]
                for key in keyed]  # fmt: skip
        return hits if coverage is None else [HitList(h, coverage) for h in hits]

    def facets(self, hits: Sequence[Hit]) -> dict[str, list[tuple[str, int]]]:
        """How many ``hits`` hold each value of the index's few-valued fields."""
        return count_facets(hits, facet_fields(self.index.field_kinds()))

    def query_cut(self, query: str, first_stage: str | None = None) -> tuple[int, int] | None:
        """``(tokens, kept)`` when the query encoder reads only the first ``kept`` of the
        query's ``tokens`` (its window), else None (a stage that reads no dense side)."""
        stage = self.stages.resolve(first_stage or self.first_stage)
        if "dense" not in entry(stage).sides:
            return None
        tokens, kept = self.encoder.query_tokens(query), self.encoder.max_length
        return (tokens, kept) if tokens > kept else None

    def score_kind(self, *, first_stage: str | None = None, rerank: bool | None = None) -> str:
        """Which scale a call's scores are on (:data:`dotcat.search.hits.SCORE_KINDS`): the
        cross-encoder's when it re-ranks, else the first stage's (``-sum``: passages summed)."""
        reranks = self.reranker is not None if rerank is None else rerank
        if reranks and self.reranker is not None and self.reranker.alpha > 0:
            return "logit" if self.reranker.alpha == 1.0 else "interpolated"
        kind = self.stage(first_stage).score_kind
        summed = self.config.aggregation == "sum" and self.manifest.passages
        return f"{kind}-sum" if summed and kind in ("bm25", "cosine", "dot") else kind

    def run(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        *,
        show_progress: bool = False,
        **options: Unpack[CallOptions],
    ) -> Run:
        """Ranked ``(doc_id, score)`` lists for ``{query_id: text}``: a TREC run's content, the
        top ``k`` of each (``options``: :class:`CallOptions`).

        Raises:
            DotcatError: ``k`` or ``depth`` < 1, re-ranking asked without a cross-encoder, a
                first stage the index cannot serve, or a filter that cannot run on it.
        """
        return to_run(self.matches(queries, k, show_progress=show_progress, **options))

    def matches(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        *,
        show_progress: bool = False,
        **options: Unpack[CallOptions],
    ) -> dict[str, list[Match]]:
        """:meth:`run` with each document's passages that matched (best first); query ids are
        read as text (TREC's): ``{1: ...}`` is answered as ``{"1": ...}``."""
        if not isinstance(k, int) or isinstance(k, bool) or k < 1:
            raise DotcatError(f"k must be a whole number >= 1, got {k!r}")
        known = list(CallOptions.__annotations__)
        if unknown := sorted(set(options) - set(known)):  # (ignored, it answered another way)
            hint = did_you_mean(unknown[0], known)
            raise DotcatError(f"unknown option {unknown[0]!r}{hint}: the options are "
                              f"{', '.join(known)}")  # fmt: skip
        if not isinstance(queries, Mapping):
            raise DotcatError(f"queries: a {{id: text}} mapping, got {type(queries).__name__}")
        ids = {str(q): text for q, text in queries.items()}  # (an int id split hybrid's fusion)
        if len(ids) < len(queries):
            raise DotcatError("queries: two ids are the same as text (e.g. 1 and '1')")
        queries = ids
        for text in queries.values():
            if not isinstance(text, str):
                check_query(text)  # one line naming the type
        if options.get("rerank") and self.reranker is None:
            raise DotcatError("re-ranking was asked for, but this pipeline has no cross-encoder")
        reranker = None if options.get("rerank") is False else self.reranker
        depth = options.get("depth")
        depth = depth if depth is not None else (self.reranker.depth if self.reranker else 0)
        if reranker is not None and depth < 1:
            raise DotcatError(f"depth must be >= 1, got {depth}")
        wanted = max(k, depth) if reranker is not None else k
        text = options.get("filter")
        text = self.config.filter if text is None else text
        with self._lock:  # one generation of the index for the whole call (reload)
            stage = self.stage(options.get("first_stage"))
            self.stages.begin_call()
            found = self.stages.search(stage, queries, wanted, show_progress, text or None)
            if reranker is not None:
                found = reranker.rerank_matches(
                    found, queries, depth, self.candidate_texts, show_progress
                )
        return {q: docs[:k] for q, docs in found.items()}

    def candidate_texts(
        self, found: Mapping[str, Sequence[Match]], depth: int
    ) -> dict[tuple[str, str], list[str]]:
        """What the cross-encoder reads of each query's top ``depth`` documents
        (:func:`~dotcat.search.reranker.candidate_texts`)."""
        return candidate_texts(self.index, found, depth, self.config.rerank_passages)

    def document_texts(self, doc_ids) -> dict[str, str]:
        """id -> ``title + " " + text`` (what the models read) from the index's doc store."""
        docs = self.index.store.by_ids(list(doc_ids))
        return {doc_id: document_text(d.title, d.text) for doc_id, d in docs.items()}

    def document(self, doc_id: str):
        """The stored document with this id, else with it in the other Unicode form (a file
        named on macOS is NFD, the id as typed NFC), or None."""
        forms = dict.fromkeys([doc_id, *(unicodedata.normalize(f, doc_id) for f in ("NFC", "NFD"))])
        found = self.index.store.by_ids(list(forms))
        return next((found[form] for form in forms if form in found), None)

    def _feedback(self) -> tuple[Any, Any]:
        """The RM3 (where the index has BM25) and Rocchio settings, each None when off."""
        rm3 = rm3_of(self.config) if self.bm25 is not None else None
        return rm3, rocchio_of(self.config)

    def describe_feedback(self) -> str:
        """``none``, or the feedback on each side (``RM3 (...) + Rocchio (...)``)."""
        return " + ".join(f.describe() for f in self._feedback() if f) or "none"

    def describe(self) -> dict[str, Any]:
        """What this pipeline does, for logs, ``/info`` and run records."""
        rm3, rocchio = self._feedback()
        return {
            "index": str(self.index_dir),
            "documents": self.index.document_count,
            "passages": self.manifest.passages,
            "aggregation": self.config.aggregation,
            "first_stage": self.first_stage,
            "filter": self.config.filter or None,
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
