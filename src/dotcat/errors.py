"""Errors a user can act on. The CLI prints them as one line, without a traceback."""

from __future__ import annotations

import difflib
from collections.abc import Iterable
from pathlib import Path


class DotcatError(Exception):
    """Base class of every error dotcat reports to a user.

    ``settings`` are the settings its text names, spelled as in Python (``id_field``,
    ``overwrite=True``), so that each front door can say them its own way: the command line
    renames them to its options (``--id-field``, ``--overwrite``), a Python caller reads the
    keyword arguments it passes.
    """

    def __init__(self, *args: object, settings: Iterable[str] = ()) -> None:
        super().__init__(*args)
        self.settings = tuple(settings)


class DataFormatError(DotcatError):
    """Bad input data, located precisely: ``{path}:{line}: {field}: {problem}``."""

    def __init__(
        self,
        path: str | Path,
        line: int | None,
        problem: str,
        field: str | None = None,
        settings: Iterable[str] = (),
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        what = problem if field is None else f"{field}: {problem}"
        super().__init__(f"{where}: {what}", settings=settings)


def first_line(error: BaseException) -> str:
    """The first non-empty line of an error's text (transformers' and Ray's errors run to
    paragraphs), or its type's name."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    return lines[0] if lines else type(error).__name__


class SettingError(DotcatError):
    """A setting whose value cannot work, e.g. ``max_length must be >= 2, got 0``.

    ``setting`` is the field's name as the message spells it, so a front door can name it as
    its users know it: the command line shows ``--max-length must be >= 2, got 0``. ``others``
    are further settings the message names.
    """

    def __init__(self, setting: str, message: str, others: Iterable[str] = ()) -> None:
        self.setting = setting
        super().__init__(message, settings=(setting, *others))


class DiskFullError(DotcatError):
    """A write that found no room: no space left on the device, a disk quota, a file-size
    limit, a read-only file system (:func:`dotcat.files.writing` recognises them all).

    Whatever was half written is removed by then; what existed before (an index, a model, a
    run file) is untouched. ``path`` is the file or folder being written (None where
    unknown), ``errno`` the system's error number (ENOSPC, EDQUOT, EFBIG or EROFS), ``free``
    the bytes free on its file system afterwards (None where unknown).
    """

    def __init__(self, message: str, path: str | None, errno: int, free: int | None) -> None:
        self.path = path
        self.errno = errno
        self.free = free
        super().__init__(message)


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """`` (did you mean 'x'?)`` for the choice nearest a misspelt ``name``, else ``""``."""
    close = difflib.get_close_matches(name, list(choices), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""
