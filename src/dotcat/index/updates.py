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

Each update is atomic: it works on a copy of the index in the build folder and swaps it into
place (:mod:`dotcat.index.layout`), so a crash at any point leaves the previous index whole
and searchable. The manifest keeps the count and a log of updates; the BM25 side index, if
any, is rebuilt over the new set of documents (BM25's statistics are global).
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import faiss
import numpy as np

from dotcat.data import CorpusOptions, CorpusStats, load_corpus
from dotcat.data.corpus import iter_row_batches
from dotcat.data.sources import CorpusSource
from dotcat.errors import DotcatError
from dotcat.files import replacing, writes
from dotcat.index import faiss_index, layout
from dotcat.index.bm25 import build_from_docstore
from dotcat.index.config import BM25Config
from dotcat.index.docstore import DocStore, document_text
from dotcat.index.encoder import encoder_config_from_manifest
from dotcat.index.fields import batch_field_rows
from dotcat.index.layout import BM25_DIR
from dotcat.index.manifest import (
    DOCSTORE_NAME,
    FORMAT_VERSION,
    INDEX_NAME,
    Manifest,
    check_encoder,
)
from dotcat.index.passages import PassageConfig, Splitter, split_longer_than, store_passages
from dotcat.models import BiEncoder
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
) -> UpdateResult:
    """Encode the documents of ``corpus`` with the index's own encoder and add them.

    ``corpus`` is any source :func:`dotcat.index.build.build_index` takes (a corpus file, a folder
    of files, documents in Python...), read with ``corpus_options``.

    Raises:
        DotcatError: an id the index holds already (unless ``upsert``, which replaces it),
            or any problem with the corpus or the index.
        DiskFullError: no room for the updated copy; the index is untouched.
    """
    index_dir = Path(index_dir)
    layout.check_writable(index_dir)  # before the corpus is read and encoded
    stats = CorpusStats()
    dataset = load_corpus(corpus, stats=stats, options=corpus_options)
    with _updating(index_dir) as (tmp, manifest):
        store = DocStore(tmp / DOCSTORE_NAME, readonly=False)
        try:
            existing = _existing(store, dataset)
            if existing and not upsert:
                sample = ", ".join(repr(i) for i in sorted(existing)[:5])
                raise DotcatError(
                    f"{stats.path}: {len(existing)} document(s) are in {index_dir} already "
                    f"(e.g. {sample}); pass upsert=True to replace them",
                    settings=("upsert",),
                )
            index = _updatable(faiss.read_index(str(tmp / INDEX_NAME)))
            positions = [doc.pos for doc in store.by_ids(sorted(existing)).values()]
            _remove(index, _vector_ids(store, manifest, positions))
            store.delete(positions)
            first = int(manifest.documents.get("next_pos", manifest.documents["count"]))
            next_pid = _add(index, store, dataset, manifest, first, (device, precision),
                            show_progress)  # fmt: skip
            store.finish_fields()
            store.commit()
            documents = len(store)
        finally:
            store.close()
        added = len(dataset)
        _finish(tmp, manifest, index, first + added, documents, next_pid)
        manifest.updates = _log(manifest, "add", added - len(existing), len(existing), 0,
                                {"corpus": stats.path, "sha256": stats.sha256})  # fmt: skip
        manifest.write(tmp)
    result = UpdateResult(added - len(existing), len(existing), 0, manifest.documents["count"])
    logger.info("%s: %s", index_dir, result)
    return result


