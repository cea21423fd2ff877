"""Markdown and reStructuredText as a search engine reads them: front matter, plain text.

A note's **front matter** is its metadata, not its text: a YAML block between ``---`` lines
at the top of a Markdown or reStructuredText file (Jekyll, Hugo, MkDocs, Obsidian, Pandoc),
a TOML block between ``+++`` lines (Hugo), or a reStructuredText field list at the top or
right under the title (``:tags: hr, onboarding``, docutils' bibliographic fields as Pelican
writes them). :func:`front_matter` splits it off and parses it: YAML with PyYAML's safe
loader (plain data only, never objects), TOML with :mod:`tomllib`; a ``title`` key becomes
the document's title; a reStructuredText field named ``tags``, ``keywords``, ``categories``
or ``authors`` is a comma-separated list. A block that does not parse (or is not a mapping)
is left in the text, and the file read as if it had none.

The **text** kept is the plain text a reader sees, not the markup (:func:`markdown_text`,
:func:`rst_text`): headings, paragraphs, list items, table cells and code, without ``#``,
``**``, link targets or directives. Snippets are cut from the stored text, and the encoders
and BM25 read it too: markup is noise to both (``**`` is no word, a URL in a link target no
part of what the note says).

Markdown is parsed by markdown-it-py (CommonMark, with GitHub's tables), so that ``#`` in a code
block is not taken for a heading; reStructuredText by regular expressions over its
well-defined markup (adornments, directives, roles, hyperlink references): docutils would be
a dependency for stripping it.
"""

from __future__ import annotations

import logging
import re
import sys
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

logger = logging.getLogger(__name__)

#: reStructuredText fields read as comma-separated lists.
RST_LIST_FIELDS = frozenset({"tags", "keywords", "categories", "authors"})

_YAML_BLOCK = re.compile(
    r"\A---[ \t]*\r?\n(?P<body>.*?)(?:\r?\n)?^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.M
)
_TOML_BLOCK = re.compile(
    r"\A\+\+\+[ \t]*\r?\n(?P<body>.*?)(?:\r?\n)?^\+\+\+[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.M
)
_RST_FIELD = re.compile(r"^:(?P<name>[^:\s][^:]*):(?:[ \t]+(?P<value>.*))?$")
_RST_ADORNMENT = re.compile(r"""^([!-/:-@\[-`{-~])\1{2,}\s*$""")
_RST_DIRECTIVE = re.compile(r"^\s*\.\.\s+(?:\|[^|]+\|\s+)?[\w:.+-]+::.*$")
_RST_COMMENT = re.compile(r"^\s*\.\.(?:\s+(?!\w[\w:.+-]*::)(?!_).*)?$")
_RST_TARGET = re.compile(r"^\s*\.\.\s+_[^:]*:.*$")
_RST_ROLE = re.compile(r":[\w:.+-]+:`(?P<text>[^`]+?)(?:\s*<[^>`]*>)?`")
_RST_LINK = re.compile(r"`(?P<text>[^`<]+?)\s*(?:<[^>`]*>)?`__?")
_RST_LITERAL = re.compile(r"``(?P<text>.+?)``")
_RST_STRONG = re.compile(r"(?<![\w*])\*\*(?P<text>[^*\s](?:[^*]*[^*\s])?)\*\*(?![\w*])")
_RST_EMPHASIS = re.compile(r"(?<![\w*])\*(?P<text>[^*\s](?:[^*]*[^*\s])?)\*(?![\w*])")
_RST_REFERENCE = re.compile(r"(?<![\w`])(?P<text>[^\W_](?:[\w.-]*[^\W_])?)__?(?!\w)")
_TAG = re.compile(r"<[^>]*>")


def front_matter(text: str, kind: str, where: str = "") -> tuple[dict[str, Any], str]:
    """``(front matter, the text without it)``; no front matter: ``({}, text)``.

    Args:
        text: the file's text.
        kind: ``markdown`` or ``rst`` (a field list at the top is front matter too).
        where: the file, named in the warning about a block that does not parse.
    """
    for pattern, parse in ((_YAML_BLOCK, _yaml), (_TOML_BLOCK, tomllib.loads)):
        match = pattern.match(text)
        if match is None:
            continue
        try:
            data = parse(match["body"])
        except Exception as e:  # noqa: BLE001 - a YAML or TOML error of any kind: not parsed
            logger.warning("%s: front matter not read (%s)", where, str(e).splitlines()[0])
            return {}, text
        if isinstance(data, dict):
            return data, text[match.end() :]
        return {}, text
    if kind == "rst":
        return _rst_fields(text)
    return {}, text


