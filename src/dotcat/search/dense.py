"""Dense retrieval at query time: encode the query with the index's own encoder, FAISS top-k.

:class:`DenseStage` is the ``dense`` first stage (:mod:`dotcat.search.stages`) over a
:class:`DenseRetriever`, with Rocchio feedback where the settings ask for it.

The encoder is rebuilt from the index manifest (model, pooling, similarity, max length:
:func:`dotcat.index.encoder.encoder_config_from_manifest`), so
an index is always searched as it was built; another model is refused unless its weights and
settings are the ones recorded (:func:`dotcat.index.manifest.check_encoder`).

Over an index with passages, FAISS ranks passages and documents are ranked from them
(:mod:`dotcat.search.aggregation`: MaxP by default); each hit carries the passage that matched.
A filter's documents (:class:`dotcat.index.filtered.Admitted`) are searched within, in FAISS
(:func:`dotcat.index.filtered.search_admitted`), Rocchio's feedback vectors included.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from dotcat.errors import DotcatError
from dotcat.index import DenseIndex, check_encoder
from dotcat.index.docstore import StoredDocument
from dotcat.index.encoder import encoder_config_from_manifest, load_query_encoder
from dotcat.index.filtered import Admitted
from dotcat.index.shards import ShardSet, open_index
from dotcat.options import AGGREGATE_TOP, AGGREGATION, RUN_K
from dotcat.progress import progress_bar
from dotcat.search.aggregation import (
    Match,
    check_aggregation,
    lead_margins,
    rank_documents,
    resolve,
    to_run,
)
from dotcat.search.feedback import Rocchio, rocchio_expand, rocchio_of
from dotcat.search.hits import Hit
from dotcat.types import Run

__all__ = ["DenseRetriever", "DenseStage", "Hit"]

logger = logging.getLogger(__name__)


class DenseRetriever:
    """BERT_DOT first stage over an index directory.

    Args:
        index_dir: a directory written by ``dotcat index``.
        model: load the query encoder from here instead of the manifest's record.
        device: ``auto``, ``cpu`` or ``cuda`` (for both the encoder and FAISS).
        search_params: FAISS search parameters (``nprobe``, ``efSearch``) overriding the manifest.
        precision: the query encoder's ``auto``, ``fp32``, ``bf16`` or ``int8`` (see
            :class:`dotcat.models.config.EncoderConfig`); ``auto`` follows an int8 index.
        index: the index directory already open (a :class:`DenseIndex` of ``index_dir``).
        aggregation, aggregate_top: how documents are ranked from their passages
            (:func:`dotcat.search.aggregation.aggregate`).
    """

    def __init__(
        self,
        index_dir: str | Path,
        model: str | None = None,
        device: str = "auto",
        search_params: dict[str, float] | None = None,
        precision: str = "auto",
        index: DenseIndex | ShardSet | None = None,
        aggregation: str = AGGREGATION,
        aggregate_top: int = AGGREGATE_TOP,
    ) -> None:
        check_aggregation(aggregation, aggregate_top)
        if index is None:
            index = open_index(index_dir, device=device, search_params=search_params)
        self.index = index
        entry = self.index.manifest.encoder
        config = encoder_config_from_manifest(entry, model, device, precision)
        self.encoder = load_query_encoder(config)  # without PyTorch where it can
        check_encoder(self.index.manifest, self.encoder.manifest_entry(), self.index.dir)
        self.aggregation, self.aggregate_top = aggregation, aggregate_top
        #: The scale of the scores: the encoder's similarity.
        self.score_kind = "cosine" if self.encoder.similarity == "cos" else "dot"

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """The top-k documents for one query, with titles, texts and the passages found."""
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        if not query.strip():
            raise DotcatError("the query is empty; give some words to search for")
        matches = self.batch_matches({"q": query}, k, show_progress=False)["q"]
        docs = self.index.store.by_ids([m.doc_id for m in matches])
        return [
            hit(rank, m, docs[m.doc_id], self.score_kind) for rank, m in enumerate(matches, start=1)
        ]

    def batch_search(self, queries: Mapping[str, str], *args: Any, **kwargs: Any) -> Run:
        """:meth:`batch_matches` as a run: ``{qid: [(doc_id, score), ...]}``, best first."""
        return to_run(self.batch_matches(queries, *args, **kwargs))

    def batch_matches(
        self,
        queries: Mapping[str, str],
        k: int = RUN_K,
        batch_size: int = 256,
        show_progress: bool = True,
        rocchio: Rocchio | None = None,
        admitted: Admitted | None = None,
    ) -> dict[str, list[Match]]:
        """Top-k documents for many queries, each with its passages found, best first. With
        ``rocchio``, each query vector is first rewritten from the vectors the index ranks
        first for it (:func:`dotcat.search.feedback.rocchio_expand`: passages, on an index
        with passages), then searched and its documents ranked from their passages as any.
        With ``admitted``, only a filter's documents are searched (and fed back)."""
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        qids = list(queries)
        if admitted is not None and admitted.vectors == 0:
            return {q: [] for q in qids}
        out: dict[str, list[Match]] = {}
        with progress_bar(
            total=len(qids), desc="searching", unit="query", enabled=show_progress
        ) as bar:
            for start in range(0, len(qids), batch_size):
                chunk = qids[start : start + batch_size]
                encoded = self.encoder.encode_queries([queries[q] for q in chunk])
                if rocchio is not None:
                    encoded = rocchio_expand(self.index, encoded, rocchio, self.score_kind,
                                             admitted)  # fmt: skip
                rows = dict(zip(chunk, encoded, strict=True))
                out.update(rank_vectors(self.index, rows, k, admitted, self.aggregation,
                                        self.aggregate_top))  # fmt: skip
                bar.update(len(chunk))
        return out


