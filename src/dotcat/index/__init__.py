"""Index directories: FAISS index + SQLite doc store + manifest."""

from dotcat.exports import lazy_exports

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
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
