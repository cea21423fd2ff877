"""The one training loop every recipe runs: ``dot``, ``cat`` and ``distill``.

:func:`train` reads top to bottom like nanoGPT's ``train.py``: prepare the output directory,
let the recipe load its data and model, build AdamW with a linear warm-up and decay, resume
from the newest checkpoint if asked, score the starting point on dev (epoch 0), then for each
epoch walk its batches (gradient accumulation, clipping, one optimizer step per group of
batches, checkpoints every ``checkpoint_every`` steps), score the epoch on dev and keep the
best model, and write the run record ``dotcat_training.json`` as it goes.

A recipe (:class:`~dotcat.training.recipe.Recipe`) supplies only what differs between models.
Under ``torchrun`` (the ``dot`` recipes) the loop gathers every process's random state into
the checkpoint and averages the step's loss; only rank 0 writes. :func:`dotcat.training.run.train`
picks the recipe for a config and calls :func:`train`.

References:
    - Loshchilov & Hutter (2019), "Decoupled Weight Decay Regularization", ICLR,
      arXiv:1711.05101 (AdamW).
    - Karpathy, nanoGPT ``train.py`` (the shape of the loop).
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import math
import os
import random
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import get_linear_schedule_with_warmup

from dotcat.errors import DotcatError
from dotcat.files import read_json_or_none, remove_tree, write_json
from dotcat.models.resolve import TRAINING_RECORD
from dotcat.progress import progress_bar
from dotcat.training.checkpoint import (
    CHECKPOINTS_DIR,
    latest_checkpoint,
    load_checkpoint,
    python_numpy_rng_state,
    save_checkpoint,
    set_python_numpy_rng_state,
    set_torch_rng_state,
    torch_rng_state,
)
from dotcat.training.config import TrainConfig
from dotcat.training.ddp import DistributedContext
from dotcat.training.recipe import Recipe
from dotcat.version import __version__

logger = logging.getLogger(__name__)

RECORD_FORMAT = "dotcat-training"
#: Where the held-out check keeps its folds' work (:mod:`dotcat.training.heldout`).
HELDOUT_DIR = "heldout"
DEV_MEASURE = "nDCG@10"
#: What training writes in OUT_DIR (records, work, any recipe's model, ``trained/``, a
#: pre-training): what ``overwrite`` removes, so nothing of an earlier run stays; nothing else.
RUN_FILES = (
    "dotcat_*.json", CHECKPOINTS_DIR, HELDOUT_DIR, "trained", "pretrain", "negatives*.jsonl.gz",
    "teacher*", "student_start*", "model.safetensors", "config*.json", "tokenizer*", "vocab.txt",
    "*tokens*.json", "modules.json", "1_Pooling", "2_Normalize", "sentence_bert_config.json",
)  # fmt: skip
EARLIER_DIR = ".overwritten"  #: where ``overwrite`` keeps the earlier run until the new one ends
#: Config fields that may differ on resume without changing what is trained.
RESUME_FREE = frozenset(
    {"resume", "overwrite", "stop_after_steps", "checkpoint_every", "keep_checkpoints"}
    | {"show_progress", "device"}
)


# -- seeds, the output directory, a resumed run's settings ----------------------------------


def seed_everything(seed: int, rank: int = 0) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    # Different dropout masks on every process (they embed different examples anyway).
    torch.manual_seed(seed + rank)


def finished(out_dir: Path, kind: str, epochs: int) -> bool:
    """True when ``out_dir`` holds a finished run of this kind and number of epochs."""
    record = read_json_or_none(out_dir / TRAINING_RECORD) or {}
    return (
        record.get("status") == "finished"
        and record.get("kind", "dot") == kind
        and record.get("hyperparameters", {}).get("epochs") == epochs
    )


def prepare_out_dir(out_dir: Path, config: TrainConfig) -> None:
    """Refuse to mix a new run into an earlier run's outputs unless resuming or overwriting;
    overwriting moves what training writes (:data:`RUN_FILES`) but what it reads aside."""
    if not out_dir.exists():
        out_dir.mkdir(parents=True)
        return
    aside = out_dir / EARLIER_DIR
    earlier = (out_dir / TRAINING_RECORD).exists() or (out_dir / CHECKPOINTS_DIR).exists()
    if not earlier or config.resume:
        return
    if not config.overwrite:
        raise DotcatError(
            f"{out_dir}: holds an earlier training run; resume it (--resume) or overwrite it "
            "(--overwrite)"
        )
    logger.warning("overwriting the run in %s (kept in %s until this one ends)", out_dir, aside)
    settle_earlier(out_dir, config, failed=True)  # one kept by an overwrite that never ended
    aside.mkdir()
    for stale in _run_files(out_dir, config):
        os.replace(stale, aside / stale.name)


def settle_earlier(out_dir: Path, config: TrainConfig, failed: bool) -> None:
    """The run ``overwrite`` moved aside: removed, or put back where the new one ``failed``."""
    aside = out_dir / EARLIER_DIR
    if failed and aside.is_dir():
        for stale in _run_files(out_dir, config):
            remove_tree(stale)
        for kept in aside.iterdir():
            os.replace(kept, out_dir / kept.name)
    remove_tree(aside)


def _run_files(out_dir: Path, config: TrainConfig) -> list[Path]:
    """What training wrote in ``out_dir`` (:data:`RUN_FILES`) but what ``config`` reads there."""
    values = [getattr(config, f.name) for f in dataclasses.fields(config) if f.name != "out_dir"]
    named = [v for value in values for v in (value if isinstance(value, tuple) else (value,))]
    reads = [Path(v).resolve() for v in named if isinstance(v, str | Path) and v]
    kept = {path for p in reads for path in (p, *p.parents)}  # e.g. OUT_DIR/negatives.jsonl.gz
    return [f for pattern in RUN_FILES for f in out_dir.glob(pattern) if f.resolve() not in kept]


def check_resumed_config(recorded: Mapping[str, Any], config: TrainConfig) -> None:
    """Warn about settings that differ from the checkpoint's (the run would not be the same)."""
    now = config.to_dict()
    changed = sorted(
        k for k in now if k not in RESUME_FREE and k in recorded and recorded[k] != now[k]
    )
    if changed:
        logger.warning(
            "resuming with settings that differ from the checkpoint's: %s",
            ", ".join(f"{k} {recorded[k]!r} -> {now[k]!r}" for k in changed),
        )


