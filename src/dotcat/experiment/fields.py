"""Experiment-file fields derived from the settings dataclasses (one source for every setting).

A system of an experiment file takes the settings of the query pipeline
(:class:`~dotcat.search.config.PipelineConfig`) and of the index its ``model`` builds, under
the settings' own names (a few renamed to say which part they set: ``passage_window``).
:func:`pydantic_fields` turns those dataclass fields into pydantic fields: the field's type
(strict: TOML has real types), its default, its help text as the description; choices become
a ``Literal`` where the list is closed. Ranges and the rules between settings are not
repeated here: the settings objects are built from a system and check themselves
(:meth:`~dotcat.options.Settings.validate`), so a new pipeline setting reaches experiment
files with no edit to this package.
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from dotcat.options import choices_of, default_of, is_union

#: How an error message says what a type expects.
_EXPECTS = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}


def pydantic_fields(
    cls: type, names: Iterable[str], rename: Mapping[str, str] | None = None
) -> dict[str, tuple[Any, Any]]:
    """``{name: (annotation, FieldInfo)}`` for ``create_model``: the fields ``names`` of the
    settings dataclass ``cls``, under ``rename``'s names where given."""
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls)}
    out = {}
    for name in names:
        annotation, expects = _annotation(cls, name, hints[name])
        info = Field(
            default_of(cls, name),
            description=fields[name].metadata["help"],
            json_schema_extra={"expects": expects, "setting": f"{cls.__name__}.{name}"},
        )
        out[(rename or {}).get(name, name)] = (annotation, info)
    return out


def expects(info: Any) -> str | None:
    """What a derived field expects, in words (``an integer``), for error messages."""
    extra = getattr(info, "json_schema_extra", None) or {}
    return extra.get("expects") if isinstance(extra, dict) else None


def _annotation(cls: type, name: str, hint: Any) -> tuple[Any, str]:
    """The strict pydantic type of a setting, and what it expects in words."""
    choices = choices_of(cls, name)
    static = choices is not None and not callable(
        {f.name: f for f in dataclasses.fields(cls)}[name].metadata.get("choices")
    )
    args = typing.get_args(hint) if is_union(hint) else (hint,)
    optional = type(None) in args
    base = tuple(a for a in args if a is not type(None))
    if static:
        kind: Any = Literal.__getitem__(tuple(choices))
        words = "one of " + ", ".join(repr(c) for c in choices)
    elif choices is not None:  # a list others extend (the first stages): the setting checks it
        kind, words = str, "one of " + ", ".join(repr(c) for c in choices)
    else:
        kind = base[0] if len(base) == 1 else typing.Union[base]  # noqa: UP007 - built at run time
        kind = str if kind is Path else kind
        words = " or ".join(_EXPECTS.get(b, b.__name__ if isinstance(b, type) else str(b))
                            for b in base)  # fmt: skip
    return (kind | None if optional else kind), words
