"""Command-line options generated from the library's settings dataclasses.

A command declares which settings it takes, and :func:`with_settings` adds one option per
field of that settings class to the command's signature (as transformers' HfArgumentParser
makes an argument parser from dataclass fields): its default, help text and choices are the
field's (:func:`dotcat.options.setting`), and so are its flags, its command-line type and the
parsing of what the shell gives, where the field's metadata says so. The command receives the
settings object built from the options, checked, so a new setting needs no edit here or in the
command::

    @app.command()
    @with_settings(PipelineConfig, "config")
    def search(index_dir: str, config: PipelineConfig) -> None: ...

A field whose type is itself a settings class (:attr:`IndexConfig.passages`) gives its own
fields as options, and is built from them. Two settings classes of one command share an option
of the same name (``--device`` sets the encoder's and the index's). A setting given on the
command line where it does not apply (:meth:`~dotcat.options.Settings.applies`) is refused in
one line naming the option, and a :class:`~dotcat.errors.SettingError` names the command's
option rather than the field (:func:`dotcat.cli.main.as_option`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import typer

from dotcat.errors import DotcatError
from dotcat.options import Settings, choices_of, default_of, is_settings, is_union

#: What an option's default stands for when the field's None means "decide": shown as
#: ``auto`` on the command line (``--teacher-alpha auto``).
AUTO = "auto"
try:  # typer 0.2x runs commands on its own copy of click: the context is that copy's
    from typer._click.core import ParameterSource
    from typer._click.globals import get_current_context
except ImportError:  # typer on click itself
    from click.core import ParameterSource
    from click.globals import get_current_context

#: How a value reached a command: given by the user (not the option's default).
_GIVEN = (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT)
#: A command's INDEX_DIR argument (typer copies it for each command).
INDEX_DIR = typer.Argument(..., help="An index directory from `dotcat index`.", metavar="INDEX_DIR")


def option(
    owner: type, name: str, *flags: str, default: Any = dataclasses.MISSING, help: str | None = None
) -> Any:
    """A typer option for the settings field ``owner.name``: its flags, default, help, choices
    (as the metavar) and environment variable are the field's."""
    meta = {f.name: f for f in dataclasses.fields(owner)}[name].metadata
    choices = choices_of(owner, name)
    if default is dataclasses.MISSING:
        default = meta.get("cli_default", default_of(owner, name))
        default = list(default) if isinstance(default, tuple) else default
    metavar = meta.get("metavar") or ("[" + "|".join(map(str, choices)) + "]" if choices else None)
    info = typer.Option(default, *(flags or meta.get("flags", ())), help=help or meta["help"],
                        metavar=metavar, envvar=meta.get("envvar"))  # fmt: skip
    info.setting = (owner, name)  # read by tests/test_cli_options.py
    return info


def with_settings(
    cls: type,
    into: str,
    *,
    positional: tuple[str, ...] = (),
    exclude: tuple[str, ...] = (),
    required: tuple[str, ...] = (),
    words: Mapping[str, str] | None = None,
) -> Callable[[Callable], Callable]:
    """Add ``cls``'s fields to a command as options and hand it the built settings.

    Args:
        cls: a settings dataclass (:class:`dotcat.options.Settings`).
        into: the command's parameter that receives the ``cls`` object.
        positional: fields that are positional arguments of this command besides those the
            class declares so (``argument=True``), in order.
        exclude: fields the command does not offer (it sets them itself, or they do not
            apply to it).
        required: fields the command requires although the class has a default.
        words: the command line's own help text for some fields.
    """

    def decorate(command: Callable) -> Callable:
        fields = _cli_fields(cls, exclude)
        names = [f.name for _, f in fields]
        taken = set(inspect.signature(command).parameters) - {into}
        new = [(owner, f) for owner, f in fields if f.name not in taken]

        @functools.wraps(command)
        def wrapper(**values: Any) -> Any:
            chosen = {n: values[n] for n in names if n in values}
            for _, f in new:  # the options only these settings take
                values.pop(f.name, None)
            config = build(cls, chosen, exclude)
            config.validate()
            check_applies(config, given(names, fields))
            return command(**values, **{into: config})

        params = _signature(command, into, new, positional, required, words or {})
        wrapper.__signature__ = inspect.signature(command).replace(parameters=params)
        wrapper.__annotations__ = {p.name: p.annotation for p in params}
        return wrapper

    return decorate


