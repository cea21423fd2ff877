"""Progress bars for long work: tqdm, at a terminal, silenced by ``dotcat -q``.

Every bar in dotcat comes from :func:`progress_bar`, so one switch silences them all:
:func:`set_quiet` (the CLI's ``-q``), or ``DOTCAT_QUIET=1`` in the environment (inherited by
child processes, e.g. torchrun workers). A bar is drawn where its stream (stderr) is a
terminal, redrawn in place ten times a second. Written to a file or a pipe (a log, CI, a
program reading dotcat's output) a bar adds a line every :data:`HEARTBEAT` seconds once its
work has lasted that long (a sign of life from a long training or encoding; short work writes
none), or every :data:`LOG_INTERVAL` seconds from the start where asked: ``DOTCAT_PROGRESS=1``
(the CLI's ``--progress``); no state printed twice (tqdm re-prints the last one when a bar
closes, which in a log file is a duplicate line).

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
#: ``1``: draw bars also where the stream is not a terminal (a log file).
PROGRESS_ENV = "DOTCAT_PROGRESS"
#: Seconds between two lines of a bar written to a file or a pipe, where asked.
LOG_INTERVAL = 10.0
#: ... where not asked: the first line after this long, then one as often.
HEARTBEAT = 60.0

_quiet = False


def env_on(name: str) -> bool:
    """Whether the environment variable ``name`` is set on: not empty, 0, false, no or off."""
    return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no", "off")


#: ``DOTCAT_QUIET=1`` where the process started: no command line's lack of ``-q`` undoes it.
QUIET_AT_START = env_on(QUIET_ENV)


@contextlib.contextmanager
def quiet_logger(name: str, level: int = logging.ERROR) -> Iterator[None]:
    """Within the block, the logger ``name`` (and its children) logs ``level`` and up only."""
    logger = logging.getLogger(name)
    before = logger.level
    logger.setLevel(level)
    try:
        yield
    finally:
        logger.setLevel(before)


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
    return not (_quiet or env_on(QUIET_ENV))


def set_progress_anywhere(on: bool = True) -> None:
    """Draw bars also where stderr is not a terminal (the CLI's ``--progress``), in this
    process and its children."""
    if on:
        os.environ[PROGRESS_ENV] = "1"
    else:
        os.environ.pop(PROGRESS_ENV, None)


class _Bar(tqdm):
    """A tqdm bar that never displays the same state (count and postfix) twice in a row (see
    the module doc)."""

    def display(self, msg: str | None = None, pos: int | None = None) -> bool:
        state = (self.n, self.postfix)  # (a new postfix is news: "waiting for HOST")
        if msg is None and state == getattr(self, "_shown", None):
            return True
        self._shown = state
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
        enabled: the caller's own switch (``show_progress``); ``-q`` overrides it. Where
            the stream is not a terminal, a line every :data:`HEARTBEAT` seconds of work
            (every :data:`LOG_INTERVAL` from the start with ``DOTCAT_PROGRESS=1``).
    """
    stream = kwargs.pop("file", sys.stderr)
    terminal = hasattr(stream, "isatty") and stream.isatty()
    asked = env_on(PROGRESS_ENV)
    every = 0.1 if terminal else LOG_INTERVAL if asked else HEARTBEAT
    return _Bar(
        iterable,
        desc=desc,
        total=total,
        unit=unit,
        file=stream,
        disable=not (enabled and progress_enabled()),
        mininterval=every,
        maxinterval=max(every, 10.0),  # (tqdm's monitor would draw every 10 s)
        delay=HEARTBEAT if every == HEARTBEAT else 0.0,
        dynamic_ncols=terminal,
        **kwargs,
    )
