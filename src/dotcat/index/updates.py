"""Live updates: add documents to an index, or delete them, without rebuilding it.

``dotcat add INDEX CORPUS`` encodes only the new documents and adds them; an id the index
already holds is refused, or replaced with ``--upsert``. ``dotcat delete INDEX ID...`` removes
documents from the FAISS index and the doc store. A deleted document never comes back in
results: its vector is gone from FAISS, which is what search reads.

Positions are stable ids: FAISS returns them and the doc store is keyed by them. An added
document gets the next position never used (``documents.next_pos`` in the manifest); a deleted
one leaves a gap. In an index with passages (:mod:`dotcat.index.passages`) the FAISS ids are
the passages': an added document is split as the index's documents were (the settings in its
manifest), its passages get the next ids never used (``passages.next_pid``), and a deleted
document takes every one of its passages with it.

IVF indexes keep explicit ids natively; other index types are wrapped in an ``IndexIDMap2``
the first time they are updated (rebuilt from their own vectors, exact for flat storage).
HNSW cannot remove a vector in place: a delete rebuilds its graph from the remaining vectors.

Each update makes the next generation of the index (:class:`Generation`): a copy in the build folder
(hard links of the files it only replaces, a copy of the doc store it changes), fsynced and swapped
into place (:mod:`dotcat.index.layout`), so a crash at any point leaves the previous generation
whole and searchable, and an update that returned is on disk. The manifest keeps the count and a log
of updates; the BM25 side, if any, keeps its rows' term counts and is scored again with the new
collection's statistics (:func:`dotcat.index.bm25_global.updated`: as a build over the same
documents scores). A sync of a folder (:mod:`dotcat.index.sync`) and the server's document API
(:mod:`dotcat.serve.live`) change an index through the same :func:`apply_change`.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import shutil
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import faiss
import numpy as np

from dotcat.data import CorpusOptions, CorpusStats, load_corpus
from dotcat.data.corpus import fields_json, iter_row_batches
from dotcat.data.sources import CorpusSource
from dotcat.errors import DiskFullError, DotcatError
from dotcat.files import read_json_or_none, replacing, write_json, writes
from dotcat.index import faiss_index, layout
from dotcat.index.bm25 import BM25Index, build_from_docstore, docstore_rows
from dotcat.index.bm25_global import updated
from dotcat.index.config import BM25Config
from dotcat.index.docstore import DocStore, document_text
from dotcat.index.encoder import encoder_config_from_manifest, load_document_encoder
from dotcat.index.fields import batch_field_rows
from dotcat.index.layout import BM25_DIR
from dotcat.index.manifest import DOCSTORE_NAME, FORMAT_VERSION, INDEX_NAME, Manifest, check_encoder
from dotcat.index.passages import PassageConfig, Splitter, split_longer_than, store_passages
from dotcat.models.config import EncoderConfig
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

#: Updates kept in the manifest's log (the oldest are dropped beyond).
LOG_LENGTH = 1000


@dataclass(frozen=True)
class UpdateResult:
    """What an update did."""

    added: int
    replaced: int
    deleted: int
    documents: int  # in the index afterwards


@dataclass
class Change:
    """What one generation changes (:func:`apply_change`).

    Attributes:
        remove: ids of documents to delete.
        add: documents to add (a dataset as :func:`dotcat.data.corpus.load_corpus` gives, or a
            list of :class:`~dotcat.data.corpus.Document`); an id the index holds is replaced
            (its old document removed first).
        fields: id -> fields (JSON, as the dataset holds them) for documents whose text stays.
        files: the state of the folder's files as the index now holds them
            (:func:`write_files`), or None: the state of the files whose documents change is
            dropped (a sync reads them again).
    """

    remove: Sequence[str] = ()
    add: Any = None
    fields: Mapping[str, str] = field(default_factory=dict)
    files: dict[str, Any] | None = None


@writes("index_dir")
def add_documents(
    index_dir: str | Path,
    corpus: CorpusSource,
    *,
    upsert: bool = False,
    device: str = "auto",
    precision: str = "auto",
    show_progress: bool = True,
    corpus_options: CorpusOptions | None = None,
    encoder: Any = None,
    wait: float = 0.0,
) -> UpdateResult:
    """Encode the documents of ``corpus`` with the index's own encoder and add them.

    ``corpus`` is any source :func:`dotcat.index.build.build_index` takes (a corpus file, a folder
    of files, documents in Python...), read with ``corpus_options``. ``encoder``: the index's
    document encoder, loaded (else loaded here, on ``device`` at ``precision``); ``wait``:
    seconds to wait for another writer of the index (0: refused at once).

    Raises:
        DotcatError: an id the index holds already (unless ``upsert``, which replaces it),
            or any problem with the corpus or the index.
        DiskFullError: no room for the updated copy; the index is untouched.
    """
    index_dir = Path(index_dir)
    layout.check_writable(index_dir)  # before the corpus is read and encoded
    stats = CorpusStats()
    options = recorded_fields(index_dir, corpus, corpus_options)
    dataset = load_corpus(corpus, stats=stats, options=options)
    runtime = {"device": device, "precision": precision}
    return add_dataset(index_dir, dataset, stats, upsert, encoder or runtime, show_progress, wait)


def add_dataset(index_dir: Path, dataset, stats: CorpusStats, upsert: bool, encoder: Any,
                show_progress: bool = True, wait: float = 0.0) -> UpdateResult:  # fmt: skip
    """:func:`add_documents` of a corpus loaded (its fields as read: a folder of shards hands
    each shard its part); ``encoder``: loaded, or the runtime settings to load it with."""
    with Generation(index_dir, wait) as generation:
        with DocStore(index_dir / DOCSTORE_NAME) as store:
            existing = set(store.by_ids(_existing_ids(dataset)))
        if existing and not upsert:
            raise held_error(stats.path, existing, index_dir, "upsert=True", settings=("upsert",))
        log = {"corpus": stats.path, "sha256": stats.sha256}
        result = generation.apply(Change(add=dataset), encoder, show_progress, ("add", log))
    logger.info("%s: %s", index_dir, result)
    return result


@writes("index_dir")
def delete_documents(
    index_dir: str | Path, doc_ids: Sequence[str], *, missing_ok: bool = False, wait: float = 0.0
) -> UpdateResult:
    """Remove documents (by id) from the FAISS index and the doc store.

    Raises:
        DotcatError: an id the index does not hold (unless ``missing_ok``), or no id given.
        DiskFullError: no room for the updated copy; the index is untouched.
    """
    index_dir = Path(index_dir)
    wanted = sorted(set(doc_ids))
    if not wanted:
        raise DotcatError("delete: no document id given")
    layout.check_writable(index_dir)
    with Generation(index_dir, wait) as generation:
        with DocStore(index_dir / DOCSTORE_NAME) as store:
            found = store.by_ids(wanted, composed=True)
        missing = [i for i in wanted if i not in found]
        if missing and not missing_ok:
            lead = f"{index_dir}: no document with id"
            raise missing_error(lead, missing, "missing_ok=True", settings=("missing_ok",))
        if not found:  # nothing to delete: no new generation
            return UpdateResult(0, 0, 0, generation.manifest.documents["count"])
        held = sorted({d.id for d in found.values()})  # as the index writes them
        result = generation.apply(Change(remove=held), None, False,
                                  ("delete", {"ids": held[:20]}))  # fmt: skip
    logger.info("%s: %s", index_dir, result)
    return result


def held_error(source: Any, held: Collection[str], where: Any, flag: str, **kwargs: Any):
    """The error for documents to add that ``where`` holds already: ``flag`` replaces them."""
    return DotcatError(
        f"{source}: {len(held)} document(s) are in {where} already (e.g. "
        f"{_first_five(sorted(held))}); pass {flag} to replace them", **kwargs,
    )  # fmt: skip


def missing_error(lead: str, missing: Sequence[str], flag: str, **kwargs: Any) -> DotcatError:
    """The error for ids to delete that are not there: the first five, ``flag`` to skip them."""
    more = f" (and {len(missing) - 5} more)" if len(missing) > 5 else ""
    return DotcatError(f"{lead} {_first_five(missing)}{more}; pass {flag} to delete the others",
                       **kwargs)  # fmt: skip


def _first_five(ids: Sequence[str]) -> str:
    return ", ".join(repr(i) for i in ids[:5])


class Generation:
    """The next generation of an index, made beside it and published in one swap.

    Entered: the index's writer lock held (waiting ``wait`` seconds for another writer), a
    killed writer's leftovers restored or removed (:func:`dotcat.index.layout.recover`), and
    :attr:`manifest` the current generation's. :meth:`apply` makes the next generation in the
    build folder (:func:`dotcat.index.layout.copy_for_update`), changes it and writes its
    manifest; a clean exit then fsyncs it and swaps it into place, any error discards it (the
    index is untouched). A generation nothing was applied to publishes nothing.
    """

    def __init__(self, index_dir: Path, wait: float = 0.0) -> None:
        self.index_dir = layout.real_path(index_dir)
        self.lock = layout.index_lock(self.index_dir, wait)
        self.tmp: Path | None = None

    def __enter__(self) -> Generation:
        self.lock.__enter__()
        try:
            layout.recover(self.index_dir)
            self.manifest = Manifest.read(self.index_dir)
            layout.check_writable(self.index_dir)
            building = layout.build_path(self.index_dir)
            if layout.is_resumable(building):
                raise DotcatError(
                    f"{self.index_dir}: an interrupted build of this path is waiting in "
                    f"{building.name}; finish it (run the same `dotcat index` again) or remove "
                    "that folder before updating"
                )
        except BaseException:
            self.lock.__exit__(None, None, None)
            raise
        return self

    def apply(
        self, change: Change, encoder: Any, show_progress: bool, log: tuple[str, dict]
    ) -> UpdateResult:
        """Make the next generation with ``change`` applied (:func:`apply_change`), its
        manifest written; published when the block ends."""
        if change.add is not None and len(change.add):  # loaded and checked before the copy
            if encoder is None or isinstance(encoder, Mapping):
                encoder = load_document_encoder(document_config(self.manifest, encoder or {}))
            entry = encoder.manifest_entry()
            check_encoder(self.manifest, entry, self.index_dir, side="documents")
        self.tmp = tmp = layout.build_path(self.index_dir)
        layout.clear(tmp, "an unusable build folder")
        layout.copy_for_update(self.index_dir, tmp)
        manifest = Manifest.read(tmp)
        try:
            result = apply_change(tmp, manifest, change, encoder, show_progress)
        except DotcatError as e:  # a damaged file of the copy is the index's own: name that
            if not isinstance(e, DiskFullError):  # (a write, though, is the copy's)
                e.args = (str(e).replace(str(tmp), str(self.index_dir)),)
            raise
        manifest.next_generation()  # made now: only fsync and the swap come after
        manifest.updates = _log(manifest, result, *log)
        manifest.write(tmp)
        self.manifest = manifest
        return result

    def __exit__(self, kind, value, traceback) -> None:
        try:
            if self.tmp is not None and kind is None:
                layout.fsync_tree(self.tmp)
                layout.swap_into_place(self.tmp, self.index_dir)
            elif self.tmp is not None:
                shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            self.lock.__exit__(kind, value, traceback)


def apply_change(
    tmp: Path, manifest: Manifest, change: Change, encoder: Any, show_progress: bool = False
) -> UpdateResult:
    """Apply ``change`` to the index in ``tmp`` (FAISS, doc store, fields, BM25, the files'
    state), encoding the added documents with the index's ``encoder`` (loaded and checked by
    :meth:`Generation.apply`; unused without documents to add)."""
    with DocStore(tmp / DOCSTORE_NAME, readonly=False) as store:
        added_ids = _existing_ids(change.add)
        found = store.by_ids(sorted({*change.remove, *added_ids}))
        replaced = len(found.keys() & set(added_ids))
        index = _updatable(faiss_index.read_index(tmp / INDEX_NAME))
        positions = [doc.pos for doc in found.values()]
        # The FAISS ids of these documents: every passage of each, or the positions themselves.
        vector_ids = store.passage_ids(positions) if manifest.passages else positions
        _remove(index, vector_ids)
        by_passage = bool(manifest.bm25 and "passages" in manifest.bm25)
        dropped = {str(i) for i in vector_ids} if by_passage else set(found)
        store.delete(positions)
        first = int(manifest.documents.get("next_pos", manifest.documents["count"]))
        first_id = next_id = manifest.next_vector_id
        if change.add is not None and len(change.add):
            next_id = _add(index, store, change.add, manifest, first, encoder, show_progress)
        store.replace_fields([(d.pos, change.fields[i]) for i, d in
                              store.by_ids(sorted(change.fields)).items()])  # fmt: skip
        store.finish_fields()
        store.commit()
        after = (first_id if by_passage else first) - 1
        rows = list(docstore_rows(store, by_passage, after)) if manifest.bm25 else []
        documents = len(store)
    added = len(added_ids)
    _finish(tmp, manifest, index, first + added, documents, next_id)
    if manifest.bm25:
        _update_bm25(tmp, manifest, dropped, rows)
    _files_after(tmp, change, found)
    return UpdateResult(added - replaced, replaced, len(found) - replaced, documents)


def document_config(manifest: Manifest, runtime: Mapping[str, Any]) -> EncoderConfig:
    """The config of the index's document encoder (its vectors comparable with the index's),
    run as ``runtime`` says (``device``, ``precision``, ``batch_size``...)."""
    device, precision = runtime.get("device", "auto"), runtime.get("precision", "auto")
    config = encoder_config_from_manifest(
        manifest.encoder, None, device, precision, side="documents"
    )
    names = {f.name for f in dataclasses.fields(EncoderConfig)} - {"device", "precision"}
    return replace(config, **{k: v for k, v in runtime.items() if k in names})


def recorded_fields(index_dir: Path, corpus: Any, options: CorpusOptions | None):
    """``options`` with the record fields a file-built index was read with (``--id-field``...)
    where none is given: an added record file is read as the index's was, so a record it
    holds is found by its id, not added again under another."""
    if not isinstance(corpus, (str, Path)) or not Path(corpus).is_file():
        return options
    built, options = Manifest.read(index_dir).corpus.get("options", {}), options or CorpusOptions()
    names = [k for k in ("id_field", "title_field", "text_field") if getattr(options, k) is None]
    return replace(options, **{k: built[k] for k in names if k in built})


def _existing_ids(dataset) -> list[str]:
    """Every id of ``dataset`` (none for None)."""
    return [i for batch in _batches(dataset, 10_000) for i in batch["id"]] if dataset else []


def _batches(documents, size: int):
    """Batches of columns (``id``, ``title``, ``text``, ``fields``) of a dataset (as
    :func:`dotcat.data.corpus.load_corpus` gives) or of a list of
    :class:`~dotcat.data.corpus.Document` (a sync's few: no Arrow needed)."""
    if not isinstance(documents, list):
        yield from (batch for _, batch in iter_row_batches(documents, batch_size=size))
        return
    for start in range(0, len(documents), size):
        part = documents[start : start + size]
        rows = zip(*((d.id, d.title, d.text, fields_json(d.fields)) for d in part), strict=True)
        yield dict(zip(("id", "title", "text", "fields"), map(list, rows), strict=True))


def _updatable(index: faiss.Index) -> faiss.Index:
    """An index that takes ``add_with_ids`` and ``remove_ids`` (IVF as it is; the others
    wrapped once in an ``IndexIDMap2``, rebuilt from their vectors at positions 0..n-1)."""
    base = faiss.downcast_index(index)
    if isinstance(base, faiss.IndexIDMap2) or faiss.try_extract_index_ivf(base) is not None:
        if index.this.own():  # hand the ownership to the proxy that is returned
            index.this.disown()
            base.this.acquire()
        return base
    vectors = base.reconstruct_n(0, base.ntotal)
    empty = faiss.clone_index(base)  # a new object (trained, if it was), emptied below
    empty.reset()
    wrapped = faiss.IndexIDMap2(empty)
    # The wrapper owns (and frees) its sub-index; its only Python proxy must not free it too.
    wrapped.own_fields = True
    empty.this.disown()
    wrapped.add_with_ids(vectors, np.arange(len(vectors), dtype=np.int64))
    return wrapped


def _remove(index: faiss.Index, positions: Sequence[int]) -> None:
    if not positions:
        return
    selector = faiss.IDSelectorArray(np.asarray(sorted(positions), dtype=np.int64))
    inner = faiss.downcast_index(index.index) if isinstance(index, faiss.IndexIDMap2) else None
    if isinstance(inner, faiss.IndexHNSW):
        _rebuild_hnsw_without(index, set(positions))
        return
    removed = index.remove_ids(selector)
    if removed != len(positions):
        raise DotcatError(
            f"FAISS removed {removed} of {len(positions)} vectors; index left as it was"
        )


def _rebuild_hnsw_without(index: faiss.IndexIDMap2, positions: set[int]) -> None:
    """HNSW has no removal: its graph is rebuilt from the vectors that stay."""
    ids = faiss.vector_to_array(index.id_map)
    keep = np.array([i for i, p in enumerate(ids) if int(p) not in positions], dtype=np.int64)
    vectors = np.stack([index.reconstruct(int(ids[i])) for i in keep]) if len(keep) else None
    index.reset()
    if vectors is not None:
        index.add_with_ids(vectors, ids[keep])


def _add(
    index: faiss.Index,
    store: DocStore,
    dataset,
    manifest: Manifest,
    first: int,
    encoder: Any,
    show_progress: bool,
) -> int:
    """Encode the dataset's documents with the index's encoder (split into passages as the
    index's were), positions from ``first``; returns the next FAISS id never used."""
    next_id = manifest.next_vector_id
    config = PassageConfig.from_manifest(manifest.passages)
    splitter = Splitter.for_encoder(encoder, config, split_longer_than(manifest.passages))
    position = first
    with progress_bar(
        total=len(dataset), desc="encoding documents", unit="doc", enabled=show_progress
    ) as bar:
        for batch in _batches(dataset, 8192):
            positions = range(position, position + len(batch["id"]))
            store.add(zip(positions, batch["id"], batch["title"], batch["text"], strict=True))
            if manifest.format_version == FORMAT_VERSION:  # (a store from before fields: none)
                store.add_fields(batch_field_rows(positions, batch["fields"]))
            if splitter is None:
                ids = np.asarray(positions, dtype=np.int64)
                texts = list(map(document_text, batch["title"], batch["text"]))
            else:
                start = next_id
                next_id = store_passages(store, splitter, positions, batch, next_id)
                ids = np.arange(start, next_id, dtype=np.int64)
                passages = store.passage_texts(ids.tolist())
                texts = [document_text(*passages[int(pid)]) for pid in ids]
            vectors = encoder.encode_documents(texts)
            index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)
            position += len(positions)
            bar.update(len(positions))
    return position if splitter is None else next_id


