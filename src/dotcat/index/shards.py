"""Shards: a corpus indexed in parts, searched unmerged or merged into one index.

``dotcat index CORPUS OUT --shard I/N`` indexes the ``I``-th of ``N`` contiguous, equal
position ranges of the corpus (on as many machines as there are shards); each shard is a
complete index that also keeps its vectors. Then either:

* :class:`ShardSet`: a folder of shards searched as one index, unmerged: a query is encoded
  once, each shard's FAISS returns its top-k, and the lists are merged by score. Positions are
  the corpus's (shard offset + local position), so the results are the merged index's.
* :func:`merge_indexes`: one index from the shards (``dotcat merge SHARD... OUT``): a Flat
  index by concatenation; IVF/PQ by training the quantizers once on a sample drawn across all
  shards, then adding every shard's vectors, with FAISS's on-disk merge of inverted lists
  (``faiss.contrib.ondisk``) when they would not fit in memory. One doc store, one manifest.

Shards split the corpus by documents, never inside one: a shard holds its documents whole,
with all their passages (:mod:`dotcat.index.passages`). Unmerged, a shard's FAISS ids are
shifted by the ids of the shards before it; merged, passage ids and document positions are
shifted alike, and every passage keeps its document.

Shards made with different encoders or settings (passage settings included), or holding the
same document id, are refused.
"""

from __future__ import annotations

import datetime as dt
import logging
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np
from faiss.contrib.ondisk import merge_ondisk

from dotcat.data.index_source import indexes_in
from dotcat.errors import DotcatError, SettingError
from dotcat.files import writes, writing
from dotcat.index import faiss_index, layout
from dotcat.index.bm25 import build_from_docstore, side_entry
from dotcat.index.config import BM25Config, MergeConfig
from dotcat.index.dense_index import SAMPLE, DenseIndex
from dotcat.index.docstore import DocStore, PassageRef, StoredDocument
from dotcat.index.fields import merged_kinds
from dotcat.index.filtered import Admitted
from dotcat.index.layout import BM25_DIR
from dotcat.index.manifest import (
    DOCSTORE_NAME,
    ENCODER_KEYS,
    INDEX_NAME,
    MANIFEST_NAME,
    Manifest,
    int8_runtime,
)
from dotcat.version import __version__

logger = logging.getLogger(__name__)

IVFDATA_NAME = "index.ivfdata"
#: On-disk inverted lists when the lists would take more than this share of available memory.
ON_DISK_SHARE = 0.5


def shard_dirs(folder: Path, required: bool = False) -> list[Path]:
    """The index directories inside ``folder`` (not ``folder`` itself), in shard order (none:
    an error where ``required``)."""
    paths = _in_order([(p, Manifest.read(p)) for p in indexes_in(folder)])
    if required and not paths:
        raise DotcatError(f"{folder}: no index and no shard indexes inside")
    return paths


def _in_order(shards: list[tuple[Path, Manifest]]) -> list[Path]:
    """Shards by their shard number (plain indexes: as given, after the shards)."""
    resolved = [p.resolve() for p, _ in shards]
    twice = [p for (p, _), r in zip(shards, resolved, strict=True) if resolved.count(r) > 1]
    if twice:
        raise DotcatError(f"{twice[0]} is given twice: its documents would be answered twice")
    numbered = sorted(((m.shard["index"], p) for p, m in shards if m.shard), key=lambda x: x[0])
    if len({i for i, _ in numbered}) != len(numbered):
        named = ", ".join(str(p) for _, p in numbered)
        raise DotcatError(f"two shards have the same shard number: {named}")
    plain = [p for p, m in shards if not m.shard]
    merged = [p for p, m in shards if numbered and m.documents.get("merged_from")]
    if merged:  # shards beside their merge: every document answered twice
        raise DotcatError(f"{merged[0]} is a merge of shards: keep it out of a shard set")
    return [p for _, p in numbered] + plain


