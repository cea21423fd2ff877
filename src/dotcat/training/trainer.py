"""Train a BERT_DOT bi-encoder on relevance labels: ``dotcat train dot DATA OUT_DIR``.

:func:`train_bi_encoder` is the whole run, readable top to bottom:

1. load the queries, qrels and corpus; carve a dev split out of the training queries by a hash
   of their ids (:func:`dotcat.training.split_dev`);
2. mine hard negatives (BM25 by default, or the base model's own dense ranking, from a rank
   window) or load them from a file, and save them to ``OUT_DIR/negatives.jsonl.gz`` so the
   run can be repeated exactly;
3. build (query, positive, negatives) examples and batches that never hold a false in-batch
   negative (:class:`~dotcat.training.NoDuplicatePositiveBatchSampler`);
4. train with AdamW (Loshchilov & Hutter 2019; no weight decay on biases and LayerNorm),
   a linear warm-up then linear decay of the learning rate, gradient clipping, gradient
   accumulation, bf16 autocast where the hardware has it, and optionally GradCache (Gao et al.
   2021) so that a batch of hundreds of examples fits in the memory of a few;
5. evaluate nDCG@10 on the dev split before training (epoch 0, the base model) and after
   every epoch, keeping the best model as ``OUT_DIR`` itself (a sentence-transformers
   directory, see :meth:`~dotcat.training.model.TrainableBiEncoder.save`);
6. record everything in ``OUT_DIR/dotcat_training.json``.

The loss is InfoNCE over in-batch and hard negatives with a temperature (DPR, Karpukhin et al.
2020; :func:`dotcat.losses.contrastive_loss`) or the triplet margin loss of Sentence-BERT
(Reimers & Gurevych 2019; :func:`dotcat.losses.triplet_loss`).

Checkpoints every ``checkpoint_every`` optimizer steps (:mod:`dotcat.training.checkpoint`) and
``resume=True`` continue exactly. Under ``torchrun`` the same call trains with DDP, in-batch
negatives gathered from every process (:mod:`dotcat.training.distributed`).

Output directory::

    OUT_DIR/  model.safetensors config.json tokenizer* modules.json 1_Pooling/ [2_Normalize/]
              sentence_bert_config.json config_sentence_transformers.json   <- the best model
              dotcat_training.json    negatives.jsonl.gz [negatives-epoch-N.jsonl.gz]
              checkpoints/step-XXXXXXXX/

References:
    - Karpukhin et al. (2020), "Dense Passage Retrieval for Open-Domain Question Answering",
      EMNLP, arXiv:2004.04906.
    - Gao, Zhang, Han, Callan (2021), "Scaling Deep Contrastive Learning Batch Size under
      Memory Limited Setup", RepL4NLP, arXiv:2101.06983 (GradCache).
    - Reimers & Gurevych (2019), "Sentence-BERT", EMNLP, arXiv:1908.10084.
    - Loshchilov & Hutter (2019), "Decoupled Weight Decay Regularization", ICLR,
      arXiv:1711.05101 (AdamW).
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import hashlib
import json
import logging
import math
import os
import random
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel
from transformers import get_linear_schedule_with_warmup

from dotcat import __version__
from dotcat.data.splits import split_dev
from dotcat.errors import DotcatError
from dotcat.losses import split_batch
from dotcat.losses.cached import grad_cache_backward
from dotcat.models.runtime import cpu_has_native_bf16
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
from dotcat.training.distributed import (
    DistributedContext,
    ddp_contrastive_loss,
    ddp_triplet_loss,
    init_distributed,
    shard_sizes,
)
from dotcat.training.examples import (
    TrainingData,
    TrainingExample,
    build_examples,
    load_training_data,
)
from dotcat.training.mining import (
    check_window,
    load_negatives,
    mine_bm25_negatives,
    mine_dense_negatives,
    save_negatives,
)
from dotcat.training.model import TrainableBiEncoder
from dotcat.training.sampler import NoDuplicatePositiveBatchSampler, false_negative_mask

logger = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, int]]

RECORD_FILE = "dotcat_training.json"
NEGATIVES_FILE = "negatives.jsonl.gz"
RECORD_FORMAT = "dotcat-training"
DEV_MEASURE = "nDCG@10"
LOSSES = ("contrastive", "triplet")
NEGATIVE_SOURCES = ("bm25", "dense", "none")
DEV_EVALS = ("full", "none")
BF16_SETTINGS = ("auto", "on", "off")
# Config fields that may differ on resume without changing what is trained.
_RESUME_FREE = {
    "resume",
    "overwrite",
    "stop_after_steps",
    "checkpoint_every",
    "keep_checkpoints",
    "show_progress",
    "device",
}


@dataclass
class DotTrainConfig:
    """Everything that defines a BERT_DOT training run (recorded in the run's outputs).

    Data:
        data: a BEIR directory (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``) or a
            corpus (BEIR directory or file) with ``queries`` and ``qrels`` files.
        out_dir: where the model, the records, the negatives and the checkpoints go.
        split: the qrels split to train on (BEIR directory).
        queries, qrels: files replacing the directory's own.
        dev_fraction: share of the training queries held out for model selection
            (:func:`dotcat.training.split_dev`; 0: no dev split, the last epoch is kept).
        dev_eval: ``"full"``: dev nDCG@10 by exact retrieval over the corpus encoded with the
            current model (over more than ``dev_max_docs`` documents: the dev queries' judged
            documents plus a seeded sample of ``dev_max_docs`` others); ``"none"``: no dev
            evaluation (the last epoch is kept).

    Model:
        base: the model to start from (``"default"``: all-MiniLM-L6-v2; a directory; a hub name).
        pooling, similarity: ``None``: the base model's own (its sentence-transformers files),
            else ``cls``/``dot``. Keep the base's: the pre-trained weights are tuned for them.
        max_length: document length in tokens (also the saved model's ``max_seq_length``).
        query_max_length: query length in tokens during training (queries are short; the saved
            model encodes queries with ``max_length``, which only matters for longer queries).

    Negatives:
        negatives: ``"bm25"``, ``"dense"`` (the base model's ranking, ANCE style) or ``"none"``
            (in-batch negatives only).
        negatives_file: load these mined negatives instead of mining (a
            ``negatives.jsonl.gz`` from an earlier run repeats it exactly).
        n_negatives: hard negatives per example (sampled from the query's mined list; repeated
            when fewer were mined).
        window: ``(start, end)`` rank window the negatives are taken from.
        remine_each_epoch: before every epoch after the first, mine dense negatives again with
            the current model (ANCE, Xiong et al. 2021).

    Optimisation:
        loss: ``"contrastive"`` (InfoNCE, in-batch + hard negatives; ``temperature``) or
            ``"triplet"`` (``max(margin - cos(q, d+) + cos(q, d-), 0)``; ``margin``).
        epochs: passes over the training examples.
        batch_size: examples per batch, counted over all processes (the global batch): the
            pool of in-batch negatives of the contrastive loss.
        grad_accum_steps: batches per optimizer step (gradients summed, each batch's loss
            divided by their number). The contrastive loss still sees one batch at a time: to
            enlarge the in-batch pool in little memory, raise ``batch_size`` and set
            ``cache_chunk_size`` instead.
        cache_chunk_size: GradCache chunk, texts per forward pass (``None``/0: plain backward).
        lr, weight_decay: AdamW (no decay on biases and LayerNorm weights).
        warmup_ratio: share of the steps over which the learning rate rises linearly from 0;
            then it decays linearly to 0 at the last step.
        max_grad_norm: clip the gradients' global L2 norm (0: no clipping).
        temperature: of the contrastive loss; None: :data:`DEFAULT_TEMPERATURES` for the
            model's similarity (0.05 for cosines in [-1, 1]; 1 for inner products, whose
            unnormalised scores divided by 0.05 would saturate the softmax).
        margin: of the triplet loss, in cosine units (the loss is on cosines, as in the
            notes, whatever similarity the index searches with).
        seed: data order, dev split, negative sampling and dropout.
        bf16: ``"auto"`` (bf16 autocast where the hardware supports it natively: CUDA GPUs with
            bf16, CPUs with AVX512-BF16 or AMX), ``"on"`` (always; emulated and slow on other
            CPUs), ``"off"``.
        device: ``"auto"`` (CUDA when available), ``"cpu"`` or ``"cuda"``.

    Checkpoints:
        checkpoint_every: optimizer steps between checkpoints (0: none, except at a stop).
        keep_checkpoints: newest checkpoints kept (0: all).
        resume: continue from the newest checkpoint in ``out_dir`` (from scratch if none).
        overwrite: replace an earlier run's outputs in ``out_dir``.
        stop_after_steps: stop after this many optimizer steps with a checkpoint, as an
            interrupted run would (the schedule still spans all ``epochs``); resume later.
        show_progress: tqdm bars (rank 0 only).
    """

    data: str | Path
    out_dir: str | Path
    split: str = "train"
    queries: str | Path | None = None
    qrels: str | Path | None = None
    base: str = "default"
    pooling: str | None = None
    similarity: str | None = None
    loss: str = "contrastive"
    negatives: str = "bm25"
    negatives_file: str | Path | None = None
    n_negatives: int = 1
    window: tuple[int, int] = (10, 100)
    remine_each_epoch: bool = False
    epochs: int = 2
    batch_size: int = 32
    grad_accum_steps: int = 1
    cache_chunk_size: int | None = None
    lr: float = 1e-4  # chosen on SciFact dev over 5e-5 (eval/results/train_dot_*.md)
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    temperature: float | None = None
    margin: float = 0.1
    max_length: int = 256
    query_max_length: int = 64
    dev_fraction: float = 0.1
    dev_eval: str = "full"
    dev_max_docs: int = 50_000
    seed: int = 42
    bf16: str = "auto"
    device: str = "auto"
    checkpoint_every: int = 0
    keep_checkpoints: int = 2
    resume: bool = False
    overwrite: bool = False
    stop_after_steps: int | None = None
    show_progress: bool = True

    def validate(self) -> None:
        """Raise :class:`DotcatError` for a value that cannot work."""

        def need(ok: bool, message: str) -> None:
            if not ok:
                raise DotcatError(message)

        need(self.loss in LOSSES, f"loss must be one of {LOSSES}, got {self.loss!r}")
        need(
            self.negatives in NEGATIVE_SOURCES,
            f"negatives must be one of {NEGATIVE_SOURCES}, got {self.negatives!r}",
        )
        need(self.dev_eval in DEV_EVALS, f"dev_eval must be one of {DEV_EVALS}")
        need(str(self.bf16) in BF16_SETTINGS, f"bf16 must be one of {BF16_SETTINGS}")
        need(self.epochs >= 1, f"epochs must be >= 1, got {self.epochs}")
        need(self.batch_size >= 1, f"batch size must be >= 1, got {self.batch_size}")
        need(self.grad_accum_steps >= 1, "grad_accum_steps must be >= 1")
        need(not self.cache_chunk_size or self.cache_chunk_size >= 1, "cache chunk size < 1")
        need(self.n_negatives >= 0, f"n_negatives must be >= 0, got {self.n_negatives}")
        need(self.lr > 0, f"learning rate must be > 0, got {self.lr}")
        need(0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)")
        need(self.weight_decay >= 0 and self.max_grad_norm >= 0, "negative decay or clip norm")
        need(
            self.temperature is None or self.temperature > 0,
            f"temperature must be > 0, got {self.temperature}",
        )
        need(self.margin > 0, f"margin must be > 0, got {self.margin}")
        need(self.max_length >= 2 and self.query_max_length >= 2, "max lengths must be >= 2")
        need(self.dev_max_docs >= 1, "dev_max_docs must be >= 1")
        need(self.checkpoint_every >= 0, "checkpoint_every must be >= 0")
        need(
            self.stop_after_steps is None or self.stop_after_steps >= 1,
            "stop_after_steps must be >= 1",
        )
        check_window(self.window)
        if self.loss == "triplet":
            need(
                self.negatives != "none" or self.negatives_file is not None,
                "the triplet loss needs hard negatives: use negatives bm25 or dense",
            )
            need(self.n_negatives >= 1, "the triplet loss needs n_negatives >= 1")
        need(
            not (self.remine_each_epoch and self.negatives == "none"),
            "remine_each_epoch needs hard negatives (n_negatives >= 1)",
        )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (paths as strings, the window as a list)."""
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, Path):
                out[key] = str(value)
        out["window"] = list(self.window)
        return out


# -- precision ----------------------------------------------------------------------------


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


# -- one batch ----------------------------------------------------------------------------


#: The contrastive temperature per similarity when none is given: 0.05 for cosines (DPR-style
#: training of normalised embeddings, e.g. SimCSE, E5), 1 for inner products (DPR trains its
#: dot-product bi-encoder with no temperature at all).
DEFAULT_TEMPERATURES = {"cos": 0.05, "dot": 1.0}


@dataclass(frozen=True)
class LossConfig:
    """The loss of a run: ``contrastive`` (``temperature``, on the model's similarity) or
    ``triplet`` (``margin``, always on cosines: the notes define it so, and a margin in
    unbounded inner-product units would mean nothing)."""

    name: str = "contrastive"
    similarity: str = "cos"
    temperature: float = 0.05
    margin: float = 0.1

    @classmethod
    def for_model(
        cls, name: str, similarity: str, temperature: float | None, margin: float
    ) -> LossConfig:
        """The loss for a model of this similarity; ``temperature`` None: the default for it."""
        if temperature is None:
            temperature = DEFAULT_TEMPERATURES[similarity]
        return cls(name, similarity, temperature, margin)


def backward_batch(
    encode: Callable[[list[str], int], Tensor],
    batch: Sequence[TrainingExample],
    doc_texts: Mapping[str, str],
    loss: LossConfig,
    *,
    query_max_length: int,
    max_length: int,
    qrels: Qrels | None = None,
    ctx: DistributedContext | None = None,
    scale: float = 1.0,
    chunk_size: int | None = None,
    no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
    bf16: bool = False,
    device_type: str = "cpu",
) -> float:
    """Forward and backward one global batch; gradients accumulate in the parameters' ``.grad``.

    This process embeds its slice of ``batch`` (all of it without DDP): the queries, then the
    positives followed by the hard negatives (example-major) in one document pass. The loss is
    :func:`~dotcat.training.distributed.ddp_contrastive_loss` (with the batch's false-negative
    mask, :func:`dotcat.training.false_negative_mask`) or
    :func:`~dotcat.training.distributed.ddp_triplet_loss`, which reduce to the plain losses in a
    single process, times ``scale`` (``1 / batches per optimizer step``).

    With ``chunk_size``, GradCache (:func:`dotcat.losses.grad_cache_backward`): the texts are
    embedded ``chunk_size`` at a time without a graph, the loss is back-propagated to the
    embeddings, then each chunk is embedded again with its RNG state replayed and its slice of
    the gradient pushed through the encoder. Same gradients as the plain pass (with dropout:
    the same in distribution; tested equal without dropout) in the memory of one chunk.

    Args:
        encode: ``encode(texts, max_length) -> [len(texts), dim]`` embeddings with autograd
            (the model, or its DDP wrapper, on the tokenized texts).
        batch: the global batch (every process passes the same one).
        doc_texts: document id -> text to embed.
        no_sync: DDP's ``no_sync``, for GradCache's intermediate chunks.

    Returns:
        This process's loss value (scaled; averaged over processes it is the batch loss times
        ``scale``).
    """
    ctx = ctx or DistributedContext()
    sizes = shard_sizes(len(batch), ctx.world_size)
    rows = ctx.local_slice(len(batch))
    local = list(batch[rows])
    if not local:
        raise DotcatError(f"global batch of {len(batch)} is smaller than {ctx.world_size} ranks")
    n_neg = len(local[0].negative_ids)
    queries = [e.query for e in local]
    docs = [doc_texts[e.positive_id] for e in local]
    docs += [doc_texts[d] for e in local for d in e.negative_ids]
    mask = None
    if loss.name == "contrastive":
        mask = false_negative_mask(batch, qrels)[rows]
        if not mask.any():
            mask = None
    b = len(local)

    def loss_fn(q: Tensor, d: Tensor) -> Tensor:
        positive = d[:b]
        negatives = d[b:].reshape(b, n_neg, d.shape[-1]) if n_neg else None
        if loss.name == "contrastive":
            value = ddp_contrastive_loss(
                q,
                positive,
                negatives,
                sizes,
                ctx.rank,
                temperature=loss.temperature,
                similarity=loss.similarity,
                mask=mask,
            )
        else:
            value = ddp_triplet_loss(
                q,
                positive,
                negatives,
                sizes,
                ctx.rank,
                margin=loss.margin,
                similarity="cos",  # the notes' triplet loss, whatever the index searches by
            )
        return value * scale

    def encode_queries(texts: list[str]) -> Tensor:
        return encode(texts, query_max_length)

    def encode_documents(texts: list[str]) -> Tensor:
        return encode(texts, max_length)

    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
        if chunk_size:
            value = grad_cache_backward(
                [encode_queries, encode_documents],
                [split_batch(queries, chunk_size), split_batch(docs, chunk_size)],
                loss_fn,
                no_sync=no_sync,
            )
        else:
            value = loss_fn(encode_queries(queries), encode_documents(docs))
            value.backward()
    return float(value.detach())


# -- helpers ------------------------------------------------------------------------------


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_fingerprint(config: DotTrainConfig) -> dict[str, Any]:
    """The files a run reads and the sha256 of their bytes, plus one combined fingerprint."""
    from dotcat.data import find_corpus_file, find_qrels_file, find_queries_file

    data = Path(config.data)
    files = {
        "corpus": find_corpus_file(data),
        "queries": Path(config.queries) if config.queries else find_queries_file(data),
        "qrels": Path(config.qrels) if config.qrels else find_qrels_file(data, config.split),
    }
    hashes = {name: _file_sha256(path) for name, path in files.items()}
    combined = hashlib.sha256(
        "\n".join(f"{name}:{h}" for name, h in sorted(hashes.items())).encode()
    ).hexdigest()
    return {
        "files": {name: str(path.resolve()) for name, path in files.items()},
        "sha256": hashes,
        "fingerprint": combined,
    }


def state_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the parameter names and float32 bytes of a model in memory."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class _EncoderView:
    """The duck-typed encoder :func:`dotcat.training.mine_dense_negatives` expects."""

    def __init__(
        self, model: TrainableBiEncoder, query_max_length: int, bf16: bool, fingerprint: str
    ) -> None:
        self.model = model
        self.query_max_length = query_max_length
        self.bf16 = bf16
        self.similarity = model.similarity
        self.dim = model.dim
        self.name = model.name
        self.fingerprint = fingerprint

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode(
            self.model.query_texts(texts), self.query_max_length, bf16=self.bf16
        )

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        return self.model.encode(self.model.document_texts(texts), bf16=self.bf16)


def _document_texts(corpus: Any, ids: set[str]) -> dict[str, str]:
    """id -> encoded text (:func:`dotcat.index.document_text`) of the documents in ``ids``."""
    from dotcat.index import document_text

    texts: dict[str, str] = {}
    for batch in corpus.iter(batch_size=10_000):
        for doc_id, title, text in zip(batch["id"], batch["title"], batch["text"], strict=True):
            if doc_id in ids:
                texts[doc_id] = document_text(title or "", text or "")
    return texts


def dev_subset(corpus: Any, dev_qrels: Qrels, max_docs: int, seed: int) -> Any:
    """The corpus, or for more than ``max_docs`` documents the judged ones plus a seeded sample."""
    if len(corpus) <= max_docs:
        return corpus
    judged = {doc for docs in dev_qrels.values() for doc in docs}
    ids = corpus["id"]
    keep = [i for i, doc in enumerate(ids) if doc in judged]
    others = np.setdiff1d(np.arange(len(ids)), np.asarray(keep, dtype=np.int64))
    sample = np.random.default_rng(seed).choice(
        others, size=min(max_docs, len(others)), replace=False
    )
    rows = sorted(set(keep) | set(sample.tolist()))
    logger.info("dev evaluation on %d of %d documents (judged + sample)", len(rows), len(ids))
    return corpus.select(rows)


def evaluate_dev(
    model: TrainableBiEncoder,
    corpus: Any,
    queries: Mapping[str, str],
    qrels: Qrels,
    *,
    query_max_length: int,
    bf16: bool = False,
    k: int = 10,
    chunk_size: int = 8192,
    show_progress: bool = False,
) -> float:
    """nDCG@10 of exact inner-product retrieval over ``corpus`` with the current model.

    The corpus (a ``datasets.Dataset``) is encoded in chunks; each chunk is searched with
    ``faiss.knn`` and the per-chunk top-``k`` merged, as a flat index would. Scored with
    :func:`dotcat.evaluation.evaluate` (ir-measures).
    """
    from dotcat.evaluation import evaluate
    from dotcat.index import document_text
    from dotcat.training.mining import iter_document_chunks

    qids = list(queries)
    query_vectors = model.encode(
        model.query_texts([queries[q] for q in qids]), query_max_length, bf16=bf16
    )
    heap = faiss.ResultHeap(len(qids), k, keep_max=True)
    doc_ids: list[str] = []
    with progress_bar(total=len(corpus), desc="dev eval", unit="doc", enabled=show_progress) as bar:
        for ids, titles, texts in iter_document_chunks(corpus, chunk_size):
            docs = [document_text(t, x) for t, x in zip(titles, texts, strict=True)]
            vectors = model.encode(model.document_texts(docs), bf16=bf16)
            scores, positions = faiss.knn(
                query_vectors, vectors, min(k, len(ids)), metric=faiss.METRIC_INNER_PRODUCT
            )
            heap.add_result(scores, positions + len(doc_ids))
            doc_ids += ids
            bar.update(len(ids))
    heap.finalize()
    run = {
        qid: [
            (doc_ids[p], float(s)) for s, p in zip(heap.D[row], heap.I[row], strict=True) if p >= 0
        ]
        for row, qid in enumerate(qids)
    }
    report = evaluate(run, {q: dict(qrels[q]) for q in qids}, measures=[DEV_MEASURE])
    return report.aggregate[DEV_MEASURE]


def _param_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay for matrices (weights, embeddings), none for biases and norms."""
    decay, no_decay = [], []
    for param in model.parameters():
        if param.requires_grad:
            (decay if param.ndim >= 2 else no_decay).append(param)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def _usable_batches(sampler: NoDuplicatePositiveBatchSampler, epoch: int, world: int) -> list:
    """The epoch's batches; under DDP, without batches smaller than the number of processes."""
    batches = sampler.batches(epoch)
    if world > 1:
        batches = [b for b in batches if len(b) >= world]
    return batches


def _steps_in_epoch(n_batches: int, accum: int) -> int:
    return math.ceil(n_batches / accum)


def _seed_everything(seed: int, rank: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    # Different dropout masks on every process (they embed different examples anyway).
    torch.manual_seed(seed + rank)


def _prepare_out_dir(out_dir: Path, config: DotTrainConfig) -> None:
    """Refuse to mix a new run into an earlier run's outputs unless resuming or overwriting."""
    if not out_dir.exists():
        out_dir.mkdir(parents=True)
        return
    if not out_dir.is_dir():
        raise DotcatError(f"{out_dir}: exists and is not a directory")
    earlier = (out_dir / RECORD_FILE).exists() or (out_dir / CHECKPOINTS_DIR).exists()
    if not earlier or config.resume:
        return
    if not config.overwrite:
        raise DotcatError(
            f"{out_dir}: holds an earlier training run; resume it (--resume) or overwrite it "
            "(--overwrite)"
        )
    logger.warning("overwriting the training run in %s", out_dir)
    shutil.rmtree(out_dir / CHECKPOINTS_DIR, ignore_errors=True)
    for stale in out_dir.glob("negatives*.jsonl.gz"):
        stale.unlink()
    (out_dir / RECORD_FILE).unlink(missing_ok=True)


def _write_json(path: Path, value: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(tmp, path)


# -- negatives ----------------------------------------------------------------------------


def _negatives_path(out_dir: Path, epoch: int) -> Path:
    return out_dir / (NEGATIVES_FILE if epoch == 0 else f"negatives-epoch-{epoch}.jsonl.gz")


def _obtain_negatives(
    config: DotTrainConfig,
    ctx: DistributedContext,
    out_dir: Path,
    epoch: int,
    data: TrainingData,
    train_queries: Mapping[str, str],
    model: TrainableBiEncoder,
    bf16: bool,
) -> tuple[dict[str, list[str]] | None, dict[str, Any]]:
    """The hard negatives for ``epoch`` (0: the run's; later: re-mined), saved by rank 0.

    An existing file of this run (a resumed run) is read back rather than mined again, so a
    resumed run trains on exactly the negatives it started with. Other ranks read the file
    rank 0 wrote.
    """
    path = _negatives_path(out_dir, epoch)
    dense = epoch > 0 or config.negatives == "dense"
    if epoch == 0 and config.negatives_file is None and config.negatives == "none":
        return None, {"method": "none"}
    if config.resume and path.is_file():
        negatives, meta = load_negatives(path)
        return negatives, {**meta, "file": path.name}
    if ctx.is_main:
        meta: dict[str, Any] = {}
        if epoch == 0 and config.negatives_file is not None:
            negatives, meta = load_negatives(config.negatives_file)
            meta = {**meta, "loaded_from": str(config.negatives_file)}
        elif dense:
            view = _EncoderView(model, config.query_max_length, bf16, state_fingerprint(model))
            negatives = mine_dense_negatives(
                view,
                data.corpus,
                train_queries,
                data.qrels,
                config.window,
                show_progress=config.show_progress,
                meta=meta,
            )
        else:
            negatives = mine_bm25_negatives(
                data.corpus,
                train_queries,
                data.qrels,
                config.window,
                show_progress=config.show_progress,
                meta=meta,
            )
        save_negatives(path, negatives, {**meta, "epoch": epoch})
    ctx.barrier()
    negatives, meta = load_negatives(path)
    return negatives, {**meta, "file": path.name}


def _examples_for(
    config: DotTrainConfig,
    train_queries: Mapping[str, str],
    data: TrainingData,
    negatives: Mapping[str, Sequence[str]] | None,
    model: TrainableBiEncoder,
) -> tuple[list[TrainingExample], dict[str, str], NoDuplicatePositiveBatchSampler]:
    """Examples (query texts with the model's query prompt), document texts, batch sampler."""
    n_negatives = config.n_negatives if negatives is not None else 0
    qrels = {q: data.qrels[q] for q in train_queries}
    examples = build_examples(
        dict(zip(train_queries, model.query_texts(train_queries.values()), strict=True)),
        qrels,
        negatives,
        n_negatives,
        seed=config.seed,
        on_short="repeat",
    )
    if not examples:
        raise DotcatError("no training examples (no judged query with a positive and negatives)")
    needed = {e.positive_id for e in examples} | {d for e in examples for d in e.negative_ids}
    doc_texts = {
        doc: model.document_prefix + text
        for doc, text in _document_texts(data.corpus, needed).items()
    }
    sampler = NoDuplicatePositiveBatchSampler(
        examples, config.batch_size, seed=config.seed, qrels=qrels
    )
    return examples, doc_texts, sampler


# -- the run ------------------------------------------------------------------------------


def train_bi_encoder(config: DotTrainConfig) -> Path:
    """Train a BERT_DOT bi-encoder; returns the output directory (the best model).

    See the module docstring for the stages and :class:`DotTrainConfig` for the settings.
    Under ``torchrun`` (``WORLD_SIZE > 1``) every process calls this function and trains its
    share of each batch with DDP (:mod:`dotcat.training.distributed`); only rank 0 writes.

    Raises:
        DotcatError: bad settings or data, an output directory holding another run (without
            ``resume`` or ``overwrite``), a checkpoint that does not fit.
    """
    config.validate()
    if config.resume and _finished(Path(config.out_dir), config):
        logger.info("%s: this training run has already finished; nothing to resume", config.out_dir)
        return Path(config.out_dir)
    ctx = init_distributed(config.device)
    try:
        return _train(config, ctx)
    finally:
        ctx.close()


def _finished(out_dir: Path, config: DotTrainConfig) -> bool:
    """True when ``out_dir`` holds a finished run of as many epochs as ``config`` asks for."""
    try:
        record = json.loads((out_dir / RECORD_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    return (
        record.get("status") == "finished"
        and record.get("hyperparameters", {}).get("epochs") == config.epochs
    )


def _train(config: DotTrainConfig, ctx: DistributedContext) -> Path:
    started = time.perf_counter()
    out_dir = Path(config.out_dir)
    if ctx.is_main:
        _prepare_out_dir(out_dir, config)
    ctx.barrier()
    _seed_everything(config.seed, ctx.rank)
    show = config.show_progress and ctx.is_main

    # Data and the dev split.
    data = load_training_data(config.data, config.split, config.queries, config.qrels)
    train_qids, dev_qids = split_dev(list(data.queries), config.dev_fraction, config.seed)
    train_queries = {q: data.queries[q] for q in train_qids}
    dev_queries = {q: data.queries[q] for q in dev_qids}
    evaluating = bool(dev_queries) and config.dev_eval != "none"
    dev_corpus = (
        dev_subset(
            data.corpus, {q: data.qrels[q] for q in dev_qids}, config.dev_max_docs, config.seed
        )
        if evaluating
        else None
    )

    # The model.
    from dotcat.models import resolve_model, weights_fingerprint

    base_path = resolve_model(config.base)
    model = TrainableBiEncoder.from_pretrained(
        base_path,
        pooling=config.pooling,
        similarity=config.similarity,
        max_length=config.max_length,
    )
    model.name = config.base
    model.to(ctx.device)
    model.freeze_unused_parameters()
    bf16 = resolve_bf16(config.bf16, ctx.device)
    loss = LossConfig.for_model(config.loss, model.similarity, config.temperature, config.margin)

    # Hard negatives and examples.
    mining_started = time.perf_counter()
    negatives, negatives_meta = _obtain_negatives(
        config, ctx, out_dir, 0, data, train_queries, model, bf16
    )
    mining_seconds = time.perf_counter() - mining_started
    examples, doc_texts, sampler = _examples_for(config, train_queries, data, negatives, model)

    # Optimizer and schedule: the total counts every epoch's batches (grouped for accumulation).
    accum = config.grad_accum_steps
    total_steps = sum(
        _steps_in_epoch(len(_usable_batches(sampler, e, ctx.world_size)), accum)
        for e in range(config.epochs)
    )
    if total_steps == 0:
        raise DotcatError(
            f"no batch to train on ({len(examples)} examples, {ctx.world_size} ranks)"
        )
    optimizer = torch.optim.AdamW(
        _param_groups(model, config.weight_decay), lr=config.lr, betas=(0.9, 0.999), eps=1e-8
    )
    scheduler = get_linear_schedule_with_warmup(
        optimizer, math.ceil(config.warmup_ratio * total_steps), total_steps
    )
    # broadcast_buffers=False: BERT's buffers (position ids) are constants, and a broadcast at
    # every forward would be a collective that GradCache's uneven chunk counts could misalign.
    ddp = (
        DistributedDataParallel(
            model,
            device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
            broadcast_buffers=False,
        )
        if ctx.enabled
        else None
    )
    wrapped = ddp if ddp is not None else model

    def encode(texts: list[str], max_length: int) -> Tensor:
        return wrapped(model.tokenize(texts, max_length))

    # State that a checkpoint carries.
    step, epoch, batches_done = 0, 0, 0
    history: list[dict[str, Any]] = []
    loss_curve: list[list[float]] = []
    best: dict[str, Any] = {"epoch": None, "score": None}
    partial = {"loss_sum": 0.0, "steps": 0, "examples": 0, "seconds": 0.0}
    totals = {"examples": 0, "train_seconds": 0.0, "eval_seconds": 0.0}
    resumed_from = None

    checkpoint = latest_checkpoint(out_dir) if config.resume else None
    if config.resume and checkpoint is None:
        logger.warning("%s: no checkpoint to resume from; starting from scratch", out_dir)
    if checkpoint is not None:
        state, torch_rngs = load_checkpoint(checkpoint, model, optimizer, scheduler)
        _check_resumed_config(state["config"], config)
        step, epoch, batches_done = state["step"], state["epoch"], state["batches_done"]
        history, loss_curve, best = state["history"], state["loss_curve"], state["best"]
        partial, totals = state["partial"], state["totals"]
        mining_seconds = state.get("mining_seconds", mining_seconds)
        if epoch > 0 and config.remine_each_epoch:
            negatives, negatives_meta = _obtain_negatives(
                config, ctx, out_dir, epoch, data, train_queries, model, bf16
            )
            examples, doc_texts, sampler = _examples_for(
                config, train_queries, data, negatives, model
            )
        # The loop walks the epoch's batch list from `batches_done`; loading the sampler's
        # state checks that the examples and batching settings are the checkpoint's.
        sampler.load_state_dict(state["sampler"])
        if len(state["rng"]) == ctx.world_size:
            set_python_numpy_rng_state(state["rng"][ctx.rank])
            set_torch_rng_state(torch_rngs[ctx.rank])
        else:
            logger.warning(
                "checkpoint written by %d processes, resumed by %d: random states differ, the "
                "run continues but not bit for bit",
                len(state["rng"]),
                ctx.world_size,
            )
        resumed_from = str(checkpoint)

    data_info = data_fingerprint(config) if ctx.is_main else {}
    base_fingerprint = weights_fingerprint(base_path) if ctx.is_main else None

    def record(status: str) -> dict[str, Any]:
        train_seconds = totals["train_seconds"] + partial["seconds"]
        examples_seen = totals["examples"] + partial["examples"]
        return {
            "format": RECORD_FORMAT,
            "format_version": 1,
            "status": status,
            "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "dotcat_version": __version__,
            "torch_version": torch.__version__,
            "data": {
                "path": str(Path(config.data).resolve()),
                "split": config.split,
                **data_info,
                "corpus_documents": len(data.corpus),
            },
            "split": {
                "dev_fraction": config.dev_fraction,
                "seed": config.seed,
                "train_queries": len(train_queries),
                "dev_queries": len(dev_queries),
                "train_examples": len(examples),
                "dev_documents": len(dev_corpus) if dev_corpus is not None else 0,
            },
            "negatives": {k: v for k, v in negatives_meta.items() if k != "format"},
            "base_model": {
                "name": config.base,
                "path": str(base_path),
                "fingerprint": base_fingerprint,
            },
            "model": {
                "pooling": model.pooling,
                "similarity": model.similarity,
                "max_length": model.max_length,
                "query_max_length": config.query_max_length,
                "dim": model.dim,
                "fingerprint": (
                    weights_fingerprint(out_dir)
                    if (out_dir / "model.safetensors").exists()
                    else None
                ),
            },
            "loss": dataclasses.asdict(loss),
            "hyperparameters": config.to_dict(),
            "world_size": ctx.world_size,
            "device": str(ctx.device),
            "bf16": bf16,
            "total_steps": total_steps,
            "steps": step,
            "epochs": history,
            "best_epoch": best["epoch"],
            f"best_dev_{DEV_MEASURE}": best["score"],
            "loss_curve": loss_curve,
            "examples_seen": examples_seen,
            "timings": {
                "mining_seconds": round(mining_seconds, 3),
                "train_seconds": round(train_seconds, 3),
                "eval_seconds": round(totals["eval_seconds"], 3),
                "total_seconds": round(time.perf_counter() - started, 3),
            },
            "examples_per_second": round(examples_seen / train_seconds, 3)
            if train_seconds
            else None,
            "resumed_from": resumed_from,
        }

    def keep_if_best(ep: int, score: float | None) -> None:
        if score is None:
            return
        if best["score"] is None or score > best["score"]:
            best.update(epoch=ep, score=score)
            if ctx.is_main:
                model.save(out_dir)

    def dev_score() -> tuple[float | None, float]:
        if not evaluating:
            return None, 0.0
        t0 = time.perf_counter()
        score = None
        if ctx.is_main:
            score = evaluate_dev(
                model,
                dev_corpus,
                dev_queries,
                data.qrels,
                query_max_length=config.query_max_length,
                bf16=bf16,
                show_progress=show,
            )
        ctx.barrier()
        return score, time.perf_counter() - t0

    if checkpoint is None:
        score, seconds = dev_score()
        totals["eval_seconds"] += seconds
        history.append(
            {"epoch": 0, "train_loss": None, f"dev_{DEV_MEASURE}": score, "eval_seconds": seconds}
        )
        if score is not None:
            logger.info("epoch 0 (base model): dev %s %.4f", DEV_MEASURE, score)
        keep_if_best(0, score)

    def save_state() -> None:
        rng = [python_numpy_rng_state()]
        torch_rng = [torch_rng_state()]
        if ctx.enabled:
            rng = [None] * ctx.world_size
            torch_rng = [None] * ctx.world_size
            torch.distributed.all_gather_object(rng, python_numpy_rng_state())
            torch.distributed.all_gather_object(torch_rng, torch_rng_state())
        if ctx.is_main:
            sampler_state = sampler.state_dict()
            sampler_state.update(epoch=epoch, batches_yielded=batches_done)
            save_checkpoint(
                out_dir,
                step,
                model,
                optimizer,
                scheduler,
                {
                    "epoch": epoch,
                    "batches_done": batches_done,
                    "sampler": sampler_state,
                    "rng": rng,
                    "history": history,
                    "loss_curve": loss_curve,
                    "best": best,
                    "partial": partial,
                    "totals": totals,
                    "mining_seconds": mining_seconds,
                    "config": config.to_dict(),
                },
                torch_rng,
                keep=config.keep_checkpoints,
            )
            _write_json(out_dir / RECORD_FILE, record("running"))
        ctx.barrier()

    model.train()
    bar = progress_bar(total=total_steps, initial=step, desc="training", unit="step", enabled=show)
    stopped = False
    while epoch < config.epochs and not stopped:
        if epoch > 0 and batches_done == 0 and config.remine_each_epoch:
            t0 = time.perf_counter()
            negatives, negatives_meta = _obtain_negatives(
                config, ctx, out_dir, epoch, data, train_queries, model, bf16
            )
            examples, doc_texts, sampler = _examples_for(
                config, train_queries, data, negatives, model
            )
            mining_seconds += time.perf_counter() - t0
            model.train()
        sampler.set_epoch(epoch)
        batches = _usable_batches(sampler, epoch, ctx.world_size)
        while batches_done < len(batches):
            t0 = time.perf_counter()
            group = batches[batches_done : batches_done + accum]
            step_loss = 0.0
            for k, indices in enumerate(group):
                batch = [examples[i] for i in indices]
                last = k == len(group) - 1
                # Gradients are all-reduced once per optimizer step, on its last batch.
                sync = contextlib.nullcontext() if ddp is None or last else ddp.no_sync()
                with sync:
                    step_loss += backward_batch(
                        encode,
                        batch,
                        doc_texts,
                        loss,
                        query_max_length=config.query_max_length,
                        max_length=model.max_length,
                        qrels=data.qrels,
                        ctx=ctx,
                        scale=1.0 / len(group),
                        chunk_size=config.cache_chunk_size or None,
                        no_sync=ddp.no_sync if ddp is not None else None,
                        bf16=bf16,
                        device_type=ctx.device.type,
                    )
            if config.max_grad_norm > 0:
                torch.nn.utils.clip_grad_norm_(model.parameters(), config.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad(set_to_none=True)
            if ctx.enabled:  # the mean of the processes' scaled losses is the batch loss
                reduced = torch.tensor([step_loss], dtype=torch.float64, device=ctx.device)
                torch.distributed.all_reduce(reduced)
                step_loss = float(reduced) / ctx.world_size
            step += 1
            batches_done += len(group)
            n_examples = sum(len(b) for b in group)
            partial["loss_sum"] += step_loss
            partial["steps"] += 1
            partial["examples"] += n_examples
            partial["seconds"] += time.perf_counter() - t0
            loss_curve.append([step, round(step_loss, 6)])
            bar.update(1)
            bar.set_postfix(
                epoch=epoch + 1,
                loss=f"{step_loss:.4f}",
                ex_s=f"{partial['examples'] / max(partial['seconds'], 1e-9):.1f}",
            )
            at_stop = config.stop_after_steps is not None and step >= config.stop_after_steps
            if at_stop or (config.checkpoint_every and step % config.checkpoint_every == 0):
                save_state()
            if at_stop:
                stopped = True
                break
        if stopped:
            break

        # End of the epoch: its mean loss, dev score, the best model so far.
        train_loss = partial["loss_sum"] / max(partial["steps"], 1)
        score, seconds = dev_score()
        totals["eval_seconds"] += seconds
        totals["examples"] += partial["examples"]
        totals["train_seconds"] += partial["seconds"]
        history.append(
            {
                "epoch": epoch + 1,
                "train_loss": train_loss,
                f"dev_{DEV_MEASURE}": score,
                "steps": partial["steps"],
                "train_seconds": partial["seconds"],
                "examples_per_second": partial["examples"] / max(partial["seconds"], 1e-9),
                "eval_seconds": seconds,
            }
        )
        logger.info(
            "epoch %d: train loss %.4f, dev %s %s, %.1f examples/s",
            epoch + 1,
            train_loss,
            DEV_MEASURE,
            "n/a" if score is None else f"{score:.4f}",
            history[-1]["examples_per_second"],
        )
        if evaluating:
            keep_if_best(epoch + 1, score)
        elif ctx.is_main:
            best.update(epoch=epoch + 1, score=None)
            model.save(out_dir)
        epoch += 1
        batches_done = 0
        partial = {"loss_sum": 0.0, "steps": 0, "examples": 0, "seconds": 0.0}
        if ctx.is_main:
            _write_json(out_dir / RECORD_FILE, record("running"))
    bar.close()

    if ctx.is_main:
        status = "stopped" if stopped else "finished"
        _write_json(out_dir / RECORD_FILE, record(status))
        if not stopped:
            logger.info(
                "training finished: best epoch %s (dev %s %s), model in %s",
                best["epoch"],
                DEV_MEASURE,
                best["score"],
                out_dir,
            )
            if best["epoch"] == 0:
                logger.warning("no epoch beat the base model on the dev split; it is kept")
    ctx.barrier()
    return out_dir


def _check_resumed_config(recorded: Mapping[str, Any], config: DotTrainConfig) -> None:
    """Warn about settings that differ from the checkpoint's (the run would not be the same)."""
    now = config.to_dict()
    changed = sorted(
        k for k in now if k not in _RESUME_FREE and k in recorded and recorded[k] != now[k]
    )
    if changed:
        logger.warning(
            "resuming with settings that differ from the checkpoint's: %s",
            ", ".join(f"{k} {recorded[k]!r} -> {now[k]!r}" for k in changed),
        )