# -- the loop's own state -----------------------------------------------------------------


def _fresh_partial() -> dict[str, Any]:
    return {"loss_sum": 0.0, "steps": 0, "examples": 0, "seconds": 0.0}


@dataclass
class LoopState:
    """Where the loop is: what a checkpoint carries besides weights, optimizer and RNGs."""

    step: int = 0
    epoch: int = 0
    batches_done: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    loss_curve: list[list[float]] = field(default_factory=list)
    best: dict[str, Any] = field(default_factory=lambda: {"epoch": None, "score": None})
    partial: dict[str, Any] = field(default_factory=_fresh_partial)
    totals: dict[str, Any] = field(
        default_factory=lambda: {"examples": 0, "train_seconds": 0.0, "eval_seconds": 0.0}
    )

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, state: Mapping[str, Any]) -> LoopState:
        return cls(**{f.name: state[f.name] for f in dataclasses.fields(cls)})


@dataclass
class _Run:
    """Everything :func:`train`'s helpers share: one object instead of closures."""

    recipe: Recipe
    config: TrainConfig
    ctx: DistributedContext
    out_dir: Path
    optimizer: torch.optim.Optimizer
    scheduler: Any
    total_steps: int
    started: float
    state: LoopState = field(default_factory=LoopState)
    resumed_from: str | None = None


# -- the loop -----------------------------------------------------------------------------