def check_compatible(manifests: Sequence[tuple[Path, Manifest]]) -> None:
    """Refuse shards whose vectors cannot be compared or combined.

    Raises:
        DotcatError: another encoder or encoder setting (naming both shards and the
            differences), another precision, or shards of different corpora / shard counts.
    """
    first_dir, first = manifests[0]
    for path, manifest in manifests[1:]:
        diffs = [
            f"{key}: {first.encoder.get(key)!r} vs {manifest.encoder.get(key)!r}"
            for key in (*ENCODER_KEYS, "precision")
            if first.encoder.get(key) != manifest.encoder.get(key)
            and key in first.encoder.keys() & manifest.encoder.keys()  # (one older: unknown)
        ]
        runtimes = (int8_runtime(first.encoder), int8_runtime(manifest.encoder))
        if not diffs and first.encoder.get("precision") == "int8" and len(set(runtimes)) > 1:
            diffs.append(f"int8 runtime: {runtimes[0]!r} vs {runtimes[1]!r}")
        diffs += _passage_differences(first, manifest)
        if diffs:
            raise DotcatError(
                f"{path} was built with another encoder or settings than {first_dir} "
                f"({'; '.join(diffs)}); its vectors cannot be combined"
            )
        if not (first.shard and manifest.shard):
            continue
        if first.shard["of"] != manifest.shard["of"]:
            raise DotcatError(
                f"{path} is shard {manifest.shard['index']}/{manifest.shard['of']}, {first_dir} "
                f"is {first.shard['index']}/{first.shard['of']}: not one split of a corpus"
            )
        if first.corpus.get("sha256") != manifest.corpus.get("sha256"):
            raise DotcatError(f"{path} and {first_dir} are shards of different corpora")


def _check_mergeable(manifests: Sequence[tuple[Path, Manifest]]) -> None:
    """:func:`check_compatible`, and every shard of the split given: a merge that misses one
    would look like the whole corpus."""
    if not manifests:
        raise DotcatError("merge: no shards given")
    check_compatible(manifests)
    changed = [p for p, m in manifests if m.updates]  # positions with gaps, vectors.npy gone
    if changed:
        raise DotcatError(
            f"merge: {changed[0]} was changed since it was built (add, delete or sync); shards "
            "merge as built: index them again with --shard I/N, or search their folder as it is"
        )
    split = [m.shard for _, m in manifests if m.shard]
    given = [x["index"] for x in split]  # (one twice: _in_order refuses it; plain ones: merged)
    missing = sorted(set(range(split[0]["of"])) - set(given)) if split else []
    if missing and len(set(given)) == len(given) == len(manifests):
        named = ", ".join(f"{i}/{split[0]['of']}" for i in missing)
        raise DotcatError(f"merge: shard(s) {named} not given: part of a corpus would look whole")


_PASSAGE_SETTINGS = ("window", "stride", "sentence_aware", "split_longer_than")


def _passage_differences(a: Manifest, b: Manifest) -> list[str]:
    """How two indexes' passage settings differ (with passages or not, then each setting).
    An index without passages meets one that splits document by document: it is one whose
    documents were all short (each its own passage)."""
    if bool(a.passages) != bool(b.passages):
        split = a.passages or b.passages
        if split.get("split_longer_than") is not None:
            return []
        return [f"passages: {'on' if a.passages else 'off'} vs {'on' if b.passages else 'off'}"]
    if not a.passages:
        return []
    return [
        f"passage {key}: {a.passages.get(key)!r} vs {b.passages.get(key)!r}"
        for key in _PASSAGE_SETTINGS
        if a.passages.get(key) != b.passages.get(key)
    ]


def shard_order(paths: Sequence[str | Path]) -> list[Path]:
    """Index directories in shard order (by shard number; plain indexes after, as given)."""
    return _in_order([(Path(p), Manifest.read(Path(p))) for p in paths])


def collection_manifest(manifests: Sequence[Manifest]) -> Manifest:
    """The manifest of the collection that shards (in shard order) make up, searched
    unmerged: the first shard's encoder and corpus (of the first with passages, where some
    split document by document and others had no long document), the counts of all."""
    first = next((m for m in manifests if m.passages), manifests[0])
    count = sum(m.vector_count for m in manifests)
    span = sum(m.next_vector_id for m in manifests)
    documents = sum(int(m.documents["count"]) for m in manifests)
    passages = {**first.passages, "count": count, "next_pid": span} if first.passages else None
    return Manifest(
        encoder=first.encoder,
        faiss={**first.faiss, "shards": len(manifests)},
        documents={"count": documents} if passages else {"count": documents, "next_pos": span},
        corpus=first.corpus,
        dotcat_version=first.dotcat_version,
        passages=passages,
    )


