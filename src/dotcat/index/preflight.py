"""Checks before a build: everything that can fail cheaply fails before any encoding.

Light on purpose (FAISS, the corpus reader and JSON only; no torch, no model weights): the
command line runs :func:`check_build` before importing the encoder, and
:func:`dotcat.index.build_index` runs it again for callers from Python. It checks the target
path, the corpus, the FAISS factory string against the model's dimension, and what the
spec must train (IVF lists, PQ's 2^nbits centroids) against the corpus size.
"""

from __future__ import annotations

from pathlib import Path

from dotcat.data import CorpusOptions, CorpusStats, load_corpus
from dotcat.errors import DotcatError
from dotcat.index import faiss_index, layout
from dotcat.models.resolve import model_dim, read_model_config, resolve_model
from dotcat.models.st_config import read_st_settings


def model_dimension(model: str) -> int | None:
    """A model's vector dimension from its ``config.json``, after checking it is a model."""
    path = resolve_model(model)
    return model_dim(read_model_config(path, read_st_settings(path).transformer_dir))


def check_build(
    corpus: str | Path,
    index_dir: str | Path,
    faiss_spec: str,
    *,
    overwrite: bool = False,
    model: str | None = None,
    dim: int | None = None,
    shard: tuple[int, int] | None = None,
    options: CorpusOptions | None = None,
) -> int:
    """Check a build request before any model is loaded; return the corpus's document count.

    Args:
        corpus: a corpus source (:mod:`dotcat.data.sources`): a BEIR directory, a corpus
            file, a folder of files, or documents in Python.
        index_dir: where the index will go.
        faiss_spec: the FAISS factory string.
        overwrite: whether an existing index may be replaced.
        model: the encoder's model argument (its dimension is read from its config), or
        dim: the dimension itself, when the encoder is already loaded.
        shard: ``(i, n)``: the build indexes shard ``i`` of ``n`` (its size is what trains).
        options: how to read the corpus (field names, a folder's file selection).

    Raises:
        DotcatError: any problem with the target, the corpus, the model directory or the spec.
    """
    layout.check_target(Path(index_dir), overwrite)
    if dim is None and model is not None:
        dim = model_dimension(model)
    empty = faiss_index.create_index(faiss_spec, dim) if dim else None
    stats = CorpusStats()
    n = len(load_corpus(corpus, stats=stats, options=options))
    if n == 0:
        raise DotcatError(f"{stats.path}: the corpus has no documents to index")
    if shard is not None:
        i, count = shard
        if count < 1 or not 0 <= i < count:
            raise DotcatError(f"--shard {i}/{count}: expected I/N with 0 <= I < N")
        size = (i + 1) * n // count - i * n // count
        if size == 0:
            raise DotcatError(f"--shard {i}/{count}: {n} documents leave this shard empty")
    else:
        size = n
    if empty is not None:
        faiss_index.check_trainable(empty, faiss_spec, size)
    return n
