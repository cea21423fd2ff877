"""The ``dotcat`` application: its command group, global options and logging.

A :class:`~dotcat.errors.DotcatError` becomes one line on stderr and exit status 2; a
:class:`~dotcat.errors.SettingError` names the command's option (``--max-length``) rather than
the library's field (``max_length``). ``-q``/``-v`` are accepted anywhere on the line.
"""

from __future__ import annotations

import logging
import re
import signal
import sys
import threading

import click
import typer
from typer.core import TyperGroup

from dotcat.cli.params import current_context
from dotcat.errors import DotcatError, SettingError
from dotcat.files import no_room
from dotcat.progress import QUIET_AT_START, set_progress_anywhere, set_quiet
from dotcat.version import __version__

#: The global flags, accepted before or after the command.
GLOBAL_FLAGS = ("-q", "--quiet", "-v", "--verbose", "--progress")


try:  # typer's own exception base, where typer ships its own click (newer releases)
    from typer.exceptions import TyperException
except ImportError:  # older releases raise click's, listed below
    TyperException = click.ClickException

#: How the command-line framework ends a command (typer's own click, or click's): never an
#: error of the disk, whatever error they were raised while handling.
_FRAMEWORK = (
    typer.Exit,
    typer.Abort,
    TyperException,
    click.exceptions.Exit,
    click.exceptions.Abort,
    click.ClickException,
)


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``kill``, a scheduler), raised like Ctrl-C so cleanup runs."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated


class Group(TyperGroup):
    """Turns a DotcatError (bad input, refused index...) into one line and exit status 2; so
    too a write that found no room, should a writer not have said so itself.

    Ctrl-C and SIGTERM stop the work the same orderly way (a build's folder removed, its
    lock released): "dotcat: interrupted", exit status 130 (Ctrl-C) or 143 (SIGTERM).
    """

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if ctx.parent is None:  # the top group: global flags given after the command too
            args = hoist_global_flags(args)
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return super().invoke(ctx)
        except DotcatError as e:
            command = self.get_command(ctx, ctx.invoked_subcommand or "")
            click.echo(f"dotcat: error: {as_option(e, command)}", err=True)
            ctx.exit(2)
        except _Terminated:
            click.echo("dotcat: interrupted (SIGTERM)", err=True)
            ctx.exit(143)
        except KeyboardInterrupt:
            click.echo("dotcat: interrupted", err=True)
            ctx.exit(130)
        except _FRAMEWORK as e:
            _hint_quotes(e)  # (typer may ship its own click: its UsageError is not click's)
            raise  # (an Exit raised while a sub-command's error was shown has it as context)
        except Exception as e:
            full = no_room(e)
            if full is None:
                raise
            click.echo(f"dotcat: error: {full}", err=True)
            ctx.exit(2)


#: Commands whose last argument is free text: extra arguments are its words, unquoted.
_TEXT_ARGUMENT = {"search": 'dotcat search INDEX "how do I reset my password"'}


def _hint_quotes(error: BaseException) -> None:
    """To click's "Got unexpected extra argument(s)" of a command that takes a query, add
    that a query of several words goes in quotes (the shell split it into arguments)."""
    message, ctx = getattr(error, "message", None), getattr(error, "ctx", None)
    command = ctx.command.name if ctx is not None else None
    example = _TEXT_ARGUMENT.get(command or "")
    if example and isinstance(message, str) and "unexpected extra argument" in message:
        error.message = f"{message}; a query of several words goes in quotes: {example}"


def hoist_global_flags(args: list[str]) -> list[str]:
    """``args`` with the global flags moved before the command (up to a ``--``)."""
    end = args.index("--") if "--" in args else len(args)
    flags = [a for a in args[:end] if a in GLOBAL_FLAGS]
    rest = [a for a in args[:end] if a not in GLOBAL_FLAGS]
    return flags + rest + args[end:]


