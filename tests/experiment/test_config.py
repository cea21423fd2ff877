"""The experiment file: a wrong field is one line naming it, exit status 2, no work done."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.errors import DotcatError
from dotcat.experiment import load_config, parse_config

runner = CliRunner()


def _valid(data: Path, model: Path) -> str:
    return textwrap.dedent(
        f"""\
        output = "out"
        baseline = "BM25"

        [dataset]
        path = "{data}"
        split = "test"

        [[systems]]
        name = "BM25"
        first_stage = "bm25"

        [[systems]]
        name = "dense"
        first_stage = "dense"
        model = "{model}"
        """
    )


@pytest.fixture()
def write(tmp_path, tiny_beir_dir, tiny_bert_dir):
    def write(text: str | None = None, replace: tuple[str, str] | None = None) -> Path:
        text = text if text is not None else _valid(tiny_beir_dir, tiny_bert_dir)
        if replace is not None:
            assert replace[0] in text
            text = text.replace(*replace)
        path = tmp_path / "experiment.toml"
        path.write_text(text)
        return path

    return write


def _error(path: Path) -> str:
    result = runner.invoke(app, ["experiment", str(path)])
    assert result.exit_code == 2, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 1, result.output
    assert lines[0].startswith(f"dotcat: error: {path}: ")
    return lines[0].removeprefix(f"dotcat: error: {path}: ")


def test_a_valid_file_parses_with_defaults(write):
    config = load_config(write())
    assert config.measures == ["nDCG@10", "RR@10", "R@100", "AP@100"]
    assert config.k == 100 and config.test == "t" and config.dataset.split == "test"
    assert [s.first_stage for s in config.systems] == ["bm25", "dense"]


def test_a_typo_names_the_field_and_suggests_the_right_one(write):
    path = write(replace=('model = "', 'modle = "'))
    assert _error(path) == "systems[1]: unknown field 'modle' (did you mean 'model'?)"


def test_a_wrong_type_names_the_field_and_what_it_must_be(write):
    text = _valid("d", "m") + 'rerank = "c"\ndepth = "ten"\n'
    path = write(text)
    assert _error(path) == "systems[1].depth: must be an integer, got 'ten'"
    path = write(_valid("d", "m") + 'rerank = "c"\ndepth = 0\n')
    assert _error(path) == "systems[1].depth: depth must be >= 1, got 0"


def test_a_missing_dataset_is_named(write, tiny_bert_dir):
    text = _valid("x", tiny_bert_dir)
    text = text.replace('[dataset]\npath = "x"\nsplit = "test"\n', "")
    assert _error(write(text)).startswith("dataset: missing; expected a [dataset] table")


def test_paths_are_checked_before_any_work(write, tiny_beir_dir, tiny_bert_dir, tmp_path):
    missing = tmp_path / "nowhere"
    assert _error(write(_valid(missing, tiny_bert_dir))) == (
        f"dataset.path: {missing}: no such directory"
    )
    text = _valid(tiny_beir_dir, tiny_bert_dir).replace('split = "test"', 'split = "dev"')
    message = _error(write(text))
    assert message.startswith("dataset.split: ") and "no qrels for split 'dev'" in message
    assert _error(write(_valid(tiny_beir_dir, missing))).startswith("systems[1].model: ")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('baseline = "BM26"', "baseline: 'BM26' is not a system name (did you mean 'BM25'?)"),
        (
            'first_stage = "dnese"',
            "systems[1].first_stage: must be one of 'dense', 'bm25', 'hybrid', got 'dnese'",
        ),
        ("measures = ['nDGC@10']", "measures[0]: unknown measure 'nDGC@10'"),
        ("k1 = 1.2", "systems[1].k1: applies only to first_stage 'bm25'"),
        ("alpha = 1.5", "alpha: must be a number in (0, 1), got 1.5"),
        (
            'prf = "rm3"',
            "systems[1].prf: prf 'rm3' rewrites the bm25 side, and first stage 'dense' has none",
        ),
        ("fb_terms = 20", "systems[1].fb_terms: fb_terms applies only with prf rm3 or both"),
        ("passages = false", "systems[1].passages: applies only when `model` builds an index"),
        ("passage_window = 128", "systems[1].passage_window: applies only when `model` builds"),
        ("aggregation = 'maxq'", "systems[1].aggregation: must be one of 'auto', 'maxp', "),
    ],
)
def test_semantic_errors_name_the_field(text, expected):
    data = {
        "output": "out",
        "baseline": "BM25",
        "dataset": {"path": "d"},
        "systems": [
            {"name": "BM25", "first_stage": "bm25"},
            {"name": "dense", "first_stage": "dense", "index": "i"},
        ],
    }
    key, _, value = text.partition(" = ")
    value = json.loads(value.replace("'", '"'))
    per_system = (
        "first_stage",
        "k1",
        "prf",
        "fb_terms",
        "passages",
        "passage_window",
        "aggregation",
    )
    target = data["systems"][1] if key in per_system else data
    target[key] = value
    with pytest.raises(DotcatError) as error:
        parse_config(data, "e.toml")
    assert str(error.value).startswith(f"e.toml: {expected}")


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        (
            {"passages": False, "passage_stride": 16},
            "passage_stride: passage_stride does not apply",
        ),
        (
            {"passage_window": 64, "passage_stride": 40},
            "passage_stride: passage_stride 40 must be at most half",
        ),
        ({"passage_window": 4}, "passage_window: passage_window must be >= 8, got 4"),
    ],
)
def test_passage_settings_are_checked_where_a_model_builds_the_index(settings, expected):
    system = {"name": "dense", "first_stage": "dense", "model": "default", **settings}
    data = {"output": "o", "baseline": "dense", "dataset": {"path": "d"}, "systems": [system]}
    with pytest.raises(DotcatError) as error:
        parse_config(data, "e.toml")
    assert f"systems[0].{expected}" in str(error.value)


def test_invalid_toml_is_one_line(write):
    assert _error(write("output = \n")).startswith("invalid TOML: ")


def test_config_errors_come_before_torch_is_imported(write):
    path = write(replace=('model = "', 'modle = "'))
    code = (
        "import sys; from typer.testing import CliRunner; from dotcat.cli import app; "
        f"r = CliRunner().invoke(app, ['experiment', {str(path)!r}]); "
        "print(r.exit_code, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.split() == ["2", "False"], out.stderr
