"""Short reprs for the objects users print: a document is shown by its first words.

``print(hit)`` in a loop over results, or a document in a notebook cell, should read as one
line per object, not pages of text: :func:`preview` cuts a text to its first words, and
:func:`short_repr` writes ``Name(field=value, ...)`` with long texts previewed. Nothing here
imports anything heavy (every layer's objects use it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Characters of a text a repr shows (about ten words of English).
PREVIEW_CHARS = 60


def preview(text: str, width: int = PREVIEW_CHARS) -> str:
    """``text`` with its whitespace collapsed, cut to at most ``width`` characters (at a word
    boundary where one falls in the second half, else mid-word: text without spaces, such as
    Chinese, is cut too) and ended by ``…`` when cut."""
    flat = " ".join(text.split())
    if len(flat) <= width:
        return flat
    cut = flat[: width - 1]
    space = cut.rfind(" ")
    if space >= width // 2:
        cut = cut[:space]
    return cut.rstrip() + "…"


def short_repr(name: str, fields: Mapping[str, Any], texts: tuple[str, ...] = ()) -> str:
    """``name(key=value, ...)`` with ``repr`` values; the ``texts`` fields previewed; floats
    to four decimals (a score, not its last bits)."""
    parts = []
    for key, value in fields.items():
        if key in texts and isinstance(value, str):
            value = preview(value)
        shown = f"{value:.4f}" if isinstance(value, float) else repr(value)
        parts.append(f"{key}={shown}")
    return f"{name}({', '.join(parts)})"