def as_option(error: DotcatError, command) -> str:
    """The error's text, the settings it names (:attr:`DotcatError.settings`; a
    :class:`SettingError`'s field, and any option of the command it spells as a field, such
    as ``rocchio_beta``) renamed to the command's options that set them (``max_length`` ->
    ``--max-length``, ``overwrite=True`` -> ``--overwrite``, ``k`` -> ``-k``)."""
    text = str(error)
    if command is None:
        return text
    names = set(error.settings)
    if isinstance(error, SettingError):
        names |= {p.name for p in command.params if p.name and "_" in p.name and p.name in text}
    return spell_options(text, names, command)


def spell_options(text: str, names, command) -> str:
    """``text`` with each setting of ``names`` that ``command`` has as an option written as
    that option: ``name=True`` as the flag, ``name=False`` as its ``--no-`` form, ``name=V``
    as ``--flag V``, a bare ``name`` as the flag (not after ``:`` or a quote: a rule's key or
    a field's name)."""
    for param in command.params:
        if param.param_type_name != "option" or param.name not in names:
            continue
        flag = next((o for o in param.opts if o.startswith("--")), param.opts[0])
        off = next(iter(param.secondary_opts), flag)
        name = rf"(?<![\w.:'-]){re.escape(param.name)}"
        text = re.sub(rf"{name}=True(?![\w-])", flag, text)
        text = re.sub(rf"{name}=False(?![\w-])", off, text)
        text = re.sub(rf"{name}=(?=\S)", f"{flag} ", text)
        text = re.sub(rf"{name}(?![\w-])", flag, text)
    return text


#: The ``dotcat`` application (its commands: :mod:`dotcat.cli.commands`).
app = typer.Typer(
    cls=Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,  # help text as written: no markup eats "[ray]", no <bool> columns
    help="dotcat: index a corpus with BERT_DOT + FAISS, search it, re-rank, evaluate.",
)


def sub_app(name: str, help: str) -> typer.Typer:
    """``dotcat NAME``: a group of commands."""
    group = typer.Typer(cls=Group, no_args_is_help=True, rich_markup_mode=None, help=help)
    app.add_typer(group, name=name)
    return group


#: ``dotcat train``: its recipes' commands.
train_app = sub_app("train", "Train BERT_DOT or BERT_CAT.")


class _StderrHandler(logging.Handler):
    """Log lines to whatever ``sys.stderr`` is at the time (test runners swap it); the
    settings a line names (``extra={"settings": (...)}``) spelled as the running command's
    options (:func:`spell_options`)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
            ctx = current_context()
            if getattr(record, "settings", None) and ctx is not None:
                line = spell_options(line, set(record.settings), ctx.command)
            sys.stderr.write(line + "\n")
        except Exception:  # noqa: BLE001 - logging must never take the command down
            self.handleError(record)


#: Loggers whose INFO lines are noise at -v: FAISS's loader reports each of its builds it
#: probes ("Could not load library with AVX512 support due to: ModuleNotFoundError...").
QUIET_LOGGERS = ("faiss.loader",)


def configure_logging(verbose: bool) -> None:
    """One stderr handler on the root logger, at WARNING (INFO with -v).

    The level is set on the handler too: a library that forces its own logger to DEBUG
    still cannot print below the level the user asked for.
    """
    level = logging.INFO if verbose else logging.WARNING
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    handler.setLevel(level)
    root.setLevel(level)
    for name in QUIET_LOGGERS:
        logging.getLogger(name).setLevel(logging.WARNING)


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"dotcat {__version__}")
        raise typer.Exit()


@app.callback()
def _setup(
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Log progress details."),
    quiet: bool = typer.Option(False, "--quiet", "-q", help="No progress bars."),
    progress: bool = typer.Option(
        False, "--progress", help="Progress bars also when stderr is not a terminal (a log)."
    ),
    version: bool = typer.Option(
        False, "--version", callback=_print_version, is_eager=True, help="Print the version."
    ),
) -> None:
    configure_logging(verbose)
    set_quiet(quiet or QUIET_AT_START)
    if progress:
        set_progress_anywhere()
