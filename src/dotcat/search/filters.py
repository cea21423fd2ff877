"""Filters: a small expression language over documents' fields, parsed once, run in SQL.

A filter says which documents a search may return::

    product = "billing" and updated >= 2025-01-01
    tags contains "hr" or path startswith "projects/"
    not (extension in ["pdf", "html"]) and size < 100000

Grammar (keywords in any case; ``not`` binds tighter than ``and``, ``and`` than ``or``)::

    filter     := or
    or         := and ("or" and)*
    and        := not ("and" not)*
    not        := "not" not | "(" filter ")" | comparison
    comparison := FIELD op VALUE | FIELD ["not"] "in" "[" VALUE ("," VALUE)* "]"
                | FIELD "contains" VALUE | FIELD "startswith" VALUE
    op         := "=" | "==" | "!=" | "<" | "<=" | ">" | ">="
    VALUE      := "text" | 'text' | 42 | -1.5 | 2025-01-31 | 2025-01-31T09:30:00Z

A FIELD is a name as the index keeps it (``product``, ``meta.owner``: dotted for nested
fields), or any name between backquotes (```Product line```). What a comparison means follows
the field's kind (:mod:`dotcat.index.fields`):

- a **string** field compares text (``=`` exactly, ``<``... in code-point order); ``contains`` finds
  a piece of text (ignoring case, for ASCII letters), ``startswith`` a beginning;
- a **number** field compares numbers; a **date** field compares dates: a date alone stands
  for its whole day (``updated = 2025-01-31`` is any time that day, ``updated <= 2025-01-31``
  includes it, ``> 2025-01-31`` starts the next day), a date-time for its instant (UTC when it
  names no zone); a date in quotes is read as a date too;
- a **list** field (tags) matches when any item does: ``tags contains "hr"`` and
  ``tags = "hr"`` both admit a document tagged ``hr``, ``startswith`` any item's beginning.

A document without the field fails every comparison on it, so ``not`` (and ``!=``, which is
``not =``) admits it. Each error names the column and the token at fault, in one line: an
unknown field (with the closest names), a value of the wrong kind (``updated >= "soon"``), a
syntax error. A filter is parsed once (:func:`parse_filter`, cached), checked against the
index's fields, and compiled into one SQLite query over the doc store's field table
(:meth:`Filter.sql`), never evaluated by Python's ``eval``; its result, the set of admitted
documents, is what every first stage searches within (:mod:`dotcat.search.stages`).
"""

from __future__ import annotations

import difflib
import functools
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotcat.data.index_source import indexes_in
from dotcat.data.metadata import parse_date
from dotcat.errors import SettingError
from dotcat.index.docstore import DocStore
from dotcat.index.fields import merged_kinds
from dotcat.index.layout import DOCSTORE_NAME, MANIFEST_NAME
from dotcat.options import not_utf8

#: The longest filter accepted (characters).
MAX_FILTER_CHARS = 4_000
#: The most comparisons in one filter (a filter is a few conditions, not a program).
MAX_COMPARISONS = 200
#: The deepest nesting of ``not`` and brackets (SQLite's parser and Python's stack have limits).
MAX_DEPTH = 32
_DAY = 86_400.0
_KEYWORDS = ("and", "or", "not", "in", "contains", "startswith")
_TOKEN = re.compile(
    r"""(?P<space>\s+)
    |(?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    |(?P<date>[0-9]{4}-[0-9]{2}-[0-9]{2}(?:T[0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\.[0-9]+)?)?
              (?:Z|[+-][0-9]{2}:?[0-9]{2})?)?)(?![\w.:-])
    |(?P<number>-?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?)(?![\w.])
    |(?P<quoted>`[^`]+`)
    |(?P<name>[A-Za-z_][\w.-]*)
    |(?P<op>==|!=|<=|>=|=|<|>)
    |(?P<punct>[()\[\],])""",
    re.VERBOSE,
)


class FilterError(SettingError):
    """A filter that cannot run: ``filter, column N at 'token': problem``.

    Attributes:
        column: where the token at fault starts (1-based; past the end for a missing one).
        token: that token's text ('' at the end).
        problem: what is wrong with it.
    """

    def __init__(self, column: int, token: str, problem: str) -> None:
        self.column, self.token, self.problem = column, token, problem
        at = f"at {token!r}" if token else "at the end"
        super().__init__("filter", f"filter, column {column} {at}: {problem}")


@dataclass(frozen=True)
class Token:
    """A piece of a filter: its kind (``string``, ``date``, ``number``, ``name``, ``keyword``,
    ``op``, ``punct``, ``end``), its text, its value, its column (1-based)."""

    kind: str
    text: str
    value: Any
    column: int


@dataclass(frozen=True)
class Comparison:
    """``field op values`` (``in`` holds several values, the others one)."""

    field: Token
    op: str
    values: tuple[Token, ...]


