"""Markdown and reStructuredText as a search engine reads them: front matter, plain text.

A note's **front matter** is its metadata, not its text: a YAML block between ``---`` lines
at the top of a Markdown or reStructuredText file (Jekyll, Hugo, MkDocs, Obsidian, Pandoc),
a TOML block between ``+++`` lines (Hugo), or a reStructuredText field list at the top or
right under the title (``:tags: hr, onboarding``, docutils' bibliographic fields as Pelican
writes them). :func:`front_matter` splits it off and parses it: YAML with PyYAML's safe
loader (plain data only, never objects), TOML with :mod:`tomllib`; a ``title`` key becomes
the document's title; a reStructuredText field named ``tags``, ``keywords``, ``categories``
or ``authors`` is a comma-separated list. A block that is not a mapping is left in the text,
and the file read as if it had none; one that does not parse (a template's,
``title: {{ page.title }}``) is left out of the text: it is no prose, and a comment line in it
must not become a heading.

The **text** kept is the plain text a reader sees, not the markup (:func:`markdown_text`,
:func:`rst_text`): headings, paragraphs, list items, table cells and code, without ``#``,
``**``, link targets, directives, roles or HTML. Snippets are cut from the stored text, and the
encoders and BM25 read it too: markup is noise to both (``**`` is no word, a URL in a link
target no part of what the note says). Markdown is parsed by markdown-it-py (CommonMark, with
GitHub's tables): HTML blocks and inline HTML give their text, without tags, comments or
scripts (a README's centred ``<p>`` intro and its ``<details>`` are prose), code is kept as
code, and diagrams (a ``mermaid``, ``plantuml`` or ``dot`` fence) are left out: their source is
arrows and node ids, neither words a person searches for nor text a snippet should show.
reStructuredText is parsed by docutils, the reference parser, with file inclusion and raw
content disabled (no ``.. raw:: html``, no ``.. include::`` reaches the text) and its reports
silenced; the roles and directives of Sphinx and its extensions, which docutils does not know,
are read as their text (``:ref:`Title <label>``` gives "Title", ``.. versionadded:: 2.0`` its
words, ``.. code-block::`` its code), but for tables of contents and diagrams, left out as in
Markdown. Template tags outside code (Jinja's and Liquid's ``{% %}``, ``{{ }}``, ``{# #}``) are
left out too.
"""

from __future__ import annotations

import functools
import logging
import re
import tomllib
from html import unescape
from typing import Any

from dotcat.data.metadata import cell_value

logger = logging.getLogger(__name__)

#: reStructuredText fields read as comma-separated lists.
RST_LIST_FIELDS = frozenset({"tags", "keywords", "categories", "authors"})
#: Diagrams, left out of the text (a Markdown fence's language, a directive's name).
DIAGRAMS = frozenset({"mermaid", "plantuml", "uml", "graphviz", "dot", "digraph", "graph", "ditaa"})
#: Sphinx directives whose content is code, kept as code.
CODE_DIRECTIVES = frozenset({"code-block", "sourcecode", "doctest", "testcode", "testoutput"})
#: Sphinx directives whose content is no text: tables of contents, file inclusions, settings.
SKIPPED_DIRECTIVES = frozenset(
    {"toctree", "literalinclude", "highlight", "currentmodule", "tabularcolumns", "index"}
)

