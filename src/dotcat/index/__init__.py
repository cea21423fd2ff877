"""Index directories: FAISS index + SQLite doc store + manifest.

Names are imported on first use (PEP 562): ``dotcat.index.layout`` and
``dotcat.index.manifest`` stay importable without FAISS and torch, so the command line can
check its arguments before paying for those imports.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "IndexConfig": "dotcat.index.config",
    "build_index": "dotcat.index.build",
    "document_text": "dotcat.index.docstore",
    "DenseIndex": "dotcat.index.dense_index",
    "DocStore": "dotcat.index.docstore",
    "StoredDocument": "dotcat.index.docstore",
    "Manifest": "dotcat.index.manifest",
    "PassageConfig": "dotcat.index.passages",
    "check_encoder": "dotcat.index.manifest",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dotcat.index' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
