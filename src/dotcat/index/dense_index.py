"""A built index, loaded: FAISS index + doc store + manifest, searched by vectors.

A FAISS id is a passage's (an index built with passages, :mod:`dotcat.index.passages`) or a
document's position (an index without them); :meth:`DenseIndex.locate` says where each id lies
either way, so callers rank documents the same way over both layouts. A search may be kept
within the documents a filter admits (:meth:`DenseIndex.admit`, :mod:`dotcat.index.filtered`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from dotcat.errors import DotcatError
from dotcat.index import faiss_index, layout
from dotcat.index.docstore import DocStore, PassageRef, StoredDocument, document_text
from dotcat.index.fields import FieldInfo
from dotcat.index.filtered import Admitted, search_admitted
from dotcat.index.manifest import Manifest

logger = logging.getLogger(__name__)
#: Vectors :meth:`DenseIndex.sample` reads.
SAMPLE = 2048


class DenseIndex:
    """An index directory opened for search.

    Args:
        index_dir: a directory written by :func:`dotcat.index.build.build_index`.
        device: ``auto`` (GPU when faiss-gpu sees one), ``cpu`` or ``cuda``.
        search_params: overrides of the manifest's search parameters (``nprobe``, ``efSearch``).
    """

    def __init__(
        self,
        index_dir: str | Path,
        device: str = "auto",
        search_params: dict[str, float] | None = None,
    ) -> None:
        self.dir = Path(index_dir)
        layout.recover_for_reading(self.dir)  # a build killed while swapping left it aside
        with layout.reading(self.dir):  # one generation's files (an update may be swapping)
            self._open(device, search_params)

    def _open(self, device: str, search_params: dict[str, float] | None) -> None:
        self.manifest = Manifest.read(self.dir)
        self.device = faiss_index.resolve_faiss_device(device)
        index_path = self.dir / self.manifest.files["index"]
        # On-disk inverted lists (a merged index) are found beside the index file.
        index = faiss_index.read_index(index_path, faiss.IO_FLAG_ONDISK_SAME_DIR)
        expected = self.manifest.vector_count
        if index.ntotal != expected:
            raise DotcatError(
                f"{index_path}: holds {index.ntotal} vectors, manifest says {expected}; rebuild"
            )
        if self.device == "cuda":
            index = faiss_index.to_gpu(index)
        params = dict(self.manifest.faiss.get("search_params", {}))
        kept = faiss_index.applicable_search_params(index, search_params or {})
        if ignored := sorted(set(search_params or {}) - set(kept)):
            spec = self.manifest.faiss.get("spec")
            logger.warning("%s: %s does nothing on a FAISS %s index", self.dir, ignored[0], spec)
        params.update(kept)
        faiss_index.set_search_params(index, params)
        self.search_params = params
        self.index = index
        self.store = DocStore(self.dir / self.manifest.files["docstore"])
        documents = self.manifest.documents
        self.store.check(documents["count"], documents.get("next_pos"))
        self.passages = self.manifest.passages
        if self.passages:
            self.store.check_passages(self.passages["count"], self.manifest.next_vector_id)
        self._lock = threading.Lock()
        self._vectors: tuple | None = None
        self._sample: np.ndarray | None = None
        self._kinds: dict[str, FieldInfo] | None = None

    def __len__(self) -> int:
        """Vectors (passages, or documents in an index without passages)."""
        return int(self.index.ntotal)

    @property
    def document_count(self) -> int:
        return int(self.manifest.documents["count"])

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def search(
        self, queries: np.ndarray, k: int, admitted: Admitted | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores, positions)`` for a ``(n, dim)`` array of query vectors; with
        ``admitted``, among the vectors of the documents a filter admits."""
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise DotcatError(f"query vectors have shape {queries.shape}, index dim {self.dim}")
        if admitted is not None:
            return search_admitted(self.index, queries, k, admitted)
        return faiss_index.search(self.index, queries, k)

    # -- fields and filters -------------------------------------------------------------------

    def field_kinds(self) -> dict[str, FieldInfo]:
        """The documents' fields, name -> kind and counts (:mod:`dotcat.index.fields`)."""
        if self._kinds is None:
            self._kinds = self.store.field_kinds()
        return self._kinds

    def fields_of(self, positions: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The fields of the documents at these positions."""
        return self.store.fields_of(positions, self.field_kinds())

    def field_counts(self, positions: Sequence[int], names: Sequence[str]) -> dict:
        """Documents per value of each field of ``names`` among ``positions`` (facets)."""
        return self.store.field_counts(positions, names)

    def admit(self, sql: str, params: Sequence[Any]) -> Admitted:
        """The documents a filter's query (:meth:`dotcat.search.filters.Filter.sql`) admits."""
        ids, positions, documents = self._vector_positions()
        return Admitted.of(self.store.select(sql, params), ids, positions,
                           self.manifest.next_vector_id, documents)  # fmt: skip

    def _vector_positions(self) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """Every vector's id (sorted) and its document's position, and (with passages) every
        document's position, read once."""
        with self._lock:
            if self._vectors is None:
                ids, positions = self.store.vector_positions()
                documents = self.store.positions() if self.passages else None
                self._vectors = (ids, positions, documents)
            return self._vectors

    def locate(self, ids) -> dict[int, PassageRef]:
        """Where the vectors with these FAISS ids lie (-1, FAISS's padding, is skipped): a
        passage of a document, or (an index without passages) a whole document."""
        if self.passages:
            return self._complete(self.store.passages(ids), ids)
        found = self._complete(self.store.ids(ids), ids)
        return {pos: PassageRef(pos, doc_id) for pos, doc_id in found.items()}

    def vectors(self, positions) -> np.ndarray:
        """The vectors at FAISS positions (:func:`faiss_index.reconstruct`; zeros for -1)."""
        return faiss_index.reconstruct(self.index, positions)

    def sample(self, size: int = SAMPLE) -> np.ndarray:
        """Up to ``size`` of the index's vectors, evenly spaced by id, read once: where a
        query's score spread is measured (:func:`dotcat.search.aggregation.lead_margins`)."""
        if self._sample is None:
            ids = self._vector_positions()[0]
            picked = np.unique(np.linspace(0, len(ids) - 1, min(len(ids), size)).astype(int))
            self._sample = self.vectors(ids[picked]) if len(ids) else np.zeros((0, self.index.d))
        return self._sample

    def documents(self, ids) -> dict[int, StoredDocument]:
        """The stored document behind each FAISS id (-1, FAISS's padding, is skipped)."""
        if not self.passages:
            return self._complete(self.store.get(ids), ids)
        refs = self.locate(ids)
        docs = self.store.by_ids(sorted({r.doc_id for r in refs.values()}))
        return {i: docs[r.doc_id] for i, r in refs.items()}

    def doc_ids(self, ids) -> dict[int, str]:
        """The document id behind each FAISS id (-1, FAISS's padding, is skipped)."""
        if not self.passages:
            return self._complete(self.store.ids(ids), ids)
        return {i: r.doc_id for i, r in self.locate(ids).items()}

    def passage_texts(self, refs) -> dict[int, str]:
        """``pid -> document_text(title, passage text)``, what the models read of each."""
        texts = self.store.passage_texts([r.pid for r in refs])
        return {pid: document_text(title, text) for pid, (title, text) in texts.items()}

    def _complete(self, found: dict, ids) -> dict:
        missing = sorted({int(p) for p in ids if p >= 0} - set(found))
        if missing:
            raise DotcatError(
                f"{self.store.path}: nothing at FAISS ids {missing[:5]}; the doc store and the "
                "FAISS index disagree, rebuild the index"
            )
        return found