_YAML_BLOCK = re.compile(
    r"\A---[ \t]*\r?\n(?P<body>.*?)(?:\r?\n)?^(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.M
)
_TOML_BLOCK = re.compile(
    r"\A\+\+\+[ \t]*\r?\n(?P<body>.*?)(?:\r?\n)?^\+\+\+[ \t]*(?:\r?\n|\Z)", re.DOTALL | re.M
)
_RST_FIELD = re.compile(r"^:(?P<name>[^:\s][^:]*):(?:[ \t]+(?P<value>.*))?$")
_RST_ADORNMENT = re.compile(r"""^([!-/:-@\[-`{-~])\1{2,}\s*$""")
_RST_ROLE_NAME = re.compile(r"(?<![\w`]):(?P<name>[A-Za-z][\w.+-]*(?::[\w.+-]+)*):`")
_RST_DIRECTIVE_NAME = re.compile(r"^[ \t]*\.\.[ \t]+(?P<name>[A-Za-z][\w.+:-]*?)::", re.M)
_BREAK = re.compile(r"</?(?:br|p|div|li|td|th|tr|hr)\b", re.I)
_TEMPLATE = re.compile(r"\{%.*?%\}|\{\{.*?\}\}|\{#.*?#\}", re.DOTALL)


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
            template = _TEMPLATE.search(match["body"]) is not None  # a template's: expected
            logger.log(logging.INFO if template else logging.WARNING,
                       "%s: front matter not read (%s); left out of the text", where,
                       str(e).splitlines()[0])  # fmt: skip
            return {}, text[match.end() :]
        return (data, text[match.end() :]) if isinstance(data, dict) else ({}, text)
    return _rst_fields(text) if kind == "rst" else ({}, text)


def _yaml(body: str) -> Any:
    """YAML read untyped (PyYAML's base loader: text, lists, mappings only), each value then typed
    as a CSV cell is (:func:`~dotcat.data.metadata.cell_value`): ``0042``, ``12:30`` and ``no`` stay
    as written, where YAML 1.1's rules (PyYAML's safe loader) read 34, 750 and false."""
    import yaml  # only front matter needs it

    loader = getattr(yaml, "CBaseLoader", yaml.BaseLoader)
    return _typed(yaml.load(body, Loader=loader))  # noqa: S506 - text only, no objects


def _typed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _typed(inner) for key, inner in value.items()}
    if isinstance(value, list):
        return [_typed(inner) for inner in value]
    return None if value in ("", "~", "null", "Null", "NULL") else cell_value(value)


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
    return (fields, "\n".join(lines[:start] + lines[end:])) if fields else ({}, text)


# -- Markdown ------------------------------------------------------------------------------


def markdown_text(text: str) -> tuple[str, str]:
    """``(first heading, plain text)`` of a Markdown text (see the module docstring)."""
    from markdown_it import MarkdownIt  # only Markdown files need it; keeps `dotcat` fast

    tokens = MarkdownIt("commonmark").enable(["table", "strikethrough"]).parse(text)
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
        elif kind in ("table_open", "table_close"):
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
        elif kind == "html_block" and (words := _html_words(token.content)):
            blocks.append(_blank(blocks) + words)
            gap = _blank(blocks)
        elif kind in ("fence", "code_block"):
            language = token.info.split()[0].lower() if token.info.strip() else ""
            if language not in DIAGRAMS and token.content.strip():
                blocks.append(_blank(blocks) + token.content.strip("\n"))
            gap = _blank(blocks)
    return title, "".join(blocks)


def _html_words(html: str) -> str:
    """The text of a Markdown file's HTML block (a README's centred intro, a ``<details>``
    body): its words without tags, comments, scripts or styles, entities decoded."""
    text = re.sub(r"<!--.*?-->|<(script|style)\b.*?</\1\s*>", " ", html, flags=re.S | re.I)
    text = _TEMPLATE.sub(" ", re.sub(r"<[A-Za-z/!?][^>]*>", " ", text))  # (not `a < b`)
    return " ".join(unescape(text).split())


def _blank(blocks: list[str]) -> str:
    """A blank line between blocks (nothing before the first)."""
    return "\n\n" if blocks else ""


def _inline(token: Any) -> str:
    """An inline token's text: words, code spans and image descriptions; no markup (inline
    HTML tags and template tags left out)."""
    parts: list[str] = []
    for child in token.children or ():
        if child.type == "code_inline":
            parts.append(child.content)
        elif child.type == "text":
            parts.append(_TEMPLATE.sub("", child.content))
        elif child.type in ("softbreak", "hardbreak"):
            parts.append("\n")
        elif child.type == "html_inline" and _BREAK.match(child.content):
            parts.append(" ")  # a table cell's <br>: two words, not one
        elif child.type == "image":
            parts.append(child.content)
    return "".join(parts).strip()


# -- reStructuredText ----------------------------------------------------------------------


