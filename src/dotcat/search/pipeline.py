"""The query pipeline: a first stage (dense, BM25 or hybrid), then optional BERT_CAT re-ranking.

One object answers queries for every caller: ``dotcat search`` (one query, a queries file, or
line by line), ``dotcat serve`` (HTTP) and Python programs; ``dotcat rerank`` uses its second
half (:class:`Reranker`) on a TREC run. Models and indexes load once, in the constructor;
calls are safe from several threads (they take turns: on a CPU the model work of one call
already uses every core, and the server batches concurrent requests into one call).

First stages, over one index directory (:func:`dotcat.index.build_index`):

- ``dense``: the query encoded by the index's own BERT_DOT, FAISS top-k.
- ``bm25``: the BM25 index built inside the index directory (``dotcat index --bm25``).
- ``hybrid``: both, fused (:mod:`dotcat.search.fusion`): the fusion the index recorded on a
  dev split, else reciprocal rank fusion.
- ``auto`` (default): hybrid where the index has BM25, else dense. Fusing is the safer default:
  on collections unlike the encoder's training data BM25 often beats a dense model.

Over an index with passages (:mod:`dotcat.index.passages`) dense and BM25 rank passages, and
each ranks documents from them (``aggregation``: MaxP by default, :mod:`dotcat.search.aggregation`);
the fusion works on those document scores. A result keeps the passages that matched it, best
first: the first is its snippet's, and the cross-encoder reads the best ``rerank_passages`` of
them (the first stage's best: the passage that put the document in the list, and the only one
a first stage vouches for; a document's logit is the highest of its passages'). In a hybrid,
a document's passages come first from the side that gave it the larger share of its fused
score. Runs, evaluation and the server's answers stay at the document level.

Re-ranking (:mod:`dotcat.search.reranker`): the top ``depth`` of the first stage re-ordered by
the cross-encoder, with ``alpha * norm(cat) + (1 - alpha) * norm(first)`` where ``alpha``
(``interpolate="auto"``, the default) is the weight ``dotcat calibrate`` chose for this model
on the index's own corpus (:mod:`dotcat.search.calibrate`), else the one ``dotcat train cat``
chose on its dev split, else 1.0 (the plain logit).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from dotcat.data.splits import find_dev_split
from dotcat.errors import DotcatError
from dotcat.files import read_json_or_none
from dotcat.index import build_index, document_text
from dotcat.index.bm25 import BM25Index
from dotcat.index.config import IndexConfig
from dotcat.index.docstore import PassageRef
from dotcat.index.manifest import update_manifest
from dotcat.index.shards import open_index
from dotcat.models.config import EncoderConfig
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.models.resolve import check_model
from dotcat.models.runtime import store_linear_weights
from dotcat.options import FIRST_STAGES, FUSION_DEPTH, RERANK_DEPTH, RUN_K, SHOWN_K
from dotcat.progress import progress_bar
from dotcat.search.aggregation import Match, rank_documents, to_run
from dotcat.search.config import PRF_SIDES, PipelineConfig, check_pipeline, parse_interpolate
from dotcat.search.dense import DenseRetriever, hit
from dotcat.search.feedback import RM3, RM3Expander, Rocchio
from dotcat.search.fusion import Fusion, choose_fusion
from dotcat.search.hits import Hit
from dotcat.search.reranker import rerank
from dotcat.types import Run

__all__ = [
    "FIRST_STAGES",
    "FUSION_DEPTH",
    "PipelineConfig",
    "Reranker",
    "SearchPipeline",
    "build_and_tune",
    "parse_interpolate",
    "tune_fusion",
]

logger = logging.getLogger(__name__)


def _corpus_alpha(weights: Mapping[str, Any] | None, fingerprint: str) -> float | None:
    """The weight ``dotcat calibrate`` recorded in an index manifest for this model, if any."""
    entry = (weights or {}).get(fingerprint)
    if entry is None:
        return None
    try:
        return parse_interpolate(entry["alpha"])
    except (DotcatError, KeyError, TypeError):
        raise DotcatError(
            f"index manifest: the re-ranking weight recorded for model {fingerprint[:12]} is "
            f"unreadable ({entry!r}); run `dotcat calibrate` again"
        ) from None


class Reranker:
    """The second stage: a BERT_CAT cross-encoder, its depth and its interpolation weight.

    Args:
        cross_encoder: a loaded :class:`dotcat.models.cross_encoder.CrossEncoder` with a
            trained head.
        depth: how many results per query it re-ranks.
        interpolate: see :class:`PipelineConfig`.
        corpus_weights: the index manifest's ``rerank`` entries (weights chosen on its corpus,
            keyed by cross-encoder fingerprint).
    """

    def __init__(
        self,
        cross_encoder: Any,
        depth: int = RERANK_DEPTH,
        interpolate: str | float = "auto",
        corpus_weights: Mapping[str, Mapping[str, Any]] | None = None,
    ):
        cross_encoder.require_trained()
        self.cross_encoder = cross_encoder
        self.depth = depth
        # The weight: given > chosen on this corpus (dotcat calibrate) > chosen on the
        # model's dev split > 1 (the plain logit).
        corpus = _corpus_alpha(corpus_weights, cross_encoder.fingerprint)
        for source, alpha in (
            ("given", parse_interpolate(interpolate)),
            ("corpus-chosen", corpus),
            ("dev-chosen", cross_encoder.interpolation_alpha),
            ("plain", 1.0),
        ):
            if alpha is not None:
                self.alpha, self.alpha_source = float(alpha), source
                break

    @classmethod
    def load(
        cls,
        model: str,
        depth: int = RERANK_DEPTH,
        interpolate: str | float = "auto",
        *,
        device: str = "auto",
        precision: str = "auto",
        backend: str = "auto",
        batch_size: int = 32,
        corpus_weights: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> Reranker:
        # Refused before loading: a bi-encoder would get an untrained head (and transformers
        # would print its load report first).
        check_model(model, cross_encoder=True)
        config = CrossEncoderConfig(
            model=model, device=device, precision=precision, backend=backend, batch_size=batch_size
        )
        cross_encoder = CrossEncoder.load(config)
        # Loaded here for inference only: its linear weights cast once, not on every call.
        store_linear_weights(cross_encoder.model, cross_encoder.autocast_dtype)
        return cls(cross_encoder, depth, interpolate, corpus_weights)

    def rerank(
        self,
        run: Mapping[str, Sequence[tuple[str, float]]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
        depth: int | None = None,
        show_progress: bool = False,
        pair_texts: Mapping[tuple[str, str], Sequence[str]] | None = None,
    ) -> Run:
        """Each query's top ``depth`` re-ordered; the rest keeps its first-stage order below.

        ``pair_texts``: ``(qid, doc id)`` -> the passages the cross-encoder reads of that
        document for that query instead of its text (see
        :func:`dotcat.search.reranker.score_candidates`).

        At weight 0 (``dotcat calibrate`` found that the cross-encoder does not help on this
        corpus) the first stage's ranking is the answer, and the cross-encoder is not run.
        """
        if self.alpha == 0.0:
            return {q: list(docs) for q, docs in run.items()}

        return rerank(
            run,
            queries,
            texts,
            self.cross_encoder,
            depth or self.depth,
            self.alpha,
            show_progress=show_progress,
            pair_texts=pair_texts,
        )

    def describe(self) -> dict[str, Any]:
        return {
            **self.cross_encoder.describe(),
            "depth": self.depth,
            "interpolation": self.alpha,
            "interpolation_source": self.alpha_source,
        }


class SearchPipeline:
    """Queries in, ranked :class:`Hit` lists out, over one index directory.

    ``SearchPipeline("my-index")`` searches hybrid where the index has BM25 (as ``dotcat
    search`` does); ``SearchPipeline("my-index", rerank="my-cat", depth=50)`` re-ranks.

    Args:
        index_dir: a directory written by ``dotcat index`` or :func:`build_and_tune`.
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
        index_dir: str | Path,
        config: PipelineConfig | None = None,
        *,
        advise: bool = True,
        **settings: Any,
    ) -> None:
        config = config or PipelineConfig()
        self.config = config = replace(config, **settings) if settings else config
        check_pipeline(index_dir, config)
        self.index_dir = Path(index_dir)
        self._lock = threading.RLock()
        # An index directory, or a folder of shard indexes searched unmerged (dense only).
        self.index = open_index(
            self.index_dir, device=config.device, search_params=dict(config.search_params or {})
        )
        self.manifest = self.index.manifest
        self.bm25 = self._load_bm25()
        # An index built with passages has its BM25 rows over them (ids: FAISS ids).
        self._bm25_passages = bool(self.manifest.bm25 and "passages" in self.manifest.bm25)
        self.first_stage = self._resolve_first_stage(config.first_stage)
        self.fusion = self._resolve_fusion()
        sides = PRF_SIDES[config.prf]
        if sides and self.first_stage != "hybrid" and self.first_stage not in sides:
            raise DotcatError(
                f"{self.index_dir}: prf {config.prf!r} rewrites the {' and '.join(sides)} side, "
                f"and this index's first stage is {self.first_stage!r}"
            )
        self.rm3 = (
            RM3Expander(
                self.bm25, RM3(config.fb_docs, config.fb_terms, config.original_query_weight)
            )  # fmt: skip
            if "bm25" in sides and self.bm25 is not None
            else None
        )
        self.rocchio = (
            Rocchio(config.rocchio_docs, config.rocchio_alpha, config.rocchio_beta)
            if "dense" in sides
            else None
        )
        self._dense: DenseRetriever | None = None
        self._small_call_threads: int | None = None  # see one_thread_small_calls
        if self.first_stage in ("dense", "hybrid"):
            self._dense_retriever()  # load now: the first query should not pay for it
        self.reranker = (
            Reranker.load(
                config.rerank,
                config.depth,
                config.interpolate,
                device=config.device,
                precision=config.precision,
                backend=config.rerank_backend,
                batch_size=config.batch_size,
                corpus_weights=self.manifest.rerank,
            )
            if config.rerank
            else None
        )
        if self.reranker is not None and advise:
            self._advise_calibration()
        logger.info("search pipeline over %s: %s", self.index_dir, self.describe())

    def __repr__(self) -> str:
        reranker = self.reranker.cross_encoder.name if self.reranker else None
        return (
            f"SearchPipeline({str(self.index_dir)!r}, documents={len(self.index)}, "
            f"first_stage={self.first_stage!r}, fusion={self.fusion.describe()!r}, "
            f"encoder={self.manifest.encoder.get('name')!r}, rerank={reranker!r})"
        )

    # -- set-up ------------------------------------------------------------------------------

    def _advise_calibration(self) -> None:
        """Warn when a dev-chosen weight meets a corpus the cross-encoder was not trained on:
        out of domain that weight made re-ranking worse than the first stage it re-ranks
        (``eval/studies/cat_corpus_weight/cat_corpus_weight.md``); ``dotcat calibrate`` chooses one
        for it."""
        reranker = self.reranker
        if reranker.alpha_source != "dev-chosen":
            return
        record = read_json_or_none(Path(reranker.cross_encoder.path) / "dotcat_training.json")
        try:
            trained_on = record["data"]["sha256"]["corpus"]
        except (TypeError, KeyError):  # not trained by dotcat, or an older record
            return
        if trained_on and trained_on != self.manifest.corpus.get("sha256"):
            logger.warning(
                "%s was trained on another corpus: its dev-chosen interpolation weight %g may "
                "not suit this one; `dotcat calibrate %s --rerank %s` chooses one on it",
                reranker.cross_encoder.path, reranker.alpha, self.index_dir,
                reranker.cross_encoder.path,
            )  # fmt: skip

    def _load_bm25(self):
        entry = self.manifest.bm25
        if not entry:
            return None
        bm25 = BM25Index.load(self.index_dir / entry["dir"], mmap=True)
        if len(bm25) != len(self.index):
            raise DotcatError(
                f"{self.index_dir}: BM25 index holds {len(bm25)} documents, the dense index "
                f"{len(self.index)}; rebuild the index"
            )
        return bm25

    def _resolve_first_stage(self, stage: str) -> str:
        if stage == "auto":
            return "hybrid" if self.bm25 is not None else "dense"
        if stage in ("bm25", "hybrid") and self.bm25 is None:
            raise DotcatError(
                f"{self.index_dir}: first stage {stage!r} needs a BM25 index; rebuild it "
                "with `dotcat index ... --bm25`"
            )
        return stage

    def _resolve_fusion(self) -> Fusion:
        recorded = Fusion.from_json(self.manifest.fusion) if self.manifest.fusion else None
        method = self.config.fusion
        if method == "auto":
            return recorded or Fusion("rrf")
        weight = self.config.fusion_weight
        if weight is None:
            weight = recorded.weight if recorded and recorded.method == method else 0.5
        return Fusion(method, weight)

    def _dense_retriever(self) -> DenseRetriever:
        with self._lock:
            if self._dense is None:
                self._dense = DenseRetriever(
                    self.index_dir,
                    model=self.config.model,
                    device=self.config.device,
                    precision=self.config.precision,
                    index=self.index,
                    aggregation=self.config.aggregation,
                    aggregate_top=self.config.aggregate_top,
                )
                self._dense.encoder.single_query_threads = self._small_call_threads
            return self._dense

    @property
    def encoder(self):
        """The index's BERT_DOT query encoder (a loaded :class:`dotcat.models.BiEncoder`)."""
        return self._dense_retriever().encoder

    def one_thread_small_calls(self) -> None:
        """Encode single queries (and other small calls) on one intra-op thread.

        For a server: its event loop, and on a shared machine its clients, need a core the moment an
        answer is ready, and OpenMP workers spin-waiting after a two-thread call take it
        (``eval/studies/serve_scaling/serve.md``: one client's p50 17.6 ms with two threads on a
        quiet CPU, 14.9 ms with one thread while another process held a core).
        """
        self._small_call_threads = 1
        if self._dense is not None:
            self._dense.encoder.single_query_threads = 1

    # -- queries -----------------------------------------------------------------------------

    def search(
        self,
        query: str,
        k: int = SHOWN_K,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
    ) -> list[Hit]:
        """The top ``k`` documents for one query (see :meth:`run` for the options)."""
        return self.search_many([query], k, first_stage=first_stage, rerank=rerank, depth=depth)[0]

    def search_many(
        self,
        queries: Sequence[str],
        k: int = SHOWN_K,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
    ) -> list[list[Hit]]:
        """:meth:`search` for several queries in one pass: one encoder call, one FAISS
        search, one cross-encoder call (the batching that makes the server scale)."""
        for query in queries:
            if not isinstance(query, str) or not query.strip():
                raise DotcatError("a query is empty; give some words to search for")
        keyed = {str(i): q for i, q in enumerate(queries)}
        found = self.matches(keyed, k, first_stage=first_stage, rerank=rerank, depth=depth)
        kind = self.score_kind(first_stage=first_stage, rerank=rerank)
        needed = {m.doc_id for matches in found.values() for m in matches}
        stored = self.index.store.by_ids(sorted(needed))
        return [
            [hit(rank, m, stored[m.doc_id], kind) for rank, m in enumerate(found[key], start=1)]
            for key in keyed
        ]

    def query_cut(self, query: str, first_stage: str | None = None) -> tuple[int, int] | None:
        """``(tokens, kept)`` when the query encoder reads only the first ``kept`` of the
        query's ``tokens`` (its window), else None (BM25 reads the whole query)."""
        stage = self._resolve_first_stage(first_stage) if first_stage else self.first_stage
        if stage == "bm25":
            return None
        encoder = self.encoder
        tokens = encoder.query_tokens(query)
        return (tokens, encoder.max_length) if tokens > encoder.max_length else None

    def score_kind(self, *, first_stage: str | None = None, rerank: bool | None = None) -> str:
        """Which scale a call's scores are on (:data:`dotcat.search.hits.SCORE_KINDS`): the
        cross-encoder's when it re-ranks, else the first stage's."""
        stage = self._resolve_first_stage(first_stage) if first_stage else self.first_stage
        reranks = self.reranker is not None if rerank is None else rerank
        if reranks and self.reranker is not None and self.reranker.alpha > 0:
            return "logit" if self.reranker.alpha == 1.0 else "interpolated"
        if stage == "bm25":
            return "bm25"
        if stage == "dense":
            return "cosine" if self.manifest.encoder.get("similarity") == "cos" else "dot"
        return "rrf" if self.fusion.method == "rrf" else "fused"

    def run(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
        show_progress: bool = False,
    ) -> Run:
        """Ranked ``(doc_id, score)`` lists for ``{query_id: text}``: a TREC run's content.

        Args:
            k: results per query.
            first_stage: this call's first stage (default: the pipeline's).
            rerank: re-rank (default: whenever the pipeline has a cross-encoder).
            depth: this call's re-ranking depth (default: the pipeline's).

        Raises:
            DotcatError: ``k`` or ``depth`` < 1, re-ranking asked without a cross-encoder, or
                a first stage the index cannot serve.
        """
        return to_run(
            self.matches(
                queries, k, first_stage=first_stage, rerank=rerank, depth=depth,
                show_progress=show_progress,
            )
        )  # fmt: skip

    def matches(
        self,
        queries: Mapping[str, str],
        k: int = 100,
        *,
        first_stage: str | None = None,
        rerank: bool | None = None,
        depth: int | None = None,
        show_progress: bool = False,
    ) -> dict[str, list[Match]]:
        """:meth:`run` with each document's passages that matched (best first)."""
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        stage = self._resolve_first_stage(first_stage) if first_stage else self.first_stage
        use_reranker = self.reranker is not None if rerank is None else rerank
        if use_reranker and self.reranker is None:
            raise DotcatError("re-ranking was asked for, but this pipeline has no cross-encoder")
        depth = depth if depth is not None else (self.reranker.depth if self.reranker else 0)
        if use_reranker and depth < 1:
            raise DotcatError(f"depth must be >= 1, got {depth}")
        wanted = max(k, depth) if use_reranker else k
        with self._lock:
            found = self._first_stage(stage, queries, wanted, show_progress)
            if use_reranker and self.reranker.alpha > 0:
                texts = self.candidate_texts(found, depth)
                reranked = self.reranker.rerank(
                    to_run(found), queries, {}, depth, show_progress, pair_texts=texts
                )
                found = _rescored(found, reranked)
        return {q: docs[:k] for q, docs in found.items()}

    def _first_stage(
        self, stage: str, queries: Mapping[str, str], k: int, show_progress: bool
    ) -> dict[str, list[Match]]:
        if stage == "dense":
            return self._dense_matches(queries, k, show_progress)
        if stage == "bm25":
            return self._bm25_matches(queries, k, show_progress)
        n = max(k, self.config.fusion_depth)
        dense = self._dense_matches(queries, n, show_progress)
        sparse = self._bm25_matches(queries, n, False)
        return {
            q: fuse_matches(self.fusion, dense.get(q, []), sparse.get(q, []))[:k]
            for q in {**dense, **sparse}
        }

    def _dense_matches(
        self, queries: Mapping[str, str], k: int, show_progress: bool
    ) -> dict[str, list[Match]]:
        """The dense side's top ``k`` documents (its query vectors rewritten by Rocchio first
        where the pipeline has it)."""
        retriever = self._dense_retriever()
        return retriever.batch_matches(queries, k, show_progress=show_progress,
                                       rocchio=self.rocchio)  # fmt: skip

    def _bm25_matches(
        self, queries: Mapping[str, str], k: int, show_progress: bool
    ) -> dict[str, list[Match]]:
        """BM25's top ``k`` documents: ranked from its passages (an index with passages), or
        its own document ranking (each document matched whole). With RM3, each query is
        expanded once from its top rows (passages, on an index with passages) and the expanded
        query ranks the rows, as the plain one would."""
        if not self._bm25_passages:
            run = (self.rm3 or self.bm25).search(queries, k, show_progress=show_progress)
            return {
                q: [Match(d, s, ((PassageRef(-1, d), s),)) for d, s in docs]
                for q, docs in run.items()
            }
        expanded: dict[str, dict[int, float]] = {}

        def rows(qid: str, n: int) -> list[tuple[str, float]]:
            if self.rm3 is None:
                return self.bm25.search_one(queries[qid], n)
            if qid not in expanded:  # the over-fetch asks again for more: expand once
                expanded[qid] = self.rm3.expand(queries[qid])
            return self.rm3.search_expanded(expanded[qid], n)

        def search(qids: list[str], n: int) -> dict[str, list[tuple[int, float]]]:
            return {q: [(int(i), s) for i, s in rows(q, n)] for q in qids}

        out: dict[str, list[Match]] = {}
        qids = list(queries)
        with progress_bar(
            total=len(qids), desc="BM25 search", unit="query", enabled=show_progress
        ) as bar:
            for start in range(0, len(qids), 256):
                chunk = qids[start : start + 256]
                out.update(
                    rank_documents(
                        search, self.index.locate, chunk, k, vectors=len(self.bm25),
                        documents=self.index.document_count, method=self.config.aggregation,
                        top=self.config.aggregate_top,
                    )
                )  # fmt: skip
                bar.update(len(chunk))
        return out

    def candidate_texts(
        self, found: Mapping[str, Sequence[Match]], depth: int
    ) -> dict[tuple[str, str], list[str]]:
        """``(qid, doc id)`` -> what the cross-encoder reads of each of a query's top
        ``depth`` documents: its best :attr:`PipelineConfig.rerank_passages` passages (title
        and passage text), or its whole text (a document matched whole)."""
        m = self.config.rerank_passages
        wanted = {
            (qid, match.doc_id): [ref for ref, _ in match.passages[:m]]
            for qid, matches in found.items()
            for match in matches[:depth]
        }
        refs = [ref for group in wanted.values() for ref in group]
        whole = self.document_texts({r.doc_id for r in refs if r.stop is None})
        parts = self.index.passage_texts([r for r in refs if r.stop is not None])
        return {
            key: [whole[r.doc_id] if r.stop is None else parts[r.pid] for r in group]
            for key, group in wanted.items()
        }

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
        parts = [f.describe() for f in (self.rm3 and self.rm3.params, self.rocchio) if f]
        return " + ".join(parts) or "none"

    def describe(self) -> dict[str, Any]:
        """What this pipeline does, for logs, ``/info`` and run records."""
        return {
            "index": str(self.index_dir),
            "documents": self.index.document_count,
            "passages": self.manifest.passages,
            "aggregation": self.config.aggregation,
            "first_stage": self.first_stage,
            "stages_available": ["dense"] + (["bm25", "hybrid"] if self.bm25 is not None else []),
            "fusion": {**asdict(self.fusion), "description": self.fusion.describe()},
            "feedback": {
                "rm3": asdict(self.rm3.params) if self.rm3 else None,
                "rocchio": asdict(self.rocchio) if self.rocchio else None,
                "description": self.describe_feedback(),
            },
            "encoder": self.manifest.encoder,
            "reranker": self.reranker.describe() if self.reranker else None,
        }