def _signature(
    command: Callable,
    into: str,
    new: list[tuple[type, dataclasses.Field]],
    positional: tuple[str, ...],
    required: tuple[str, ...],
    words: Mapping[str, str],
) -> list[inspect.Parameter]:
    """A command's parameters with the settings' added: the command's own positional
    arguments, then the settings' (declared ``argument=True``, then ``positional``), then the
    command's own options, then the settings' options."""
    hints = typing.get_type_hints(command)
    keyword = inspect.Parameter.KEYWORD_ONLY
    own = [p.replace(kind=keyword, annotation=hints.get(p.name, p.annotation))
           for p in inspect.signature(command).parameters.values() if p.name != into]  # fmt: skip
    declared = tuple(f.name for _, f in new if f.metadata.get("argument"))
    arguments = declared + tuple(a for a in positional if a not in declared)
    params = {
        f.name: _parameter(owner, f, f.name in arguments, f.name in required, words.get(f.name))
        for owner, f in new
    }
    own_args = [p for p in own if isinstance(p.default, typer.models.ArgumentInfo)]
    return [
        *own_args,
        *(params[a] for a in arguments if a in params),
        *(p for p in own if p not in own_args),
        *(p for name, p in params.items() if name not in arguments),
    ]


def build(cls: type, values: Mapping[str, Any], exclude: tuple[str, ...] = ()) -> Any:
    """A ``cls`` object from option values (parsed as each field's metadata says), nested
    settings built from their own fields."""
    kwargs: dict[str, Any] = {}
    for f, hint in _offered(cls, exclude):
        if is_settings(hint):
            kwargs[f.name] = build(hint, values)
        elif "parts" in f.metadata:
            kwargs[f.name] = tuple(values[_part_name(flag)] for flag in f.metadata["parts"])
        elif f.name in values:
            kwargs[f.name] = _parsed(f, values[f.name])
    return cls(**kwargs)


def given(names: list[str], fields: list[tuple[type, dataclasses.Field]] = ()) -> set[str]:
    """Which of ``names`` the user gave this command (not left at their defaults); a pair's
    half given counts as its field given."""
    context = get_current_context(silent=True)
    if context is None:
        return set()
    out = {n for n in names if context.get_parameter_source(n) in _GIVEN}
    halves = {f.name: f.metadata["half_of"][0] for _, f in fields if "half_of" in f.metadata}
    return out | {halves[n] for n in out if n in halves}


def current_context() -> Any:
    """The running command's context (typer's own click's where typer ships one)."""
    return get_current_context(silent=True)


def given_settings(cls: type) -> set[str]:
    """The fields of ``cls`` given on the command line of the command running now."""
    return given([f.name for f in dataclasses.fields(cls)])


def refuse_with(what: str, names: set[str], why: str) -> None:
    """Refuse options given where they do not apply: ``--fusion does not apply with --server:
    WHY``."""
    if names:
        flags = ", ".join(sorted(_flag(n) for n in names))
        verb = "does" if len(names) == 1 else "do"
        raise DotcatError(f"{flags} {verb} not apply with {what}: {why}")


def _flag(name: str) -> str:
    """The current command's flag for its parameter ``name`` (``--fusion``)."""
    context = get_current_context(silent=True)
    for param in context.command.params if context else ():
        if param.name == name:
            return next((o for o in param.opts if o.startswith("--")), param.opts[0])
    return "--" + name.replace("_", "-")


