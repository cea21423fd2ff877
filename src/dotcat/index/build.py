"""Build an index directory: corpus -> BERT_DOT vectors -> FAISS + doc store + manifest.

The corpus is read as an Arrow dataset and streamed (never memory-mapped, see
:func:`dotcat.data.corpus.iter_row_batches`) in chunks of ``chunk_size`` documents; the
encoder sorts each chunk by length, so padding stays small. A chunk's vectors are written to
disk in parts of about a minute of encoding, each logged with a checksum
(:mod:`dotcat.index.chunks`), so a build killed in hour six resumes after its last part
when the same command runs again: the plan (corpus, encoder and settings) must match, or the
resume is refused with what differs; ``fresh`` starts over. Memory stays flat with the corpus
size: a chunk of texts, a training sample, the FAISS index itself.

Where most documents are several windows long (or when asked), documents longer than the
encoder's window are split into passages first (:mod:`dotcat.index.passages`); elsewhere only
the documents more than ``split_over`` (sixteen) windows long are, document by document: the
doc store keeps the documents and where each passage lies, and the vectors and chunks are the
passages' (the BM25 side too where every long document is split; it reads documents whole where
only a few are). A document that is not split is one passage, so a collection of short passages
indexes as it would whole (and without a passages table where none was split).

The index is written into a build folder beside its target and swapped into place at the
end (:mod:`dotcat.index.layout`): an interrupted build never leaves a half index and never
loses the old one. Everything that can be checked cheaply is checked before the model loads
(:mod:`dotcat.index.preflight`).
"""

from __future__ import annotations

import datetime as dt
import itertools
import logging
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import faiss
import numpy as np

from dotcat.data import CorpusOptions, CorpusStats, load_corpus
from dotcat.data.corpus import iter_row_batches
from dotcat.data.sources import CorpusSource
from dotcat.errors import DotcatError
from dotcat.files import replacing, writes
from dotcat.index import faiss_index, layout, preflight
from dotcat.index.bm25 import BM25Index, build_from_docstore, side_entry
from dotcat.index.chunks import VECTORS_FILE, ChunkStore, npy_header, read_plan, write_plan
from dotcat.index.config import BM25Config, IndexConfig, shard_range
from dotcat.index.docstore import DocStore, document_text
from dotcat.index.fields import batch_field_rows
from dotcat.index.layout import BM25_DIR
from dotcat.index.manifest import DOCSTORE_NAME, INDEX_NAME, Manifest
from dotcat.index.passages import AUTO_LENGTH_FACTOR, AUTO_SAMPLE, Splitter, store_passages
from dotcat.index.ray_encoding import encode_chunks_on_ray
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.options import UNREAD_FUSION_WEIGHT
from dotcat.progress import progress_bar
from dotcat.version import __version__

logger = logging.getLogger(__name__)

#: A local build writes its vectors in parts of about this many seconds of encoding (the most
#: a stop loses), the first of :data:`FIRST_PART` rows (:func:`_encode_chunks`).
PART_SECONDS = 60.0
FIRST_PART = 64