def rst_text(text: str, where: str = "") -> tuple[str, str]:
    """``(first section title, plain text)`` of a reStructuredText text, parsed by docutils
    (see the module docstring); text that docutils cannot parse at all is kept as it is."""
    from docutils import nodes  # only reStructuredText files need it; keeps `dotcat` fast
    from docutils.core import publish_doctree

    _register_unknown(text)
    settings = {"report_level": 5, "halt_level": 5, "warning_stream": False,
                "file_insertion_enabled": False, "raw_enabled": False,
                "_disable_config": True, "input_encoding": "unicode"}  # fmt: skip
    try:
        document = publish_doctree(text, settings_overrides=settings)
    except Exception as e:  # noqa: BLE001 - a parser bug on odd input: the text as it is
        logger.warning("%s: reStructuredText not parsed (%s); read as plain text", where, e)
        return "", text
    dropped = (nodes.comment, nodes.raw, nodes.system_message, nodes.problematic,
               nodes.substitution_definition, nodes.footnote_reference,
               nodes.citation_reference, nodes.label, nodes.docinfo, nodes.decoration)  # fmt: skip
    for node in list(document.findall(lambda n: isinstance(n, dropped) or _is_contents(n))):
        node.parent.remove(node)
    blocks = []
    for node in document.findall(nodes.TextElement):
        if isinstance(node.parent, nodes.TextElement):
            continue  # its text is its parent's
        block = node.astext()
        if not isinstance(node, nodes.literal_block):
            block = _TEMPLATE.sub("", block)
        if block.strip():
            blocks.append(block.strip("\n"))
    title = next(iter(document.findall(nodes.title)), None)
    return (" ".join(title.astext().split()) if title else ""), "\n\n".join(blocks)


def _is_contents(node: Any) -> bool:
    """A table of contents that ``.. contents::`` made: titles repeated, no text."""
    return node.tagname == "topic" and "contents" in node.get("classes", ())


def _register_unknown(text: str) -> None:
    """Register the roles and directives ``text`` uses that docutils does not know (Sphinx's,
    its extensions'), so that they are read as their text (:func:`_role`, :class:`_Directive`)
    rather than reported as errors with their source."""
    from docutils.parsers.rst import directives, roles

    for name in set(_RST_ROLE_NAME.findall(text)) - {"raw"}:
        roles.register_local_role(name, _role)
    for name in set(_RST_DIRECTIVE_NAME.findall(text)):
        if name not in directives._directive_registry:  # noqa: SLF001 - docutils' own names
            directives.register_directive(name, _directive())


def _role(name, rawtext, text, lineno, inliner, options=None, content=None):  # noqa: ARG001
    """A role docutils does not know, as its text: ``Title <target>`` its title, ``~a.b.c``
    its last part (as Sphinx shows them)."""
    from docutils import nodes, utils

    shown = utils.unescape(text)
    if shown.endswith(">") and "<" in shown:
        shown = shown[: shown.rindex("<")].strip() or shown
    if shown.startswith("~"):
        shown = shown[1:].rsplit(".", 1)[-1]
    return [nodes.Text(shown.lstrip("!"))], []


@functools.cache
def _directive() -> type:
    """A directive docutils does not know: its arguments and content as text, code as code,
    diagrams and tables of contents left out; any option accepted."""
    from docutils import nodes
    from docutils.parsers.rst import Directive, directives
    from docutils.statemachine import StringList

    class AnyOption(dict):
        def __missing__(self, key: str):
            return directives.unchanged

    class Unknown(Directive):
        optional_arguments = 1
        final_argument_whitespace = True
        has_content = True
        option_spec = AnyOption(name=directives.unchanged)

        def run(self) -> list:
            name = self.name.rsplit(":", 1)[-1].lower()
            if name in DIAGRAMS or name in SKIPPED_DIRECTIVES:
                return []
            if name in CODE_DIRECTIVES:
                return [nodes.literal_block(text="\n".join(self.content))]
            shown = self.arguments and name not in ("only", "ifconfig")  # not a condition
            lines = StringList(self.arguments[0].splitlines() + [""] if shown else [])
            body = nodes.container()
            self.state.nested_parse(lines + self.content, self.content_offset, body)
            return [body]

    return Unknown