def fuse_matches(fusion: Fusion, dense: Sequence[Match], bm25: Sequence[Match]) -> list[Match]:
    """One query's hybrid ranking of documents (:meth:`Fusion.fuse` of their scores), each
    with its passages found: first those of the side that gave it the larger share of its
    fused score (:meth:`Fusion.shares`), then the other side's; a whole document last."""
    dense_run = [(m.doc_id, m.score) for m in dense]
    bm25_run = [(m.doc_id, m.score) for m in bm25]
    shares = fusion.shares(dense_run, bm25_run)
    by_dense, by_bm25 = {m.doc_id: m for m in dense}, {m.doc_id: m for m in bm25}
    out = []
    for doc, score in fusion.fuse(dense_run, bm25_run):
        a, b = shares[doc]
        sides = (by_dense.get(doc), by_bm25.get(doc))
        passages: dict[tuple, tuple[PassageRef, float]] = {}
        for side in sides if a >= b else sides[::-1]:
            for ref, value in side.passages if side else ():
                passages.setdefault((ref.start, ref.stop), (ref, value))
        # A passage before the whole document (a side that ranks documents whole, e.g. BM25
        # of an index without passages): it says where the document matched.
        ordered = sorted(passages.values(), key=lambda p: p[0].stop is None)
        out.append(Match(doc, score, tuple(ordered)))
    return out