def _finish(
    tmp: Path, manifest: Manifest, index: faiss.Index, next_pos: int, documents: int, next_id: int
) -> None:
    """Write the updated FAISS index and the counts into ``tmp``."""
    with replacing(tmp / INDEX_NAME) as tmp_index:
        faiss_index.write_index(index, tmp_index)
    manifest.faiss["ntotal"] = int(index.ntotal)
    manifest.documents["count"] = documents
    manifest.documents["next_pos"] = next_pos
    if manifest.passages:
        manifest.passages["count"] = int(index.ntotal)
        manifest.passages["next_pid"] = next_id
    (tmp / "vectors.npy").unlink(missing_ok=True)  # stale now: updates go to FAISS only


def _update_bm25(tmp: Path, manifest: Manifest, dropped: set[str], rows: list[dict]) -> None:
    """The BM25 side without the ``dropped`` rows and with ``rows``, scored with the new
    collection's statistics (:func:`dotcat.index.bm25_global.updated`), or built again from
    the doc store where it cannot be (an index saved without its term counts)."""
    by_passage = "passages" in manifest.bm25  # as it was built (documents whole, or not)
    bm25 = updated(BM25Index.load(tmp / BM25_DIR), dropped, rows)
    if bm25 is None:
        config = BM25Config(**manifest.bm25["config"])
        bm25 = build_from_docstore(tmp / DOCSTORE_NAME, config, False, passages=by_passage)
    shutil.rmtree(tmp / BM25_DIR)  # its files are the current generation's too: unlinked
    bm25.save(tmp / BM25_DIR)
    manifest.bm25["documents"] = manifest.documents["count"]
    if by_passage:
        manifest.bm25["passages"] = manifest.passages["count"]


