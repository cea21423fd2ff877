"""Index directories: FAISS index + SQLite doc store + manifest."""

from dotcat.index.build import IndexConfig, build_index, document_text
from dotcat.index.dense_index import DenseIndex
from dotcat.index.docstore import DocStore, StoredDocument
from dotcat.index.manifest import Manifest, check_encoder

__all__ = [
    "DenseIndex",
    "DocStore",
    "IndexConfig",
    "Manifest",
    "StoredDocument",
    "build_index",
    "check_encoder",
    "document_text",
]
