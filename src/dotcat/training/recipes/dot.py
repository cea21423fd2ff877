"""The ``dot`` recipe: BERT_DOT on relevance labels, contrastive or triplet (``dotcat train dot``).

The run, driven by the loop (:func:`dotcat.training.loop.train`):

1. load the queries, qrels and corpus; from 100 training queries, carve a dev split out of them
   by a hash of their ids (:func:`dotcat.data.splits.split_dev`); under 100, every query trains
   and the held-out check's folds judge the run;
2. mine hard negatives (BM25 by default, or the base model's own dense ranking, from a rank
   window) or load them from a file, and save them to ``OUT_DIR/negatives.jsonl.gz`` so the
   run can be repeated exactly;
3. build (query, positive, negatives) examples and batches that never hold a false in-batch
   negative (:class:`~dotcat.training.data.sampler.NoDuplicatePositiveBatchSampler`);
4. forward and backward each batch (:func:`backward_batch`): a loss of
   :data:`dotcat.losses.registry.LOSSES` ``["dot"]`` over the batch's embeddings, bf16 autocast
   where the hardware has it, and optionally GradCache (Gao et al. 2021) so that a batch of hundreds
   of examples fits in the memory of a few;
5. evaluate nDCG@10 (and R@100) on the dev split before training (epoch 0, the base model) and
   after every epoch (:func:`evaluate_dev`), keeping the best model as ``OUT_DIR`` itself (a
   sentence-transformers directory, :meth:`~dotcat.training.model.TrainableBiEncoder.save`);
6. the held-out check (:mod:`dotcat.training.heldout`; :meth:`DotRecipe.judge`): the hybrid with
   the trained model against the hybrid with the base model on queries it never trained on
   (over each query's BM25 top 100); where no gain shows, ``OUT_DIR`` gets the base model back
   and the trained one moves to ``OUT_DIR/trained``.

The loss is InfoNCE over in-batch and hard negatives with a temperature (DPR, Karpukhin et al.
2020; :func:`dotcat.losses.contrastive.contrastive_loss`) or the triplet margin loss of
Sentence-BERT (Reimers & Gurevych 2019; :func:`dotcat.losses.triplet.triplet_loss`). Under
``torchrun`` every process trains its share of each batch with DDP, in-batch negatives gathered
from every process (:mod:`dotcat.losses.gathered`).

Output directory::

    OUT_DIR/  model.safetensors config.json tokenizer* modules.json 1_Pooling/ [2_Normalize/]
              sentence_bert_config.json config_sentence_transformers.json   <- the best model
              dotcat_training.json    negatives.jsonl.gz [negatives-epoch-N.jsonl.gz]
              checkpoints/step-XXXXXXXX/   [trained/: a model the check did not keep]

References:
    - Karpukhin et al. (2020), "Dense Passage Retrieval for Open-Domain Question Answering",
      EMNLP, arXiv:2004.04906.
    - Gao, Zhang, Han, Callan (2021), "Scaling Deep Contrastive Learning Batch Size under
      Memory Limited Setup", RepL4NLP, arXiv:2101.06983 (GradCache).
    - Reimers & Gurevych (2019), "Sentence-BERT", EMNLP, arXiv:1908.10084.
    - Xiong et al. (2021), "Approximate Nearest Neighbor Negative Contrastive Learning for
      Dense Text Retrieval", ICLR (ANCE: negatives re-mined with the current model).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch
from torch import Tensor
from torch.nn.parallel import DistributedDataParallel

from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.losses import LossConfig, grad_cache_backward, pick_loss, split_batch
from dotcat.models import resolve_model, weights_fingerprint
from dotcat.search.fusion import default_fusion
from dotcat.search.lexical import bm25_search
from dotcat.training.data.examples import (
    TrainingExample,
    build_examples,
    dev_subset,
    document_texts,
)
from dotcat.training.data.judged import with_judged_negatives
from dotcat.training.data.mining import (
    exact_search,
    load_negatives,
    mine_bm25_negatives,
    mine_dense_negatives,
    save_negatives,
)
from dotcat.training.data.sampler import NoDuplicatePositiveBatchSampler, batch_false_negatives
from dotcat.training.ddp import DistributedContext, init_distributed, shard_sizes
from dotcat.training.heldout import compare
from dotcat.training.loop import DEV_MEASURE
from dotcat.training.model import TrainableBiEncoder
from dotcat.training.recipe import NEGATIVES_FILE, Recipe, resolve_bf16
from dotcat.types import Qrels

logger = logging.getLogger(__name__)

#: Where a model the held-out check did not show better than its base goes (``OUT_DIR`` then
#: holds the base model).
TRAINED_DIR = "trained"
#: Dev retrieval depth and what is measured there: nDCG@10 selects the kept model; R@100 is
#: recorded beside it (what a re-ranker's top 100 can hold).
DEV_DEPTH = 100
DEV_MEASURES = (DEV_MEASURE, f"R@{DEV_DEPTH}")


class DotRecipe(Recipe):
    """BERT_DOT trained by :func:`dotcat.training.loop.train` (see the module docstring)."""

    kind = "dot"
    base_is_candidate = True
    negatives_meta: dict[str, Any]
    _negatives_epoch: int | None = None

    @staticmethod
    def context(device: str) -> DistributedContext:
        """This process's place in a ``torchrun`` job (a single process without one)."""
        return init_distributed(device)

    def prepare(self) -> None:
        """Data and dev split, the model (DDP-wrapped under torchrun), epoch 0's negatives."""
        config, ctx = self.config, self.ctx
        self.load_data()
        self.evaluating = bool(self.dev_queries) and config.dev_eval != "none"
        dev_qrels = {q: self.data.qrels[q] for q in self.dev_queries}
        dev_args = (self.data.corpus, dev_qrels, config.dev_max_docs, config.seed)
        self.dev_corpus = dev_subset(*dev_args) if self.evaluating else None
        self.base_path = resolve_model(config.base)
        model = self._load(self.base_path, config)
        model.name = config.base
        model.freeze_unused_parameters()
        self.model = self.trained = model
        self.bf16 = resolve_bf16(config.bf16, ctx.device)
        self.base_fingerprint = weights_fingerprint(self.base_path) if ctx.is_main else None
        # broadcast_buffers=False: BERT's buffers (position ids) are constants, and a broadcast
        # at every forward would be a collective that GradCache's uneven chunks could misalign.
        self.ddp = None
        if ctx.enabled:
            ids = [ctx.device.index] if ctx.device.type == "cuda" else None
            self.ddp = DistributedDataParallel(model, device_ids=ids, broadcast_buffers=False)
        self.loss = LossConfig.for_model(
            config.loss, model.similarity, config.temperature, config.margin
        )
        self.begin_epoch(0)

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
        name = NEGATIVES_FILE if epoch == 0 else f"negatives-epoch-{epoch}.jsonl.gz"
        path = self.out_dir / name
        if epoch == 0 and config.negatives_file is None and config.negatives == "none":
            return None, {"method": "none"}
        if not (config.resume and path.is_file()):
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
        miner = mine_bm25_negatives
        if epoch > 0 or config.negatives == "dense":
            model, bf16 = self.model, self.bf16
            view = SimpleNamespace(  # the encoder mine_dense_negatives expects
                encode_queries=lambda texts: model.encode(
                    model.query_texts(texts), config.query_max_length, bf16=bf16
                ),
                encode_documents=lambda texts: model.encode(model.document_texts(texts), bf16=bf16),
                similarity=model.similarity,
                name=model.name,
                fingerprint=state_fingerprint(model),
            )
            miner = functools.partial(mine_dense_negatives, view)
        return miner(*args, show_progress=config.show_progress, meta=meta), meta

    def build_examples(self, negatives: Mapping[str, Sequence[str]] | None) -> None:
        """Examples (query texts with the model's query prompt), document texts, sampler."""
        config, model = self.config, self.model
        n_negatives = config.n_negatives if negatives is not None else 0
        qrels = {q: self.data.qrels[q] for q in self.train_queries}
        query_texts = model.query_texts(self.train_queries.values())
        if negatives is not None:
            negatives = with_judged_negatives(negatives, qrels, list(self.train_queries))
        examples = build_examples(
            dict(zip(self.train_queries, query_texts, strict=True)),
            qrels,
            negatives,
            n_negatives,
            min_relevance=config.min_relevance,
            seed=config.seed,
            on_short="repeat",
        )
        if not examples:
            raise DotcatError(
                "no training examples (no judged query with a positive and negatives)"
            )
        needed = {e.positive_id for e in examples} | {d for e in examples for d in e.negative_ids}
        self.examples: list[TrainingExample] = examples
        texts = document_texts(self.data.corpus, needed)
        self.doc_texts = {doc: model.document_prefix + text for doc, text in texts.items()}
        self.sampler = NoDuplicatePositiveBatchSampler(
            examples, config.batch_size, seed=config.seed, qrels=qrels
        )

    def batches(self, epoch: int) -> list[Sequence[int]]:
        """The epoch's batches; under DDP, without batches smaller than the process count."""
        return [b for b in self.sampler.batches(epoch) if len(b) >= self.ctx.world_size]

    def encode(self, texts: list[str], max_length: int) -> Any:
        wrapped = self.ddp if self.ddp is not None else self.model
        return wrapped(self.model.tokenize(texts, max_length))

    def backward(self, batch: Sequence[int], epoch: int, scale: float, last: bool) -> float:
        return self.backward_examples([self.examples[i] for i in batch], scale, last)

    def backward_examples(
        self, examples: list[TrainingExample], scale: float, last: bool, **kwargs: Any
    ) -> float:
        """:func:`backward_batch` on ``examples`` (``kwargs``: its ``weight`` and ``extra``)."""
        # Gradients are all-reduced once per optimizer step, on its last batch.
        sync = contextlib.nullcontext() if self.ddp is None or last else self.ddp.no_sync()
        with sync:
            return backward_batch(
                self.encode, examples, self.doc_texts, self.loss,
                query_max_length=self.config.query_max_length, max_length=self.model.max_length,
                qrels=self.data.qrels, ctx=self.ctx, scale=scale,
                chunk_size=self.config.cache_chunk_size or None,
                no_sync=self.ddp.no_sync if self.ddp is not None else None,
                bf16=self.bf16, device_type=self.ctx.device.type, **kwargs,
            )  # fmt: skip

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
        return {"sampler": self.sampler.state_dict(), **super().state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        # Loading the sampler's state checks the examples and batching settings are the
        # checkpoint's; the loop walks the epoch's batch list from its own position.
        sampler_state = dict(state["sampler"])
        sampler_state.update(epoch=state["epoch"], batches_yielded=state["batches_done"])
        self.sampler.load_state_dict(sampler_state)
        super().load_state_dict(state)

    def record(self) -> dict[str, Any]:
        model = self.model
        return self.record_entries(
            self.negatives_meta,
            (self.base_path, self.base_fingerprint),
            {
                "pooling": model.pooling,
                "similarity": model.similarity,
                "max_length": model.max_length,
                "query_max_length": self.config.query_max_length,
                "dim": model.dim,
            },
            dataclasses.asdict(self.loss),
            {"dev_documents": len(self.dev_corpus) if self.dev_corpus is not None else 0},
        )

    # -- the held-out check (dotcat.training.heldout) ----------------------------------------

    def heldout_lists(self, model: TrainableBiEncoder, qids: Sequence[str]) -> dict[str, Any]:
        """``model``'s ranking of each query's BM25 top ``DEV_DEPTH``, by its dense score: the
        pool the check's hybrids fuse (a corpus encoded per fold would cost k + 1 passes)."""
        pool = self._bm25_pool
        docs = sorted({d for q in qids for d, _ in pool[q]})
        texts = document_texts(self.data.corpus, set(docs))
        vectors = model.encode(model.document_texts([texts[d] for d in docs]), bf16=self.bf16)
        queries = model.query_texts([self.data.queries[q] for q in qids])
        asked = model.encode(queries, self.config.query_max_length, bf16=self.bf16)
        row = {d: i for i, d in enumerate(docs)}
        out = {}
        for q, vector in zip(qids, asked, strict=True):
            ids = [d for d, _ in pool[q]]
            scores = vectors[[row[d] for d in ids]] @ vector
            out[q] = sorted(zip(ids, map(float, scores), strict=True), key=lambda x: -x[1])
        return out

    def dev_lists(self) -> dict[str, Any]:
        """The kept model's lists for the dev queries (a check on the dev split)."""
        return self.heldout_lists(self._load(self.out_dir), list(self.dev_queries))

    def judge(self, lists: Mapping[str, Any], parts: Sequence[Sequence[str]], method: str) -> Any:
        """Each held-out query's BM25 top ``DEV_DEPTH`` ranked by the hybrid a new index
        searches with (dense and BM25 fused by :func:`~dotcat.search.fusion.default_fusion`),
        the dense score the trained model's, against the same with the base model's (as it
        searches: its own pooling, similarity and length, whatever the run trained with)."""
        base = TrainableBiEncoder.from_pretrained(self.base_path).to(self.ctx.device)
        base = self.heldout_lists(base, list(lists))
        bm25, fusion = {q: self._bm25_pool[q] for q in lists}, default_fusion()
        trained = fusion.fuse_runs(lists, bm25)
        return compare(fusion.fuse_runs(base, bm25), trained, self.data.qrels, method)

    def keep(self, verdict: Any) -> dict[str, Any]:
        """Where no gain shows, ``OUT_DIR`` holds the base model (the default every command
        naming ``OUT_DIR`` then takes) and the trained one moves to ``OUT_DIR/trained``."""
        out = self.out_dir
        figures = verdict.figures("for the hybrid with the trained model", "with the base model")
        if verdict.shown_better:
            line = f"held-out check: {figures}: shown better; {out} holds the trained model"
            logger.info(line)
            return {"check": {"kept": "trained", "line": line}}
        self._load(out).save(out / TRAINED_DIR)
        TrainableBiEncoder.from_pretrained(self.base_path).save(out)  # as it is: its settings
        line = (
            f"held-out check: {figures}: not shown better, so {out} holds the base model; the "
            f"trained one is in {out / TRAINED_DIR}"
        )
        logger.warning(line)
        return {"check": {"kept": "base", "trained_model": str(out / TRAINED_DIR), "line": line}}

    @functools.cached_property
    def _bm25_pool(self) -> dict[str, list[tuple[str, float]]]:
        """BM25's top ``DEV_DEPTH`` of the checked queries (all, or the dev split's)."""
        checked = self.dev_queries or self.data.queries
        return bm25_search(self.data.corpus, checked, k=DEV_DEPTH, show_progress=False)

    def _load(self, path: str | Path, like: Any = None) -> TrainableBiEncoder:
        """``path``'s model on this process's device, with the pooling, similarity and length
        of ``like`` (the config, where None is the model's own; default: the trained model)."""
        like = self.model if like is None else like
        model = TrainableBiEncoder.from_pretrained(
            path, pooling=like.pooling, similarity=like.similarity, max_length=like.max_length
        )
        return model.to(self.ctx.device)


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
    positives followed by the hard negatives (example-major) in one document pass. The loss of
    its rows is ``weight`` times the ``dot`` loss ``loss.name`` (0: not computed), a
    multi-process form that reduces to the plain loss in a single process
    (:mod:`dotcat.losses.gathered`); the contrastive loss masks the batch's false negatives
    (:func:`~dotcat.training.data.sampler.batch_false_negatives`). Plus ``extra(query, positive,
    negatives, rows)`` when given (the ``distill`` recipe's teacher loss), all times ``scale``
    (``1 / batches per optimizer step``). With ``chunk_size``, GradCache
    (:func:`dotcat.losses.cached.grad_cache_backward`): the texts are embedded ``chunk_size`` at a
    time without a graph, the loss is back-propagated to the embeddings, then each chunk is
    embedded again with its RNG state replayed and its slice of the gradient pushed through the
    encoder. Same gradients as the plain pass (with dropout: the same in distribution; tested equal
    without dropout) in the memory of one chunk.

    Args:
        encode: ``encode(texts, max_length) -> [len(texts), dim]`` embeddings with autograd
            (the model, or its DDP wrapper, on the tokenized texts).
        batch: the global batch (every process passes the same one).
        no_sync: DDP's ``no_sync``, for GradCache's intermediate chunks.

    Returns:
        This process's loss value (scaled; averaged over processes it is the batch loss times
        ``scale``).
    """
    ctx = ctx or DistributedContext()
    rows = ctx.local_slice(len(batch))
    local = list(batch[rows])
    if not local:
        raise DotcatError(f"global batch of {len(batch)} is smaller than {ctx.world_size} ranks")
    queries = [e.query for e in local]
    docs = [doc_texts[e.positive_id] for e in local]
    docs += [doc_texts[d] for e in local for d in e.negative_ids]
    sizes = shard_sizes(len(batch), ctx.world_size)
    b = rows.stop - rows.start
    n_neg = len(batch[rows.start].negative_ids)
    mask = batch_false_negatives(batch, qrels)[rows] if loss.name == "contrastive" else None
    mask = mask if mask is not None and mask.any() else None
    fn = pick_loss("dot", loss.name)

    def loss_fn(q: Tensor, d: Tensor) -> Tensor:
        negatives = d[b:].reshape(b, n_neg, d.shape[-1]) if n_neg else None
        value = q.new_zeros((), dtype=torch.float32)
        if weight:
            value = weight * fn(q, d[:b], negatives, sizes, ctx.rank, loss, mask)
        if extra is not None:
            value = value + extra(q, d[:b], negatives, rows)
        return value * scale

    encoders = [lambda t: encode(t, query_max_length), lambda t: encode(t, max_length)]
    with torch.autocast(device_type, dtype=torch.bfloat16, enabled=bf16):
        if chunk_size:
            value = grad_cache_backward(
                encoders,
                [split_batch(queries, chunk_size), split_batch(docs, chunk_size)],
                loss_fn,
                no_sync=no_sync,
            )
        else:
            value = loss_fn(encoders[0](queries), encoders[1](docs))
            value.backward()
    return float(value.detach())


def state_fingerprint(model: torch.nn.Module) -> str:
    """sha256 over the parameter names and float32 bytes of a model in memory."""
    digest = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(tensor.detach().float().cpu().contiguous().numpy().tobytes())
    return digest.hexdigest()


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

    The corpus (a ``datasets.Dataset``) is encoded and searched in chunks, the per-chunk top
    100 merged as a flat index would (:func:`~dotcat.training.data.mining.exact_search`). Over
    a sampled dev corpus (:func:`~dotcat.training.data.examples.dev_subset`) R@100 is higher
    than over the whole corpus: fewer documents compete.
    """
    qids = list(queries)
    query_vectors = model.encode(
        model.query_texts([queries[q] for q in qids]), query_max_length, bf16=bf16
    )
    heap, doc_ids = exact_search(
        query_vectors,
        corpus,
        DEV_DEPTH,
        lambda docs: model.encode(model.document_texts(docs), bf16=bf16),
        chunk_size=chunk_size,
        desc="dev eval",
        show_progress=show_progress,
    )
    pairs = {qid: zip(heap.D[row], heap.I[row], strict=True) for row, qid in enumerate(qids)}
    run = {qid: [(doc_ids[p], float(s)) for s, p in top if p >= 0] for qid, top in pairs.items()}
    report = evaluate(run, {q: dict(qrels[q]) for q in qids}, measures=list(DEV_MEASURES))
    return {m: float(report.aggregate[m]) for m in DEV_MEASURES}
