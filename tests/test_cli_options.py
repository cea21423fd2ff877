"""One source of truth: every option the command line offers is the library's setting.

Each option is either generated from a settings field (:func:`dotcat.cli.params.with_settings`:
its default, help and choices are the field's) or one of the few that only the command line
has (where to write, what to print), listed below with the reason. The command line holds no
choice list and no check of its own, and ``-k``/``--depth`` mean one thing everywhere.
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
from pathlib import Path

import pytest
import typer

from dotcat import options
from dotcat.cli import app
from dotcat.cli.judge import judge_app
from dotcat.cli.main import train_app
from dotcat.cli.params import AUTO

CLI_DIR = Path(__file__).resolve().parents[1] / "src" / "dotcat" / "cli"

#: Options that are no library setting: where a command reads or writes, how it prints.
CLI_ONLY = {
    "index": {"overwrite", "fresh"},
    "add": {"upsert"},
    "delete": {"ids", "missing_ok"},
    "merge": {"overwrite"},
    "search": {
        "k",
        "as_json",
        "full_text",
        "queries",
        "split",
        "output",
        "tag",
        "server",
    },  # fmt: skip
    "rerank": {"output", "queries", "split", "tag"},
    "bm25": {"queries", "output", "split", "k", "tag"},
    "eval": {"split", "measure", "per_query", "as_json", "baseline", "queries", "corpus"},
    "experiment": {"output", "only"},
    "calibrate": {"as_json"},
    "serve": {"access_log"},
    "judge status": {"as_json"},
}
#: Where the command line's default differs from the library's on purpose: nowhere (Python
#: and the command line share one set of defaults; tests/test_api.py checks Python's side).
DIFFERENT_DEFAULTS: set[tuple[str, str]] = set()


#: Options worded for the command line (a pair's half).
OWN_WORDS = {
    *((c, n) for c in ("train dot", "train distill") for n in ("window_start", "window_end")),
    ("calibrate", "rerank"),
    ("judge import", "assessor"),
}


def _commands() -> list[tuple[str, object]]:
    """``(name, function)`` of every command, ``train`` subcommands included."""
    out = []
    for typer_app, prefix in ((app, ""), (train_app, "train "), (judge_app, "judge ")):
        for info in typer_app.registered_commands:
            name = info.name or info.callback.__name__.replace("_", "-")
            out.append((prefix + name, info.callback))
    return out


def _click_command(name: str):
    group = typer.main.get_command(app)
    for part in name.split():
        group = group.get_command(None, part)
    return group


def _options(function) -> dict[str, typer.models.OptionInfo]:
    return {
        name: p.default
        for name, p in inspect.signature(function).parameters.items()
        if isinstance(p.default, typer.models.OptionInfo)
    }


COMMANDS = _commands()


def test_every_command_is_covered():
    names = {name for name, _ in COMMANDS}
    assert {"index", "search", "bm25", "eval", "serve", "train dot", "train cat"} <= names
    assert len(names) == 21


@pytest.mark.parametrize(("command", "function"), COMMANDS, ids=[c for c, _ in COMMANDS])
def test_each_option_is_a_library_setting_or_says_why_not(command, function):
    click_params = {p.name: p for p in _click_command(command).params}
    for name, info in _options(function).items():
        setting = getattr(info, "setting", None)
        if setting is None:
            assert name in CLI_ONLY.get(command, ()), f"{command} --{name}: no library setting"
            continue
        owner, field_name = setting
        field = {f.name: f for f in dataclasses.fields(owner)}[field_name]
        expected = options.default_of(owner, field_name)
        shown = click_params[name].default
        if isinstance(expected, tuple) and field_name == "window":
            expected = expected[0 if name.endswith("start") else 1]
        elif isinstance(expected, tuple):
            expected = list(expected)
        if expected is None and shown == AUTO:  # the command line's word for "decide"
            shown = None
        if "cli_default" in field.metadata:  # the shell's spelling, parsed to the default
            shown = field.metadata["parse"](field_name, shown)
        if click_params[name].required or (command, name) in DIFFERENT_DEFAULTS:
            continue  # required, or listed above
        assert shown == expected, f"{command} --{name}: {shown!r}, {owner.__name__}: {expected!r}"
        if (command, name) not in OWN_WORDS:
            assert info.help == field.metadata["help"], f"{command} --{name}: help differs"
        choices = options.choices_of(owner, field_name)
        if choices:
            assert click_params[name].metavar == "[" + "|".join(choices) + "]"


def test_cli_only_options_name_real_options():
    for command, names in CLI_ONLY.items():
        function = dict(COMMANDS)[command]
        assert names <= set(_options(function)), command


def test_k_and_depth_mean_one_thing_everywhere():
    ks, depths = {}, {}
    for command, _ in COMMANDS:
        params = {p.name: p for p in _click_command(command).params}
        if "k" in params:
            ks[command] = (params["k"].default, params["k"].help)
        if "depth" in params and not command.startswith("train"):
            depths[command] = params["depth"].default
    assert set(ks) == {"search", "bm25"} and len(set(ks.values())) == 1
    assert ks["search"] == (None, options.K_HELP)
    assert set(depths) == {"search", "serve", "rerank", "calibrate"}
    assert set(depths.values()) == {options.RERANK_DEPTH}


def test_bm25_defaults_are_bm25configs():
    from dotcat.search.lexical import BM25Config

    params = {p.name: p for p in _click_command("bm25").params}
    assert (params["k1"].default, params["b"].default) == (BM25Config().k1, BM25Config().b)


def test_the_library_acts_on_the_choices_the_options_module_lists():
    from dotcat.evaluation.significance import TESTS
    from dotcat.models import pooling, runtime
    from dotcat.models.onnx_backend import KEEP_FP32
    from dotcat.search.fusion import FUSIONS

    assert ("auto", *runtime.PRECISIONS, *runtime.ONNX_PRECISIONS) == options.PRECISIONS
    assert ("auto", *runtime.INT8_BACKENDS) == options.INT8_BACKENDS
    assert tuple(pooling.POOLINGS) == options.POOLINGS
    assert ("auto", *FUSIONS) == options.FUSIONS
    assert ("auto", *KEEP_FP32) == options.KEEP_FP32
    assert TESTS == options.SIGNIFICANCE_TESTS


def _sources() -> list[tuple[Path, ast.Module]]:
    return [(p, ast.parse(p.read_text())) for p in sorted(CLI_DIR.glob("*.py"))]


def test_the_command_line_holds_no_choice_list_and_no_check():
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)) and len(node.elts) >= 2:
                strings = [e for e in node.elts if isinstance(e, ast.Constant)]
                is_flags = all(str(e.value).startswith("-") for e in strings)
                assert len(strings) < 2 or is_flags or path.name in ("__init__.py",), (
                    f"{path.name}:{node.lineno}: a list of values; put it in dotcat.options"
                )
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                assert "must be" not in node.value, (
                    f"{path.name}:{node.lineno}: a check; put it in the config's checks()"
                )


def test_no_function_over_80_lines():
    for path, tree in _sources():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef):
                lines = node.end_lineno - node.lineno + 1
                assert lines <= 80, f"{path.name}: {node.name} is {lines} lines"
