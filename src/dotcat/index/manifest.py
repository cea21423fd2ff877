"""The index manifest: everything needed to search an index again, written, never guessed.

``manifest.json`` records the format version, the encoder (name, path, weights fingerprint,
pooling, similarity, normalisation, max length, dimension), the FAISS spec and search
parameters, the document count, the passage settings and count (an index built with passages,
:mod:`dotcat.index.passages`) and a fingerprint of the corpus it was built from.
"""

from __future__ import annotations

import datetime as dt
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from dotcat.data.index_source import indexes_in
from dotcat.errors import DotcatError
from dotcat.files import write_text
from dotcat.index.layout import (
    DOCSTORE_NAME,
    INDEX_NAME,
    MANIFEST_NAME,
    check_writable,
    index_lock,
    is_complete,
    leftovers,
    real_path,
    recover_for_reading,
)

#: The format written: 2 since the doc store keeps documents' fields (:mod:`dotcat.index.fields`).
FORMAT_VERSION = 2
#: The formats read: 1 is an index without fields (it searches, a filter is refused).
READABLE_VERSIONS = (1, 2)
__all__ = ["DOCSTORE_NAME", "INDEX_NAME", "MANIFEST_NAME", "Manifest", "check_encoder"]

# Encoder fields that change the vectors: any difference makes query and document vectors
# incomparable, so searching with a different value is refused (a key an older index lacks,
# do_lower_case, is not checked).
ENCODER_KEYS = ("fingerprint", "pooling", "similarity", "normalize", "max_length", "dim",
                "query_prefix", "document_prefix", "do_lower_case")  # fmt: skip


@dataclass
class Manifest:
    """What an index directory holds and how it was built (see DESIGN.md, "Index directory")."""

    encoder: dict[str, Any]
    faiss: dict[str, Any]
    documents: dict[str, Any]
    corpus: dict[str, Any]
    format_version: int = FORMAT_VERSION
    dotcat_version: str = ""
    created: str = ""
    files: dict[str, str] = field(
        default_factory=lambda: {"index": INDEX_NAME, "docstore": DOCSTORE_NAME}
    )
    #: The BM25 side index (``dir``, ``config``, ``documents``), when built with ``--bm25``.
    bm25: dict[str, Any] | None = None
    #: The hybrid fusion chosen on dev (:class:`dotcat.search.fusion.Fusion`), if any.
    fusion: dict[str, Any] | None = None
    #: For a shard (``dotcat index --shard I/N``): ``index``, ``of``, and the corpus positions
    #: ``start``..``stop`` it holds.
    shard: dict[str, int] | None = None
    #: Live updates (``dotcat add`` / ``dotcat delete``), oldest first.
    updates: list[dict[str, Any]] | None = None
    #: Interpolation weights chosen on this corpus for cross-encoders (``dotcat calibrate``,
    #: :mod:`dotcat.search.calibrate`), keyed by the cross-encoder's weights fingerprint.
    rerank: dict[str, dict[str, Any]] | None = None
    #: Passages of long documents (:mod:`dotcat.index.passages`): the settings (``window``,
    #: ``stride``, ``sentence_aware``), ``count`` (the FAISS vectors) and ``next_pid``; None:
    #: one vector per document (an index built before passages, or with them off).
    passages: dict[str, Any] | None = None
    #: This generation's number (a build is 1; each update, sync or manifest change makes the
    #: next: :mod:`dotcat.index.layout`) and when it was made (ISO 8601; a build: ``created``).
    generation: int = 1
    made: str = ""

    def next_generation(self) -> None:
        """Make this the manifest of the next generation, made now."""
        self.generation += 1
        self.made = dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")

    @property
    def vector_count(self) -> int:
        """Vectors in the FAISS index: passages, or documents in an index without them."""
        return int((self.passages or self.documents)["count"])

    @property
    def next_vector_id(self) -> int:
        """The next FAISS id never used (updates leave gaps where they delete)."""
        if self.passages:
            return int(self.passages.get("next_pid", self.passages["count"]))
        return int(self.documents.get("next_pos", self.documents["count"]))

    def write(self, directory: Path) -> None:
        """Write ``manifest.json`` durably (temp file, fsync, rename)."""
        text = json.dumps(asdict(self), indent=2, sort_keys=True)
        write_text(Path(directory) / MANIFEST_NAME, [text, "\n"])

    @classmethod
    def read(cls, directory: Path) -> Manifest:
        """Read and validate the manifest of an index directory."""
        directory = Path(directory)
        path = directory / MANIFEST_NAME
        if not directory.is_dir():
            raise DotcatError(f"{directory}: no such index directory")
        if not path.is_file():
            raise DotcatError(
                f"{directory}: not a dotcat index (no {MANIFEST_NAME}; "
                "an interrupted build never leaves one, so rebuild it with `dotcat index`)"
            )
        try:
            raw = json.loads(path.read_text(encoding="utf-8"))
        except (json.JSONDecodeError, UnicodeDecodeError) as e:
            raise DotcatError(f"{path}: manifest is not valid JSON ({e})") from None
        version = raw.get("format_version")
        if version not in READABLE_VERSIONS:
            raise DotcatError(
                f"{path}: index format version {version!r} is not supported by this dotcat "
                f"(expects {' or '.join(map(str, READABLE_VERSIONS))}); rebuild the index"
            )
        try:
            manifest = cls(**raw)
        except TypeError as e:
            raise DotcatError(f"{path}: malformed manifest ({e})") from None
        for key in ("index", "docstore"):
            name = manifest.files.get(key, "")
            if not (directory / name).is_file():
                raise DotcatError(f"{directory}: manifest names {key} file {name!r}, missing")
        if manifest.bm25 and not (directory / manifest.bm25.get("dir", "")).is_dir():
            raise DotcatError(f"{directory}: manifest names a BM25 index, its folder is missing")
        return manifest


