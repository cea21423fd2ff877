"""Per-file reading rules: each record file of a folder with its own field names, encoding.

A folder whose record files name their fields differently (``tickets.csv`` with ``ticket``,
``subject``, ``body``; ``faq.jsonl`` with ``key``, ``question``, ``answer``) is indexed in one
command by giving each file (or each glob of files) its own names:

- a ``dotcat.toml`` file in the folder, read when the folder is::

      [files."faq.jsonl"]
      id = "key"
      title = "question"
      text = "answer"

      [files."legacy/*.txt"]
      encoding = "latin-1"

- ``--fields 'faq.jsonl:id=key,title=question,text=answer'`` on the command line (repeat it
  for several files; ``encoding=...`` too).

A rule's keys are ``id``, ``title``, ``text`` (the record fields to read) and ``encoding``
(the file's encoding, used whatever the file holds; :mod:`dotcat.data.encodings`). Patterns
are matched as ``--include`` matches them (:func:`pattern_matches`: a pattern without ``/``
matches a file's name, one with ``/`` its path in the folder). A file takes the first rule
that matches it, the command line's before the folder's; a key a rule leaves out comes from
``--id-field``, ``--title-field``, ``--text-field`` and ``--encoding`` (or their defaults).
Ids keep their ``PATH#ID`` shape whatever names a file's ids come from.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from fnmatch import fnmatchcase
from pathlib import Path
from typing import Any

from dotcat.data.encodings import check_encoding
from dotcat.errors import DataFormatError, SettingError

#: The file a folder's rules are read from.
RULES_FILE = "dotcat.toml"
#: What a rule may say.
RULE_KEYS = ("id", "title", "text", "encoding")


@dataclass(frozen=True)
class FileRule:
    """How to read the files a pattern matches (None: the command's default).

    Attributes:
        pattern: a glob (see :func:`pattern_matches`).
        id, title, text: the record fields to read.
        encoding: the files' encoding.
        origin: where the rule was given (``--fields``, or a ``dotcat.toml`` path).
    """

    pattern: str
    id: str | None = None
    title: str | None = None
    text: str | None = None
    encoding: str | None = None
    origin: str = "--fields"

    def to_json(self) -> dict[str, Any]:
        """What the rule says (for cache keys and plans)."""
        keys = ("pattern", *RULE_KEYS)
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


def pattern_matches(rel: str, name: str, pattern: str) -> bool:
    """Whether a file (its path in the folder, its name) matches a shell pattern: one without
    ``/`` matches the name, one with ``/`` the path, where ``*`` crosses folders; ``**/``
    matches any depth, none included (``**/x``, ``notes/**/*.md``); a leading ``/`` anchors a
    name at the top folder (gitignore's ``/drafts``)."""
    anchored, pattern = pattern.startswith("/"), pattern.removeprefix("./").removeprefix("/")
    if "/" not in pattern and not anchored:
        return fnmatchcase(name, pattern)
    flat = {pattern, pattern.replace("/**/", "/"), pattern.removeprefix("**/")}
    return any(fnmatchcase(rel, p) for p in flat)


def parse_fields_option(spec: str) -> FileRule:
    """A ``--fields GLOB:key=value,...`` rule.

    Raises:
        SettingError: no glob, no ``key=value``, an unknown key, an empty value or an unknown
            encoding, naming the option and the spec.
    """
    where = f"--fields {spec!r}"
    equals = spec.find("=")
    colon = spec.rfind(":", 0, equals) if equals > 0 else -1
    if colon <= 0 or not spec[:colon].strip():
        raise SettingError(
            "fields", f"{where}: expected GLOB:key=value,... (e.g. faq.jsonl:id=key,text=answer)"
        )
    values: dict[str, str] = {}
    for part in spec[colon + 1 :].split(","):
        key, sep, value = part.partition("=")
        key, value = key.strip(), value.strip()
        if not sep or not value:
            raise SettingError("fields", f"{where}: {part.strip()!r} is not key=value")
        values[key] = value
    return _rule(spec[:colon].strip(), values, where, "--fields")


def _rule(pattern: str, values: Mapping[str, Any], where: str, origin: str) -> FileRule:
    unknown = sorted(set(values) - set(RULE_KEYS))
    if unknown:
        raise SettingError(
            "fields", f"{where}: unknown key {unknown[0]!r} (a rule sets {', '.join(RULE_KEYS)})"
        )
    for key, value in values.items():
        if not isinstance(value, str) or not value.strip():
            raise SettingError("fields", f"{where}: {key} must be a non-empty string")
    if "encoding" in values:
        check_encoding(values["encoding"], f"{where}: encoding")
    return FileRule(pattern, **{k: values[k] for k in RULE_KEYS if k in values}, origin=origin)


def read_rules_file(folder: Path) -> list[FileRule]:
    """The rules of a folder's ``dotcat.toml`` (none without one).

    Raises:
        DataFormatError: a file that is not TOML, or holds anything but ``[files."GLOB"]``
            tables of known keys, naming the file and what is wrong.
    """
    path = Path(folder) / RULES_FILE
    if not os.path.isfile(path):  # (False, never an error, where it cannot be looked at)
        return []
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError, OSError) as e:
        raise DataFormatError(path, None, f"not a readable TOML file: {e}") from None
    unknown = sorted(set(data) - {"files"})
    if unknown:
        known = 'it holds [files."GLOB"] tables'
        raise DataFormatError(path, None, f"unknown table {unknown[0]!r} ({known})")
    files = data.get("files", {})
    if not isinstance(files, dict):
        raise DataFormatError(path, None, 'files must be tables: [files."GLOB"]')
    rules = []
    for pattern, values in files.items():
        if not isinstance(values, dict):
            raise DataFormatError(path, None, f'[files."{pattern}"] must be a table of keys')
        try:
            rules.append(_rule(pattern, values, f'[files."{pattern}"]', str(path)))
        except SettingError as e:
            raise DataFormatError(path, None, str(e)) from None
    return rules


@dataclass(frozen=True)
class Rules:
    """The rules of one read, in order: the command line's, then the folder's."""

    rules: tuple[FileRule, ...] = ()

    @classmethod
    def of(cls, given: Iterable[str], folder: Path | None = None) -> Rules:
        """``--fields`` specs and, for a folder, its ``dotcat.toml``."""
        rules = [parse_fields_option(spec) for spec in given]
        if folder is not None:
            rules += read_rules_file(folder)
        return cls(tuple(rules))

    def for_file(self, rel: str) -> FileRule | None:
        """The first rule matching a file (its path in the folder), or None."""
        name = rel.rsplit("/", 1)[-1]
        return next((r for r in self.rules if pattern_matches(rel, name, r.pattern)), None)

    def to_json(self) -> list[dict[str, Any]]:
        return [r.to_json() for r in self.rules]