def train(recipe: Recipe, config: TrainConfig, ctx: DistributedContext | None = None) -> Path:
    """Run ``recipe`` under ``config`` (epochs, schedule, checkpoints); returns ``out_dir``.

    ``config`` is the recipe's dataclass; the loop reads ``out_dir``, ``epochs``, ``lr``,
    ``warmup_ratio``, ``max_grad_norm``, ``grad_accum_steps``, ``seed``, ``resume``,
    ``overwrite``, ``checkpoint_every``, ``keep_checkpoints``, ``stop_after_steps``,
    ``show_progress`` and ``to_dict()``.
    """
    started = time.perf_counter()
    ctx = ctx or DistributedContext()
    out_dir = Path(config.out_dir)
    if ctx.is_main:
        prepare_out_dir(out_dir, config)
    ctx.barrier()
    seed_everything(config.seed, ctx.rank)
    recipe.prepare()

    total_steps = sum(
        math.ceil(len(recipe.batches(e)) / config.grad_accum_steps) for e in range(config.epochs)
    )
    if total_steps == 0:
        raise DotcatError(f"no batch to train on ({ctx.world_size} processes)")
    optimizer = torch.optim.AdamW(recipe.param_groups(), lr=config.lr, betas=(0.9, 0.999), eps=1e-8)
    scheduler = get_linear_schedule_with_warmup(
        optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps
    )
    run = _Run(recipe, config, ctx, out_dir, optimizer, scheduler, total_steps, started)

    pending = _restore(run)
    if pending is None:
        _evaluate_start(run)
    recipe.model.train()
    show = config.show_progress and ctx.is_main
    bar = progress_bar(
        total=total_steps, initial=run.state.step, desc="training", unit="step", enabled=show
    )
    stopped = False
    while run.state.epoch < config.epochs and not stopped:
        recipe.begin_epoch(run.state.epoch)
        if pending is not None:
            recipe.load_state_dict(pending)
            pending = None
        stopped = _train_epoch(run, bar)
        if not stopped:
            _end_epoch(run)
    bar.close()
    _finish(run, stopped)
    return out_dir


def _restore(run: _Run) -> dict[str, Any] | None:
    """Load the newest checkpoint when resuming; returns the recipe's saved state (or None)."""
    if not run.config.resume:
        return None
    checkpoint = latest_checkpoint(run.out_dir)
    if checkpoint is None:
        logger.warning("%s: no checkpoint to resume from; starting from scratch", run.out_dir)
        return None
    state, torch_rngs = load_checkpoint(checkpoint, run.recipe.model, run.optimizer, run.scheduler)
    check_resumed_config(state["config"], run.config)
    run.state = LoopState.from_json(state)
    rng = state["rng"]
    if len(rng) == run.ctx.world_size:
        set_python_numpy_rng_state(rng[run.ctx.rank])
        set_torch_rng_state(torch_rngs[run.ctx.rank])
    else:
        logger.warning(
            "checkpoint written by %d processes, resumed by %d: random states differ, the "
            "run continues but not bit for bit",
            len(rng), run.ctx.world_size,
        )  # fmt: skip
    run.resumed_from = str(checkpoint)
    return state


def _evaluate_start(run: _Run) -> None:
    """Epoch 0: the starting point's dev score (the base model, or the first stage alone)."""
    scores, seconds = _timed_evaluate(run, 0)
    run.state.totals["eval_seconds"] += seconds
    run.state.history.append(
        {"epoch": 0, "train_loss": None, **_dev_fields(scores), "eval_seconds": seconds}
    )
    score = None if scores is None else scores[DEV_MEASURE]
    if score is not None:
        logger.info("epoch 0 (starting point): dev %s", _describe(scores))
        if run.recipe.base_is_candidate:
            _keep_if_best(run, 0, score)


def _timed_evaluate(run: _Run, epoch: int) -> tuple[dict[str, float] | None, float]:
    t0 = time.perf_counter()
    scores = run.recipe.evaluate(epoch) if run.ctx.is_main else None
    run.ctx.barrier()
    run.recipe.model.train()
    return scores, time.perf_counter() - t0