#: The folder's files whose documents an index holds, and their size and modification time
#: when read (:mod:`dotcat.index.sync`).
FILES_NAME = "files.json"


def read_files(index_dir: Path) -> dict[str, Any] | None:
    """The files' state an index keeps (``{"key": ..., "files": {rel: [size, mtime_ns]}}``),
    or None (an index built before it was kept, or not from a folder)."""
    return read_json_or_none(Path(index_dir) / FILES_NAME)


def write_files(index_dir: Path, state: dict[str, Any]) -> None:
    write_json(Path(index_dir) / FILES_NAME, state, indent=None)


def _files_after(tmp: Path, change: Change, found: Mapping[str, Any]) -> None:
    """The files' state after ``change``: as a sync gives it, else with the files whose
    documents changed (``dotcat add``, ``delete``, HTTP writes) unrecorded (None): the next
    sync reads them again, or removes their documents if they left the folder; the new ids
    (not replacing a document) are recorded as no file's (``added``): a sync keeps them."""
    state = read_files(tmp)
    if change.files is not None:
        write_files(tmp, change.files)
    elif state is not None:
        ids = _existing_ids(change.add)
        touched = {unquote(i.split("#", 1)[0]) for i in [*found, *ids]}
        state["files"] = {k: None if k in touched else v for k, v in state["files"].items()}
        new = {i for i in ids if i not in found}
        state["added"] = sorted({*state.get("added", ()), *new} - set(change.remove))
        write_files(tmp, state)


def _log(manifest: Manifest, result: UpdateResult, op: str, detail: dict) -> list[dict]:
    when = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    counts = {k: getattr(result, k) for k in ("added", "replaced", "deleted")}
    entry = {"op": op, "time": when, **counts, "documents": manifest.documents["count"], **detail}
    return [*(manifest.updates or []), entry][-LOG_LENGTH:]
