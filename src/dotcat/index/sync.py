"""Bring an index up to date with the folder it was built from (:func:`sync_index`): what
``dotcat index FOLDER INDEX`` does when INDEX holds an index built from FOLDER.

A file whose size and modification time (ns) are those the index recorded when it read it
(``files.json``, :func:`dotcat.index.updates.read_files`) is not read again. Any other file is
read and each of its documents compared with the stored one, record by record for a record
file: a new document is encoded and added, a changed text encoded again, new fields alone (a
file touched: its ``mtime`` field) written without encoding. The documents of a file gone
(removed, renamed, now excluded or unreadable, the folder emptied) are deleted; those added
otherwise (``dotcat add``) are kept, whatever the options. Without ``--include``,
``--exclude`` or ``--hidden``, the folder's files are selected as when it was last read. A
corpus file (JSONL, CSV, a BEIR directory's ``corpus.jsonl``) is one such file, compared record
by record when it changed.

A sync is one generation of the index (:class:`~dotcat.index.updates.Generation`): killed at
any point, it leaves the index as it was, and the next one does the whole job again. The BM25
side is scored again with the new collection's statistics, as a build of the folder scores it
(:func:`dotcat.index.bm25_global.updated`). What the index was built with stays: the encoder,
the passage settings (the per-document split rule too), the FAISS spec, BM25 on or off, and
the hybrid fusion chosen on dev queries (a folder has none to choose again on: the choice
stays until a rebuild). A setting given that differs is refused with the command that rebuilds.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from itertools import islice
from pathlib import Path
from typing import Any

from dotcat.data import CorpusOptions, CorpusStats, iter_corpus
from dotcat.data.corpus import CACHE_FORMAT_VERSION, fields_json
from dotcat.data.sources import FileSource, FolderSource, Listing, open_source, path_id
from dotcat.errors import DataFormatError, DotcatError
from dotcat.index import layout
from dotcat.index.docstore import DocStore
from dotcat.index.encoder import load_document_encoder
from dotcat.index.fields import field_rows
from dotcat.index.manifest import DOCSTORE_NAME, ENCODER_KEYS, Manifest
from dotcat.index.passages import PassageConfig
from dotcat.index.updates import Change, Generation, document_config, read_files, write_files

logger = logging.getLogger(__name__)

#: Encoder settings a sync may take (how the document encoder runs, not what it computes).
RUNTIME_SETTINGS = ("device", "precision", "batch_size", "fast", "max_batch_tokens", "backend",
                    "cpu_workers", "num_threads", "chunk_size", "seed", "keep_vectors", "ray",
                    "ray_workers")  # fmt: skip


@dataclass(frozen=True)
class SyncResult:
    """What a sync did: documents added, changed (encoded again), removed and unchanged,
    those whose fields alone changed, the files read of those listed, the generation the
    index is at, and the seconds it took."""

    added: int
    changed: int
    removed: int
    unchanged: int
    refielded: int
    files_read: int
    files: int
    generation: int
    seconds: float

    def line(self, corpus: object, index_dir: object) -> str:
        """The summary line ``dotcat index`` prints."""
        fields = f" ({self.refielded} with new fields only)" if self.refielded else ""
        return (
            f"synced {index_dir} with {corpus} in {self.seconds:.1f} s: {self.added} added, "
            f"{self.changed} changed, {self.removed} removed, {self.unchanged} unchanged"
            f"{fields}; {self.files_read} of {self.files} files read; generation "
            f"{self.generation}"
        )


def given_settings(*configs: Any) -> dict[str, Any]:
    """The fields of these settings (nested ones included) set away from their defaults: what
    a Python caller asked of a sync."""
    out: dict[str, Any] = {}
    for config in configs:
        if not dataclasses.is_dataclass(config):
            continue
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if dataclasses.is_dataclass(value):
                out.update(given_settings(value))
            elif f.default is not dataclasses.MISSING and value != f.default:
                out[f.name] = value
    return out


def sync_index(
    corpus: str | Path,
    index_dir: str | Path,
    *,
    settings: Mapping[str, Any] | None = None,
    corpus_options: CorpusOptions | None = None,
    encoder: Any = None,
    show_progress: bool = True,
    wait: float = 0.0,
) -> SyncResult:
    """Bring ``index_dir`` up to date with ``corpus``, the folder (or corpus file) it was built
    from (see the module docstring).

    Args:
        settings: settings given by name (``device``, ``precision``, ``model``, ``window``,
            ``faiss_spec``...): how the document encoder runs is taken, what the index was
            built with must not change.
        corpus_options: how to read the folder (as a build takes them; options other than
            the build's make every file read again).
        encoder: the index's document encoder, loaded (the server keeps one).
        wait: seconds to wait for another writer of the index (0: refused at once).

    Raises:
        DotcatError: a setting that would change every vector (naming the command that
            rebuilds), a corpus that cannot be read (the index untouched), another writer.
    """
    start = time.perf_counter()
    index_dir, settings = Path(index_dir), dict(settings or {})
    recorded = read_files(index_dir)
    options = _selection_kept(corpus_options or CorpusOptions(), recorded)
    layout.check_writable(index_dir)
    encoder = encoder or _encoder(index_dir, corpus, settings)  # (checks the settings)
    try:
        source = open_source(corpus, options)
    except DataFormatError:  # a folder left with no file: emptied, under the options it was last
        # read with only (others that select none, a mistyped pattern, are refused as a build's)
        empty = (
            FolderSource(Path(corpus), options, empty_ok=True) if Path(corpus).is_dir() else None
        )
        if (
            empty is None
            or empty.listing.files
            or empty.listing.problems
            or (recorded and recorded.get("key") != _state(empty, options)["key"])
        ):
            raise
        source = empty
    with Generation(index_dir, wait) as generation:
        state = _state(source, options)
        with DocStore(index_dir / DOCSTORE_NAME) as store:
            change, counts = _compare(source, store, read_files(index_dir), state)
            total = len(store)
        runtime = {k: v for k, v in settings.items() if k in RUNTIME_SETTINGS}
        if change.remove or change.fields or change.add is not None:
            generation.apply(change, encoder or runtime, show_progress,
                             ("sync", {"corpus": str(corpus)}))  # fmt: skip
        elif change.files != read_files(index_dir):  # files touched, nothing else
            write_files(index_dir, change.files)
    added, changed, refielded, files_read = counts
    removed = len(change.remove)
    unchanged = total - removed - changed
    result = SyncResult(added, changed, removed, unchanged, refielded, files_read,
                        len(state["files"]), generation.manifest.generation,
                        time.perf_counter() - start)  # fmt: skip
    logger.info("%s", result.line(corpus, index_dir))
    return result


def record_files(index_dir: str | Path, corpus: object, options: CorpusOptions | None) -> None:
    """After a build of ``index_dir`` from ``corpus`` (a folder or a corpus file, opened
    before the build began): record its files' size and time, for the next sync. Files that
    gave no document (unreadable, empty) are left out: a sync reads them again."""
    if not isinstance(corpus, (FolderSource, FileSource)):
        return
    index_dir = layout.real_path(index_dir)
    state = _state(corpus, options or CorpusOptions())
    with layout.index_lock(index_dir, wait=30.0):
        with DocStore(index_dir / DOCSTORE_NAME) as store:
            held = {i.split("#", 1)[0] for i in store.all_ids()}
        if isinstance(corpus, FolderSource):
            state["files"] = {k: v for k, v in state["files"].items() if k in held}
        write_files(index_dir, state)


def _selection_kept(options: CorpusOptions, recorded: Mapping[str, Any] | None) -> CorpusOptions:
    """``options`` with the ``include``, ``exclude`` and ``hidden`` the folder was last read
    with where none is given: a command run again as first typed must not index what the
    build or a sync left out."""
    before = recorded["key"][1] if recorded and not options.folder_options() else {}
    kept = {n: before[n] for n in ("include", "exclude", "hidden") if n in before}
    if kept:
        logger.info("the folder read as last time: %s", kept)
    return replace(options, **kept)


def _state(source: FolderSource | FileSource, options: CorpusOptions) -> dict[str, Any]:
    """The files of a folder as walked (document id prefix -> ``[size, mtime_ns]``; a corpus
    file's under ``""``), and what they were read with (``key``: the options, the folder's
    rules, the reader's version)."""
    key: list[Any] = [CACHE_FORMAT_VERSION, options.to_json()]
    if isinstance(source, FolderSource):
        key.append(source.rules.to_json())
        files = {path_id(f.rel): [f.size, f.mtime_ns] for f in source.listing.files}
    elif isinstance(source, FileSource):
        st = source.file.stat()
        files = {"": [st.st_size, st.st_mtime_ns]}
    else:
        raise DotcatError(
            f"{source.describe()}: only an index built from a folder or a corpus file is "
            "brought up to date; this corpus is given otherwise"
        )
    return {"key": key, "files": files}


def _compare(
    source: FolderSource | FileSource,
    store: DocStore,
    recorded: dict[str, Any] | None,
    state: dict[str, Any],
) -> tuple[Change, tuple[int, int, int, int]]:
    """The change that makes the index hold what ``source`` holds now, and the counts
    ``(added, changed, new fields only, files read)``."""
    now = state["files"]
    # The files recorded (no record, an index built before they were kept: those of every
    # document), every one read again where the options differ; documents added otherwise
    # (``dotcat add``) are no file's, and kept.
    recorded = recorded or {"files": dict.fromkeys({i.split("#", 1)[0] for i in store.all_ids()})}
    kept = set(recorded.get("added", ()))  # ids `dotcat add` and HTTP writes gave: no file's
    same = recorded.get("key") == state["key"]
    before: dict[str, Any] = recorded["files"] if same else dict.fromkeys(recorded["files"])
    stale = [k for k, v in now.items() if before.get(k) != v]
    gone = [k for k in before if k not in now]
    if isinstance(source, FileSource):
        held = set(store.all_ids()) - kept if stale else set()
        reader = source
    else:
        held = {d.id for k in (*stale, *gone) for d in store.of_file(k)} - kept
        reader = copy.copy(source)
        wanted = set(stale)
        reader.listing = Listing(files=[f for f in source.listing.files
                                        if path_id(f.rel) in wanted])  # fmt: skip
    added, fields, changed, seen = [], {}, 0, set()
    documents = iter_corpus(reader, CorpusStats()) if stale else iter(())
    while batch := list(islice(documents, 1000)):
        stored = store.by_ids([d.id for d in batch])
        rows = store.field_rows([d.pos for d in stored.values()])
        for doc in batch:
            seen.add(doc.id.split("#", 1)[0])
            old = stored.get(doc.id)
            held.discard(doc.id)
            kept.discard(doc.id)  # a file's now (the file's going takes it, not a write's)
            if old is None or (old.title, old.text) != (doc.title, doc.text):
                added.append(doc)
                changed += old is not None
            elif rows[old.pos] != sorted(r[1:] for r in field_rows(old.pos, doc.fields or {})):
                fields[doc.id] = fields_json(doc.fields)
    # A file's record is kept where it gave documents (one that gave none is read again).
    files = {k: v for k, v in now.items() if k not in stale and before.get(k) is not None}
    files.update({k: now[k] for k in stale if k in seen or k == ""})
    state = {"key": state["key"], "files": files, **({"added": sorted(kept)} if kept else {})}
    change = Change(sorted(held), added or None, fields, state)
    return change, (len(added) - changed, changed, len(fields), len(stale))


def _encoder(index_dir: Path, corpus: object, settings: dict[str, Any]) -> Any:
    """The document encoder the given settings ask for (None: the index's, loaded when a
    document needs encoding); a setting that would change what the index holds is refused."""
    manifest = Manifest.read(index_dir)
    built = PassageConfig.from_manifest(manifest.passages)
    per_document = bool(manifest.passages and "split_longer_than" in manifest.passages)
    held = {
        "faiss_spec": manifest.faiss.get("spec"),
        "bm25": bool(manifest.bm25),
        "shard": None,
        "enabled": None if per_document else built.enabled,
        **{k: getattr(built, k) for k in ("window", "stride", "sentence_aware") if built.enabled},
    }
    differs = {k: v for k, v in settings.items() if k in held and v != held[k]}
    vectors = {k: v for k, v in settings.items() if k in ENCODER_FIELDS}
    encoder = None
    if vectors:
        encoder = load_document_encoder(replace(document_config(manifest, settings), **vectors))
        entry = encoder.manifest_entry()
        differs.update({k: settings.get(k, entry.get(k)) for k in ENCODER_KEYS
                        if entry.get(k) != manifest.encoder.get(k, entry.get(k))})  # fmt: skip
    unknown = set(settings) - set(held) - ENCODER_FIELDS - set(RUNTIME_SETTINGS)
    if differs or unknown:
        named = {**differs, **{k: settings[k] for k in unknown}}
        given = " ".join(f"{k}={v}" for k, v in named.items())
        raise DotcatError(
            f"{index_dir}: {given} would change what the index holds (it was built otherwise); "
            f"rebuild it so: `dotcat index {corpus} {index_dir} overwrite=True {given}`",
            settings=("overwrite", *named),
        )
    return encoder


#: Encoder settings that change the vectors (a sync refuses them where they differ).
ENCODER_FIELDS = {"model", "pooling", "similarity", "max_length", "query_prefix", "document_prefix"}