def _yaml(body: str) -> Any:
    import yaml  # only front matter needs it

    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    return yaml.load(body, Loader=loader)  # noqa: S506 - a safe loader: plain data only


def _rst_fields(text: str) -> tuple[dict[str, Any], str]:
    """A field list at the top of a reStructuredText file, or right under its title."""
    lines = text.split("\n")
    start = 0
    while start < len(lines) and not lines[start].strip():
        start += 1
    if start + 1 < len(lines) and _RST_ADORNMENT.match(lines[start]) and lines[start + 1] != "":
        start += 1  # an overline
    if start + 1 < len(lines) and _RST_ADORNMENT.match(lines[start + 1]):
        start += 2  # the title and its underline
        while start < len(lines) and not lines[start].strip():
            start += 1
    fields: dict[str, Any] = {}
    end = start
    while end < len(lines):
        match = _RST_FIELD.match(lines[end])
        if match is None:
            break
        name, value = match["name"].strip(), (match["value"] or "").strip()
        if name.lower() in RST_LIST_FIELDS:
            fields[name] = [v.strip() for v in value.split(",") if v.strip()]
        else:
            fields[name] = value
        end += 1
    if not fields:
        return {}, text
    return fields, "\n".join(lines[:start] + lines[end:])


# -- Markdown ------------------------------------------------------------------------------


def markdown_text(text: str) -> tuple[str, str]:
    """``(first heading, plain text)`` of a Markdown text (see the module docstring)."""
    from markdown_it import MarkdownIt  # only Markdown files need it; keeps `dotcat` fast

    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    blocks: list[str] = []
    title = ""
    row: list[str] | None = None
    lists = 0
    gap = ""  # what goes before the next block: a line break, or a blank line
    for i, token in enumerate(tokens):
        kind = token.type
        if kind in ("bullet_list_open", "ordered_list_open"):
            gap = gap if lists else _blank(blocks)
            lists += 1
        elif kind in ("bullet_list_close", "ordered_list_close"):
            lists -= 1
            gap = _blank(blocks)
        elif kind == "table_open":
            gap = _blank(blocks)
        elif kind == "tr_open":
            row = []
        elif kind == "tr_close" and row is not None:
            blocks.append(gap + "  ".join(c for c in row if c))
            row, gap = None, "\n"
        elif kind == "inline":
            line = _inline(token)
            if row is not None:
                row.append(line)
                continue
            if not title and i > 0 and tokens[i - 1].type == "heading_open":
                title = line
            if line:
                blocks.append(gap + line)
                gap = "\n" if lists else "\n\n"
        elif kind in ("fence", "code_block", "html_block"):
            content = token.content if kind != "html_block" else _TAG.sub("", token.content)
            if content.strip():
                blocks.append(_blank(blocks) + content.strip("\n"))
            gap = _blank(blocks)
    return title, "".join(blocks)


def _blank(blocks: list[str]) -> str:
    """A blank line between blocks (nothing before the first)."""
    return "\n\n" if blocks else ""


def _inline(token: Any) -> str:
    """An inline token's text: words, code spans and image descriptions; no markup."""
    parts: list[str] = []
    for child in token.children or ():
        if child.type in ("text", "code_inline"):
            parts.append(child.content)
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif child.type == "image":
            parts.append(child.content)
    return "".join(parts).strip()


# -- reStructuredText ----------------------------------------------------------------------


def rst_text(text: str) -> tuple[str, str]:
    """``(first section title, plain text)`` of a reStructuredText text."""
    lines = text.split("\n")
    kept: list[str] = []
    title = ""
    for i, line in enumerate(lines):
        if _RST_ADORNMENT.match(line):
            if not title and i > 0 and len(line.rstrip()) >= len(lines[i - 1].strip()) > 0:
                title = lines[i - 1].strip()
            continue
        directive = _RST_DIRECTIVE.match(line)
        if directive is not None:
            continue  # its arguments are a language, a path or options, rarely words
        if _RST_TARGET.match(line) or _RST_COMMENT.match(line):
            continue
        kept.append(_rst_inline(line))
    plain = "\n".join(kept)
    plain = re.sub(r"::(\s*)$", r":\1", plain, flags=re.MULTILINE)
    return title, re.sub(r"\n{3,}", "\n\n", plain).strip("\n")


def _rst_inline(line: str) -> str:
    for pattern in (_RST_ROLE, _RST_LITERAL, _RST_LINK, _RST_STRONG, _RST_EMPHASIS):
        line = pattern.sub(lambda m: m["text"], line)
    return _RST_REFERENCE.sub(lambda m: m["text"], line)


def strip_tags(html: str) -> str:
    """Text without HTML tags (an HTML block inside Markdown)."""
    return _TAG.sub("", html)
