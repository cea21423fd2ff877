"""Build an index directory: corpus -> BERT_DOT vectors -> FAISS + doc store + manifest.

The corpus is read as a memory-mapped Arrow dataset and encoded in chunks, longest documents
first, into a memory-mapped ``.npy`` file, so neither the texts nor the vectors of a corpus
larger than RAM are held in memory. The index is written into a build folder beside its
target and swapped into place at the end (:mod:`dotcat.index.layout`): an interrupted build
never leaves a half index, never loses the old one, and its leftovers are cleaned up (and
said so) by the next build of the same path.

Everything that can be checked cheaply is checked before the model is loaded
(:mod:`dotcat.index.preflight`): the target path, the corpus, the FAISS spec against the
model's dimension and the corpus size.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import faiss
import numpy as np
import pyarrow.compute as pc

from dotcat import __version__
from dotcat.data import find_corpus_file, load_corpus
from dotcat.index import faiss_index, layout, preflight
from dotcat.index.docstore import DocStore
from dotcat.index.manifest import DOCSTORE_NAME, INDEX_NAME, Manifest
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

BM25_DIR = "bm25"


@dataclass
class IndexConfig:
    """How to build the FAISS side of an index.

    Attributes:
        faiss_spec: a FAISS factory string; ``Flat`` is exact search.
        device: ``auto`` (GPU when faiss-gpu sees one), ``cpu`` or ``cuda``.
        search_params: search-time defaults stored in the manifest (``nprobe``, ``efSearch``).
        chunk_size: documents handed to the encoder at a time (bounds memory).
        keep_vectors: keep ``vectors.npy`` in the index directory (to re-index with another
            FAISS spec without encoding again).
        seed: seed of the training sample.
        bm25: also build a BM25 index (bm25s, memory-mapped at search time) into the index
            directory, so BM25 and hybrid search run from it without the corpus.
    """

    faiss_spec: str = "Flat"
    device: str = "auto"
    search_params: dict[str, float] = field(
        default_factory=lambda: dict(faiss_index.DEFAULT_SEARCH_PARAMS)
    )
    chunk_size: int = 8192
    keep_vectors: bool = False
    seed: int = 0
    bm25: bool = False


def document_text(title: str, text: str) -> str:
    """The text a document is encoded (and BM25-indexed) on: title, a space, body.

    As BEIR and MTEB do for bi-encoders; an empty part is dropped.
    """
    return f"{title} {text}" if title and text else (title or text)


def file_fingerprint(path: Path) -> str:
    """sha256 of a file's bytes, read in 1 MiB blocks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fill_docstore(dataset, store: DocStore, show_progress: bool) -> None:
    pos = 0
    with progress_bar(
        total=len(dataset), desc="storing documents", unit="doc", enabled=show_progress
    ) as bar:
        for batch in dataset.iter(batch_size=10_000):
            positions = range(pos, pos + len(batch["id"]))
            rows = list(zip(positions, batch["id"], batch["title"], batch["text"], strict=True))
            store.add(rows)
            pos += len(rows)
            bar.update(len(rows))
    store.commit()


def _encode_corpus(
    dataset, encoder: BiEncoder, out: np.ndarray, chunk_size: int, show_progress: bool
) -> None:
    """Encode every document into ``out`` (row = position), longest documents first.

    Sorting by length across the whole corpus (not only inside a batch) keeps padding to a
    minimum; character length is a cheap, good proxy for token count. One bar over the
    corpus advances with every batch, so its docs/s is live from the first minute.
    """
    table = dataset.data
    lengths = pc.add(pc.utf8_length(table.column("title")), pc.utf8_length(table.column("text")))
    order = np.argsort(-lengths.to_numpy(zero_copy_only=False), kind="stable")
    with progress_bar(
        total=len(order), desc="encoding documents", unit="doc", enabled=show_progress
    ) as bar:
        for start in range(0, len(order), chunk_size):
            idx = np.sort(order[start : start + chunk_size])
            rows = dataset[idx.tolist()]
            texts = [document_text(t, x) for t, x in zip(rows["title"], rows["text"], strict=False)]
            out[idx] = encoder.encode_documents(texts, progress=bar)


