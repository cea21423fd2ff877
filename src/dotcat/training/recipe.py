"""What a recipe is (:class:`Recipe`, the part :func:`dotcat.training.loop.train` drives) and
what every recipe shares: its data and split, AdamW groups, bf16, the run record's entries.

A recipe supplies only what differs between models: the model, the batches of an epoch, the
forward/backward of one batch with its loss, the dev evaluation, how the model is saved, and
what the record and the checkpoint carry besides the loop's own state.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch

from dotcat.data import find_corpus_file, find_qrels_file, find_queries_file
from dotcat.data.index_source import source_corpus_sha256
from dotcat.models.resolve import file_sha256, weights_fingerprint
from dotcat.models.runtime import cpu_has_native_bf16, resolve_device
from dotcat.training.config import TrainConfig
from dotcat.training.data.examples import load_training_data
from dotcat.training.data.judged import split_queries
from dotcat.training.ddp import DistributedContext

logger = logging.getLogger(__name__)

NEGATIVES_FILE = "negatives.jsonl.gz"


class Recipe:
    """What a recipe supplies to :func:`~dotcat.training.loop.train` (see
    ``dotcat.training.recipes``), with what ``dot``, ``cat`` and ``distill`` share.

    Attributes:
        kind: ``"dot"``, ``"cat"`` or ``"distill"`` (recorded; a finished run of another kind
            is not taken for this one).
        model: the module whose parameters train (unwrapped: never the DDP wrapper).
        trained: what a fold of the held-out check ranks its held-out queries with (``model``,
            or the cross-encoder around it).
        base_is_candidate: whether the starting model may be kept as the best (epoch 0).
        negatives_name, fold_files: what the held-out check's folds reuse of the run
            (:mod:`dotcat.training.heldout`).

    Each recipe defines ``prepare()`` (data, model, negatives; the output directory exists),
    ``batches(epoch)`` (the epoch's batches of example indices, the same on every call),
    ``backward(batch, epoch, scale, last)`` (forward and backward one batch; returns its loss
    times ``scale``; ``last``: the last batch of its optimizer step), ``evaluate(epoch)`` (dev
    measures of the current model, epoch 0 the starting point; None: no dev;
    ``DEV_MEASURE`` selects the kept model, any other measure is recorded beside it),
    ``save(out_dir)`` (the current model as the run's output) and ``record()`` (its part of
    the run record: data, negatives, model, loss, timings...).
    """

    kind: str
    model: torch.nn.Module
    trained: Any
    base_is_candidate: bool
    negatives_name = NEGATIVES_FILE
    fold_files: tuple[str, ...] = ()

    def __init__(self, config: Any, ctx: DistributedContext) -> None:
        self.config = config
        self.ctx = ctx
        self.out_dir = Path(config.out_dir)
        self.mining_seconds = 0.0

    @staticmethod
    def context(device: str) -> DistributedContext:
        """One process on ``device`` (``dot`` trains under ``torchrun`` too)."""
        return DistributedContext(device=resolve_device(device))

    @classmethod
    def first_steps(cls, config: Any) -> Any:
        """What runs before the loop; returns the config it trains (None: stopped)."""
        return config

    def load_data(self, at_least: int = 0) -> None:
        """The queries, qrels and corpus, and the train and dev queries
        (:func:`~dotcat.training.data.judged.split_queries`; ``at_least`` dev queries where
        there is a dev split). DEV_SEED, not the run's seed: every stage (train
        dot/cat/distill, calibrate, the index's fusion weight) holds out the same queries."""
        config = self.config
        self.data = load_training_data(config.data, config.split, config.queries, config.qrels)
        train_qids, dev_qids = split_queries(config, list(self.data.queries), at_least)
        self.train_queries = {q: self.data.queries[q] for q in train_qids}
        self.dev_queries = {q: self.data.queries[q] for q in dev_qids}
        self.data_info = data_record(config, len(self.data.corpus)) if self.ctx.is_main else {}

    def param_groups(self) -> list[dict[str, Any]]:
        """AdamW parameter groups."""
        return param_groups(self.model, self.config.weight_decay)

    def begin_epoch(self, epoch: int) -> None:
        """Called before each epoch's batches (e.g. re-mining negatives)."""

    def state_dict(self) -> dict[str, Any]:
        """What a checkpoint must carry for this recipe (JSON-ready)."""
        return {"mining_seconds": self.mining_seconds}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Continue from :meth:`state_dict` (called after :meth:`begin_epoch`)."""
        self.mining_seconds = state.get("mining_seconds", self.mining_seconds)

    def finish(self, out_dir: Path) -> None:
        """After the last epoch of a run that was not stopped (e.g. choose a weight on dev)."""

    def record_entries(
        self,
        negatives: Mapping[str, Any],
        base: tuple[Any, str | None],
        model: Mapping[str, Any],
        loss: Mapping[str, Any],
        split: Mapping[str, Any] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """The entries of ``record()`` every recipe has: ``base`` is the starting model's (path,
        fingerprint); ``model`` gets the fingerprint of the model ``OUT_DIR`` holds."""
        config, out = self.config, self.out_dir
        saved = (out / "model.safetensors").exists()
        return {
            "data": self.data_info,
            "split": {
                "dev_fraction": config.dev_fraction,
                "seed": config.seed,
                "train_queries": len(self.train_queries),
                "dev_queries": len(self.dev_queries),
                "train_examples": len(self.examples),
                **(split or {}),
            },
            "negatives": {k: v for k, v in negatives.items() if k != "format"},
            "base_model": {"name": config.base, "path": str(base[0]), "fingerprint": base[1]},
            "model": {**model, "fingerprint": weights_fingerprint(out) if saved else None},
            "loss": loss,
            "device": str(self.ctx.device),
            "bf16": self.bf16,
            **extra,
            "timings": {"mining_seconds": round(self.mining_seconds, 3)},
        }


def resolve_bf16(setting: str, device: torch.device) -> bool:
    """Whether to train under bf16 autocast: ``"on"``, ``"off"``, or ``"auto"`` (native only).

    ``auto``: CUDA GPUs with bf16, CPUs with native bf16 instructions (AVX512-BF16 / AMX on
    x86, :func:`dotcat.models.runtime.cpu_has_native_bf16`). Elsewhere PyTorch emulates bf16
    matmuls, slower than float32, so ``auto`` leaves it off; ``on`` still works there.
    """
    if setting == "off":
        return False
    supported = (
        torch.cuda.is_bf16_supported()
        if device.type == "cuda"
        else device.type == "cpu" and cpu_has_native_bf16()
    )
    if setting == "on":
        if not supported:
            logger.warning("bf16 forced on %s without native support: slower than float32", device)
        return True
    return supported


def param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for matrices (weights, embeddings), none for biases and norms."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def data_record(config: TrainConfig, corpus_documents: int) -> dict[str, Any]:
    """The run record's ``data`` entry: where the data is, the files a run reads and the sha256
    of their bytes (and one combined fingerprint), the corpus's size."""
    data = Path(config.data)
    files = {
        "corpus": find_corpus_file(data),
        "queries": Path(config.queries) if config.queries else find_queries_file(data),
        "qrels": Path(config.qrels) if config.qrels else find_qrels_file(data, config.split),
    }
    hashes = {name: file_sha256(path) for name, path in files.items()}
    combined = hashlib.sha256(
        "\n".join(f"{name}:{h}" for name, h in sorted(hashes.items())).encode()
    ).hexdigest()
    return {
        "path": str(data.resolve()),
        "split": config.split,
        "files": {name: str(path.resolve()) for name, path in files.items()},
        "sha256": hashes,
        "fingerprint": combined,
        "corpus_documents": corpus_documents,
        # an index, or a folder exported from one: that index's corpus, though the file read
        # (its document store, the exported corpus) hashes otherwise
        "source_corpus_sha256": source_corpus_sha256(config.data),
    }