def rank_vectors(
    index, rows: dict[str, np.ndarray], k: int, admitted, method: str, top: int
) -> dict[str, list[Match]]:
    """Each query vector's (``rows``: qid -> vector) top ``k`` documents of ``index``, ranked
    from FAISS's passages (:func:`rank_documents`, by ``method`` and ``top``), among the
    ``admitted`` ones where a filter is given."""
    method, margins = resolve(method, index.passages), None
    if method == "lead":
        margins = dict(zip(rows, lead_margins(index, np.stack(list(rows.values()))), strict=True))
    return rank_documents(
        functools.partial(_nearest, index, rows=rows, admitted=admitted), index.locate,
        list(rows), k,
        vectors=len(index) if admitted is None else admitted.vectors,
        documents=index.document_count if admitted is None else admitted.documents,
        method=method, top=top, margins=margins,
    )  # fmt: skip


def _nearest(
    index, qids: list[str], n: int, rows: dict, admitted: Admitted | None = None
) -> dict[str, list[tuple[int, float]]]:
    """FAISS's top ``n`` ``(id, score)`` for each query of ``qids`` (vectors in ``rows``),
    among the ``admitted`` vectors where a filter is given."""
    matrix = np.stack([rows[q] for q in qids])
    scores, ids = index.search(matrix, n, admitted)
    return {
        qid: [(int(i), float(s)) for s, i in zip(row_s, row_i, strict=True) if i >= 0]
        for qid, row_s, row_i in zip(qids, scores, ids, strict=True)
    }


@dataclass(frozen=True)
class DenseStage:
    """The ``dense`` first stage: a :class:`DenseRetriever`'s documents, its query vectors
    rewritten by Rocchio first where ``rocchio`` is set (:meth:`with_feedback`).

    Attributes:
        retriever: the index's retriever (its query encoder loaded).
        rocchio: Rocchio's settings, or None.
    """

    retriever: DenseRetriever
    rocchio: Rocchio | None = None
    name: str = "dense"

    @classmethod
    def create(cls, context) -> DenseStage:
        """The stage over a :class:`~dotcat.search.stages.StageContext`'s index (its query
        encoder loaded once, shared with a hybrid's dense side), with the Rocchio feedback its
        settings ask for."""
        retriever = context.shared("dense", lambda: dense_retriever(context))
        return cls(retriever).with_feedback(rocchio_of(context.config))

    def with_feedback(self, rocchio: Rocchio | None) -> DenseStage:
        """This stage wrapped in Rocchio feedback (None: as it is)."""
        return self if rocchio is None else replace(self, rocchio=rocchio)

    @property
    def score_kind(self) -> str:
        return self.retriever.score_kind

    def search(
        self,
        queries: Mapping[str, str],
        k: int,
        *,
        show_progress: bool = False,
        admitted: Admitted | None = None,
    ) -> dict[str, list[Match]]:
        """Each query's top ``k`` documents (:meth:`DenseRetriever.batch_matches`), among the
        ``admitted`` ones where a filter is given."""
        return self.retriever.batch_matches(
            queries, k, show_progress=show_progress, rocchio=self.rocchio, admitted=admitted
        )


def dense_retriever(context) -> DenseRetriever:
    """The index's dense retriever (over shards: the collection's, its query encoder loaded
    in the front as the shards' manifests record it), as the pipeline's settings ask for it."""
    c = context.config
    retriever = DenseRetriever(
        context.index_dir, model=c.model, device=c.device, precision=c.precision,
        index=context.index, aggregation=c.aggregation, aggregate_top=c.aggregate_top,
    )  # fmt: skip
    retriever.encoder.single_query_threads = context.small_call_threads
    return retriever


def hit(
    rank: int, match: Match, doc: StoredDocument, score_kind: str, fields: dict | None = None
) -> Hit:
    """A result: the document, its score on the ``score_kind`` scale, where the passage that matched
    lies in its text (none for a whole document: an index without passages), and its fields."""
    ref = match.passages[0][0] if match.passages else None
    span = (ref.start, ref.stop) if ref is not None and ref.stop is not None else (None, None)
    return Hit(rank, doc.id, match.score, doc.title, doc.text, score_kind, *span,
               fields=fields or {})  # fmt: skip
