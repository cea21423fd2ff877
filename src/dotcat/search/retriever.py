"""Dense retrieval at query time: encode the query with the index's own encoder, FAISS top-k.

The encoder is rebuilt from the index manifest (model, pooling, similarity, max length:
:func:`dotcat.index.encoder.encoder_config_from_manifest`), so
an index is always searched as it was built; another model is refused unless its weights and
settings are the ones recorded (:func:`dotcat.index.check_encoder`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from dotcat.errors import DotcatError
from dotcat.index import DenseIndex, check_encoder, document_text
from dotcat.index.encoder import encoder_config_from_manifest
from dotcat.index.shards import ShardSet, open_index
from dotcat.models import BiEncoder
from dotcat.progress import progress_bar
from dotcat.search.hits import Hit
from dotcat.types import Run

__all__ = ["DenseRetriever", "Hit"]

logger = logging.getLogger(__name__)


class DenseRetriever:
    """BERT_DOT first stage over an index directory.

    Args:
        index_dir: a directory written by ``dotcat index``.
        model: load the query encoder from here instead of the manifest's record.
        device: ``auto``, ``cpu`` or ``cuda`` (for both the encoder and FAISS).
        search_params: FAISS search parameters (``nprobe``, ``efSearch``) overriding the manifest.
        precision: the query encoder's ``auto``, ``fp32``, ``bf16`` or ``int8`` (see
            :class:`dotcat.models.EncoderConfig`); ``auto`` follows an int8 index.
        index: the index directory already open (a :class:`DenseIndex` of ``index_dir``).
    """

    def __init__(
        self,
        index_dir: str | Path,
        model: str | None = None,
        device: str = "auto",
        search_params: dict[str, float] | None = None,
        precision: str = "auto",
        index: DenseIndex | ShardSet | None = None,
    ) -> None:
        self.index = index or open_index(index_dir, device=device, search_params=search_params)
        entry = self.index.manifest.encoder
        self.encoder = BiEncoder.load(encoder_config_from_manifest(entry, model, device, precision))
        check_encoder(self.index.manifest, self.encoder.manifest_entry(), self.index.dir)
        #: The scale of the scores: the encoder's similarity.
        self.score_kind = "cosine" if self.encoder.similarity == "cos" else "dot"

    def search(self, query: str, k: int = 10) -> list[Hit]:
        """The top-k documents for one query, with titles and texts."""
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        if not query.strip():
            raise DotcatError("the query is empty; give some words to search for")
        vector = self.encoder.encode_queries([query])
        scores, positions = self.index.search(vector, k)
        docs = self.index.documents(positions[0])
        return [
            Hit(rank, docs[p].id, float(s), docs[p].title, docs[p].text, self.score_kind)
            for rank, (s, p) in enumerate(zip(scores[0], positions[0], strict=False), start=1)
            if p >= 0
        ]

    def document_texts(self, doc_ids) -> dict[str, str]:
        """id -> ``document_text(title, text)`` from the index's document store."""
        docs = self.index.store.by_ids(list(doc_ids))
        return {doc_id: document_text(d.title, d.text) for doc_id, d in docs.items()}

    def batch_search(
        self,
        queries: Mapping[str, str],
        k: int = 100,
        batch_size: int = 256,
        show_progress: bool = True,
    ) -> Run:
        """Top-k for many queries: ``{qid: [(doc_id, score), ...]}`` ranked best first."""
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        qids = list(queries)
        run: Run = {}
        with progress_bar(
            total=len(qids), desc="searching", unit="query", enabled=show_progress
        ) as bar:
            for start in range(0, len(qids), batch_size):
                chunk = qids[start : start + batch_size]
                vectors = self.encoder.encode_queries([queries[q] for q in chunk])
                run.update(self.search_vectors(chunk, vectors, k))
                bar.update(len(chunk))
        return run

    def search_vectors(self, qids: Sequence[str], vectors: np.ndarray, k: int) -> Run:
        """Top-k for query vectors already encoded (one row per id of ``qids``)."""
        scores, positions = self.index.search(vectors, k)
        ids = self.index.doc_ids(positions.ravel())
        run: Run = {}
        for qid, row_scores, row_pos in zip(qids, scores, positions, strict=True):
            pairs = zip(row_scores, row_pos, strict=True)
            run[qid] = [(ids[p], float(s)) for s, p in pairs if p >= 0]
        return run