def _dev_fields(scores: Mapping[str, float] | None) -> dict[str, float | None]:
    """An epoch's dev entries of the record: ``dev_nDCG@10`` always (None without dev), then
    whatever else the recipe measured (e.g. ``dev_R@100``)."""
    return {f"dev_{DEV_MEASURE}": None, **{f"dev_{m}": v for m, v in (scores or {}).items()}}


def _describe(scores: Mapping[str, float] | None) -> str:
    if scores is None:
        return f"{DEV_MEASURE} n/a"
    return ", ".join(f"{m} {v:.4f}" for m, v in scores.items())


def _keep_if_best(run: _Run, epoch: int, score: float | None) -> None:
    """Save the model when it beats the best dev score so far (no dev: always the latest)."""
    best = run.state.best
    if score is None or best["score"] is None or score > best["score"]:
        best.update(epoch=epoch, score=score)
        if run.ctx.is_main:
            run.recipe.save(run.out_dir)


def _train_epoch(run: _Run, bar: Any) -> bool:
    """The current epoch's remaining steps; True when ``stop_after_steps`` stopped the run."""
    config, state = run.config, run.state
    batches = run.recipe.batches(state.epoch)
    while state.batches_done < len(batches):
        t0 = time.perf_counter()
        group = batches[state.batches_done : state.batches_done + config.grad_accum_steps]
        step_loss = _optimizer_step(run, group)
        state.step += 1
        state.batches_done += len(group)
        partial = state.partial
        partial["loss_sum"] += step_loss
        partial["steps"] += 1
        partial["examples"] += sum(len(b) for b in group)
        partial["seconds"] += time.perf_counter() - t0
        state.loss_curve.append([state.step, round(step_loss, 6)])
        bar.update(1)
        bar.set_postfix(
            epoch=state.epoch + 1,
            loss=f"{step_loss:.4f}",
            ex_s=f"{partial['examples'] / max(partial['seconds'], 1e-9):.1f}",
            refresh=False,  # drawn when the bar next draws (a log: each heartbeat)
        )
        at_stop = config.stop_after_steps is not None and state.step >= config.stop_after_steps
        if at_stop or (config.checkpoint_every and state.step % config.checkpoint_every == 0):
            _save_state(run)
        if at_stop:
            return True
    return False


def _optimizer_step(run: _Run, group: Sequence[Sequence[int]]) -> float:
    """Backward every batch of ``group`` (each loss divided by their number), clip, step."""
    recipe, ctx = run.recipe, run.ctx
    loss = 0.0
    for k, batch in enumerate(group):
        loss += recipe.backward(batch, run.state.epoch, 1.0 / len(group), k == len(group) - 1)
    if run.config.max_grad_norm > 0:
        torch.nn.utils.clip_grad_norm_(recipe.model.parameters(), run.config.max_grad_norm)
    run.optimizer.step()
    run.scheduler.step()
    run.optimizer.zero_grad(set_to_none=True)
    if ctx.enabled:  # the mean of the processes' scaled losses is the batch loss
        reduced = torch.tensor([loss], dtype=torch.float64, device=ctx.device)
        torch.distributed.all_reduce(reduced)
        loss = float(reduced) / ctx.world_size
    return loss


def _end_epoch(run: _Run) -> None:
    """The epoch's mean loss and dev score; keep the best model; start the next epoch."""
    state = run.state
    partial = state.partial
    train_loss = partial["loss_sum"] / max(partial["steps"], 1)
    scores, seconds = _timed_evaluate(run, state.epoch + 1)
    score = None if scores is None else scores[DEV_MEASURE]
    state.totals["eval_seconds"] += seconds
    state.totals["examples"] += partial["examples"]
    state.totals["train_seconds"] += partial["seconds"]
    rate = partial["examples"] / max(partial["seconds"], 1e-9)
    state.history.append(
        {
            "epoch": state.epoch + 1,
            "train_loss": train_loss,
            **_dev_fields(scores),
            "steps": partial["steps"],
            "train_seconds": partial["seconds"],
            "examples_per_second": rate,
            "eval_seconds": seconds,
        }
    )
    logger.info(
        "epoch %d: train loss %.4f, dev %s, %.1f examples/s",
        state.epoch + 1, train_loss, _describe(scores), rate,
    )  # fmt: skip
    _keep_if_best(run, state.epoch + 1, score)
    state.epoch += 1
    state.batches_done = 0
    state.partial = _fresh_partial()
    if run.ctx.is_main:
        write_json(run.out_dir / TRAINING_RECORD, _record(run, "running"))


