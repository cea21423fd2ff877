"""The installed package's version (semantic versioning), from its metadata.

A leaf: any module of any layer reads the version here, never through the package's facade
(``dotcat/__init__.py``, which sits above every layer)."""

from __future__ import annotations

from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("dotcat")
except PackageNotFoundError:  # a source tree that was never installed
    __version__ = "0+unknown"
