"""The ``dot`` recipe: BERT_DOT on relevance labels, contrastive or triplet.

Batches: (query, positive, hard negatives) examples from the qrels and mined negatives
(:func:`obtain_negatives`), grouped so that no batch holds a false in-batch negative
(:class:`~dotcat.training.NoDuplicatePositiveBatchSampler`). Loss: one from
:data:`dotcat.training.distributed.DDP_LOSSES` over the batch's embeddings
(:func:`dotcat.training.trainer.backward_batch`, GradCache optional). Dev: exact retrieval
over the dev corpus (:func:`dotcat.training.trainer.evaluate_dev`). Output: a
sentence-transformers directory. The loop itself is :func:`dotcat.training.loop.train`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from torch.nn.parallel import DistributedDataParallel

from dotcat.data.splits import DEV_SEED, split_dev
from dotcat.errors import DotcatError
from dotcat.training.distributed import DistributedContext
from dotcat.training.examples import TrainingExample, build_examples, load_training_data
from dotcat.training.loop import data_record, param_groups, resolve_bf16, split_record
from dotcat.training.mining import (
    load_negatives,
    mine_bm25_negatives,
    mine_dense_negatives,
    save_negatives,
)
from dotcat.training.model import TrainableBiEncoder
from dotcat.training.sampler import NoDuplicatePositiveBatchSampler
from dotcat.training.trainer import (
    DotTrainConfig,
    EncoderView,
    LossConfig,
    backward_batch,
    dev_subset,
    document_texts,
    evaluate_dev,
    state_fingerprint,
)

logger = logging.getLogger(__name__)

NEGATIVES_FILE = "negatives.jsonl.gz"


def negatives_path(out_dir: Path, epoch: int) -> Path:
    return out_dir / (NEGATIVES_FILE if epoch == 0 else f"negatives-epoch-{epoch}.jsonl.gz")


class DotRecipe:
    """BERT_DOT trained by :func:`dotcat.training.loop.train` (see the module docstring)."""

    kind = "dot"
    stale_files = ("negatives*.jsonl.gz",)
    base_is_candidate = True

    def __init__(self, config: DotTrainConfig, ctx: DistributedContext) -> None:
        self.config = config
        self.ctx = ctx
        self.out_dir = Path(config.out_dir)
        self.mining_seconds = 0.0
        self.negatives_meta: dict[str, Any] = {}
        self._negatives_epoch: int | None = None

    # -- set-up -------------------------------------------------------------------------

    def prepare(self) -> None:
        """Data and dev split, the model (DDP-wrapped under torchrun), epoch 0's negatives."""
        config = self.config
        self.data = load_training_data(config.data, config.split, config.queries, config.qrels)
        # DEV_SEED, not the run's seed: every stage (train dot/cat/distill, calibrate, the
        # index's fusion weight) then holds out the same queries, whatever --seed a run takes.
        train_qids, dev_qids = split_dev(list(self.data.queries), config.dev_fraction, DEV_SEED)
        self.train_queries = {q: self.data.queries[q] for q in train_qids}
        self.dev_queries = {q: self.data.queries[q] for q in dev_qids}
        self.evaluating = bool(self.dev_queries) and config.dev_eval != "none"
        self.dev_corpus = None
        if self.evaluating:
            dev_qrels = {q: self.data.qrels[q] for q in dev_qids}
            self.dev_corpus = dev_subset(
                self.data.corpus, dev_qrels, config.dev_max_docs, config.seed
            )
        self.data_info = data_record(config, len(self.data.corpus)) if self.ctx.is_main else {}
        self._load_model()
        self.loss = self.make_loss()
        self.begin_epoch(0)

    def _load_model(self) -> None:
        from dotcat.models import resolve_model, weights_fingerprint

        config, ctx = self.config, self.ctx
        self.base_path = resolve_model(config.base)
        model = TrainableBiEncoder.from_pretrained(
            self.base_path,
            pooling=config.pooling,
            similarity=config.similarity,
            max_length=config.max_length,
        )
        model.name = config.base
        model.to(ctx.device)
        model.freeze_unused_parameters()
        self.model = model
        self.bf16 = resolve_bf16(config.bf16, ctx.device)
        self.base_fingerprint = weights_fingerprint(self.base_path) if ctx.is_main else None
        # broadcast_buffers=False: BERT's buffers (position ids) are constants, and a broadcast
        # at every forward would be a collective that GradCache's uneven chunks could misalign.
        self.ddp = (
            DistributedDataParallel(
                model,
                device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                broadcast_buffers=False,
            )
            if ctx.enabled
            else None
        )

    def make_loss(self) -> LossConfig:
        config = self.config
        return LossConfig.for_model(
            config.loss, self.model.similarity, config.temperature, config.margin
        )

    def param_groups(self) -> list[dict[str, Any]]:
        return param_groups(self.model, self.config.weight_decay)

    # -- negatives and examples ---------------------------------------------------------

    def begin_epoch(self, epoch: int) -> None:
        """Epoch 0: the run's negatives; later epochs re-mine them when asked (ANCE)."""
        if (epoch > 0 and not self.config.remine_each_epoch) or epoch == self._negatives_epoch:
            return
        t0 = time.perf_counter()
        negatives, self.negatives_meta = self.obtain_negatives(epoch)
        self.mining_seconds += time.perf_counter() - t0
        self._negatives_epoch = epoch
        self.build_examples(negatives)
        self.model.train()

    def obtain_negatives(self, epoch: int) -> tuple[dict[str, list[str]] | None, dict[str, Any]]:
        """The hard negatives for ``epoch`` (0: the run's; later: re-mined), saved by rank 0.

        An existing file of this run (a resumed run) is read back rather than mined again, so
        a resumed run trains on exactly the negatives it started with. Other ranks read the
        file rank 0 wrote.
        """
        config, ctx = self.config, self.ctx
        path = negatives_path(self.out_dir, epoch)
        if epoch == 0 and config.negatives_file is None and config.negatives == "none":
            return None, {"method": "none"}
        if config.resume and path.is_file():
            negatives, meta = load_negatives(path)
            return negatives, {**meta, "file": path.name}
        if ctx.is_main:
            negatives, meta = self._mine(epoch)
            save_negatives(path, negatives, {**meta, "epoch": epoch})
        ctx.barrier()
        negatives, meta = load_negatives(path)
        return negatives, {**meta, "file": path.name}

    def _mine(self, epoch: int) -> tuple[dict[str, list[str]], dict[str, Any]]:
        config, data = self.config, self.data
        meta: dict[str, Any] = {}
        if epoch == 0 and config.negatives_file is not None:
            negatives, meta = load_negatives(config.negatives_file)
            return negatives, {**meta, "loaded_from": str(config.negatives_file)}
        args = (data.corpus, self.train_queries, data.qrels, config.window)
        if epoch > 0 or config.negatives == "dense":
            view = EncoderView(
                self.model, config.query_max_length, self.bf16, state_fingerprint(self.model)
            )
            negatives = mine_dense_negatives(
                view, *args, show_progress=config.show_progress, meta=meta
            )
        else:
            negatives = mine_bm25_negatives(*args, show_progress=config.show_progress, meta=meta)
        return negatives, meta

    def build_examples(self, negatives: Mapping[str, Sequence[str]] | None) -> None:
        """Examples (query texts with the model's query prompt), document texts, sampler."""
        config, model = self.config, self.model
        n_negatives = config.n_negatives if negatives is not None else 0
        qrels = {q: self.data.qrels[q] for q in self.train_queries}
        query_texts = model.query_texts(self.train_queries.values())
        examples = build_examples(
            dict(zip(self.train_queries, query_texts, strict=True)),
            qrels,
            negatives,
            n_negatives,
            seed=config.seed,
            on_short="repeat",
        )
        if not examples:
            raise DotcatError(
                "no training examples (no judged query with a positive and negatives)"
            )
        needed = {e.positive_id for e in examples} | {d for e in examples for d in e.negative_ids}
        self.examples: list[TrainingExample] = examples
        self.doc_texts = {
            doc: model.document_prefix + text
            for doc, text in document_texts(self.data.corpus, needed).items()
        }
        self.sampler = NoDuplicatePositiveBatchSampler(
            examples, config.batch_size, seed=config.seed, qrels=qrels
        )

    def batches(self, epoch: int) -> list[Sequence[int]]:
        """The epoch's batches; under DDP, without batches smaller than the process count."""
        batches = self.sampler.batches(epoch)
        if self.ctx.world_size > 1:
            batches = [b for b in batches if len(b) >= self.ctx.world_size]
        return batches

    # -- one batch ----------------------------------------------------------------------

    def encode(self, texts: list[str], max_length: int) -> Any:
        wrapped = self.ddp if self.ddp is not None else self.model
        return wrapped(self.model.tokenize(texts, max_length))

    def backward(self, batch: Sequence[int], epoch: int, scale: float, last: bool) -> float:
        return self.backward_examples([self.examples[i] for i in batch], scale, last)

    def backward_examples(
        self, examples: list[TrainingExample], scale: float, last: bool, **kwargs: Any
    ) -> float:
        """:func:`~dotcat.training.trainer.backward_batch` on ``examples`` (``kwargs``: its
        ``weight`` and ``extra``)."""
        ddp = self.ddp
        # Gradients are all-reduced once per optimizer step, on its last batch.
        sync = contextlib.nullcontext() if ddp is None or last else ddp.no_sync()
        with sync:
            return backward_batch(
                self.encode,
                examples,
                self.doc_texts,
                self.loss,
                query_max_length=self.config.query_max_length,
                max_length=self.model.max_length,
                qrels=self.data.qrels,
                ctx=self.ctx,
                scale=scale,
                chunk_size=self.config.cache_chunk_size or None,
                no_sync=ddp.no_sync if ddp is not None else None,
                bf16=self.bf16,
                device_type=self.ctx.device.type,
                **kwargs,
            )

    # -- dev, saving, state ---------------------------------------------------------------

    def evaluate(self, epoch: int) -> dict[str, float] | None:
        if not self.evaluating:
            return None
        return evaluate_dev(
            self.model,
            self.dev_corpus,
            self.dev_queries,
            self.data.qrels,
            query_max_length=self.config.query_max_length,
            bf16=self.bf16,
            show_progress=self.config.show_progress,
        )

    def save(self, out_dir: Path) -> None:
        self.model.save(out_dir)

    def state_dict(self) -> dict[str, Any]:
        return {"sampler": self.sampler.state_dict(), "mining_seconds": self.mining_seconds}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # Loading the sampler's state checks the examples and batching settings are the
        # checkpoint's; the loop walks the epoch's batch list from its own position.
        sampler_state = dict(state["sampler"])
        sampler_state.update(epoch=state["epoch"], batches_yielded=state["batches_done"])
        self.sampler.load_state_dict(sampler_state)
        self.mining_seconds = state.get("mining_seconds", self.mining_seconds)

    def finish(self, out_dir: Path) -> None:
        pass

    def record(self) -> dict[str, Any]:
        from dotcat.models import weights_fingerprint

        config, model = self.config, self.model
        out = self.out_dir
        return {
            "data": self.data_info,
            "split": split_record(
                config,
                self,
                dev_documents=len(self.dev_corpus) if self.dev_corpus is not None else 0,
            ),
            "negatives": {k: v for k, v in self.negatives_meta.items() if k != "format"},
            "base_model": {
                "name": config.base,
                "path": str(self.base_path),
                "fingerprint": self.base_fingerprint,
            },
            "model": {
                "pooling": model.pooling,
                "similarity": model.similarity,
                "max_length": model.max_length,
                "query_max_length": config.query_max_length,
                "dim": model.dim,
                "fingerprint": (
                    weights_fingerprint(out) if (out / "model.safetensors").exists() else None
                ),
            },
            "loss": dataclasses.asdict(self.loss),
            "device": str(self.ctx.device),
            "bf16": self.bf16,
            "timings": {"mining_seconds": round(self.mining_seconds, 3)},
        }