def _rescored(found: Mapping[str, list[Match]], run: Run) -> dict[str, list[Match]]:
    """``found`` in the order and with the scores of ``run`` (a re-ranking of it)."""
    out = {}
    for qid, docs in run.items():
        by_id = {m.doc_id: m for m in found[qid]}
        out[qid] = [Match(d, s, by_id[d].passages) for d, s in docs]
    return out


def tune_fusion(
    index_dir: str | Path,
    data: str | Path,
    *,
    device: str = "auto",
    precision: str = "auto",
) -> Fusion | None:
    """Choose an index's hybrid fusion on the data's dev queries, and record it in the index.

    The dev queries are the data's ``dev`` split, else the share of ``train`` that ``dotcat
    train`` holds out (:func:`dotcat.data.splits.find_dev_split`); the test split is never
    used. Both first stages fetch :data:`FUSION_DEPTH` candidates per dev query and
    :func:`dotcat.search.fusion.choose_fusion` picks RRF or a linear weight by nDCG@10.

    Returns:
        The recorded fusion, or None when the data has no dev queries (RRF stays the
        default) or the index has no BM25 side.
    """
    dev = find_dev_split(data)
    if dev is None:
        return None
    config = PipelineConfig(first_stage="dense", device=device, precision=precision)
    pipeline = SearchPipeline(index_dir, config)
    if pipeline.bm25 is None:
        return None
    dense = pipeline.run(dev.queries, FUSION_DEPTH, first_stage="dense")
    sparse = pipeline.run(dev.queries, FUSION_DEPTH, first_stage="bm25")
    fusion = choose_fusion(dense, sparse, dev.qrels, dev.source)
    update_manifest(index_dir, lambda manifest: setattr(manifest, "fusion", fusion.to_json()))
    return fusion


