"""Exported models on disk: where they live, and how an export is known to be current.

The int8 runtimes (:mod:`dotcat.models.onnx_backend`, :mod:`dotcat.models.openvino_backend`)
run files exported from a model's weights. Each runtime keeps its files in one directory (its
*home*): beside the weights (``onnx/``, ``openvino/``, where ``dotcat export`` writes and where
sentence-transformers looks), or, for an export made on first use, in the cache under
``$DOTCAT_CACHE/<directory>/<fingerprint>/``: a model's own directory, perhaps a packaged or
shared one, is not written to behind the user's back.

An export is never silently stale: a home's ``dotcat_export.json`` records, per file, the
recipe it was made with, the sha256 of the weights included; a file whose record differs
from the recipe asked for is exported again. Files are written under temporary names and
renamed into place, so a crash leaves no half file.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path

from dotcat.cache import cache_root
from dotcat.files import write_json, writing

logger = logging.getLogger(__name__)

EXPORT_RECORD = "dotcat_export.json"


def cache_home(directory: str, fingerprint: str) -> Path:
    """Where exports made on first use are cached: ``$DOTCAT_CACHE/<directory>/<fingerprint>``
    (the fingerprint's first 32 hex digits)."""
    return cache_root() / directory / fingerprint[:32]


def current_export(homes: list[Path], name: str, recipe: dict, *companions: str) -> Path | None:
    """``home/name`` in the first of ``homes`` whose record for ``name`` is ``recipe`` and that
    holds the file (and its ``companions``, suffixes such as ``.bin``); None if none does,
    with a warning when a file is there under another recipe (stale: other weights)."""
    for home in homes:
        path = home / name
        files = [path, *(path.with_suffix(suffix) for suffix in companions)]
        if recorded(home, name) == recipe and all(f.is_file() for f in files):
            return path
    stale = [str(h / name) for h in homes if (h / name).is_file()]
    if stale:
        logger.warning("export %s is stale (other weights or recipe): exporting again", stale[0])
    return None


def recorded(home: Path, name: str) -> dict | None:
    """The recipe ``home/name`` was made with, or None when unrecorded."""
    return _records(home).get(name)


def record(home: Path, name: str, recipe: dict) -> None:
    """Record that ``home/name`` was made with ``recipe`` (after the file is in place)."""
    write_json(home / EXPORT_RECORD, _records(home) | {name: recipe})


def _records(home: Path) -> dict:
    """``home/dotcat_export.json``: file name -> recipe (empty when missing or unreadable)."""
    try:
        records = json.loads((home / EXPORT_RECORD).read_text())
    except (OSError, ValueError):
        return {}
    return records if isinstance(records, dict) else {}


@contextlib.contextmanager
def atomic_file(path: Path) -> Iterator[Path]:
    """A temporary path beside ``path``, renamed onto it if the block succeeds; removed if it
    fails (a full disk: one :class:`~dotcat.errors.DiskFullError`)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with writing(path, remove=[tmp]):
            yield Path(tmp)
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 is for secrets, not for models
        os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


@contextlib.contextmanager
def quiet_export() -> Iterator[None]:
    """The exporters' and quantisers' warnings (tracer, pre-processing advice) are noise here."""
    root = logging.getLogger()
    level = root.level
    root.setLevel(logging.ERROR)  # onnxruntime.quantization logs its advice on the root logger
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        root.setLevel(level)
