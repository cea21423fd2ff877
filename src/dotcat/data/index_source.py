"""An index directory read as a corpus: the documents its document store keeps.

A dotcat index (``dotcat index``) keeps every document it holds, whole, in a SQLite table
``docs (pos, id, title, text)`` (:mod:`dotcat.index.docstore`). Read as a corpus source, an
index gives those documents in index order, so that whatever takes a corpus (``train``,
``rerank``, ``experiment``, ``eval --corpus``, re-indexing with another model) takes an index
as well: a folder of files indexed once need not be kept beside its index, and the judged
documents of a pool (:mod:`dotcat.judging`) are exactly the ones the index holds.

The store is opened read-only (a SQLite URI, ``mode=ro``); a file that is no SQLite database,
or one without the ``docs`` table, is one :class:`~dotcat.errors.DataFormatError`.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

from dotcat.data._io import SQLITE_HEADER
from dotcat.data.records import Record
from dotcat.errors import DataFormatError
from dotcat.files import read_json_or_none

#: The files that make a directory a dotcat index (:mod:`dotcat.index.layout` writes them).
INDEX_MANIFEST = "manifest.json"
INDEX_DOCSTORE = "docstore.sqlite"
_BATCH = 10_000


#: The record ``dotcat judge export`` writes beside the corpus it exports from an index
#: (:mod:`dotcat.judging.export`): among the rest, that index's corpus identity.
EXPORT_RECORD = "dotcat_judgments.json"


def source_corpus_sha256(path: str | Path) -> str | None:
    """The sha256 of the corpus that ``path``'s documents were taken from, where they are an
    index's: an index directory's (its manifest's ``corpus.sha256``) or a folder exported
    from one (the index's, as ``dotcat judge export`` recorded it); else None.

    A model trained on either was trained on that index's corpus, though the file it read
    (the document store, the exported ``corpus.jsonl``) hashes otherwise. An index built from
    another index (``dotcat index OLD NEW --model M``) stands for the corpus the first was built
    from (its manifest's ``corpus.source_sha256``)."""
    path = Path(path)
    if is_index_dir(path):
        record = read_json_or_none(path / INDEX_MANIFEST)
        shas = corpus_shas(record.get("corpus") if isinstance(record, dict) else None)
        return shas[-1] if shas else None
    record = read_json_or_none(path / EXPORT_RECORD) if path.is_dir() else None
    corpus = record.get("source") if isinstance(record, dict) else None
    sha = corpus.get("sha256") if isinstance(corpus, dict) else None
    return sha if isinstance(sha, str) and sha else None


def corpus_shas(corpus: Any) -> list[str]:
    """The corpora an index manifest's ``corpus`` record stands for, as sha256s: its documents'
    own, then, for an index built from another index, the corpus that one stood for."""
    if not isinstance(corpus, dict):
        return []
    shas = (corpus.get("sha256"), corpus.get("source_sha256"))
    return [sha for sha in shas if isinstance(sha, str) and sha]


def is_index_dir(path: str | Path) -> bool:
    """Whether ``path`` is a dotcat index directory (a manifest and a document store)."""
    path = Path(path)  # (os.path.isfile: False, not an error, where it cannot be looked at)
    return os.path.isfile(path / INDEX_MANIFEST) and os.path.isfile(path / INDEX_DOCSTORE)


def index_holding(path: str | Path) -> Path | None:
    """The dotcat index directory that ``path`` is or lies inside (links and ``..`` followed),
    else None: no output is ever written into an index."""
    path = Path(path).resolve()
    return next((p for p in (path, *path.parents) if is_index_dir(p)), None)


def is_sqlite(path: str | Path) -> bool:
    """Whether ``path`` is a SQLite database (a judgements file, a document store): never an
    output to write over. False where it cannot be read."""
    try:
        with open(path, "rb") as f:
            return f.read(16) == SQLITE_HEADER
    except OSError:
        return False


def indexes_in(folder: str | Path) -> list[Path]:
    """The folders inside ``folder`` (links to them too) that hold an index manifest, by
    name: a folder of shards. None where ``folder`` cannot be listed, and a folder that cannot
    be looked at is not one, never an error."""
    try:
        names = sorted(os.listdir(folder))
    except OSError:
        return []
    return [Path(folder) / n for n in names if os.path.isfile(Path(folder) / n / INDEX_MANIFEST)]


def file_identity(file: Path) -> dict[str, Any]:
    """What a cached copy of a file's documents depends on: its real path, size and mtime."""
    st = file.stat()
    return {"file": str(file.resolve()), "size": st.st_size, "mtime_ns": st.st_mtime_ns}


def _connect(file: Path) -> sqlite3.Connection:
    uri = f"file:{quote(str(file.resolve()))}?mode=ro"
    return sqlite3.connect(uri, uri=True)


class IndexSource:
    """The documents of an index directory's document store, in index order."""

    kind = "index"

    def __init__(self, directory: Path, options: Any) -> None:
        self.directory, self.options = directory, options
        self.file = directory / INDEX_DOCSTORE

    def describe(self) -> str:
        return str(self.directory)

    def identity(self, again: bool = False) -> dict[str, Any]:
        """The store's real path, size and mtime (a cached copy is read again when the index
        changes: ``dotcat add``/``delete`` rewrite it)."""
        return {**file_identity(self.file), "kind": self.kind}

    def records(self, stats: Any) -> Iterator[Record]:
        """Every stored document; ``stats.sha256`` becomes the sha256 of their ids, titles and
        texts (as documents given in Python are fingerprinted)."""
        digest = hashlib.sha256()
        where = str(self.file)
        try:
            with contextlib.closing(_connect(self.file)) as connection:
                cursor = connection.execute("SELECT pos, id, title, text FROM docs ORDER BY pos")
                while rows := cursor.fetchmany(_BATCH):
                    for pos, doc_id, title, text in rows:
                        digest.update(json.dumps([doc_id, title, text]).encode() + b"\n")
                        yield Record(where, None, str(doc_id), f"docs row {pos}", title, text)
        except sqlite3.Error as e:
            raise DataFormatError(self.file, None, f"cannot read the document store: {e}") from None
        stats.sha256 = digest.hexdigest()
