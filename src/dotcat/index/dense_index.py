"""A built index, loaded: FAISS index + doc store + manifest, searched by vectors."""

from __future__ import annotations

import logging
from pathlib import Path

import faiss
import numpy as np

from dotcat.errors import DotcatError
from dotcat.index import faiss_index, layout
from dotcat.index.docstore import DocStore, StoredDocument
from dotcat.index.manifest import Manifest

logger = logging.getLogger(__name__)


class DenseIndex:
    """An index directory opened for search.

    Args:
        index_dir: a directory written by :func:`dotcat.index.build_index`.
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
        self.manifest = Manifest.read(self.dir)
        self.device = faiss_index.resolve_faiss_device(device)
        index_path = self.dir / self.manifest.files["index"]
        try:
            # On-disk inverted lists (a merged index) are found beside the index file.
            index = faiss.read_index(str(index_path), faiss.IO_FLAG_ONDISK_SAME_DIR)
        except RuntimeError as e:
            raise DotcatError(f"{index_path}: cannot read FAISS index ({e})") from None
        expected = self.manifest.documents["count"]
        if index.ntotal != expected:
            raise DotcatError(
                f"{index_path}: holds {index.ntotal} vectors, manifest says {expected}; rebuild"
            )
        if self.device == "cuda":
            index = faiss_index.to_gpu(index)
        params = dict(self.manifest.faiss.get("search_params", {}))
        params.update(faiss_index.applicable_search_params(index, search_params or {}))
        faiss_index.set_search_params(index, params)
        self.search_params = params
        self.index = index
        self.store = DocStore(self.dir / self.manifest.files["docstore"])
        self.store.check(expected, self.manifest.documents.get("next_pos"))

    def __len__(self) -> int:
        return int(self.index.ntotal)

    @property
    def dim(self) -> int:
        return int(self.index.d)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Top-k ``(scores, positions)`` for a ``(n, dim)`` array of query vectors."""
        if queries.ndim != 2 or queries.shape[1] != self.dim:
            raise DotcatError(f"query vectors have shape {queries.shape}, index dim {self.dim}")
        return faiss_index.search(self.index, queries, k)

    def vectors(self, positions) -> np.ndarray:
        """The vectors at FAISS positions (:func:`faiss_index.reconstruct`; zeros for -1)."""
        return faiss_index.reconstruct(self.index, positions)

    def documents(self, positions) -> dict[int, StoredDocument]:
        """The stored documents at FAISS positions (-1, FAISS's padding, is skipped)."""
        return self._complete(self.store.get(positions), positions)

    def doc_ids(self, positions) -> dict[int, str]:
        """Document ids at FAISS positions (-1, FAISS's padding, is skipped)."""
        return self._complete(self.store.ids(positions), positions)

    def _complete(self, found: dict, positions) -> dict:
        missing = sorted({int(p) for p in positions if p >= 0} - set(found))
        if missing:
            raise DotcatError(
                f"{self.store.path}: no document at FAISS positions {missing[:5]}; the doc "
                "store and the FAISS index disagree, rebuild the index"
            )
        return found