@writes("index_dir")
def build_index(
    corpus: CorpusSource,
    index_dir: str | Path,
    encoder: BiEncoder | EncoderConfig | None = None,
    config: IndexConfig | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
    fresh: bool = False,
    corpus_options: CorpusOptions | None = None,
) -> Manifest:
    """Index a corpus (or one shard of it) with a BERT_DOT encoder into ``index_dir``.

    Args:
        corpus: a BEIR directory, a corpus file (JSON Lines, JSON, CSV, TSV, Parquet), a
            folder of files (text, Markdown, HTML, PDF, record files), or documents in Python
            (a list of strings or dicts, a pandas DataFrame, a ``datasets.Dataset``); see
            :mod:`dotcat.data.sources`.
        index_dir: where the index goes; swapped into place when complete.
        encoder: a loaded :class:`BiEncoder` or the config to load one (default model); a
            search's query encoder gives its config.
        config: the FAISS side and the build settings (:class:`IndexConfig`).
        overwrite: replace an existing dotcat index at ``index_dir``.
        fresh: discard an interrupted build of ``index_dir`` instead of resuming it.
        corpus_options: record field names and a folder's file selection
            (:class:`dotcat.data.sources.CorpusOptions`).

    Returns:
        The manifest written into the index.

    Raises:
        DotcatError: a bad target, corpus, model or spec (before any encoding), or an
            interrupted build of the same path with another plan (unless ``fresh``).
        DiskFullError: no room for the build; the old index is untouched, the chunks
            encoded so far are kept for a resume.
    """
    config = config or IndexConfig()
    index_dir = layout.real_path(index_dir)
    encoder = encoder or EncoderConfig(device=config.device)
    if not isinstance(encoder, BiEncoder | EncoderConfig):  # a search's exported query encoder
        encoder = encoder.config  # (documents are split with the model's own tokenizer)
    loaded = isinstance(encoder, BiEncoder)
    if not loaded:
        encoder.validate()
    n_all = preflight.check_build(
        corpus, index_dir, config, overwrite=overwrite, fresh=fresh,
        model=None if loaded else encoder.model, dim=encoder.dim if loaded else None,
        options=corpus_options, max_length=encoder.max_length,
    )  # fmt: skip
    faiss_device = faiss_index.resolve_faiss_device(config.device)

    with layout.index_lock(index_dir):
        layout.recover(index_dir)  # a killed swap's leftovers: restored or removed, logged
        layout.check_target(index_dir, overwrite)  # a restored index needs --overwrite too
        stats = CorpusStats()
        dataset = load_corpus(corpus, stats=stats, options=corpus_options)
        entry = preflight.corpus_entry(corpus, stats, corpus_options)
        source = _Corpus(corpus, corpus_options, entry)
        start, stop = shard_range(n_all, config.shard)
        requested = encoder.config if loaded else encoder  # what Ray's actors load
        if not loaded:
            # With Ray the actors encode; the driver's copy only gives the dimension and the
            # manifest entry, so it stays off the GPUs the actors use.
            encoder = BiEncoder.load(replace(encoder, device="cpu") if config.ray else encoder)
        splitter = _choose_split(
            Splitter.for_encoder(encoder, config.passages), dataset, config.passages.window
        )
        unread = preflight.unread_script(split_sample(dataset)["text"], encoder.config.model)
        plan = _plan(source, n_all, encoder, config, splitter)
        tmp = _build_folder(index_dir, plan, fresh)
        try:
            manifest = _build(
                dataset, (start, stop), source, _Encoding(encoder, requested, splitter), config,
                faiss_device, tmp, show_progress,
            )  # fmt: skip
        except BaseException:
            _report_kept(tmp, config.chunk_size, encoder.dim)
            raise
        if unread and config.bm25:  # the hybrid's fusion until dev queries choose one
            manifest.fusion = {"method": "linear", "weight": UNREAD_FUSION_WEIGHT, "dev": unread}
            manifest.write(tmp)
        layout.swap_into_place(tmp, index_dir)
    logger.info(
        "indexed %d documents (%d vectors) into %s (%s)",
        stop - start, manifest.vector_count, index_dir, config.faiss_spec,
    )  # fmt: skip
    return manifest


def split_sample(dataset):
    """The documents a build's ``enabled=None`` choice looks at: up to :data:`AUTO_SAMPLE`,
    evenly spaced over the whole corpus (so every shard of a corpus draws the same)."""
    n = len(dataset)
    return dataset.select(sorted({int(i) for i in np.linspace(0, n - 1, min(n, AUTO_SAMPLE))}))


def _choose_split(splitter: Splitter | None, dataset, given: int | None) -> Splitter | None:
    """The splitter of a build: as asked, or with ``enabled=None`` the choice of
    :meth:`Splitter.splits` on an evenly spaced sample of the whole corpus (every shard of a
    corpus chooses alike): every document longer than the window, or document by document
    (:meth:`Splitter.long_documents`: those more than ``split_over`` times the max length, in
    passages of ``given`` tokens where the settings give a window)."""
    if splitter is None or splitter.config.enabled is not None:
        return splitter
    rows = split_sample(dataset)
    split, long = splitter.splits(list(zip(rows["title"], rows["text"], strict=True)))
    window, share = splitter.max_length, long / max(len(rows), 1)
    if split:
        logger.info(
            "%d of %d documents sampled (%.0f%%) are longer than the encoder's window (%d "
            "tokens), most of them longer than %d: splitting documents into passages of %d "
            "tokens", long, len(rows), 100 * share, window, AUTO_LENGTH_FACTOR * window,
            splitter.config.window,
        )  # fmt: skip
        return splitter
    one_by_one = splitter.long_documents(given)
    if long:
        logger.info(
            "%d of %d documents sampled (%.0f%%) are longer than the encoder's window (%d "
            "tokens): those longer than %d tokens are split into passages, the others cut at "
            "the window (split_over=2 splits those past two windows too, passages=True every "
            "one)", long, len(rows), 100 * share, window, one_by_one.longer_than,
            extra={"settings": ("passages", "split_over")},
        )  # fmt: skip
    return one_by_one


