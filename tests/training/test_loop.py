"""dotcat.training.loop: settings every recipe shares (the runs: tests/training/recipes)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from dotcat.errors import DotcatError
from dotcat.files import atomic_dir, move_into
from dotcat.models.runtime import cpu_has_native_bf16
from dotcat.training.checkpoint import list_checkpoints, load_checkpoint, save_checkpoint
from dotcat.training.config import DotConfig
from dotcat.training.loop import EARLIER_DIR, prepare_out_dir, settle_earlier
from dotcat.training.recipe import resolve_bf16


def test_bf16_auto_follows_the_hardware():
    assert resolve_bf16("auto", torch.device("cpu")) is cpu_has_native_bf16()
    assert resolve_bf16("off", torch.device("cpu")) is False
    assert resolve_bf16("on", torch.device("cpu")) is True


def test_overwrite_clears_every_file_an_earlier_run_wrote_and_nothing_else(tmp_path):
    """A ``cat`` run overwritten by a ``dot`` run keeps neither the cross-encoder's record nor
    a model the check set aside (``trained/``, which the docs point ``index`` at)."""
    out = tmp_path / "run"
    written = ["dotcat_training.json", "dotcat_cross_encoder.json", "model.safetensors",
               "config.json", "tokenizer.json", "modules.json", "teacher.json.gz"]  # fmt: skip
    for name in [*written, "notes.txt", "negatives.jsonl.gz"]:
        (out / name).parent.mkdir(parents=True, exist_ok=True)
        (out / name).write_text("{}")
    for folder in ("trained", "1_Pooling", "checkpoints/step-00000004", "heldout"):
        (out / folder).mkdir(parents=True)
        (out / folder / "config.json").write_text("{}")
    with pytest.raises(DotcatError, match="holds an earlier training run"):
        prepare_out_dir(out, DotConfig(data="d", out_dir=out))
    reused = out / "negatives.jsonl.gz"  # the run reads it: kept
    config = DotConfig(data="d", out_dir=out, overwrite=True, negatives_file=reused)
    prepare_out_dir(out, config)
    assert sorted(p.name for p in out.iterdir()) == [EARLIER_DIR, "negatives.jsonl.gz", "notes.txt"]
    settle_earlier(out, config, failed=False)  # the new run finished: the earlier one goes
    assert sorted(p.name for p in out.iterdir()) == ["negatives.jsonl.gz", "notes.txt"]
    prepare_out_dir(out, DotConfig(data="d", out_dir=out))  # no earlier run left: no refusal


def test_an_overwrite_that_never_ends_keeps_the_run_it_replaced(tmp_path):
    """The earlier run stays aside until the new one ends: put back where it failed, kept
    (and the unfinished run's files removed) where another overwrite comes first."""
    out = tmp_path / "run"
    out.mkdir()
    for name in ("dotcat_training.json", "model.safetensors", "notes.txt"):
        (out / name).write_text(f"first {name}")
    config = DotConfig(data="d", out_dir=out, overwrite=True)
    prepare_out_dir(out, config)
    (out / "dotcat_training.json").write_text("second")  # the new run's record, then a crash
    prepare_out_dir(out, config)  # overwritten again: the second run goes, the first stays
    (out / "checkpoints").mkdir()
    (out / "model.safetensors").write_text("third")
    settle_earlier(out, config, failed=True)  # the third run fails: the first is back
    assert {p.name: p.read_text() for p in out.iterdir()} == {
        name: f"first {name}" for name in ("dotcat_training.json", "model.safetensors", "notes.txt")
    }


def test_a_step_saved_again_replaces_its_checkpoint_whole(tmp_path, monkeypatch):
    """The earlier copy of a step is removed only once the new one is in place: a crash
    while it is removed leaves a complete checkpoint there, never half of one."""
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    args = (model, optimizer, scheduler)
    save_checkpoint(tmp_path, 3, *args, {"epoch": 0, "run": "first"}, [{}])

    def crash(path, ignore_errors=False):  # a crash half-way through removing a checkpoint
        (Path(path) / "model.safetensors").unlink()
        raise KeyboardInterrupt

    monkeypatch.setattr("dotcat.files.shutil.rmtree", crash)
    with pytest.raises(KeyboardInterrupt):
        save_checkpoint(tmp_path, 3, *args, {"epoch": 0, "run": "second"}, [{}])
    [found] = list_checkpoints(tmp_path)
    assert load_checkpoint(found, *args)[0]["run"] == "second"


def _crash_removing(path, ignore_errors=False):
    """``shutil.rmtree`` crashing half-way through removing a folder."""
    for entry in Path(path).iterdir():
        entry.unlink()
    raise KeyboardInterrupt


def test_a_folder_written_again_is_replaced_whole(tmp_path, monkeypatch):
    """:func:`atomic_dir` (downloads, exports, pretrained re-rankers) removes the earlier folder
    only once the new one is in place: a crash while it is removed leaves the new one whole."""
    target = tmp_path / "made"
    atomic_dir(target, lambda tmp: (tmp / "data.txt").write_text("first"), unique=True)

    monkeypatch.setattr("dotcat.files.shutil.rmtree", _crash_removing)
    with pytest.raises(KeyboardInterrupt):
        atomic_dir(target, lambda tmp: (tmp / "data.txt").write_text("second"), unique=True)
    assert (target / "data.txt").read_text() == "second"


def test_a_model_saved_over_another_keeps_each_module_folder_whole(tmp_path, monkeypatch):
    """:func:`move_into` (a model saved over one: its sentence-transformers folders) removes an
    earlier folder only once the new one is in place."""
    new, out = tmp_path / ".saving", tmp_path / "model"
    for folder, text in ((new, "new"), (out, "old")):
        (folder / "1_Pooling").mkdir(parents=True)
        (folder / "1_Pooling" / "config.json").write_text(text)

    monkeypatch.setattr("dotcat.files.shutil.rmtree", _crash_removing)
    with pytest.raises(KeyboardInterrupt):
        move_into(new, out)
    assert (out / "1_Pooling" / "config.json").read_text() == "new"
