"""Train a BERT_CAT re-ranker on relevance labels: ``dotcat train cat DATA OUT_DIR``.

:func:`train_cross_encoder` runs the ``cat`` recipe (:mod:`dotcat.training.recipes.cat`) in
the one training loop (:func:`dotcat.training.loop.train`); this module holds its settings,
first stages, negative pools, batch (:func:`backward_groups`) and dev scoring. The run:

1. load the queries, qrels and corpus; carve a dev split out of the training queries
   (:func:`dotcat.training.split_dev`, the same hash split as ``train dot``);
2. run the first stage(s) the re-ranker will sit behind (BM25, a dotcat index of a trained
   BERT_DOT, or a TREC run file) over the train and dev queries; a query's negative pool is
   its top ``depth`` documents of every first stage, interleaved by rank, minus the documents
   judged relevant; the pools are saved to ``OUT_DIR/negatives.jsonl.gz``;
3. one example per (query, relevant document); every epoch it is paired with ``n_negatives``
   documents drawn from its pool by a hash of (seed, epoch, query, document), so a resumed or
   repeated run sees the same groups;
4. train ``[CLS] q [SEP] d [SEP]`` -> logit with pointwise binary cross-entropy (monoBERT,
   :func:`dotcat.losses.bce_loss`) or localized contrastive estimation (LCE, a softmax over
   the positive and its negatives, :func:`dotcat.losses.lce_loss`); AdamW with linear warm-up
   and decay, clipping, accumulation, bf16 autocast where native; each batch is forwarded a
   few groups at a time (both losses are means over groups, so the gradient is the whole
   batch's, in the memory of a chunk; on CPU small chunks are also faster);
5. after every epoch re-rank the dev queries' first-stage top ``dev_depth`` and keep the
   model with the best dev nDCG@10 as ``OUT_DIR``; epoch 0 records the first stage's own
   dev score; finally choose the interpolation weight of first-stage and cross-encoder scores
   on dev (recorded, used by ``dotcat rerank --interpolate auto``);
6. record everything in ``OUT_DIR/dotcat_training.json``.

Checkpoints every ``checkpoint_every`` steps (:mod:`dotcat.training.checkpoint`); ``resume``
continues exactly (weights, optimizer, schedule, position in the epoch, RNG states).

References:
    - Nogueira & Cho (2019), "Passage Re-ranking with BERT", arXiv:1901.04085 (monoBERT).
    - Gao, Dai & Callan (2021), "Rethink Training of BERT Rerankers in Multi-Stage Retrieval
      Pipeline", ECIR, arXiv:2101.08751 (LCE, negatives from the pipeline's own first stage).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dotcat.errors import DotcatError
from dotcat.files import write_json
from dotcat.losses import soft_lce_loss
from dotcat.models.cross_encoder import CrossEncoder
from dotcat.training.distributed import DistributedContext
from dotcat.training.examples import seeded_rng
from dotcat.training.loop import BF16_SETTINGS, config_dict, param_groups
from dotcat.training.losses import LOSSES, pick_loss

logger = logging.getLogger(__name__)

Qrels = Mapping[str, Mapping[str, int]]
Run = dict[str, list[tuple[str, float]]]
NEGATIVES_FILE = "negatives.jsonl.gz"
TEACHER_FILE = "teacher.json.gz"
DEV_MEASURE = "nDCG@10"
CAT_LOSSES = tuple(LOSSES["cat"])
#: Interpolation weights tried on dev (1.0 = the plain cross-encoder).
ALPHAS = tuple(round(a, 2) for a in np.linspace(0.0, 1.0, 11))


@dataclass
class CatTrainConfig:
    """Everything that defines a BERT_CAT training run (recorded in the run's outputs).

    Data: ``data``, ``out_dir``, ``split``, ``queries``, ``qrels``, ``dev_fraction`` as for
    :class:`dotcat.training.DotTrainConfig`.

    First stage and negatives:
        first_stages: where negatives come from, each ``"bm25"``, a dotcat index directory
            (searched with its own encoder: a trained BERT_DOT) or a TREC run file covering
            the training queries. Use the first stage the re-ranker will sit behind.
        depth: a query's pool is the top ``depth`` of every first stage, minus judged-relevant.
        n_negatives: negatives per positive (the LCE group is ``1 + n_negatives``).
        negatives_file: load these pools instead of running the first stages.
        dev_depth: dev queries are re-ranked at this depth (the first of ``first_stages``).

    Model: ``base`` (a BERT checkpoint or a cross-encoder to continue), ``max_length``
    (tokens per pair; None: the base's record, else 256), ``attention_dropout``: dropout on
    the attention probabilities while training (None: the model's own, 0.1 for BERTs). 0 by
    default: PyTorch's fused CPU attention has no dropout, so any makes every layer fall back
    to the unfused attention (about 1.4x slower forward passes measured on MiniLM at 256
    tokens); the hidden-state dropout, the main regulariser, stays.

    Optimisation:
        loss: ``"lce"`` (softmax over a positive and its negatives) or ``"bce"`` (pointwise).
        epochs, batch_size (groups per optimizer step per accumulation step),
        grad_accum_steps, pairs_per_forward (pairs per forward/backward chunk; 0: the batch),
        lr, warmup_ratio, weight_decay, max_grad_norm, seed (sampling and the new head; not the
        dev split, carved with ``DEV_SEED`` like every stage's), bf16, device.
        head_lr_scale: the new classification head learns at ``lr * head_lr_scale``. Adam moves
            each weight by about the learning rate per step, so at a fine-tuning rate (3e-5) a
            freshly initialised head (weights ~0.02) barely moves in a few hundred steps and
            the loss stays at chance (seen on SciFact: LCE still at log(8) after 30 steps);
            the usual remedy is a larger rate for the head.

    Teacher: with ``teacher_weight`` w > 0 the LCE target mixes the label with the first
    stages' own view of the group (:func:`teacher_scores`, softmax at
    ``teacher_temperature``; :func:`dotcat.losses.soft_lce_loss`): the cross-encoder also
    learns from the ensemble of first stages it sits behind.

    Pre-training: with ``pretrain_queries`` N > 0, one epoch on N label-free pseudo-pairs of
    the corpus (a title or a cut sentence as the query, its document as the positive) comes
    first, and the qrels fine-tune the result (:mod:`dotcat.training.cat_pretrain`); ``auto``
    (the default) is 1,600 where the corpus gives at least 200 pseudo-queries, else 0.

    Checkpoints: checkpoint_every, keep_checkpoints, resume, overwrite, stop_after_steps,
    show_progress, as for ``DotTrainConfig``.
    """

    data: str | Path
    out_dir: str | Path
    split: str = "train"
    queries: str | Path | None = None
    qrels: str | Path | None = None
    base: str = "default"
    first_stages: tuple[str, ...] = ("bm25",)
    depth: int = 100
    n_negatives: int = 7
    negatives_file: str | Path | None = None
    loss: str = "lce"
    epochs: int = 2
    batch_size: int = 4
    grad_accum_steps: int = 1
    pairs_per_forward: int = 16
    # Measured on SciFact's dev split (eval/results/train_cat_notes.md): from a bi-encoder
    # base, 3e-5 and 5e-5 left the loss at chance for the first hundred steps; 1e-4 learned.
    lr: float = 1e-4
    head_lr_scale: float = 20.0
    warmup_ratio: float = 0.1
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    max_length: int | None = None
    attention_dropout: float | None = 0.0
    teacher_weight: float = 0.0
    teacher_temperature: float = 0.1
    dev_fraction: float = 0.1
    dev_depth: int = 20
    pretrain_queries: int | str = "auto"
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
        checks = [
            (self.loss in CAT_LOSSES, f"loss must be one of {CAT_LOSSES}, got {self.loss!r}"),
            (str(self.bf16) in BF16_SETTINGS, f"bf16 must be one of {BF16_SETTINGS}"),
            (bool(self.first_stages) or self.negatives_file is not None, "no first stage"),
            (self.depth >= 1 and self.dev_depth >= 1, "depths must be >= 1"),
            (self.n_negatives >= 1, f"n_negatives must be >= 1, got {self.n_negatives}"),
            (self.epochs >= 1, f"epochs must be >= 1, got {self.epochs}"),
            (self.batch_size >= 1 and self.grad_accum_steps >= 1, "batch sizes must be >= 1"),
            (self.pairs_per_forward >= 0, "pairs_per_forward must be >= 0"),
            (self.lr > 0, f"learning rate must be > 0, got {self.lr}"),
            (self.head_lr_scale > 0, "head_lr_scale must be > 0"),
            (0 <= self.warmup_ratio < 1, "warmup_ratio must be in [0, 1)"),
            (self.weight_decay >= 0 and self.max_grad_norm >= 0, "negative decay or clip"),
            (0 <= self.dev_fraction < 1, "dev_fraction must be in [0, 1)"),
            (
                self.attention_dropout is None or 0 <= self.attention_dropout < 1,
                "attention_dropout must be in [0, 1)",
            ),
            (0 <= self.teacher_weight <= 1, "teacher_weight must be in [0, 1]"),
            (self.teacher_temperature > 0, "teacher_temperature must be > 0"),
            (
                self.teacher_weight == 0 or self.loss == "lce",
                "a teacher (teacher_weight > 0) needs the lce loss",
            ),
            (self.checkpoint_every >= 0, "checkpoint_every must be >= 0"),
            (self.stop_after_steps is None or self.stop_after_steps >= 1, "stop_after_steps < 1"),
            (
                self.pretrain_queries == "auto"
                or (isinstance(self.pretrain_queries, int) and self.pretrain_queries >= 0),
                "pretrain_queries must be 'auto' or >= 0",
            ),
        ]
        for ok, message in checks:
            if not ok:
                raise DotcatError(message)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready (paths as strings, first stages as a list)."""
        return config_dict(self)


# -- first stages and negatives -------------------------------------------------------------


def first_stage_run(source: str, data: Any, queries: Mapping[str, str], k: int) -> Run:
    """The top ``k`` of one first stage for ``queries``: ``bm25``, an index dir or a run file."""
    from dotcat.data import read_run
    from dotcat.search.bm25 import bm25_search
    from dotcat.search.reranker import ranked

    if source == "bm25":
        return bm25_search(data.corpus, dict(queries), k=k)
    path = Path(source)
    if (path / "manifest.json").is_file():
        from dotcat.search.retriever import DenseRetriever

        return DenseRetriever(path).batch_search(dict(queries), k=k)
    if path.is_file():
        run = ranked(read_run(path))
        missing = [q for q in queries if q not in run]
        if missing:
            logger.warning("%s: no results for %d of %d queries", path, len(missing), len(queries))
        return {q: run.get(q, [])[:k] for q in queries}
    raise DotcatError(f"first stage {source!r}: not 'bm25', an index directory or a run file")


def negative_pools(runs: Sequence[Run], qrels: Qrels, depth: int) -> dict[str, list[str]]:
    """qid -> the top ``depth`` of every run interleaved by rank, deduplicated, minus relevant.

    >>> runs = [{"q": [("a", 3), ("b", 2)]}, {"q": [("c", 9), ("a", 1)]}]
    >>> negative_pools(runs, {"q": {"b": 1}}, 2)
    {'q': ['a', 'c']}
    """
    pools: dict[str, list[str]] = {}
    for qid in {q for run in runs for q in run}:
        judged = qrels.get(qid, {})
        lists = [[d for d, _ in run.get(qid, [])[:depth]] for run in runs]
        seen: dict[str, None] = {}
        for rank in range(max((len(x) for x in lists), default=0)):
            for docs in lists:
                if rank < len(docs) and judged.get(docs[rank], 0) <= 0:
                    seen.setdefault(docs[rank], None)
        pools[qid] = list(seen)
    return dict(sorted(pools.items()))


def teacher_scores(runs: Sequence[Run], depth: int) -> dict[str, dict[str, float]]:
    """qid -> doc -> the first stages' fused score: the mean of each run's min-max-normalised
    score over its top ``depth`` (0 where a run does not list the document).

    >>> teacher_scores([{"q": [("a", 3.0), ("b", 1.0)]}, {"q": [("b", 5.0), ("c", 1.0)]}], 2)
    {'q': {'a': 0.5, 'b': 0.5, 'c': 0.0}}
    """
    from dotcat.search.reranker import minmax

    out: dict[str, dict[str, float]] = {}
    for run in runs:
        for qid, docs in run.items():
            head = docs[:depth]
            norm = minmax(np.asarray([s for _, s in head], dtype=np.float64))
            scores = out.setdefault(qid, {})
            for (doc, _), value in zip(head, norm, strict=True):
                scores[doc] = scores.get(doc, 0.0) + float(value) / len(runs)
    return {q: dict(sorted(d.items())) for q, d in sorted(out.items())}


def group_teacher(
    scores: Mapping[str, float], positive: str, negatives: Sequence[str]
) -> list[float]:
    """The teacher's scores of a group, the positive raised to the best of the group: the
    first stages may miss or under-rate a judged document, and the label is the truth."""
    negs = [scores.get(d, 0.0) for d in negatives]
    return [max([scores.get(positive, 0.0), *negs])] + negs


def sample_negatives(pool: Sequence[str], n: int, *key: object) -> list[str]:
    """``n`` documents of ``pool`` drawn by a hash of ``key`` (with repeats if it is short)."""
    rng = seeded_rng(*key)
    if len(pool) >= n:
        return rng.sample(list(pool), n)
    return [rng.choice(list(pool)) for _ in range(n)]


@dataclass(frozen=True)
class CatExample:
    """A judged (query, relevant document) pair; negatives are drawn per epoch."""

    qid: str
    query: str
    positive_id: str


def build_cat_examples(
    queries: Mapping[str, str], qrels: Qrels, pools: Mapping[str, Sequence[str]]
) -> list[CatExample]:
    """One example per (query, relevant document) whose query has a non-empty pool."""
    examples, no_pool = [], 0
    for qid, text in queries.items():
        if not pools.get(qid):
            no_pool += 1
            continue
        for doc, grade in sorted(qrels.get(qid, {}).items()):
            if grade > 0:
                examples.append(CatExample(qid, text, doc))
    if no_pool:
        logger.warning("%d training queries have no first-stage negative; skipped", no_pool)
    return examples


# -- one batch ------------------------------------------------------------------------------


def set_attention_dropout(model: torch.nn.Module, p: float) -> int:
    """Set the dropout on attention probabilities (``*.attention.self.dropout``); returns count.

    Only the training-time modules change; the saved config keeps the model's own value.
    """
    changed = 0
    for name, module in model.named_modules():
        if isinstance(module, torch.nn.Dropout) and name.endswith("attention.self.dropout"):
            module.p = p
            changed += 1
    return changed


def backward_groups(
    cross_encoder: CrossEncoder,
    groups: Sequence[tuple[str, list[str]]],
    loss: str,
    *,
    pairs_per_forward: int = 0,
    scale: float = 1.0,
    bf16: bool = False,
    teacher: Sequence[Sequence[float]] | None = None,
    teacher_weight: float = 0.0,
    teacher_temperature: float = 0.1,
) -> float:
    """Forward and backward a batch of groups ``(query, [positive, negative, ...])``.

    The loss (:func:`~dotcat.losses.lce_loss` over each group, or :func:`~dotcat.losses.bce_loss`
    over every pair with the positive labelled 1) is a mean over groups of equal size, so it is
    computed ``pairs_per_forward // group size`` groups at a time, each chunk's loss weighted
    by its share of the batch: the same gradient as one pass, in a chunk's memory. Gradients
    accumulate in ``.grad``; returns the batch loss times ``scale``. With ``teacher`` (one
    list of scores per group) and ``teacher_weight`` > 0, LCE becomes
    :func:`~dotcat.losses.soft_lce_loss`.
    """
    size = len(groups[0][1])
    if any(len(docs) != size for _, docs in groups):
        raise ValueError("all groups of a batch must have the same size")
    per_chunk = max(1, pairs_per_forward // size) if pairs_per_forward else len(groups)
    device = cross_encoder.device
    total = 0.0
    for start in range(0, len(groups), per_chunk):
        chunk = groups[start : start + per_chunk]
        queries = [q for q, docs in chunk for _ in docs]
        documents = [d for _, docs in chunk for d in docs]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            logits = cross_encoder.logits(cross_encoder.features(queries, documents))
        logits = logits.float().view(len(chunk), size)
        if loss == "lce" and teacher is not None and teacher_weight > 0:
            targets = torch.tensor(teacher[start : start + per_chunk], device=logits.device)
            value = soft_lce_loss(logits, targets, teacher_weight, teacher_temperature)
        else:
            value = pick_loss("cat", loss)(logits)
        weighted = value * (len(chunk) / len(groups)) * scale
        weighted.backward()
        total += float(weighted.detach())
    return total


# -- dev evaluation -------------------------------------------------------------------------


def dev_candidates(
    cross_encoder: CrossEncoder,
    first: Run,
    queries: Mapping[str, str],
    doc_texts: Mapping[str, str],
    depth: int,
) -> dict[str, Any]:
    """The dev queries' first-stage lists with the current model's logits for the top ``depth``."""
    from dotcat.search.reranker import score_candidates

    with torch.inference_mode():
        return score_candidates(first, queries, doc_texts, cross_encoder, depth)


def dev_score(candidates: Mapping[str, Any], qrels: Qrels, alpha: float = 1.0) -> float:
    """Dev nDCG@10 of the re-ranked lists (``alpha``: see :func:`dotcat.search.reranker.fuse`)."""
    from dotcat.evaluation import evaluate
    from dotcat.search.reranker import fuse

    run = fuse(candidates, alpha)
    report = evaluate(run, {q: dict(qrels[q]) for q in candidates}, measures=[DEV_MEASURE])
    return report.aggregate[DEV_MEASURE]


# -- the run --------------------------------------------------------------------------------


def train_cross_encoder(config: CatTrainConfig) -> Path:
    """Train a BERT_CAT re-ranker; returns the output directory (the best model).

    Raises:
        DotcatError: bad settings or data, an output directory holding another run (without
            ``resume`` or ``overwrite``), a checkpoint that does not fit.
    """
    from dotcat.training.cat_pretrain import pretrain, resolve_pretrain_queries
    from dotcat.training.loop import finished, prepare_out_dir, train
    from dotcat.training.recipes.cat import CatRecipe

    config.validate()
    out_dir = Path(config.out_dir)
    if config.resume and finished(out_dir, "cat", config.epochs):
        logger.info("%s: this training run has already finished; nothing to resume", out_dir)
        return out_dir
    config = dataclasses.replace(config, pretrain_queries=resolve_pretrain_queries(config))
    if config.pretrain_queries:
        # Refuse a busy output directory before the pre-training, not after it.
        prepare_out_dir(out_dir, config, CatRecipe.stale_files)
        base = pretrain(config)
        if not finished(base, "cat", 1):
            logger.warning("%s: pre-training stopped; resume (--resume) to finish it", base)
            return out_dir
        config = dataclasses.replace(config, base=str(base))
    recipe = CatRecipe(config)
    return train(recipe, config, DistributedContext(device=recipe.device))


def cat_param_groups(model: torch.nn.Module, config: CatTrainConfig) -> list[dict[str, Any]]:
    """AdamW groups: the encoder as in ``train dot``; the head at ``lr * head_lr_scale``."""
    head = [p for n, p in model.named_parameters() if n.startswith("classifier.")]
    ids = {id(p) for p in head}
    groups = [
        {**g, "params": [p for p in g["params"] if id(p) not in ids]}
        for g in param_groups(model, config.weight_decay)
    ]
    groups.append({"params": head, "weight_decay": 0.0, "lr": config.lr * config.head_lr_scale})
    return [g for g in groups if g["params"]]


def first_stage_only(docs: Sequence[tuple[str, float]]) -> Any:
    """Candidates with no re-ranked head: the first stage's own ranking."""
    from dotcat.search.reranker import Candidates

    return Candidates(
        docs=[d for d, _ in docs],
        first=np.asarray([s for _, s in docs], dtype=np.float64),
        cat=np.empty(0),
    )


def record_alpha(out_dir: Path, alpha: float, scores: Mapping[float, float]) -> None:
    """Add the dev-chosen interpolation weight to the model's ``dotcat_cross_encoder.json``."""
    path = out_dir / "dotcat_cross_encoder.json"
    record = json.loads(path.read_text()) if path.is_file() else {}
    record["interpolation_alpha"] = alpha
    record["interpolation_dev_scores"] = {str(a): round(s, 6) for a, s in scores.items()}
    write_json(path, record)
    logger.info(
        "interpolation on dev: alpha %.1f (nDCG@10 %.4f; plain cross-encoder %.4f)",
        alpha,
        scores[alpha],
        scores[1.0],
    )