@dataclass(frozen=True)
class Not:
    inner: Any


@dataclass(frozen=True)
class Both:
    """``left and right``."""

    left: Any
    right: Any


@dataclass(frozen=True)
class Either:
    """``left or right``."""

    left: Any
    right: Any


Node = Comparison | Not | Both | Either


def tokenize(text: str) -> list[Token]:
    """The tokens of a filter, then an ``end`` token.

    Raises:
        FilterError: a character no token starts with, an unterminated string.
    """
    tokens: list[Token] = []
    at = 0
    while at < len(text):
        match = _TOKEN.match(text, at)
        if match is None:
            char = text[at]
            if char in "\"'":
                raise FilterError(at + 1, text[at : at + 12], "a string without its closing quote")
            raise FilterError(at + 1, char, f"unexpected character {char!r}")
        kind, piece = match.lastgroup or "", match.group()
        if kind != "space":
            tokens.append(_token(kind, piece, at + 1))
        at = match.end()
    tokens.append(Token("end", "", None, len(text) + 1))
    return tokens


def _token(kind: str, piece: str, column: int) -> Token:
    if kind == "string":
        body = re.sub(r"\\(.)", lambda m: {"n": "\n", "t": "\t"}.get(m[1], m[1]), piece[1:-1])
        return Token("string", piece, body, column)
    if kind == "number":
        exact = re.fullmatch(r"-?\d+", piece)  # an integer as written (past 2^53 too)
        return Token("number", piece, int(piece) if exact else float(piece), column)
    if kind == "date":
        parsed = parse_date(piece)
        if parsed is None:
            raise FilterError(column, piece, "not a date (write one as 2025-01-31)")
        return Token("date", piece, parsed, column)
    if kind == "quoted":
        return Token("name", piece, piece[1:-1], column)
    if kind == "name" and piece.lower() in _KEYWORDS:
        return Token("keyword", piece, piece.lower(), column)
    return Token(kind, piece, piece, column)


class _Parser:
    """Recursive descent over the tokens (see the module docstring's grammar)."""

    def __init__(self, tokens: list[Token]) -> None:
        self.tokens, self.at, self.comparisons, self.depth = tokens, 0, 0, 0

    def peek(self) -> Token:
        return self.tokens[self.at]

    def take(self) -> Token:
        token = self.tokens[self.at]
        self.at += 1
        return token

    def is_word(self, word: str) -> bool:
        token = self.peek()
        return token.kind == "keyword" and token.value == word

    def skip(self, word: str) -> bool:
        """Take the keyword ``word`` if it comes next."""
        if not self.is_word(word):
            return False
        self.at += 1
        return True

    def expect(self, text: str, what: str) -> Token:
        token = self.take()
        if token.text != text:
            raise FilterError(token.column, token.text, f"expected {what}")
        return token

    def parse(self) -> Node:
        node = self.either()
        end = self.peek()
        if end.kind != "end":
            raise FilterError(end.column, end.text, "expected and, or, or the end of the filter")
        return node

    def either(self) -> Node:
        return self.chain("or", Either, self.both)

    def both(self) -> Node:
        return self.chain("and", Both, self.negation)

    def chain(self, word: str, join: type, operand) -> Node:
        """``operand (word operand)*``, joined from the left."""
        node = operand()
        while self.skip(word):
            node = join(node, operand())
        return node

    def negation(self) -> Node:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            token = self.peek()
            raise FilterError(token.column, token.text, f"nested more than {MAX_DEPTH} deep")
        try:
            if self.skip("not"):
                return Not(self.negation())
            if self.peek().text != "(":
                return self.comparison()
            self.take()
            node = self.either()
            self.expect(")", "')' to close the '('")
            return node
        finally:
            self.depth -= 1

    def comparison(self) -> Node:
        field = self.take()
        if field.kind != "name":
            hint = " (a keyword: put a field of that name in backquotes, `in`)"
            problem = "expected a field name" + (hint if field.kind == "keyword" else "")
            raise FilterError(field.column, field.text, problem)
        self.comparisons += 1
        if self.comparisons > MAX_COMPARISONS:
            raise FilterError(field.column, field.text, f"more than {MAX_COMPARISONS} conditions")
        negated = self.skip("not")
        if negated and not self.is_word("in"):
            token = self.peek()
            raise FilterError(token.column, token.text, "expected 'in' after 'not'")
        op = self.take()
        if op.kind == "keyword" and op.value == "in":
            node: Node = Comparison(field, "in", self.values())
            return Not(node) if negated else node
        if op.kind == "keyword" and op.value in ("contains", "startswith"):
            return Comparison(field, op.value, (self.value(),))
        if op.kind != "op":
            raise FilterError(op.column, op.text, "expected a comparison: = != < <= > >= in "
                              "contains startswith")  # fmt: skip
        node = Comparison(field, "=" if op.text == "==" else op.text.replace("!=", "="),
                          (self.value(),))  # fmt: skip
        return Not(node) if op.text == "!=" else node

    def values(self) -> tuple[Token, ...]:
        opening = self.take()
        if opening.text not in ("[", "("):
            raise FilterError(opening.column, opening.text, 'expected a list: ["a", "b"]')
        closing = "]" if opening.text == "[" else ")"
        found = [self.value()]
        while self.peek().text == ",":
            self.take()
            found.append(self.value())
        self.expect(closing, f"',' or '{closing}' in the list")
        return tuple(found)

    def value(self) -> Token:
        token = self.take()
        if token.kind in ("string", "number", "date"):
            return token
        if token.kind == "name":
            problem = f'expected a value; quote text: "{token.text}"'
        else:
            problem = 'expected a value: "text", a number or a date (2025-01-31)'
        raise FilterError(token.column, token.text, problem)


