"""Checks before a build: everything that can fail cheaply fails before any encoding.

Light on purpose (FAISS, the corpus reader and JSON only; no torch, no model weights): the
command line runs :func:`check_build` before importing the encoder, and
:func:`dotcat.index.build.build_index` runs it again for callers from Python. It checks the target
path, the corpus, the FAISS factory string against the model's dimension, and what the
spec must train (IVF lists, PQ's 2^nbits centroids) against the corpus size.
"""

from __future__ import annotations

import logging
import os
import re
import unicodedata
from pathlib import Path
from typing import Any

from dotcat.data import CorpusOptions, CorpusStats, load_corpus
from dotcat.data.index_source import source_corpus_sha256
from dotcat.errors import DotcatError
from dotcat.index import faiss_index, layout
from dotcat.index.chunks import plan_differences, read_plan
from dotcat.index.config import IndexConfig, shard_range
from dotcat.models.resolve import (
    check_model,
    encoder_max_length,
    model_dim,
    read_model_config,
    resolve_model,
)
from dotcat.models.st_config import read_st_settings
from dotcat.options import FUSION_WEIGHT, UNREAD_FUSION_WEIGHT

logger = logging.getLogger(__name__)


def check_build(
    corpus: Any,
    index_dir: str | Path,
    config: IndexConfig | None = None,
    *,
    overwrite: bool = False,
    fresh: bool = False,
    model: str | None = None,
    dim: int | None = None,
    options: CorpusOptions | None = None,
    max_length: int | None = None,
) -> int:
    """Check a build request before any model is loaded; return the corpus's document count.

    Args:
        corpus: a corpus source (:mod:`dotcat.data.sources`): a BEIR directory, a corpus
            file, a folder of files, or documents in Python.
        index_dir: where the index will go.
        config: the build's settings (FAISS spec, shard, chunk size...), checked here.
        overwrite: whether an existing index may be replaced.
        fresh: an interrupted build of ``index_dir`` is discarded, not resumed (else its
            recorded settings must match: checked here, before any model loads).
        model: the encoder's model argument (its dimension is read from its config), or
        dim: the dimension itself, when the encoder is already loaded.
        options: how to read the corpus (field names, a folder's file selection).
        max_length: the encoder's window (None: the model's, read from its files), against
            which the passages' window and stride are checked.

    Raises:
        DotcatError: any problem with the settings, the target, the corpus, the model
            directory or the spec, or an interrupted build made with other settings.
    """
    config = config or IndexConfig()
    config.validate()
    index_dir = Path(index_dir)
    layout.check_target(index_dir, overwrite)
    if dim is None and model is not None:
        path = check_model(model)
        dim = model_dim(read_model_config(path, read_st_settings(path).transformer_dir))
    if config.passages.enabled is not False and (model is not None or max_length):
        # A window over the encoder's, a stride over half of it: said before any model loads.
        config.passages.resolved(max_length or encoder_max_length(model))
    empty = faiss_index.create_index(config.faiss_spec, dim) if dim else None
    stats = CorpusStats()
    n = len(load_corpus(corpus, stats=stats, options=options))
    if n == 0:
        raise DotcatError(f"{stats.path}: the corpus has no documents to index")
    start, stop = shard_range(n, config.shard)
    if start == stop:  # (n > 0: a shard)
        i, count = config.shard
        raise DotcatError(
            f"shard={i}/{count}: {n} documents leave this shard empty", settings=("shard",)
        )
    if empty is not None:
        faiss_index.check_trainable(empty, config.faiss_spec, stop - start)
    if not fresh:
        entry = corpus_entry(corpus, stats, options)
        check_resumable(index_dir, settings_plan(entry, n, config))
    return n


def corpus_entry(corpus: object, stats: CorpusStats, options: CorpusOptions | None) -> dict:
    """The manifest's record of a corpus: where it was, its kind, its content's sha256
    (:attr:`CorpusStats.sha256`: a file's bytes, a folder's files), and how it was read."""
    is_path = isinstance(corpus, (str, os.PathLike))
    entry: dict[str, Any] = {
        "path": str(Path(corpus).resolve()) if is_path else stats.path,
        "kind": stats.kind,
        "sha256": stats.sha256,
    }
    if stats.kind == "file":
        entry["file"] = str(Path(stats.path).resolve())
    if stats.kind == "index" and is_path and (source := source_corpus_sha256(corpus)):
        entry["source_sha256"] = source  # what a model trained on the first index knows
    if options is not None and options.to_json():
        entry["options"] = options.to_json()
    return entry


def settings_plan(corpus: dict, n_all: int, config: IndexConfig) -> dict[str, Any]:
    """What an interrupted build must share with its resumption, the encoder aside: the
    corpus's content (its sha256) and how it is read, and the build's settings."""
    return {
        "corpus": {
            "sha256": corpus["sha256"],
            "options": corpus.get("options", {}),
            "documents": n_all,
        },
        "faiss_spec": config.faiss_spec,
        "chunk_size": config.chunk_size,
        "shard": list(config.shard) if config.shard else None,
        "bm25": config.bm25,
        "seed": config.seed,
    }


def check_resumable(index_dir: Path, plan: dict[str, Any]) -> None:
    """Refuse to resume an interrupted build of ``index_dir`` made with other settings than
    ``plan`` (the keys ``plan`` has: without ``encoder``, everything but the encoder)."""
    building = layout.build_path(index_dir)
    recorded = read_plan(building) if building.exists() else None
    if recorded is None:
        return
    differences = plan_differences({k: recorded.get(k) for k in plan}, plan)
    if differences:
        raise DotcatError(
            f"{index_dir}: an interrupted build of this path (in {building.name}) was made with "
            f"other settings ({'; '.join(differences)}); run it again with those settings "
            "to resume it, or pass fresh=True to start over",
            settings=("fresh",),
        )


def unread_script(texts: list[str], model: str) -> dict[str, str] | None:
    """Warn where most letters of a corpus's sample are in scripts other than Latin and the
    encoder's model card names English only: its vectors rank such text poorly (the default
    model on Japanese manual pages: dense nDCG@10 0.11, BM25 0.61; eval/studies/bm25_words).
    Returns why, for the index's fusion (:data:`~dotcat.options.UNREAD_FUSION_WEIGHT`)."""
    card = resolve_model(model) / "README.md"
    head = card.read_text("utf-8", errors="replace")[:4000] if card.is_file() else ""
    if not re.search(r"^language:\s*(?:en|\n- en)\s*\n(?!- )", head, re.M):
        return None
    letters = [c for text in texts for c in text[:2000] if c.isalpha()]
    other = sum(not unicodedata.name(c, "").startswith("LATIN") for c in letters)
    if other <= len(letters) / 2:
        return None
    reason = f"{100 * other / len(letters):.0f}% of the letters are in scripts other than Latin"
    logger.warning(
        "%s, and the encoder (%s) reads English: dense search ranks such text poorly, so a "
        "hybrid search without dev queries to weigh it gives the dense side %g, not %g; give "
        "a multilingual --model, or search with --first-stage bm25",
        reason, model, UNREAD_FUSION_WEIGHT, FUSION_WEIGHT,
    )  # fmt: skip
    return {"reason": f"{reason}, and the encoder reads English"}