@dataclass(frozen=True)
class _Corpus:
    """The corpus of a build: as given (Ray's actors read it again), how it is read, and its
    manifest entry."""

    given: CorpusSource
    options: CorpusOptions | None
    entry: dict[str, Any]


@dataclass(frozen=True)
class _Encoding:
    """How a build encodes: the loaded encoder, the config Ray's actors load, the splitter of
    long documents (None: one vector per document)."""

    encoder: BiEncoder
    requested: EncoderConfig
    splitter: Splitter | None


def _plan(
    corpus: _Corpus, n_all: int, encoder: BiEncoder, config: IndexConfig, splitter: Splitter | None
) -> dict:
    """What must match for an interrupted build to be resumed: the corpus's content (its
    sha256) and how it is read, the encoder, the settings."""
    return {
        **preflight.settings_plan(corpus.entry, n_all, config),
        "encoder": {k: v for k, v in encoder.manifest_entry().items() if k not in ("name", "path")},
        # absent without passages: such a plan reads as before
        **({} if splitter is None else {"passages": splitter.to_json()}),
    }


def _build_folder(index_dir: Path, plan: dict, fresh: bool) -> Path:
    """The build folder: an interrupted build's, resumed, or a new one."""
    tmp = layout.build_path(index_dir)
    recorded = read_plan(tmp) if tmp.exists() else None
    if recorded is not None and not fresh:
        preflight.check_resumable(index_dir, plan)
        logger.warning("resuming the interrupted build in %s", tmp)
        return tmp
    if tmp.exists():
        what = "discarding the interrupted build" if recorded else "removing the unusable build"
        logger.warning("%s in %s", what, tmp)
        layout.clear(tmp, "an earlier build of this index")
    tmp.mkdir(parents=True)
    write_plan(tmp, plan)
    return tmp


def _report_kept(tmp: Path, chunk_size: int, dim: int) -> None:
    """After a failure or an interruption: what is kept, and how to resume."""
    if not tmp.exists():
        return
    n = encoded = 0
    try:  # (a ChunkStore would make the vectors file were it missing: a write, on a full disk)
        with open(tmp / VECTORS_FILE, "rb") as f:  # the rows its header says
            n = int(npy_header(f)[0][0])
        if n:
            encoded = sum(ChunkStore(tmp, n, dim, chunk_size).encoded(verify=False).values())
    except (OSError, ValueError, DotcatError):
        n, encoded = 0, 0
    logger.warning(
        "build stopped; %d of %d vectors encoded are kept in %s: run the same command again "
        "to resume, or pass fresh=True to start over", encoded, n, tmp,
        extra={"settings": ("fresh",)},
    )  # fmt: skip