@dataclass(frozen=True)
class Filter:
    """A parsed filter (:func:`parse_filter`): its text and its tree."""

    text: str
    tree: Node

    def check(self, kinds: Mapping[str, Any]) -> None:
        """Refuse a field the index does not have or a value of the wrong kind.

        Args:
            kinds: the index's fields, name -> :class:`dotcat.index.fields.FieldInfo`.

        Raises:
            FilterError: naming the column and the token at fault.
        """
        self.sql(kinds)

    def sql(self, kinds: Mapping[str, Any]) -> tuple[str, list[Any]]:
        """A SQLite query giving the positions of the admitted documents (``SELECT pos``),
        and its parameters; the field table is :mod:`dotcat.index.fields`'s."""
        params: list[Any] = []
        return f"SELECT pos FROM docs WHERE {_compile(self.tree, kinds, params)}", params

    def __str__(self) -> str:
        return self.text


@functools.lru_cache(maxsize=256)
def parse_filter(text: str) -> Filter:
    """Parse a filter (see the module docstring); the same text is parsed once.

    Raises:
        FilterError: a syntax error, naming the column and the token at fault; an empty or
            overlong filter.
    """
    if not text.strip():
        raise FilterError(1, "", "the filter is empty")
    if len(text) > MAX_FILTER_CHARS:
        raise FilterError(MAX_FILTER_CHARS, "", f"longer than {MAX_FILTER_CHARS} characters")
    if (bad := not_utf8(text)) is not None:
        raise FilterError(bad[0], "\ufffd", bad[1])
    return Filter(text, _Parser(tokenize(text)).parse())


def check_filter(index_dir: str | Path, text: str) -> None:
    """Check a filter against an index's fields without loading the index (its doc store, or
    its shards', read): the command line's check before any model loads.

    Raises:
        FilterError: as :meth:`Filter.check`.
    """
    parse_filter(text).check(index_field_kinds(index_dir))


def index_field_kinds(index_dir: str | Path) -> dict[str, Any]:
    """The fields of an index directory, or of a folder of shard indexes (merged)."""
    root = Path(index_dir)
    dirs = [root] if (root / MANIFEST_NAME).is_file() else indexes_in(root)
    kinds = []
    for directory in dirs:
        with DocStore(directory / DOCSTORE_NAME) as store:
            kinds.append(store.field_kinds())
    return merged_kinds(kinds)


# -- compiling to SQL ------------------------------------------------------------------------


def _compile(node: Node, kinds: Mapping[str, Any], params: list[Any]) -> str:
    """One condition on ``docs.pos``; a chain (``a or b or c``) is one flat ``OR`` (``AND``),
    as SQLite's parser overflows on nested subqueries past about a dozen."""
    if isinstance(node, Comparison):
        return f"pos IN ({_comparison(node, kinds, params)})"
    if isinstance(node, Not):
        return f"NOT {_compile(node.inner, kinds, params)}"
    joint = " AND " if isinstance(node, Both) else " OR "
    return "(" + joint.join(_compile(n, kinds, params) for n in _chained(node)) + ")"


def _chained(node: Both | Either) -> list[Node]:
    """The operands of a chain of one join, in order (the parser joins from the left)."""
    head = _chained(node.left) if type(node.left) is type(node) else [node.left]
    return [*head, node.right]


def _comparison(node: Comparison, kinds: Mapping[str, Any], params: list[Any]) -> str:
    name = node.field.value
    info = kinds.get(name)
    if info is None:
        raise FilterError(node.field.column, node.field.text, _unknown(name, kinds))
    kind, values = info.kind, []
    condition = {"number": _number, "date": _date}.get(kind, _text)(node, kind, values)
    params += [name, *values]
    return f"SELECT pos FROM fields WHERE name = ? AND {condition}"


