"""Errors a user can act on. The CLI prints them as one line, without a traceback."""

from __future__ import annotations

from pathlib import Path


class DotcatError(Exception):
    """Base class of every error dotcat reports to a user."""


class DataFormatError(DotcatError):
    """Bad input data, located precisely: ``{path}:{line}: {field}: {problem}``."""

    def __init__(
        self,
        path: str | Path,
        line: int | None,
        problem: str,
        field: str | None = None,
    ) -> None:
        self.path = str(path)
        self.line = line
        self.field = field
        self.problem = problem
        where = self.path if line is None else f"{self.path}:{line}"
        what = problem if field is None else f"{field}: {problem}"
        super().__init__(f"{where}: {what}")
