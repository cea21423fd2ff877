"""Helpers for the data tests: write small plain or gzipped files, check error messages."""

from __future__ import annotations

import gzip
from collections.abc import Callable
from pathlib import Path

import pytest

from dotcat.errors import DataFormatError


@pytest.fixture()
def write(tmp_path) -> Callable[..., Path]:
    """``write(name, content)``: write ``content`` (str or bytes) to ``tmp_path/name``.

    A name ending in ``.gz`` is gzipped. Returns the path.
    """

    def _write(name: str, content: str | bytes) -> Path:
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        data = content.encode("utf-8") if isinstance(content, str) else content
        if name.endswith(".gz"):
            data = gzip.compress(data)
        path.write_bytes(data)
        return path

    return _write


@pytest.fixture(params=["", ".gz"], ids=["plain", "gzip"])
def gz(request) -> str:
    """Run a test on a plain file and on a gzipped one: the suffix to append."""
    return request.param


def _assert_error(
    excinfo: pytest.ExceptionInfo[DataFormatError],
    path: Path,
    line: int | None,
    *fragments: str,
    field: str | None = None,
) -> None:
    """The error names the file, the line, the field (if given) and each problem fragment."""
    err = excinfo.value
    message = str(err)
    assert err.path == str(path), message
    assert err.line == line, message
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    assert message.startswith(where), message
    if field is not None:
        assert err.field == field, message
    for fragment in fragments:
        assert fragment in message, message


@pytest.fixture()
def assert_error() -> Callable[..., None]:
    """``assert_error(excinfo, path, line, *fragments, field=None)``: the error names the file,
    the line, the field (if given) and contains every fragment of the problem."""
    return _assert_error
