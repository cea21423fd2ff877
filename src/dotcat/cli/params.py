"""Command-line options made from the library's settings, and the values they turn into.

:func:`option` makes a typer option from a settings field (its default, help text and
choices: :func:`dotcat.options.setting`), so the command line states none of them again, and
a command's parameter carries the field's name: :func:`settings` builds the config from the
parameters so named, and a :class:`~dotcat.errors.SettingError` on a field names its option.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

import typer

from dotcat.errors import SettingError
from dotcat.options import choices_of, default_of, help_of

#: What an option's default stands for when the field's None means "decide": shown as
#: ``auto`` on the command line (``--teacher-alpha auto``).
AUTO = "auto"


def option(
    owner: type,
    name: str,
    *flags: str,
    default: Any = dataclasses.MISSING,
    part: int | None = None,
    help: str | None = None,
    **kwargs: Any,
) -> Any:
    """A typer option for the settings field ``owner.name``.

    Args:
        flags: the option's names, when not ``--field-name``.
        default: the command line's spelling of the default, when it differs (``auto`` for
            the field's None); else the field's default.
        part: the option sets one element of a pair (``window`` -> ``--window-start``).
        help: the command line's wording, when it differs from the field's.
    """
    choices = choices_of(owner, name)
    if default is dataclasses.MISSING:
        default = default_of(owner, name)
        if part is not None:
            default = default[part]
        elif isinstance(default, tuple):
            default = list(default)  # a repeated option's values
    if choices and "metavar" not in kwargs:
        kwargs["metavar"] = "[" + "|".join(choices) + "]"
    info = typer.Option(default, *flags, help=help or help_of(owner, name), **kwargs)
    info.setting = (owner, name)  # read by tests/test_cli_options.py
    return info


def settings(cls: type, values: Mapping[str, Any], **overrides: Any) -> Any:
    """A ``cls`` config from a command's parameters named like its fields (``locals()``),
    ``overrides`` winning; other parameters are not the config's."""
    names = {f.name for f in dataclasses.fields(cls)}
    given = {k: v for k, v in values.items() if k in names}
    return cls(**{**given, **overrides})


def auto_number(name: str, value: str, kind: type = float) -> Any:
    """``auto`` -> None, else ``value`` as a number (its range is the config's to check)."""
    if value == AUTO:
        return None
    try:
        return kind(value)
    except ValueError:
        noun = "a whole number" if kind is int else "a number"
        raise SettingError(name, f"{name}: expected 'auto' or {noun}, got {value!r}") from None