@dataclass(frozen=True)
class BuiltIndex:
    """What :func:`build_and_tune` made: the index's manifest, and the hybrid fusion chosen on
    the data's dev queries (None: no BM25 side, a shard, or no dev queries: RRF stays)."""

    manifest: Any
    fusion: Fusion | None
    seconds: float

    def __repr__(self) -> str:
        manifest = self.manifest
        fusion = self.fusion.describe() if self.fusion else None
        return (
            f"BuiltIndex(documents={manifest.documents['count']}, "
            f"encoder={manifest.encoder.get('name')!r}, bm25={bool(manifest.bm25)}, "
            f"fusion={fusion!r}, seconds={self.seconds:.1f})"
        )


def build_and_tune(
    corpus: Any,
    index_dir: str | Path,
    encoder: Any = None,
    config: IndexConfig | None = None,
    *,
    overwrite: bool = False,
    fresh: bool = False,
    corpus_options: Any = None,
    show_progress: bool = True,
) -> BuiltIndex:
    """Build an index (:func:`dotcat.index.build_index`) and, with BM25 inside, choose its
    hybrid fusion on the data's dev queries (:func:`tune_fusion`): what ``dotcat index`` and
    ``dotcat experiment`` do, so that a hybrid search of the index runs the fusion its data
    prefers. A shard is not tuned: its merge is (``dotcat merge`` then this fusion choice).

    This is ``dotcat.build_index``: ``build_index("my-docs/", "my-index")`` indexes a folder
    with the packaged default model, BM25 beside it (:class:`IndexConfig`'s defaults are the
    command line's).

    Args:
        corpus: what :func:`dotcat.index.build_index` reads (a path, or documents in Python).
        encoder: a model name or directory, an :class:`EncoderConfig`, or a loaded
            :class:`~dotcat.models.BiEncoder`; None: the packaged default model.
        config, overwrite, fresh, corpus_options, show_progress: as
            :func:`dotcat.index.build_index`.
    """
    config = config or IndexConfig()
    if encoder is None or isinstance(encoder, str):
        encoder = EncoderConfig(model=encoder or "default", device=config.device)
    start = time.perf_counter()
    manifest = build_index(
        corpus, index_dir, encoder, config, overwrite=overwrite, show_progress=show_progress,
        fresh=fresh, corpus_options=corpus_options,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    fusion = None
    if config.bm25 and config.shard is None and isinstance(corpus, (str, Path)):
        settings = getattr(encoder, "config", encoder)  # a loaded encoder's EncoderConfig
        fusion = tune_fusion(
            index_dir, corpus, device=settings.device, precision=settings.precision
        )
        if fusion is not None:  # as tune_fusion recorded it in the index
            manifest.fusion = fusion.to_json()
    return BuiltIndex(manifest, fusion, seconds)