def check_applies(config: Any, names: set[str]) -> None:
    """Refuse a setting given where it does not apply (nested settings included)."""
    if isinstance(config, Settings):
        config.check_applies(names)
        for f in dataclasses.fields(config):
            value = getattr(config, f.name)
            if isinstance(value, Settings):
                check_applies(value, names)


# -- the options of one field -------------------------------------------------------------


def _cli_fields(cls: type, exclude: tuple[str, ...]) -> list[tuple[type, dataclasses.Field]]:
    """``(owner, field)`` of every option ``cls`` offers: its own fields and those of its
    nested settings (a pair's two halves are two options)."""
    out = []
    for f, hint in _offered(cls, exclude):
        if is_settings(hint):
            out.extend(_cli_fields(hint, exclude))
        elif "parts" in f.metadata:
            out.extend((cls, _half(f, i)) for i in range(len(f.metadata["parts"])))
        else:
            out.append((cls, f))
    return out


def _half(f: dataclasses.Field, i: int) -> dataclasses.Field:
    """One half of a pair field (``window`` -> ``--window-start``) as a field of its own."""
    flag = f.metadata["parts"][i]
    words = f.metadata["part_help"][i] if "part_help" in f.metadata else f.metadata["help"]
    meta = {"help": words, "flags": (flag,), "half_of": (f.name, i), "cli_type": int}
    half = dataclasses.field(default=f.default[i], metadata=meta)
    half.name = _part_name(flag)
    return half


def _part_name(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _parameter(
    owner: type, f: dataclasses.Field, argument: bool, required: bool, words: str | None
) -> inspect.Parameter:
    """The typer parameter of a field: an option (or a positional argument)."""
    meta = f.metadata
    kind = meta.get("cli_type") or _cli_type(owner, f)
    help_text = words or meta["help"]
    missing = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
    if argument:
        info = typer.Argument(... if missing or required else f.default, help=help_text,
                              metavar=meta.get("metavar", f.name.upper()))  # fmt: skip
    elif "half_of" in meta:
        info = typer.Option(f.default, *meta["flags"], help=help_text)
        info.setting = (owner, meta["half_of"][0])
    else:
        info = option(owner, f.name, default=... if required else dataclasses.MISSING,
                      help=help_text)  # fmt: skip
    return inspect.Parameter(f.name, inspect.Parameter.KEYWORD_ONLY, default=info, annotation=kind)


def _cli_type(owner: type, f: dataclasses.Field) -> Any:
    """The type typer parses a field's option as: the field's type, a tuple of any length
    as a repeated option, a union of paths and strings as a path."""
    hint = _hints(owner)[f.name]
    args = typing.get_args(hint)
    optional = type(None) in args
    base = [a for a in args if a is not type(None)] if is_union(hint) else [hint]
    if len(base) > 1:
        if not set(base) <= {str, Path}:
            raise TypeError(f"{owner.__name__}.{f.name}: give its command-line type (cli_type)")
        base = [Path if Path in base else str]
    kind = base[0]
    if typing.get_origin(kind) is tuple:
        kind = list[typing.get_args(kind)[0]]
    return kind | None if optional else kind


def _parsed(f: dataclasses.Field, value: Any) -> Any:
    """A command-line value as the setting takes it."""
    if isinstance(value, list):
        value = tuple(value)
    parse = f.metadata.get("parse")
    return parse(f.name, value) if parse is not None else value


@functools.cache
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _offered(cls: type, exclude: tuple[str, ...]) -> list[tuple[dataclasses.Field, Any]]:
    """The fields of ``cls`` a command may offer (not excluded, not ``cli=False``), typed."""
    return [(f, _hints(cls)[f.name]) for f in dataclasses.fields(cls)
            if f.name not in exclude and f.metadata.get("cli", True)]  # fmt: skip