def _unknown(name: str, kinds: Mapping[str, Any]) -> str:
    if not kinds:
        return (
            f"no field {name!r}: this index keeps no fields (built before dotcat kept "
            "them, or its documents have none); rebuild it to filter"
        )
    close = difflib.get_close_matches(name, list(kinds), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(repr(c) for c in close)}? " if close else ""
    shown = ", ".join(list(kinds)[:20]) + (", ..." if len(kinds) > 20 else "")
    return f"no field {name!r} in this index ({hint}its fields: {shown})"


def _text(node: Comparison, kind: str, params: list[Any]) -> str:
    """A string or list field: text comparisons (a list's items one by one)."""
    values = [_as_text(token, node.field.value, kind) for token in node.values]
    ascii_only = all(v.isascii() for v in values)  # else compared composed: DocStore's nfc()
    column = "value" if ascii_only else "nfc(value)"
    if node.op == "in":
        params += values
        return f"{column} IN ({','.join('?' * len(values))})"
    value = values[0]
    if node.op == "contains" and kind == "list":
        params.append(value)
        return f"{column} = ?"
    if node.op == "contains":  # (LIKE ignores the case of ASCII letters only: else fold())
        piece = value if ascii_only else value.casefold()
        params.append("%" + re.sub(r"([%_\\])", r"\\\1", piece) + "%")
        return f"{'value' if ascii_only else 'fold(value)'} LIKE ? ESCAPE '\\'"
    if node.op == "startswith":
        params += [value, value + "\U0010ffff"]
        return f"{column} >= ? AND {column} < ?"
    params.append(value)
    return f"{column} {node.op} ?"


def _as_text(token: Token, field: str, kind: str) -> str:
    if token.kind == "string":  # composed, as the stored values (NFC "é" for NFD "e" + U+0301)
        return unicodedata.normalize("NFC", token.value)
    what = "text" if kind == "string" else "a list of text"
    problem = f'field {field!r} holds {what}; quote the value: "{token.text}"'
    raise FilterError(token.column, token.text, problem)


def _refuse_text_ops(node: Comparison, holds: str) -> None:
    if node.op in ("contains", "startswith"):
        token = node.values[0]
        problem = f"{node.op} compares text; field {node.field.value!r} holds {holds}"
        raise FilterError(token.column, token.text, problem)


def _number(node: Comparison, kind: str, params: list[Any]) -> str:
    """A number field; ``=`` and ``in`` compare an integer past 2^53, which a double cannot
    hold (ids, nanosecond times), by its stored text, which is exact."""
    _refuse_text_ops(node, "numbers")
    for token in node.values:
        if token.kind != "number":
            problem = f"field {node.field.value!r} holds numbers; {token.text} is not one"
            raise FilterError(token.column, token.text, problem)
    if node.op not in ("=", "in"):
        params.append(float(node.values[0].value))
        return f"num {node.op} ?"
    big = [str(v) for t in node.values if isinstance(v := t.value, int) and abs(v) >= 2**53]
    rest = [float(t.value) for t in node.values if str(t.value) not in big]
    params += big + rest
    sides = [f"{c} IN ({','.join('?' * len(v))})" for c, v in (("value", big), ("num", rest)) if v]
    return f"({' OR '.join(sides)})"


def _date(node: Comparison, kind: str, params: list[Any]) -> str:
    """A date field: a date stands for its whole day, a date-time for its instant."""
    _refuse_text_ops(node, "dates")
    spans = [_day_span(token, node.field.value) for token in node.values]
    if node.op == "in":
        params += [bound for span in spans for bound in span]
        return "(" + " OR ".join(["(num >= ? AND num < ?)"] * len(spans)) + ")"
    start, stop = spans[0]
    whole = stop > start
    if node.op == "=":
        params += [start, stop] if whole else [start]
        return "num >= ? AND num < ?" if whole else "num = ?"
    bound, op = {
        "<": (start, "<"),
        "<=": (stop, "<") if whole else (start, "<="),
        ">": (stop, ">=") if whole else (start, ">"),
        ">=": (start, ">="),
    }[node.op]
    params.append(bound)
    return f"num {op} ?"


def _day_span(token: Token, field: str) -> tuple[float, float]:
    """``[start, stop)`` in seconds: a day's, or an instant's (start == stop)."""
    parsed = token.value if token.kind == "date" else None
    if token.kind == "string":
        parsed = parse_date(token.value)
    if parsed is None:
        problem = (f"field {field!r} holds dates; {token.text} is not one (write a date as "
                   "2025-01-31, or 2025-01-31T09:30:00Z)")  # fmt: skip
        raise FilterError(token.column, token.text, problem)
    seconds, whole_day = parsed
    return (seconds, seconds + _DAY) if whole_day else (seconds, seconds)