def _build(
    dataset,
    rows: tuple[int, int],
    corpus: _Corpus,
    encoding: _Encoding,
    config: IndexConfig,
    faiss_device: str,
    tmp: Path,
    show_progress: bool,
) -> Manifest:
    """Complete (or continue) the build in ``tmp``; each part is written last-step-atomic,
    so a part that exists is whole; the manifest comes last (it marks completion)."""
    n = rows[1] - rows[0]
    encoder, splitter, docstore = encoding.encoder, encoding.splitter, tmp / DOCSTORE_NAME
    if not docstore.is_file():
        keep = config.shard is not None  # every shard of a corpus has the same layout
        _write_docstore(dataset, rows, docstore, show_progress, splitter, keep)
    with DocStore(docstore) as docs:
        if splitter is not None and not docs.has_passages():
            splitter = None  # no document long enough: an index without passages
        vectors = n if splitter is None else docs.passage_count()
    store = ChunkStore(tmp, vectors, encoder.dim, config.chunk_size)
    if config.ray is not None:
        encode_chunks_on_ray(
            corpus.given, rows, encoding.requested, store, config.ray, config.ray_workers,
            show_progress, options=corpus.options,
            spans=None if splitter is None else _Spans(docstore),
        )  # fmt: skip
    elif splitter is None:
        pairs = ((doc["title"], doc["text"]) for doc in _documents(dataset, rows))
        _encode_chunks(_chunks(pairs, store.chunk_size), encoder, store, show_progress)
    else:
        texts = _passage_chunks(docstore, store.chunk_size)
        _encode_chunks(texts, encoder, store, show_progress, unit="passage")
    if not (tmp / INDEX_NAME).is_file():
        _write_faiss(store, config, faiss_device, tmp / INDEX_NAME, show_progress)
    index = faiss.read_index(str(tmp / INDEX_NAME))
    bm25 = None
    if config.bm25:
        # BM25 reads passages where every long document is split; where a few are split on
        # their own it reads documents whole (its statistics as without them; BM25 has its
        # own length normalisation).
        by_passage = splitter is not None and splitter.longer_than is None
        if not (tmp / BM25_DIR).is_dir():
            if by_passage:
                side = build_from_docstore(docstore, BM25Config(), show_progress)
            else:
                side = BM25Index.build(_documents(dataset, rows), BM25Config(), show_progress)
            side.save(tmp / BM25_DIR)
        bm25 = side_entry(n, vectors if by_passage else None)
    keep = config.keep_vectors or config.shard is not None  # a shard's vectors feed a merge
    for name in ["chunks.jsonl", "build.json", *([] if keep else ["vectors.npy"])]:
        (tmp / name).unlink(missing_ok=True)
    if splitter is not None and vectors > n:
        logger.info("%d documents split into %d passages", n, vectors)
    manifest = Manifest(
        encoder=encoder.manifest_entry(),
        faiss=faiss_index.manifest_entry(
            index, config.faiss_spec, config.search_params, faiss_device
        ),
        documents={"count": n},
        corpus={**corpus.entry, "documents": len(dataset)},
        dotcat_version=__version__,
        created=dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        bm25=bm25,
        shard=(s := config.shard)
        and {"index": s[0], "of": s[1], "start": rows[0], "stop": rows[1]},
        passages=None
        if splitter is None
        else {**splitter.to_json(), "count": vectors, "next_pid": vectors},
    )
    manifest.write(tmp)
    return manifest


def _write_docstore(
    dataset,
    rows: tuple[int, int],
    path: Path,
    show_progress: bool,
    splitter: Splitter | None,
    keep_passages: bool = False,
) -> None:
    """Positions ``0..n-1`` of the index = corpus rows ``[start, stop)``, and with a splitter
    each document's passages (ids in document order); written whole, then renamed (so a doc
    store that exists in a build folder is complete). A splitter deciding document by
    document that split none leaves no passages table (unless ``keep_passages``: a shard)."""
    start, stop = rows
    path.with_suffix(".sqlite.tmp").unlink(missing_ok=True)
    desc = "storing documents" if splitter is None else "splitting documents"
    with replacing(path) as tmp, DocStore(tmp, readonly=False) as store:
        with progress_bar(total=stop - start, desc=desc, unit="doc", enabled=show_progress) as bar:
            pid = 0
            for first, batch in iter_row_batches(dataset, start, stop, batch_size=10_000):
                positions = range(first - start, first - start + len(batch["id"]))
                store.add(zip(positions, batch["id"], batch["title"], batch["text"], strict=True))
                store.add_fields(batch_field_rows(positions, batch["fields"]))
                if splitter is not None:
                    pid = store_passages(store, splitter, positions, batch, pid)
                bar.update(len(batch["id"]))
        if splitter is not None and splitter.longer_than is not None:
            _report_long(store, splitter, keep_passages)
        store.finish_fields()
        store.commit()


def _report_long(store: DocStore, splitter: Splitter, keep: bool) -> None:
    """Log the documents a per-document rule split, else drop the passages table (unless keep)."""
    split = store.split_documents()
    if split:
        logger.info(
            "%d of %d documents are longer than %d tokens: split into passages of %d tokens, "
            "the others kept whole", split, len(store), splitter.longer_than,
            splitter.config.window,
        )  # fmt: skip
    elif not keep:
        store.drop_passages()


