"""Training checkpoints that resume exactly: weights, optimizer, schedule, batches and RNGs.

A checkpoint is a directory ``OUT_DIR/checkpoints/step-00000120/`` holding

- ``model.safetensors``: the :class:`~dotcat.training.model.TrainableBiEncoder` state
  (``safetensors.torch.save_model``);
- ``optimizer.pt``: the optimizer's and the learning-rate scheduler's ``state_dict`` and the
  torch RNG states of every process, written with ``torch.save`` and read back with
  ``torch.load(weights_only=True)`` (tensors, numbers and strings only: no pickled code runs);
- ``state.json``: the step, the epoch and the batches of it already trained on, the batch
  sampler's state, the Python and NumPy RNG states of every process, the partial statistics of
  the epoch in progress, the history (losses, dev scores), and the run's configuration.

Resuming from it continues as if the run had never stopped: the same batches in the same
order, the same dropout masks, the same learning rates, hence the same weights (tested to
1e-6 against an uninterrupted run). Checkpoints are taken between optimizer steps only.

Every checkpoint is written into a temporary directory and renamed into place, so a
``step-*`` directory is always complete; the oldest are removed beyond ``keep``.
"""

from __future__ import annotations

import json
import logging
import random
import re
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_model, save_model
from torch import nn

from dotcat.errors import DotcatError
from dotcat.files import atomic_dir

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
CHECKPOINT_FORMAT = "dotcat-train-checkpoint"
CHECKPOINT_VERSION = 1
MODEL_FILE = "model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
STATE_FILE = "state.json"
_NAME = re.compile(r"^step-(\d+)$")


# -- RNG states ---------------------------------------------------------------------------


def python_numpy_rng_state() -> dict[str, Any]:
    """The Python ``random`` and legacy NumPy global RNG states, as JSON-ready lists."""
    version, internal, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    return {
        "python": [version, list(internal), gauss],
        "numpy": [name, keys.tolist(), int(pos), int(has_gauss), float(cached)],
    }


def set_python_numpy_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`python_numpy_rng_state` returned."""
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, keys, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))


def torch_rng_state() -> dict[str, Any]:
    """The torch CPU generator state and, where CUDA is initialised, every GPU's."""
    state: dict[str, Any] = {"cpu": torch.get_rng_state()}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_torch_rng_state(state: Mapping[str, Any]) -> None:
    """Restore what :func:`torch_rng_state` returned."""
    torch.set_rng_state(state["cpu"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


# -- checkpoints --------------------------------------------------------------------------


def list_checkpoints(out_dir: str | Path) -> list[Path]:
    """The complete checkpoints of a run, oldest first."""
    root = Path(out_dir) / CHECKPOINTS_DIR
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if (m := _NAME.match(p.name))]
    return [p for _, p in sorted(found) if (p / STATE_FILE).is_file()]


def latest_checkpoint(out_dir: str | Path) -> Path | None:
    """The checkpoint with the highest step, or ``None``."""
    found = list_checkpoints(out_dir)
    return found[-1] if found else None


def save_checkpoint(
    out_dir: str | Path,
    step: int,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    state: Mapping[str, Any],
    torch_rng: list[dict[str, Any]],
    keep: int = 2,
) -> Path:
    """Write ``checkpoints/step-{step}`` atomically; keep the ``keep`` newest (0: keep all).

    Args:
        model: the unwrapped model (not the DDP wrapper).
        state: JSON-serialisable training state (see the module docstring); ``step`` and the
            format are added.
        torch_rng: :func:`torch_rng_state` of every process, in rank order.
    """
    target = Path(out_dir) / CHECKPOINTS_DIR / f"step-{step:08d}"
    target.parent.mkdir(parents=True, exist_ok=True)

    def fill(tmp: Path) -> None:
        save_model(model, str(tmp / MODEL_FILE))
        optimizer_state = {
            "optimizer": optimizer.state_dict(),
            "scheduler": scheduler.state_dict(),
            "torch_rng": torch_rng,
        }
        torch.save(optimizer_state, tmp / OPTIMIZER_FILE)
        record = {
            "format": CHECKPOINT_FORMAT,
            "format_version": CHECKPOINT_VERSION,
            "step": step,
            **state,
        }
        with open(tmp / STATE_FILE, "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)
            f.write("\n")

    # A full disk is one line and no half checkpoint; the same step again (a resumed run)
    # replaces its checkpoint whole.
    atomic_dir(target, fill, unique=True)
    logger.info("checkpoint at step %d: %s", step, target)
    if keep > 0:
        for old in list_checkpoints(out_dir)[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
    return target


def load_checkpoint(
    path: str | Path, model: nn.Module, optimizer: torch.optim.Optimizer, scheduler: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Load weights, optimizer and scheduler in place; return ``(state, torch_rng)``.

    The weights are loaded into ``model`` where it is (CPU or GPU); the optimizer state is
    moved to the parameters' devices by ``Optimizer.load_state_dict``.

    Raises:
        DotcatError: not a dotcat checkpoint, another format version, or weights that do not
            fit the model (another base model).
    """
    path = Path(path)
    try:
        state = json.loads((path / STATE_FILE).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise DotcatError(f"{path}: unreadable checkpoint ({e})") from None
    if state.get("format") != CHECKPOINT_FORMAT:
        raise DotcatError(f"{path}: not a dotcat training checkpoint")
    if state.get("format_version") != CHECKPOINT_VERSION:
        raise DotcatError(
            f"{path}: checkpoint format version {state.get('format_version')!r}, "
            f"this dotcat reads {CHECKPOINT_VERSION}"
        )
    device = next(model.parameters()).device
    try:
        missing, unexpected = load_model(model, str(path / MODEL_FILE), device=str(device))
    except RuntimeError as e:
        raise DotcatError(f"{path}: the checkpoint's weights do not fit this model ({e})") from None
    if missing or unexpected:
        raise DotcatError(
            f"{path}: the checkpoint's weights do not fit this model "
            f"(missing {sorted(missing)[:3]}, unexpected {sorted(unexpected)[:3]})"
        )
    blob = torch.load(path / OPTIMIZER_FILE, map_location="cpu", weights_only=True)
    optimizer.load_state_dict(blob["optimizer"])
    scheduler.load_state_dict(blob["scheduler"])
    logger.info("resuming from %s (step %d)", path, state["step"])
    return state, list(blob["torch_rng"])