def _save_state(run: _Run) -> None:
    """A checkpoint: weights, optimizer, schedule, the loop's and the recipe's state, RNGs."""
    ctx = run.ctx
    rng, torch_rng = [python_numpy_rng_state()], [torch_rng_state()]
    if ctx.enabled:
        rng, torch_rng = [None] * ctx.world_size, [None] * ctx.world_size
        torch.distributed.all_gather_object(rng, python_numpy_rng_state())
        torch.distributed.all_gather_object(torch_rng, torch_rng_state())
    if ctx.is_main:
        state = {
            **run.recipe.state_dict(),
            **run.state.to_json(),
            "rng": rng,
            "config": run.config.to_dict(),
        }
        save_checkpoint(run.out_dir, run.state.step, run.recipe.model, run.optimizer, run.scheduler,
                        state, torch_rng, keep=run.config.keep_checkpoints)  # fmt: skip
        write_json(run.out_dir / TRAINING_RECORD, _record(run, "running"))
    ctx.barrier()


def _finish(run: _Run, stopped: bool) -> None:
    """The recipe's last word (when not stopped) and the final record."""
    if run.ctx.is_main:
        if not stopped:
            run.recipe.finish(run.out_dir)
        status = "stopped" if stopped else "finished"
        write_json(run.out_dir / TRAINING_RECORD, _record(run, status))
        if not stopped:
            best = run.state.best
            logger.info(
                "training finished: best epoch %s (dev %s %s), model in %s",
                best["epoch"], DEV_MEASURE, best["score"], run.out_dir,
            )  # fmt: skip
            if best["epoch"] == 0:
                logger.warning("no epoch beat the starting model on the dev split; it is kept")
    run.ctx.barrier()


def _record(run: _Run, status: str) -> dict[str, Any]:
    """The run record: the loop's common fields, then the recipe's."""
    state = run.state
    train_seconds = state.totals["train_seconds"] + state.partial["seconds"]
    seen = state.totals["examples"] + state.partial["examples"]
    own = run.recipe.record()
    kept = [e for e in state.history if e["epoch"] == state.best["epoch"]]  # the kept epoch
    pairs = own.pop("pairs_per_example", None)  # a cross-encoder's rate is counted in pairs
    timings = {
        **own.pop("timings", {}),
        "train_seconds": round(train_seconds, 3),
        "eval_seconds": round(state.totals["eval_seconds"], 3),
        "total_seconds": round(time.perf_counter() - run.started, 3),
    }
    return {
        "format": RECORD_FORMAT,
        "format_version": 1,
        "kind": run.recipe.kind,
        "status": status,
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "dotcat_version": __version__,
        "torch_version": torch.__version__,
        **own,
        "hyperparameters": run.config.to_dict(),
        "world_size": run.ctx.world_size,
        "total_steps": run.total_steps,
        "steps": state.step,
        "epochs": state.history,
        "best_epoch": state.best["epoch"],
        **{f"best_{k}": v for k, v in (kept[-1] if kept else {}).items() if k.startswith("dev_")},
        f"best_dev_{DEV_MEASURE}": state.best["score"],
        "loss_curve": state.loss_curve,
        "examples_seen": seen,
        "timings": timings,
        "examples_per_second": round(seen / train_seconds, 3) if train_seconds else None,
        **(
            {"pairs_per_second": round(seen * pairs / train_seconds, 3) if train_seconds else None}
            if pairs
            else {}
        ),
        "resumed_from": run.resumed_from,
    }
