"""The judge loop's benchmark reuses a training step only when its run finished: an interrupted
``dotcat train`` leaves a record (``status: running``) and a best-so-far model behind."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "eval" / "benchmarks"


@pytest.fixture(scope="module")
def judge_loop():
    """``judge_loop`` imported as the scripts import each other (their ``common`` puts the
    checkout's src first on the paths: undone afterwards)."""
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(BENCHMARKS))
    import judge_loop

    yield judge_loop
    sys.path[:] = saved_path
    if saved_env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved_env


@pytest.mark.parametrize(
    ("text", "finished"),
    [
        (json.dumps({"status": "finished", "kind": "dot"}), True),
        (json.dumps({"status": "running", "kind": "dot", "steps": 3, "total_steps": 5}), False),
        (json.dumps(["finished"]), False),
        ('{"status": "fini', False),
    ],
)
def test_a_training_record_counts_as_done_only_when_its_run_finished(
    judge_loop, tmp_path, text, finished
):
    record = judge_loop.common.training_record_path(tmp_path)
    record.write_text(text, encoding="utf-8")
    assert judge_loop.common.training_finished(tmp_path) is finished


def test_a_finished_step_is_reused_without_running_dotcat(judge_loop, tmp_path, capsys):
    record = judge_loop.common.training_record_path(tmp_path)
    record.write_text(json.dumps({"status": "finished"}), encoding="utf-8")
    seconds = judge_loop.step(tmp_path, "c", record, "no-such-command")
    assert seconds != seconds  # NaN: nothing ran (a run of the bad command would exit)
    assert "reusing" in capsys.readouterr().out


def test_an_unfinished_training_step_runs_again_over_its_leftovers(judge_loop, tmp_path):
    record = judge_loop.common.training_record_path(tmp_path)
    record.write_text(json.dumps({"status": "running", "steps": 3}), encoding="utf-8")
    with pytest.raises(SystemExit, match=r"dotcat no-such-command --overwrite failed"):
        judge_loop.step(tmp_path, "c", record, "no-such-command")