@dataclass(frozen=True)
class _Spans:
    """Where the passages with ids ``[first, stop)`` lie, read from a build's doc store, for
    Ray's actors: ``(document position, start, stop)`` per passage."""

    path: Path

    def __call__(self, first: int, stop: int) -> list[tuple[int, int, int]]:
        with DocStore(self.path) as store:
            return [(pos, a, b) for _, pos, _, a, b in store.passage_spans(first, stop)]


def _passage_chunks(path: Path, chunk_size: int) -> Iterator[tuple[int, list[str]]]:
    """``(chunk number, its texts)`` of every passage in id order: title and passage text."""
    with DocStore(path) as store:
        rows = store.iter_passages(batch=chunk_size)
        yield from _chunks(((title, text) for batch in rows for _, _, title, text in batch),
                           chunk_size)  # fmt: skip


def _chunks(pairs: Iterable[tuple[str, str]], chunk_size: int) -> Iterator[tuple[int, list[str]]]:
    """``(chunk number, its texts)``: ``(title, text)`` pairs as the encoder reads them
    (:func:`document_text`), ``chunk_size`` a chunk."""
    texts, chunk = (document_text(title, text) for title, text in pairs), 0
    while batch := list(itertools.islice(texts, chunk_size)):
        yield chunk, batch
        chunk += 1


def _encode_chunks(
    chunks: Iterator[tuple[int, list[str]]],
    encoder: BiEncoder,
    store: ChunkStore,
    show_progress: bool,
    unit: str = "document",
) -> None:
    """Encode what is not yet on disk; one bar over the whole range, advanced per batch.

    A chunk is written in parts of about :data:`PART_SECONDS` of encoding each (the first
    :data:`FIRST_PART` rows, then as many as the rate so far encodes in that time), so a stop
    loses at most the part under way: a chunk of 8,192 passages of 256 tokens takes 25
    minutes on two CPU cores. A part is sorted by length for the encoder, as a chunk is."""
    done = store.encoded(verify=True)
    if done:
        logger.warning("%d of %d %ss already encoded and verified", sum(done.values()), store.n,
                       unit)  # fmt: skip
    with progress_bar(total=store.n, initial=sum(done.values()), desc=f"encoding {unit}s",
                      unit=unit[:3], enabled=show_progress) as bar:  # fmt: skip
        size = FIRST_PART
        for chunk, texts in chunks:
            first = done.get(chunk, 0)
            while first < len(texts):
                stop = min(len(texts), first + size)
                began = time.monotonic()
                store.write(chunk, encoder.encode_documents(texts[first:stop], progress=bar), first)
                rate = (stop - first) / max(time.monotonic() - began, 1e-3)
                size, first = max(FIRST_PART, int(rate * PART_SECONDS)), stop


def _write_faiss(
    store: ChunkStore, config: IndexConfig, faiss_device: str, path: Path, show_progress: bool
) -> None:
    """Train on a seeded sample (one pass to gather it), add every vector (a second pass)."""
    index = faiss_index.create_index(config.faiss_spec, store.dim)
    if faiss_device == "cuda":
        index = faiss_index.to_gpu(index)
    wanted = faiss_index.training_rows(index, store.n, seed=config.seed)
    if len(wanted):
        faiss_index.train_index(index, _gather(store, wanted), config.faiss_spec)
    faiss_index.add_vectors(index, store.iter_rows(), store.n, show_progress)
    with replacing(path) as tmp:  # a half-written file is removed, a full disk said so
        faiss_index.write_index(index, tmp)


def _gather(store: ChunkStore, positions: np.ndarray) -> np.ndarray:
    """The rows at sorted ``positions``, read block by block."""
    out = np.empty((len(positions), store.dim), dtype=np.float32)
    filled, block = 0, 65_536
    for begin in range(0, store.n, block):
        end = min(store.n, begin + block)
        lo, hi = np.searchsorted(positions, [begin, end])
        if hi > lo:
            out[filled : filled + hi - lo] = store.read(begin, end)[positions[lo:hi] - begin]
            filled += hi - lo
    return out


def _documents(dataset, rows: tuple[int, int]) -> Iterator[dict[str, str]]:
    """The documents of corpus rows ``[start, stop)`` (BM25's, in doc-store order)."""
    for _, batch in iter_row_batches(dataset, *rows, batch_size=10_000):
        for doc_id, title, text in zip(batch["id"], batch["title"], batch["text"], strict=True):
            yield {"id": doc_id, "title": title, "text": text}