@writes("index_dir")
def delete_documents(
    index_dir: str | Path, doc_ids: Sequence[str], *, missing_ok: bool = False
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
    with _updating(index_dir) as (tmp, manifest):
        next_pos = int(manifest.documents.get("next_pos", manifest.documents["count"]))
        store = DocStore(tmp / DOCSTORE_NAME, readonly=False)
        try:
            found = store.by_ids(wanted)
            missing = [i for i in wanted if i not in found]
            if missing and not missing_ok:
                sample = ", ".join(repr(i) for i in missing[:5])
                raise DotcatError(
                    f"{index_dir}: no document with id {sample}"
                    + (f" (and {len(missing) - 5} more)" if len(missing) > 5 else "")
                    + "; pass missing_ok=True to delete the others",
                    settings=("missing_ok",),
                )
            index = _updatable(faiss.read_index(str(tmp / INDEX_NAME)))
            positions = [doc.pos for doc in found.values()]
            _remove(index, _vector_ids(store, manifest, positions))
            store.delete(positions)
            store.finish_fields()
            store.commit()
            documents = len(store)
        finally:
            store.close()
        # A deleted position (or passage id) is never reused.
        _finish(tmp, manifest, index, next_pos, documents, manifest.next_vector_id)
        manifest.updates = _log(manifest, "delete", 0, 0, len(found), {"ids": sorted(found)[:20]})
        manifest.write(tmp)
    result = UpdateResult(0, 0, len(found), manifest.documents["count"])
    logger.info("%s: %s", index_dir, result)
    return result


class _updating:
    """Lock the index, copy it into the build folder, yield ``(copy, manifest)``; on a clean
    exit swap the copy into place, on any error discard it (the index is untouched)."""

    def __init__(self, index_dir: Path) -> None:
        self.index_dir = index_dir
        self.lock = layout.index_lock(index_dir)

    def __enter__(self) -> tuple[Path, Manifest]:
        self.lock.__enter__()
        copying = False
        try:
            layout.recover(self.index_dir)
            Manifest.read(self.index_dir)  # a valid index, before copying it
            layout.check_writable(self.index_dir)
            self.tmp = layout.build_path(self.index_dir)
            if layout.is_resumable(self.tmp):
                raise DotcatError(
                    f"{self.index_dir}: an interrupted build of this path is waiting in "
                    f"{self.tmp.name}; finish it (run the same `dotcat index` again) or remove "
                    "that folder before updating"
                )
            layout.clear(self.tmp, "an unusable build folder")
            copying = True
            shutil.copytree(self.index_dir, self.tmp)
            return self.tmp, Manifest.read(self.tmp)
        except BaseException:
            if copying:  # a part copy (a full disk, Ctrl-C) is no use to anyone
                shutil.rmtree(self.tmp, ignore_errors=True)
            self.lock.__exit__(None, None, None)
            raise

    def __exit__(self, kind, value, traceback) -> None:
        try:
            if kind is None:
                layout.swap_into_place(self.tmp, self.index_dir)
            else:
                shutil.rmtree(self.tmp, ignore_errors=True)
        finally:
            self.lock.__exit__(kind, value, traceback)


def _vector_ids(store: DocStore, manifest: Manifest, positions: list[int]) -> list[int]:
    """The FAISS ids of the documents at ``positions``: every passage of each, or (without
    passages) the positions themselves."""
    return store.passage_ids(positions) if manifest.passages else positions


def _existing(store: DocStore, dataset) -> set[str]:
    """Ids of ``dataset`` that the doc store already holds."""
    existing: set[str] = set()
    for _, batch in iter_row_batches(dataset, batch_size=10_000):
        existing.update(store.by_ids(batch["id"]))
    return existing


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
    runtime: tuple[str, str],
    show_progress: bool,
) -> int:
    """Encode the dataset's documents with the index's encoder (split into passages as the
    index's were), positions from ``first``; returns the next FAISS id never used."""
    next_id = manifest.next_vector_id
    if len(dataset) == 0:
        return next_id
    device, precision = runtime
    config = encoder_config_from_manifest(
        manifest.encoder, None, device, precision, side="documents"
    )
    encoder = BiEncoder.load(config)
    check_encoder(manifest, encoder.manifest_entry(), store.path.parent, side="documents")
    config = PassageConfig.from_manifest(manifest.passages)
    splitter = Splitter.for_encoder(encoder, config, split_longer_than(manifest.passages))
    position = first
    with progress_bar(
        total=len(dataset), desc="encoding documents", unit="doc", enabled=show_progress
    ) as bar:
        for _, batch in iter_row_batches(dataset, batch_size=8192):
            positions = range(position, position + len(batch["id"]))
            store.add(zip(positions, batch["id"], batch["title"], batch["text"], strict=True))
            store.add_fields(batch_field_rows(positions, batch["fields"]))
            if splitter is None:
                ids = np.asarray(positions, dtype=np.int64)
                texts = [document_text(t, x) for t, x in zip(batch["title"], batch["text"],
                                                             strict=True)]  # fmt: skip
            else:
                start = next_id
                next_id = store_passages(store, splitter, positions, batch, next_id)
                ids = np.arange(start, next_id, dtype=np.int64)
                texts = [document_text(t, x) for _, t, x in _passage_texts(store, ids)]
            vectors = encoder.encode_documents(texts)
            index.add_with_ids(np.ascontiguousarray(vectors, dtype=np.float32), ids)
            position += len(positions)
            bar.update(len(positions))
    return position if splitter is None else next_id


def _passage_texts(store: DocStore, ids: np.ndarray) -> list[tuple[int, str, str]]:
    """``(pid, title, passage text)`` of the passages with these ids, in id order."""
    texts = store.passage_texts(ids.tolist())
    return [(int(pid), *texts[int(pid)]) for pid in ids]


def _finish(
    tmp: Path,
    manifest: Manifest,
    index: faiss.Index,
    next_pos: int,
    documents: int,
    next_id: int,
) -> None:
    """Write the updated FAISS index, the counts and the BM25 side (rebuilt) into ``tmp``."""
    with replacing(tmp / INDEX_NAME) as tmp_index:
        faiss_index.write_index(index, tmp_index)
    manifest.faiss["ntotal"] = int(index.ntotal)
    manifest.format_version = FORMAT_VERSION  # the doc store keeps fields now, if it did not
    manifest.documents["count"] = documents
    manifest.documents["next_pos"] = next_pos
    if manifest.passages:
        manifest.passages["count"] = int(index.ntotal)
        manifest.passages["next_pid"] = next_id
    (tmp / "vectors.npy").unlink(missing_ok=True)  # stale now: updates go to FAISS only
    if manifest.bm25:
        _rebuild_bm25(tmp, manifest)


def _rebuild_bm25(tmp: Path, manifest: Manifest) -> None:
    config = BM25Config(**manifest.bm25["config"])
    shutil.rmtree(tmp / BM25_DIR, ignore_errors=True)
    by_passage = "passages" in manifest.bm25  # as it was built (documents whole, or not)
    build_from_docstore(tmp / DOCSTORE_NAME, config, show_progress=False,
                        passages=by_passage).save(tmp / BM25_DIR)  # fmt: skip
    manifest.bm25["documents"] = manifest.documents["count"]
    if by_passage:
        manifest.bm25["passages"] = manifest.passages["count"]


def _log(manifest: Manifest, op: str, added: int, replaced: int, deleted: int, detail: dict):
    entry = {
        "op": op,
        "time": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "added": added,
        "replaced": replaced,
        "deleted": deleted,
        "documents": manifest.documents["count"],
        **detail,
    }
    return [*(manifest.updates or []), entry][-LOG_LENGTH:]
