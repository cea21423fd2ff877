"""Where dotcat keeps what it can rebuild: one root for every cache.

``$DOTCAT_CACHE`` if set, else ``$XDG_CACHE_HOME/dotcat``, else ``~/.cache/dotcat``. Under it:
``datasets/`` (Arrow copies of corpora, :func:`dotcat.data.corpus.default_cache_dir`) and the
verified weight digests of :mod:`dotcat.models.resolve`. Deleting it loses nothing but time.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_ENV = "DOTCAT_CACHE"


def cache_root() -> Path:
    """The cache root (see the module docstring); not created here."""
    root = os.environ.get(CACHE_ENV)
    if root:
        return Path(root).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base).expanduser() / "dotcat"