class ShardSet:
    """A folder of shard indexes, searched as one (see the module docstring).

    Offers what :class:`DenseIndex` offers to a retriever: ``manifest`` (the shards' encoder,
    the total count), ``search``, ``documents``, ``doc_ids``, ``store.by_ids``.
    """

    def __init__(
        self,
        folder: str | Path,
        device: str = "auto",
        search_params: dict[str, float] | None = None,
    ) -> None:
        self.dir = Path(folder)
        paths = shard_dirs(self.dir, required=True)
        self.shards = [DenseIndex(p, device=device, search_params=search_params) for p in paths]
        check_compatible([(s.dir, s.manifest) for s in self.shards])
        # A shard's FAISS ids (and document positions) run to its next unused one (updates may
        # leave gaps); with passages they differ: ids are the passages'.
        spans = [s.manifest.next_vector_id for s in self.shards]
        self.offsets = np.cumsum([0, *spans], dtype=np.int64)
        positions = [s.manifest.documents.get("next_pos", s.document_count) for s in self.shards]
        self.doc_offsets = np.cumsum([0, *positions], dtype=np.int64)
        self.count = sum(len(s) for s in self.shards)
        self.manifest = collection_manifest([s.manifest for s in self.shards])
        self.passages = self.manifest.passages
        self.search_params = self.shards[0].search_params
        self.store = _ShardStores(self)
        logger.info("%d shards, %d documents, searched unmerged", len(self.shards), len(self))

    def __len__(self) -> int:
        """Vectors in all the shards (passages, or documents without passages)."""
        return self.count

    @property
    def document_count(self) -> int:
        return int(self.manifest.documents["count"])

    @property
    def dim(self) -> int:
        return self.shards[0].dim

    def search(
        self, queries: np.ndarray, k: int, admitted: Any = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Top-k over all shards: each shard's top-k, merged by score (ties: position); with
        ``admitted`` (:meth:`admit`), each shard's among its admitted vectors."""
        if k < 1:
            raise DotcatError(f"k must be >= 1, got {k}")
        parts = [
            shard.search(queries, k, None if admitted is None else admitted.parts[i])
            for i, shard in enumerate(self.shards)
        ]
        scores = np.concatenate([s for s, _ in parts], axis=1)
        positions = np.concatenate(
            [np.where(p >= 0, p + self.offsets[i], -1) for i, (_, p) in enumerate(parts)], axis=1
        )
        scores, positions = faiss_index.order_ties(scores, positions)
        k = min(k, scores.shape[1])
        return scores[:, :k], positions[:, :k]

    # -- fields and filters -------------------------------------------------------------------

    def field_kinds(self) -> dict[str, Any]:
        """The shards' fields as one (:func:`dotcat.index.fields.merged_kinds`)."""
        return merged_kinds(shard.field_kinds() for shard in self.shards)

    def fields_of(self, positions) -> dict[int, dict[str, Any]]:
        """The fields of the documents at these (global) positions."""
        out: dict[int, dict[str, Any]] = {}
        for _, shard, shift, local in self._by_shard(positions, self.doc_offsets):
            out.update((pos + shift, f) for pos, f in shard.fields_of(local).items())
        return out

    def field_counts(self, positions, names) -> dict[str, dict[str, int]]:
        """Documents per value of each field of ``names`` among ``positions``, summed."""
        out: dict[str, dict[str, int]] = {name: {} for name in names}
        for _, shard, _, local in self._by_shard(positions, self.doc_offsets):
            for name, values in shard.field_counts(local, names).items():
                for value, count in values.items():
                    out[name][value] = out[name].get(value, 0) + count
        return out

    def admit(self, sql: str, params) -> ShardAdmitted:
        """The documents a filter admits, shard by shard (positions global)."""
        parts = [shard.admit(sql, params) for shard in self.shards]
        positions = np.concatenate(
            [p.positions + int(self.doc_offsets[i]) for i, p in enumerate(parts)]
        )
        return ShardAdmitted(parts, positions)

    def _by_shard(self, ids, offsets) -> Iterator[tuple[int, DenseIndex, int, list[int]]]:
        """``(i, shard, its offset, its local ids)`` of the shards holding these global ids
        (``offsets``: :attr:`offsets` for FAISS ids, :attr:`doc_offsets` for positions)."""
        wanted = sorted({int(p) for p in np.ravel(ids) if p >= 0})
        for i, shard in enumerate(self.shards):
            lo, hi = int(offsets[i]), int(offsets[i + 1])
            local = [p - lo for p in wanted if lo <= p < hi]
            if local:
                yield i, shard, lo, local

    def sample(self) -> np.ndarray:
        """Evenly spaced vectors of every shard, as many from each (:meth:`DenseIndex.sample`)."""
        return np.vstack([s.sample(max(1, SAMPLE // len(self.shards))) for s in self.shards])

    def vectors(self, positions) -> np.ndarray:
        """The vectors at global positions, each from its shard (zeros for -1)."""
        positions = np.asarray(positions, dtype=np.int64)
        flat = positions.ravel()
        out = np.zeros((flat.size, self.dim), dtype=np.float32)
        for i, shard in enumerate(self.shards):
            inside = (flat >= self.offsets[i]) & (flat < self.offsets[i + 1])
            if inside.any():
                out[inside] = shard.vectors(flat[inside] - self.offsets[i])
        return out.reshape(*positions.shape, self.dim)

    def documents(self, positions) -> dict[int, StoredDocument]:
        """The stored document behind each (shifted) FAISS id, its position shifted too."""
        out = {}
        for i, shard, offset, local in self._by_shard(positions, self.offsets):
            shift = int(self.doc_offsets[i])
            for pos, doc in shard.documents(local).items():
                out[pos + offset] = replace(doc, pos=doc.pos + shift)
        return out

    def doc_ids(self, positions) -> dict[int, str]:
        out = {}
        for _, shard, offset, local in self._by_shard(positions, self.offsets):
            out.update((pos + offset, doc_id) for pos, doc_id in shard.doc_ids(local).items())
        return out

    def locate(self, ids) -> dict[int, PassageRef]:
        """Where the vectors with these (shifted) FAISS ids lie, ids shifted back again."""
        out = {}
        for _, shard, offset, local in self._by_shard(ids, self.offsets):
            for pid, ref in shard.locate(local).items():
                out[pid + offset] = replace(ref, pid=pid + offset)
        return out

    def passage_texts(self, refs) -> dict[int, str]:
        out = {}
        for _, shard, offset, local in self._by_shard([r.pid for r in refs], self.offsets):
            texts = shard.passage_texts([PassageRef(p, "") for p in local])
            out.update((pid + offset, text) for pid, text in texts.items())
        return out


class ShardAdmitted:
    """What a filter admits of a folder of shards: each shard's :class:`Admitted`, and the
    documents' global positions."""

    def __init__(self, parts: list[Admitted], positions: np.ndarray) -> None:
        self.parts, self.positions = parts, positions

    @property
    def documents(self) -> int:
        return int(len(self.positions))

    @property
    def vectors(self) -> int:
        return sum(p.vectors for p in self.parts)

    @property
    def mask(self) -> np.ndarray:
        return np.concatenate([p.mask for p in self.parts])

    @property
    def document_mask(self) -> np.ndarray:
        return np.concatenate([p.document_mask for p in self.parts])


class _ShardStores:
    """The shards' doc stores behind one ``by_ids`` / ``get`` / ``ids``."""

    def __init__(self, shards: ShardSet) -> None:
        self.shards = shards
        self.path = shards.dir

    def by_ids(self, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
        found: dict[str, StoredDocument] = {}
        for shard, offset in zip(self.shards.shards, self.shards.doc_offsets, strict=False):
            for doc_id, doc in shard.store.by_ids(doc_ids).items():
                found[doc_id] = replace(doc, pos=doc.pos + int(offset))
        return found

    def get(self, positions) -> dict[int, StoredDocument]:
        return self.shards.documents(positions)

    def ids(self, positions) -> dict[int, str]:
        return self.shards.doc_ids(positions)


def open_index(
    path: str | Path, device: str = "auto", search_params: dict[str, float] | None = None
) -> DenseIndex | ShardSet:
    """An index directory, or a folder of shard indexes (searched unmerged)."""
    path = Path(path)
    layout.recover_for_reading(path)
    if path.is_dir() and not (path / MANIFEST_NAME).exists() and shard_dirs(path):
        return ShardSet(path, device=device, search_params=search_params)
    return DenseIndex(path, device=device, search_params=search_params)


# -- merging ------------------------------------------------------------------------------


@writes("out")
def merge_indexes(
    shards: Sequence[str | Path],
    out: str | Path,
    faiss_spec: str | None = None,
    *,
    on_disk: str = "auto",
    bm25: bool | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
) -> Manifest:
    """One index from shard indexes (see the module docstring).

    Args:
        shards: shard index directories (any order: shard numbers order them).
        out: the merged index directory.
        faiss_spec: the merged index's FAISS spec (default: the shards' own).
        on_disk: ``auto`` (on-disk inverted lists when IVF lists would take more than half
            the available memory), ``yes`` or ``no``.
        bm25: build a BM25 side index (default: when a shard has one).

    Raises:
        DotcatError: incompatible shards, the same id in two shards, a shard without its
            vectors, or a spec the merged corpus cannot train.
        DiskFullError: no room for the merged index (nothing is left of it).
    """
    out = layout.real_path(out)
    MergeConfig(faiss_spec=faiss_spec, on_disk=on_disk, bm25=bm25).validate()
    manifests = [(Path(p), Manifest.read(Path(p))) for p in shards]
    if any(out.resolve() == p.resolve() for p, _ in manifests):
        raise DotcatError(f"merge: {out} is one of the shards merged; give another OUT")
    _check_mergeable(manifests)
    paths = _in_order(manifests)
    manifests = [next(m for p, m in manifests if p == path) for path in paths]
    spec = faiss_spec or manifests[0].faiss["spec"]
    counts = [int(m.documents["count"]) for m in manifests]
    n = sum(m.vector_count for m in manifests)
    empty = _empty_index(spec, int(manifests[0].encoder["dim"]), n, on_disk)
    vectors = [_vectors_of(p, m, empty.d) for p, m in zip(paths, manifests, strict=True)]
    layout.check_target(out, overwrite)

    with layout.index_lock(out):
        layout.recover(out)
        layout.check_target(out, overwrite)
        tmp = layout.build_path(out)
        layout.clear(tmp, "an unusable build folder")
        tmp.mkdir(parents=True)
        try:
            with writing(tmp / DOCSTORE_NAME):
                _merge_docstores(paths, tmp / DOCSTORE_NAME)
                if any(m.passages for m in manifests):
                    _merge_passages(paths, tmp / DOCSTORE_NAME)
            stored_on_disk = _merge_faiss(empty, spec, vectors, n, tmp, on_disk, show_progress)
            with_bm25 = bm25 if bm25 is not None else any(m.bm25 for m in manifests)
            by_passage = any(m.passages and "split_longer_than" not in m.passages
                             for m in manifests)  # fmt: skip
            bm25_entry = (
                _bm25_from_docstore(tmp, sum(counts), n if by_passage else None, show_progress)
                if with_bm25 else None
            )  # fmt: skip
            merged = list(zip(paths, counts, manifests, strict=True))
            manifest = _merged_manifest(tmp, spec, merged, stored_on_disk, bm25_entry)
            manifest.write(tmp)
            layout.swap_into_place(tmp, out)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    logger.info("merged %d shards (%d documents) into %s (%s)", len(paths), sum(counts), out, spec)
    return manifest


def _merged_manifest(
    tmp: Path,
    spec: str,
    merged: list[tuple[Path, int, Manifest]],
    on_disk: bool,
    bm25: dict[str, Any] | None,
) -> Manifest:
    """The merged index's manifest: the shards' encoder, the FAISS index written in ``tmp``,
    the shards it came from (``(dir, documents, manifest)`` in shard order)."""
    index = faiss.read_index(str(tmp / INDEX_NAME), faiss.IO_FLAG_ONDISK_SAME_DIR)
    entry = faiss_index.manifest_entry(index, spec, dict(faiss_index.DEFAULT_SEARCH_PARAMS), "cpu")
    first = next((m for _, _, m in merged if m.passages), merged[0][2])
    passages = None
    if first.passages:
        count = sum(m.vector_count for _, _, m in merged)
        settings = {key: first.passages[key] for key in _PASSAGE_SETTINGS if key in first.passages}
        passages = {**settings, "count": count, "next_pid": count}
    return Manifest(
        encoder=first.encoder,
        faiss={**entry, "on_disk": on_disk},
        documents={
            "count": sum(c for _, c, _ in merged),
            "merged_from": [
                {"dir": str(p.resolve()), "documents": c, "shard": m.shard} for p, c, m in merged
            ],
        },
        corpus=first.corpus if all(m.shard for _, _, m in merged) else {"merged": True},
        dotcat_version=__version__,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        files={
            "index": INDEX_NAME,
            "docstore": DOCSTORE_NAME,
            **({"ivfdata": IVFDATA_NAME} if on_disk else {}),
        },
        bm25=bm25,
        passages=passages,
    )


def _vectors_of(path: Path, manifest: Manifest, dim: int):
    """A shard's vectors as a read-only array on disk (its vectors.npy, memory-mapped)."""
    npy = path / "vectors.npy"
    if npy.is_file():
        vectors = np.load(npy, mmap_mode="r")
        if vectors.shape != (manifest.vector_count, dim):
            raise DotcatError(f"{npy}: shape {vectors.shape} does not match the manifest")
        return vectors
    index = faiss_index.read_index(path / manifest.files["index"])
    if not isinstance(faiss.downcast_index(index), faiss.IndexFlat):
        raise DotcatError(
            f"{path}: no vectors.npy, and its {manifest.faiss['spec']} index cannot give its "
            "vectors back exactly; build shards with `dotcat index --shard I/N` (they keep it)"
        )
    return index.reconstruct_n(0, index.ntotal)


def _merge_docstores(paths: Sequence[Path], target: Path) -> None:
    """Every shard's rows, positions shifted by the documents before; a repeated id refused."""
    offset = 0
    with DocStore(target, readonly=False) as store:
        for path in paths:
            with DocStore(path / DOCSTORE_NAME) as source:
                for rows in source.iter_rows():
                    try:
                        store.add((pos + offset, i, title, text) for pos, i, title, text in rows)
                    except DotcatError:
                        found = store.by_ids([r[1] for r in rows])  # this shard's rows too
                        shared = sorted(i for i, doc in found.items() if doc.pos < offset)[:3]
                        raise DotcatError(
                            f"{path}: holds document ids that an earlier shard holds too (e.g. "
                            f"{', '.join(map(repr, shared))}); shards must not overlap"
                        ) from None
                if source.has_fields():
                    store.copy_fields_from(source, offset)
                offset += len(source)
        store.finish_fields()
        store.commit()


def _merge_passages(paths: Sequence[Path], target: Path, block: int = 100_000) -> None:
    """Every shard's passages, their ids shifted by the passages before and their documents'
    positions by the documents before (as :func:`_merge_docstores` shifted them); a shard
    without passages (every document short) gives each document as its one passage."""
    pid_offset = pos_offset = 0
    with DocStore(target, readonly=False) as store:
        for path in paths:
            with DocStore(path / DOCSTORE_NAME) as source:
                if not source.has_passages():
                    store.add_passages(
                        (pos + pid_offset, pos + pos_offset, 0, 0, length)
                        for pos, length in source.text_lengths()
                    )
                    span = len(source)
                else:
                    span = source.passage_count()
                    for first in range(0, span, block):
                        store.add_passages(
                            (pid + pid_offset, pos + pos_offset, part, a, b)
                            for pid, pos, part, a, b in source.passage_spans(first, first + block)
                        )
                pid_offset += span
                pos_offset += len(source)
        store.commit()


def _blocks(vectors: Sequence, block: int = 65_536) -> Iterator[np.ndarray]:
    for array in vectors:
        for start in range(0, len(array), block):
            yield np.ascontiguousarray(array[start : start + block], dtype=np.float32)


def _sample(vectors: Sequence, positions: np.ndarray) -> np.ndarray:
    """Rows at global ``positions`` (sorted) across the shards' arrays."""
    out, starts = [], np.cumsum([0] + [len(v) for v in vectors])
    for array, lo, hi in zip(vectors, starts[:-1], starts[1:], strict=True):
        mine = positions[(positions >= lo) & (positions < hi)] - lo
        if len(mine):
            out.append(np.asarray(array[mine], dtype=np.float32))
    return np.concatenate(out) if out else np.empty((0, vectors[0].shape[1]), np.float32)


def _empty_index(spec: str, dim: int, n: int, on_disk: str) -> faiss.Index:
    """The merged index, empty (refused: too few vectors to train it, on_disk yes without IVF)."""
    empty = faiss_index.create_index(spec, dim)
    faiss_index.check_trainable(empty, spec, n)
    if on_disk == "yes" and faiss.try_extract_index_ivf(faiss.downcast_index(empty)) is None:
        raise SettingError("on_disk", f"on_disk yes applies only to IVF lists; {spec} has none")
    return empty


def _merge_faiss(
    index: faiss.Index,
    spec: str,
    vectors: Sequence,
    n: int,
    tmp: Path,
    on_disk: str,
    show_progress: bool,
) -> bool:
    """Train once on a sample across shards, add every shard; returns whether on disk."""
    wanted = faiss_index.training_rows(index, n)
    if len(wanted):
        faiss_index.train_index(index, _sample(vectors, wanted), spec)
    ivf = faiss.try_extract_index_ivf(faiss.downcast_index(index))
    if ivf is not None and _wants_on_disk(ivf, n, on_disk):
        _merge_on_disk(index, vectors, tmp, show_progress)
        return True
    faiss_index.add_vectors(index, _blocks(vectors), n, show_progress)
    faiss_index.write_index(index, tmp / INDEX_NAME)
    return False


def _wants_on_disk(ivf: Any, n: int, on_disk: str) -> bool:
    if on_disk != "auto":
        return on_disk == "yes"
    lists_bytes = n * (ivf.code_size + 8)  # codes and int64 ids
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            found = (int(line.split()[1]) for line in f if line.startswith("MemAvailable:"))
            kib = next(found, None)
    except (OSError, ValueError):
        kib = None
    return kib is not None and lists_bytes > ON_DISK_SHARE * kib * 1024


def _merge_on_disk(index: faiss.Index, vectors: Sequence, tmp: Path, show_progress: bool) -> None:
    """Each shard's lists written on their own (only one shard in memory at a time), then
    merged into one ``index.ivfdata`` by FAISS (``faiss.contrib.ondisk.merge_ondisk``)."""
    parts = Path(tempfile.mkdtemp(prefix=".lists-", dir=tmp))
    try:
        names, offset = [], 0
        for i, array in enumerate(vectors):
            part = faiss.clone_index(index)
            for block in _blocks([array]):
                ids = np.arange(offset, offset + len(block), dtype=np.int64)
                part.add_with_ids(block, ids)
                offset += len(block)
            names.append(str(parts / f"shard-{i}.index"))
            faiss_index.write_index(part, names[-1])
            del part
        merged = faiss.clone_index(index)
        merge_ondisk(merged, names, str(tmp / IVFDATA_NAME))
        faiss_index.write_index(merged, tmp / INDEX_NAME)
    finally:
        shutil.rmtree(parts, ignore_errors=True)


def _bm25_from_docstore(
    tmp: Path, n: int, passages: int | None, show_progress: bool
) -> dict[str, Any]:
    """BM25 over the merged documents or passages (BM25's statistics are global: never merged)."""
    build_from_docstore(tmp / DOCSTORE_NAME, BM25Config(), show_progress,
                        passages=passages is not None).save(tmp / BM25_DIR)  # fmt: skip
    return side_entry(n, passages)
