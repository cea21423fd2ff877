"""Train a BERT_DOT bi-encoder on relevance labels: ``dotcat train dot DATA OUT_DIR``.

:func:`train_bi_encoder` runs the ``dot`` recipe (:mod:`dotcat.training.recipes.dot`) in
the one training loop (:func:`dotcat.training.loop.train`); this module holds its settings
(:class:`DotTrainConfig`), its batch (:func:`backward_batch`) and its dev evaluation. The run:

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
import hashlib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import torch
from torch import Tensor

from dotcat.errors import DotcatError
from dotcat.losses import split_batch
from dotcat.losses.cached import grad_cache_backward
from dotcat.progress import progress_bar
from dotcat.training.distributed import DistributedContext, init_distributed, shard_sizes
from dotcat.training.examples import TrainingExample
from dotcat.training.loop import BF16_SETTINGS, DEV_MEASURE, config_dict
from dotcat.training.loop import resolve_bf16 as resolve_bf16  # the dot recipe's public name
from dotcat.training.losses import pick_loss
from dotcat.training.mining import check_window
from dotcat.training.model import TrainableBiEncoder
from dotcat.training.sampler import false_negative_mask

logger = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, int]]

NEGATIVES_FILE = "negatives.jsonl.gz"
NEGATIVE_SOURCES = ("bm25", "dense", "none")
DEV_EVALS = ("full", "none")
#: Dev retrieval depth and what is measured there: nDCG@10 selects the kept model; R@100 is
#: recorded beside it (what a re-ranker's top 100 can hold).
DEV_DEPTH = 100
DEV_MEASURES = (DEV_MEASURE, f"R@{DEV_DEPTH}")


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
        seed: data order, negative sampling and dropout. The dev split does not follow it: it
            is carved with :data:`dotcat.data.splits.DEV_SEED`, so a run with another seed
            holds out the queries every other stage holds out.
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

        pick_loss("dot", self.loss)
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
        return config_dict(self)


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
    weight: float = 1.0,
    extra: Callable[[Tensor, Tensor, Tensor | None, slice], Tensor] | None = None,
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
        weight: of ``loss`` (0: not computed).
        extra: a further loss ``extra(query, positive, negatives, rows)`` on this process's
            embeddings (``rows``: its slice of the global batch), added to ``weight * loss``
            (the ``distill`` recipe's teacher loss).

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

    fn = pick_loss("dot", loss.name)

    def loss_fn(q: Tensor, d: Tensor) -> Tensor:
        negatives = d[b:].reshape(b, n_neg, d.shape[-1]) if n_neg else None
        value = q.new_zeros((), dtype=torch.float32)
        if weight:
            value = weight * fn(q, d[:b], negatives, sizes, ctx.rank, loss, mask)
        if extra is not None:
            value = value + extra(q, d[:b], negatives, rows)
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


def state_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the parameter names and float32 bytes of a model in memory."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


class EncoderView:
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


def document_texts(corpus: Any, ids: set[str]) -> dict[str, str]:
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
    chunk_size: int = 8192,
    show_progress: bool = False,
) -> dict[str, float]:
    """``DEV_MEASURES`` (nDCG@10, which selects the model, and R@100) of exact inner-product
    retrieval over ``corpus`` with the current model.

    The corpus (a ``datasets.Dataset``) is encoded in chunks; each chunk is searched with
    ``faiss.knn`` and the per-chunk top 100 merged, as a flat index would. Scored with
    :func:`dotcat.evaluation.evaluate` (ir-measures). Over a sampled dev corpus
    (:func:`dev_subset`) R@100 is higher than over the whole corpus: fewer documents compete.
    """
    from dotcat.evaluation import evaluate
    from dotcat.index import document_text
    from dotcat.training.mining import iter_document_chunks

    qids = list(queries)
    k = DEV_DEPTH
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
    report = evaluate(run, {q: dict(qrels[q]) for q in qids}, measures=list(DEV_MEASURES))
    return {m: float(report.aggregate[m]) for m in DEV_MEASURES}


# -- the run ------------------------------------------------------------------------------


def train_bi_encoder(config: DotTrainConfig) -> Path:
    """Train a BERT_DOT bi-encoder; returns the output directory (the best model).

    The ``dot`` recipe (:class:`dotcat.training.recipes.dot.DotRecipe`) run by the training
    loop (:func:`dotcat.training.loop.train`); see the module docstring for the stages and
    :class:`DotTrainConfig` for the settings. Under ``torchrun`` (``WORLD_SIZE > 1``) every
    process calls this function and trains its share of each batch with DDP
    (:mod:`dotcat.training.distributed`); only rank 0 writes.

    Raises:
        DotcatError: bad settings or data, an output directory holding another run (without
            ``resume`` or ``overwrite``), a checkpoint that does not fit.
    """
    from dotcat.training.loop import finished, train
    from dotcat.training.recipes.dot import DotRecipe

    config.validate()
    if config.resume and finished(Path(config.out_dir), "dot", config.epochs):
        logger.info("%s: this training run has already finished; nothing to resume", config.out_dir)
        return Path(config.out_dir)
    ctx = init_distributed(config.device)
    try:
        return train(DotRecipe(config, ctx), config, ctx)
    finally:
        ctx.close()
