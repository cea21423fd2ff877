"""Progress bars for long work: tqdm, silenced by ``dotcat -q``, readable in a log file.

Every bar in dotcat comes from :func:`progress_bar`, so one switch silences them all:
:func:`set_quiet` (the CLI's ``-q``), or ``DOTCAT_QUIET=1`` in the environment (inherited by
child processes, e.g. torchrun workers). On a terminal a bar redraws in place ten times a
second; written to a file or a pipe it adds a line at most every ``LOG_INTERVAL`` seconds, and
no state is printed twice (tqdm re-prints the last one when a bar closes, which in a log file
is a duplicate line).

:func:`quiet_logger` holds a chatty library's logger to errors for a while (pypdf on a damaged
file, NNCF's tables): what it would say, dotcat says once in its own words.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any

from tqdm import tqdm

QUIET_ENV = "DOTCAT_QUIET"
#: Seconds between two lines of a bar written to a file or a pipe.
LOG_INTERVAL = 10.0

_quiet = False


@contextlib.contextmanager
def quiet_logger(name: str) -> Iterator[None]:
    """Within the block, the logger ``name`` (and its children) logs errors only."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.ERROR)
    try:
        yield
    finally:
        logger.setLevel(level)


def set_quiet(quiet: bool = True) -> None:
    """Silence (or restore) every dotcat progress bar in this process and its children."""
    global _quiet
    _quiet = quiet
    if quiet:
        os.environ[QUIET_ENV] = "1"
    else:
        os.environ.pop(QUIET_ENV, None)


def progress_enabled() -> bool:
    """False under ``-q`` / ``DOTCAT_QUIET=1``."""
    return not (_quiet or os.environ.get(QUIET_ENV, "").strip() not in ("", "0"))


class _Bar(tqdm):
    """A tqdm bar that never displays the same count twice in a row (see the module doc)."""

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        if msg is None and self.n == getattr(self, "_shown_n", None):
            return True
        self._shown_n = self.n
        return super().display(msg, pos)


def progress_bar(
    iterable: Iterable | None = None,
    *,
    desc: str,
    total: float | None = None,
    unit: str = "it",
    enabled: bool = True,
    **kwargs: Any,
) -> tqdm:
    """A progress bar (or a silent pass-through when disabled), used like ``tqdm``.

    Args:
        iterable: wrap this iterable, or None and call ``update`` yourself.
        desc: what is being done ("encoding documents").
        total: expected count (None: a counter with a rate, no percentage).
        unit: what is counted (the rate shows as ``unit/s``).
        enabled: the caller's own switch (``show_progress``); ``-q`` overrides it.
    """
    stream = kwargs.pop("file", sys.stderr)
    terminal = hasattr(stream, "isatty") and stream.isatty()
    return _Bar(
        iterable,
        desc=desc,
        total=total,
        unit=unit,
        file=stream,
        disable=not (enabled and progress_enabled()),
        mininterval=0.1 if terminal else LOG_INTERVAL,
        dynamic_ncols=terminal,
        **kwargs,
    )