def build_index(
    corpus: str | Path,
    index_dir: str | Path,
    encoder: BiEncoder | EncoderConfig | None = None,
    config: IndexConfig | None = None,
    overwrite: bool = False,
    show_progress: bool = True,
) -> Manifest:
    """Index a corpus with a BERT_DOT encoder into ``index_dir``.

    Args:
        corpus: a BEIR directory, or a JSONL/TSV corpus file (optionally gzipped).
        index_dir: where the index goes; created atomically.
        encoder: a loaded :class:`BiEncoder` or the config to load one (default model).
        config: the FAISS side (:class:`IndexConfig`).
        overwrite: replace an existing dotcat index at ``index_dir``.

    Returns:
        The manifest written into the index.
    """
    config = config or IndexConfig()
    index_dir = Path(index_dir)
    encoder = encoder or EncoderConfig(device=config.device)
    faiss_device = faiss_index.resolve_faiss_device(config.device)
    loaded = isinstance(encoder, BiEncoder)
    preflight.check_build(
        corpus,
        index_dir,
        config.faiss_spec,
        overwrite=overwrite,
        model=None if loaded else encoder.model,
        dim=encoder.dim if loaded else None,
    )
    corpus_file = find_corpus_file(corpus)

    with layout.index_lock(index_dir):
        layout.recover(index_dir)  # a killed build's leftovers: restored or removed, logged
        layout.check_target(index_dir, overwrite)  # a restored index needs --overwrite too
        dataset = load_corpus(corpus)
        n = len(dataset)
        if not loaded:
            encoder = BiEncoder.load(encoder)
        tmp = layout.build_path(index_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        try:
            manifest = _build(
                dataset, corpus, corpus_file, encoder, config, faiss_device, tmp, show_progress
            )
            layout.swap_into_place(tmp, index_dir)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
    logger.info("indexed %d documents into %s (%s)", n, index_dir, config.faiss_spec)
    return manifest


def _build(
    dataset,
    corpus: str | Path,
    corpus_file: Path,
    encoder: BiEncoder,
    config: IndexConfig,
    faiss_device: str,
    tmp: Path,
    show_progress: bool,
) -> Manifest:
    """Write a complete index into ``tmp``; the manifest last (it marks completion)."""
    n = len(dataset)
    store = DocStore(tmp / DOCSTORE_NAME, readonly=False)
    try:
        _fill_docstore(dataset, store, show_progress)
    finally:
        store.close()
    bm25 = _build_bm25(dataset, tmp / BM25_DIR, show_progress) if config.bm25 else None

    vectors_path = tmp / "vectors.npy"
    vectors = np.lib.format.open_memmap(
        vectors_path, mode="w+", dtype=np.float32, shape=(n, encoder.dim)
    )
    _encode_corpus(dataset, encoder, vectors, config.chunk_size, show_progress)
    vectors.flush()

    index = faiss_index.create_index(config.faiss_spec, encoder.dim)
    if faiss_device == "cuda":
        index = faiss_index.to_gpu(index)
    faiss_index.train_index(index, vectors, config.faiss_spec, seed=config.seed)
    faiss_index.add_vectors(index, vectors, show_progress)
    index = faiss_index.to_cpu(index)
    search_params = faiss_index.applicable_search_params(index, config.search_params)
    faiss.write_index(index, str(tmp / INDEX_NAME))
    del vectors
    if not config.keep_vectors:
        vectors_path.unlink()

    manifest = Manifest(
        encoder=encoder.manifest_entry(),
        faiss={
            "spec": config.faiss_spec,
            "metric": "inner_product",
            "ntotal": int(index.ntotal),
            "search_params": search_params,
            "built_on": faiss_device,
        },
        documents={"count": n},
        corpus={
            "path": str(Path(corpus).resolve()),
            "file": str(corpus_file.resolve()),
            "sha256": file_fingerprint(corpus_file),
        },
        dotcat_version=__version__,
        created=dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        bm25=bm25,
    )
    manifest.write(tmp)
    return manifest


def _build_bm25(dataset, out: Path, show_progress: bool) -> dict:
    """The BM25 side index, documents in doc-store order; its manifest entry."""
    from dotcat.search.bm25 import BM25Config, BM25Index

    config = BM25Config()
    BM25Index.build(dataset, config=config, show_progress=show_progress).save(out)
    return {"dir": out.name, "config": config.to_dict(), "documents": len(dataset)}