def update_manifest(directory: str | Path, change: Callable[[Manifest], None]) -> Manifest:
    """Apply ``change`` to an index's manifest and write it back, under the index's lock
    (waiting up to 30 s for a build or update of the same index) and atomically."""
    directory = real_path(directory)
    check_writable(directory)
    with index_lock(directory, wait=30.0):
        manifest = Manifest.read(directory)
        change(manifest)
        manifest.next_generation()  # a server over the index reloads it (dotcat.serve.live)
        manifest.write(directory)  # temp file, fsync, rename
    return manifest


def built_from(corpus: object, index_dir: str | Path) -> bool:
    """Whether ``index_dir`` holds an index (not a shard) built from ``corpus``, a folder or
    a corpus file given by path: what ``dotcat index CORPUS INDEX`` brings up to date
    (:func:`dotcat.index.sync.sync_index`) rather than refuses or replaces."""
    index_dir = Path(index_dir)
    if not isinstance(corpus, (str, os.PathLike)):
        return False
    if not (index_dir / MANIFEST_NAME).is_file():
        if not any(is_complete(p) for p in leftovers(index_dir)):
            return False
        recover_for_reading(index_dir)  # a swap a killed writer left half done
        if not (index_dir / MANIFEST_NAME).is_file():
            return False
    manifest = Manifest.read(index_dir)
    entry = manifest.corpus
    return (
        entry.get("kind") in ("folder", "file")
        and entry.get("path") == str(Path(corpus).resolve())
        and not manifest.shard
    )


def check_encoder(
    manifest: Manifest, encoder_entry: dict[str, Any], index_dir: Path, *, side: str = "queries"
) -> None:
    """Refuse to search an index (``side="queries"``) or add to it (``"documents"``) with an
    encoder whose vectors are not comparable.

    Raises:
        DotcatError: naming the index's encoder and the given one, and what differs.
    """
    recorded = manifest.encoder
    diffs = [
        f"{key}: index {recorded.get(key)!r} vs given {encoder_entry.get(key)!r}"
        for key in ENCODER_KEYS
        if key in recorded and recorded.get(key) != encoder_entry.get(key)
    ]
    if diffs:
        raise DotcatError(
            f"{index_dir}: index was built with encoder {recorded.get('name')!r} "
            f"(weights {str(recorded.get('fingerprint'))[:12]}), refusing to search it with "
            f"{encoder_entry.get('name')!r} (weights {str(encoder_entry.get('fingerprint'))[:12]})"
            f"; differences: {'; '.join(diffs)}"
        )
    # Manifests from before int8 record no precision: their vectors are fp32 or bf16.
    built, given = recorded.get("precision") or "fp32", encoder_entry.get("precision")
    if given and not precisions_compatible(built, given, side):
        raise DotcatError(
            f"{index_dir}: the index's vectors were encoded at {built}; {given} {side} give "
            f"vectors that do not rank alike with them; use precision={built}, or build the "
            f"index at {given}",
            settings=("precision",),
        )
    if built == given == "int8":
        made, runs = int8_runtime(recorded), int8_runtime(encoder_entry)
        if made != runs:
            raise DotcatError(
                f"{index_dir}: the index's int8 vectors were made by {made}, the query encoder "
                f"runs int8 on {runs}: their vectors do not rank alike; search it with the "
                f"{made} runtime (the default follows the index), or rebuild the index"
            )


def int8_runtime(encoder_entry: dict[str, Any]) -> str:
    """The runtime that made an int8 encoder's vectors: its recorded ``backend``, ONNX Runtime
    for manifests from before OpenVINO encoded documents (they record none)."""
    return encoder_entry.get("backend") or "onnxruntime"


def precisions_compatible(built: str, given: str, side: str = "queries") -> bool:
    """Whether ``given`` vectors may meet an index's documents encoded at ``built``: as queries
    (``side="queries"``) or as added documents (``"documents"``).

    fp32, bf16 and fp16 vectors meet (cosine >= 0.9999). int8 queries meet only int8 documents (of
    the same runtime, checked apart): int8 queries over fp32 documents lost R@100 (98.99% of fp32's
    on SciFact dev). Float queries meet int8 documents: they kept >= 99.7% of fp32's
    default-pipeline nDCG@10 on each of four collections. Added documents must be what the index's
    are: int8 among int8 only, so that one index never mixes two kinds of document vectors."""
    if built == given or "int8" not in (built, given):
        return True
    return side == "queries" and given != "int8"


def check_index(index_dir: str | Path, *, shards: bool = True) -> None:
    """Check an index directory without loading it: restored first if a killed build left it
    aside, then its manifest read; with ``shards``, a folder of shard indexes passes too.

    Raises:
        DotcatError: no index there, or an unreadable manifest.
    """
    index_dir = Path(index_dir)
    recover_for_reading(index_dir)
    if shards and index_dir.is_dir() and not (index_dir / MANIFEST_NAME).exists():
        found = indexes_in(index_dir)
        for shard in found:
            Manifest.read(shard)
        if found:
            return
    Manifest.read(index_dir)
