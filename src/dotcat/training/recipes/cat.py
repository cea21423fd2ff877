"""The ``cat`` recipe: BERT_CAT on relevance labels, LCE or BCE over first-stage negatives.

``dotcat train cat DATA OUT_DIR``, driven by the loop (:func:`dotcat.training.loop.train`):

1. optionally, first, one epoch of label-free pre-training on pseudo-pairs of the corpus (a title or
   a cut sentence as the query, its document as the positive), from which the fine-tuning on the
   qrels starts (:meth:`CatRecipe.first_steps`, :mod:`dotcat.training.recipes.cat_pretrain`);
2. load the queries, qrels and corpus; from 100 training queries, carve a dev split out of
   them (:func:`dotcat.data.splits.split_dev`, the same hash split as ``train dot``; where that
   makes fewer than the interpolation rule's 20 queries, the 20 of smallest hash); under 100,
   every query trains and the held-out check's folds judge the run
   (:func:`dotcat.training.data.judged.split_queries`);
3. run the first stage(s) the re-ranker will sit behind (BM25, a dotcat index of a trained
   BERT_DOT, or a TREC run file) over the train and dev queries; a query's negative pool is
   its top ``depth`` of every first stage minus the documents judged relevant, saved to
   ``OUT_DIR/negatives.jsonl.gz`` (:mod:`dotcat.training.data.pools`);
4. one example per (query, relevant document); every epoch it is paired with ``n_negatives``
   documents drawn from its pool by a hash of (seed, epoch, query, document), so a resumed or
   repeated run sees the same groups;
5. train ``[CLS] q [SEP] d [SEP]`` -> logit with pointwise binary cross-entropy (monoBERT,
   :func:`dotcat.losses.pointwise.bce_loss`) or localized contrastive estimation (LCE, a softmax
   over the positive and its negatives, :func:`dotcat.losses.listwise.lce_loss`), optionally with
   the first stages as a teacher (:func:`dotcat.losses.listwise.soft_lce_loss`); each batch is
   forwarded a few groups at a time (:func:`backward_groups`: both losses are means over groups,
   so the gradient is the whole batch's, in a chunk's memory; on CPU small chunks are faster too);
6. after every epoch re-rank the dev queries' first-stage top ``dev_depth`` and keep the model with
   the best dev nDCG@10 as ``OUT_DIR``; epoch 0 records the first stage's own dev score; finally
   choose the interpolation weight of first-stage and cross-encoder scores on dev (recorded, used by
   ``dotcat rerank --interpolate auto``). ``dev_depth`` is search's re-ranking depth (100): min-max
   normalisation and the documents a weak re-ranker lifts both depend on the list's length, so a
   weight chosen on the top 20 is another weight at 100 (the judge loop's SciFact re-ranker: -0.042
   re-ranking 20, -0.058 re-ranking 100, ``eval/benchmarks/results/judge_loop_rerank.md``);
7. the held-out check (:mod:`dotcat.training.heldout`; :meth:`CatRecipe.judge`): the re-ranked
   lists of queries the model never trained on against the first stage's; the weight is
   recorded only where that shows a gain, else 0 (until then, 0 too).

References:
    - Nogueira & Cho (2019), "Passage Re-ranking with BERT", arXiv:1901.04085 (monoBERT).
    - Gao, Dai & Callan (2021), "Rethink Training of BERT Rerankers in Multi-Stage Retrieval
      Pipeline", ECIR, arXiv:2101.08751 (LCE, negatives from the pipeline's own first stage).
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.evaluation.choice import MIN_QUERIES, Choice, choose
from dotcat.files import replacing, write_json
from dotcat.losses import pick_loss, soft_lce_loss
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.search.reranker import Candidates, corpus_texts, fuse, score_candidates
from dotcat.training.config import CatConfig
from dotcat.training.data.examples import known_texts
from dotcat.training.data.judged import with_judged_negatives
from dotcat.training.data.mining import load_negatives, negatives_meta, save_negatives
from dotcat.training.data.pools import (
    build_cat_examples,
    first_stage_run,
    group_teacher,
    negative_pools,
    sample_negatives,
    teacher_scores,
)
from dotcat.training.heldout import compare
from dotcat.training.loop import DEV_MEASURE, finished, prepare_out_dir, train
from dotcat.training.recipe import NEGATIVES_FILE, Recipe, param_groups, resolve_bf16
from dotcat.training.recipes.cat_pretrain import pretrain_config, resolve_pretrain_queries
from dotcat.types import Qrels, Run

logger = logging.getLogger(__name__)

TEACHER_FILE = "teacher.json.gz"
#: Interpolation weights tried on dev (1.0 = the plain cross-encoder).
ALPHAS = tuple(round(float(a), 2) for a in np.linspace(0.0, 1.0, 11))
#: The prior default, kept where dev cannot tell it from the best weight
#: (:func:`dotcat.evaluation.choice.choose`): the grid's centre, equal trust in the first stage
#: and the cross-encoder, as the fusion's prior. Not 1 (the plain cross-encoder score): on the
#: README recipe's held-out SciFact dev lists, choosing on half and judging on the other half
#: (100 draws), the rule with prior 0.5 was +0.0127 nDCG@10 above it with prior 1 and +0.0083
#: above argmax, and chose the same weight far more often (``eval/studies/choices``).
PRIOR_ALPHA = 0.5


class CatRecipe(Recipe):
    """BERT_CAT trained by :func:`dotcat.training.loop.train` (see the module docstring)."""

    kind = "cat"
    # Epoch 0 is the first stage alone: a score to beat, not a model to keep.
    base_is_candidate = False
    fold_files = (TEACHER_FILE,)
    best_score: float | None = None
    choice: Choice | None = None  # the weight the held-out check's lists choose

    @classmethod
    def first_steps(cls, config: CatConfig) -> CatConfig | None:
        """The label-free pre-training, when ``pretrain_queries`` asks for it: one epoch on
        pseudo-pairs of the corpus, run by the loop into ``OUT_DIR/pretrain/model``
        (:mod:`dotcat.training.recipes.cat_pretrain`).

        Returns the config the fine-tuning trains (``base``: the pre-trained model;
        ``pretrain_queries``: the number ``auto`` resolved to), or None when the pre-training
        stopped before its end (resume finishes it). A finished pre-training is not run again.
        """
        # Refuse a busy output directory (or clear it) before the pre-training, not after it.
        prepare_out_dir(Path(config.out_dir), config)
        config = dataclasses.replace(config, pretrain_queries=resolve_pretrain_queries(config))
        if not config.pretrain_queries:
            return config
        pre = pretrain_config(config)
        pre_dir = Path(pre.out_dir)
        if not (pre.resume and finished(pre_dir, cls.kind, pre.epochs)):
            ctx = cls.context(pre.device)
            train(cls(pre, ctx), pre, ctx)
        if not finished(pre_dir, cls.kind, pre.epochs):
            logger.warning("%s: pre-training stopped; resume (--resume) to finish it", pre_dir)
            return None
        return dataclasses.replace(config, base=str(pre_dir))

    def prepare(self) -> None:
        """Data and dev split, the model's training settings, pools and examples (the model is
        loaded here, after the loop seeded the random generators)."""
        config = self.config
        self.best_candidates: dict[str, Any] = {}  # the best epoch's dev lists
        # The interpolation weight's rule needs MIN_QUERIES dev queries to judge the
        # re-ranker against its first stage: a small judged set holds out that many where it can.
        self.load_data(MIN_QUERIES)
        data = self.data
        self.trained = self.cross_encoder = CrossEncoder.load(
            # PyTorch weights, trained in place (never an export); autocast is set below.
            CrossEncoderConfig(
                model=config.base,
                max_length=config.max_length,
                device=config.device,
                precision="fp32",
            ),
            seed=config.seed,
        )
        self.model = self.cross_encoder.model.requires_grad_(True)
        if config.attention_dropout is not None:
            set_attention_dropout(self.model, config.attention_dropout)
        self.bf16 = resolve_bf16(config.bf16, self.ctx.device)
        # The run's precision governs its dev scoring too: --bf16 off means fp32 throughout.
        self.cross_encoder.autocast_dtype = torch.bfloat16 if self.bf16 else None

        t0 = time.perf_counter()
        first_run = self._pools(data.queries)
        # The first stage's lists re-ranked on dev, or by the k-fold check's folds: every query.
        ranked = data.queries if config.kfold(len(data.queries)) else self.dev_queries
        # Pools read back, or mined at another depth than the dev lists': the first stage again.
        if ranked and (first_run is None or config.depth != config.dev_depth):
            first_run = first_stage_run(config.first_stages[0], data, ranked, config.dev_depth)
        self.mining_seconds = time.perf_counter() - t0
        self.pools = with_judged_negatives(self.pools, data.qrels, list(data.queries)) or {}
        self.examples = build_cat_examples(
            self.train_queries, data.qrels, self.pools, config.min_relevance
        )
        if not self.examples:
            raise DotcatError("no training examples (no judged query with first-stage negatives)")
        self.first_lists = {q: first_run.get(q, []) for q in ranked} if ranked else {}
        self.dev_first = {q: self.first_lists[q] for q in self.dev_queries}
        # The texts of every document a training group or a dev list can hold.
        needed = {e.positive_id for e in self.examples}
        needed |= {d for q in self.train_queries for d in self.pools.get(q, [])}
        needed |= {d for docs in self.first_lists.values() for d, _ in docs[: config.dev_depth]}
        self.doc_texts = known_texts(corpus_texts(data.corpus, needed), needed)

    def _pools(self, queries: Mapping[str, str]) -> Run | None:
        """Negative pools (saved, or read back on resume) and the first stages' teacher scores
        when ``teacher_weight`` > 0 (saved likewise); returns the first stage's run for dev."""
        config, data = self.config, self.data
        path, teacher_path = self.out_dir / NEGATIVES_FILE, self.out_dir / TEACHER_FILE
        want_teacher = config.teacher_weight > 0
        fresh = not (config.resume and path.is_file()) and config.negatives_file is None
        runs: list[Run] = []
        if fresh or (want_teacher and not teacher_path.is_file()):
            for source in config.first_stages:
                logger.info(
                    "first stage %s: top %d of %d queries", source, config.depth, len(queries)
                )
                runs.append(first_stage_run(source, data, queries, config.depth))
        if fresh:
            pools = negative_pools(runs, data.qrels, config.depth)
            meta = negatives_meta(
                "first-stage",
                (0, config.depth),
                len(data.corpus),
                first_stages=[str(s) for s in config.first_stages],
                n_queries=len(pools),
            )
            save_negatives(path, pools, meta)
        elif config.negatives_file is not None and not path.is_file():
            pools, meta = load_negatives(config.negatives_file)
            save_negatives(path, pools, {**meta, "loaded_from": str(config.negatives_file)})
        self.pools, self.pools_meta = load_negatives(path)
        self.teacher: dict[str, dict[str, float]] = {}
        if want_teacher and runs:
            with replacing(teacher_path) as tmp, gzip.open(tmp, "wt", encoding="utf-8") as f:
                json.dump(teacher_scores(runs, config.depth), f)
        if want_teacher:
            with gzip.open(teacher_path, "rt", encoding="utf-8") as f:
                self.teacher = json.load(f)
        return runs[0] if runs else None

    def param_groups(self) -> list[dict[str, Any]]:
        return cat_param_groups(self.model, self.config)

    def batches(self, epoch: int) -> list[Sequence[int]]:
        """A seeded permutation of the examples per epoch, cut into batches."""
        order = np.random.default_rng([self.config.seed, epoch]).permutation(len(self.examples))
        size = self.config.batch_size
        return [order[i : i + size].tolist() for i in range(0, len(order), size)]

    def backward(self, batch: Sequence[int], epoch: int, scale: float, last: bool) -> float:
        """Each example's group (positive + sampled negatives) through the cross-encoder."""
        config = self.config
        groups, group_scores = [], []
        for i in batch:
            e = self.examples[i]
            negs = sample_negatives(
                self.pools[e.qid], config.n_negatives, config.seed, epoch, e.qid, e.positive_id
            )
            groups.append((e.query, [self.doc_texts[d] for d in (e.positive_id, *negs)]))
            if self.teacher:
                group_scores.append(group_teacher(self.teacher.get(e.qid, {}), e.positive_id, negs))
        return backward_groups(
            self.cross_encoder,
            groups,
            config.loss,
            pairs_per_forward=config.pairs_per_forward,
            scale=scale,
            bf16=self.bf16,
            teacher=group_scores or None,
            teacher_weight=config.teacher_weight,
            teacher_temperature=config.teacher_temperature,
        )

    def evaluate(self, epoch: int) -> dict[str, float] | None:
        """Epoch 0: the first stage alone; later: its top ``dev_depth`` re-ranked (nDCG@10
        only: re-ranking leaves the candidates' recall as the first stage made it)."""
        if not self.dev_first:
            return None
        qrels = self.data.qrels
        if epoch == 0:  # the first stage's own ranking: lists with no re-ranked head
            first = {
                q: Candidates([d for d, _ in docs], np.asarray([s for _, s in docs]), np.empty(0))
                for q, docs in self.dev_first.items()
            }
            return {DEV_MEASURE: dev_score(first, qrels)}
        depth = self.config.dev_depth
        candidates = dev_candidates(
            self.cross_encoder, self.dev_first, self.dev_queries, self.doc_texts, depth
        )
        score = dev_score(candidates, qrels)
        # The best epoch's lists choose the interpolation weight at the end.
        if self.best_score is None or score > self.best_score:
            self.best_score = score
            self.best_candidates = dict(candidates)
        return {DEV_MEASURE: score}

    def save(self, out_dir: Path) -> None:
        self.cross_encoder.trained_head = True
        self.cross_encoder.save(out_dir)

    def state_dict(self) -> dict[str, Any]:
        # The best epoch's dev lists travel with the checkpoint: a resumed run would otherwise
        # choose no interpolation weight.
        return {
            **super().state_dict(),
            "best_dev_score": self.best_score,
            "best_candidates": {q: c.to_json() for q, c in self.best_candidates.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.best_score = state.get("best_dev_score", state["best"]["score"])
        self.best_candidates = {
            q: Candidates.from_json(c) for q, c in state.get("best_candidates", {}).items()
        }

    def finish(self, out_dir: Path) -> None:
        """Choose the interpolation weight of first-stage and cross-encoder scores on dev; with
        the held-out check to come, or no dev split to choose on (``--no-check`` on under 100
        queries: ``--resume`` checks it), weight 0 (the first stage alone) until a gain shows."""
        if (self.config.check and not self.config.held_out) or not self.best_candidates:
            self.interpolation = record_alpha(out_dir, 0.0) | {"pending": "the held-out check"}
        else:
            choice = choose_alpha(self.best_candidates, self.data.qrels)
            self.interpolation = record_alpha(out_dir, choice.chosen, choice)

    # -- the held-out check (dotcat.training.heldout) ----------------------------------------

    def heldout_lists(self, cross_encoder: CrossEncoder, qids: Sequence[str]) -> dict[str, Any]:
        """The first stage's lists for ``qids``, their top ``dev_depth`` scored by
        ``cross_encoder``."""
        first = {q: self.first_lists[q] for q in qids}
        candidates = dev_candidates(
            cross_encoder, first, self.data.queries, self.doc_texts, self.config.dev_depth
        )
        return {q: c.to_json() for q, c in candidates.items()}

    def dev_lists(self) -> dict[str, Any]:
        """The kept model's dev lists (a check on the dev split): the best epoch's, or scored
        again by the saved model (a resumed check)."""
        if self.best_candidates:
            return {q: c.to_json() for q, c in self.best_candidates.items()}
        kept = CrossEncoder.load(
            CrossEncoderConfig(model=str(self.out_dir), device=self.config.device, precision="fp32")
        )
        return self.heldout_lists(kept, list(self.dev_queries))

    def judge(self, lists: Mapping[str, Any], parts: Sequence[Sequence[str]], method: str) -> Any:
        """The re-ranked lists against the first stage's, on the held-out queries.

        The weight (:func:`choose_alpha`) of each part's queries (a fold, or a share of the dev
        split) is chosen on the other parts' alone, so no query is re-ranked with a weight it
        helped choose (the choice is part of what the run does: nested cross-validation, Varma
        and Simon, BMC Bioinformatics, 2006); the weight recorded is chosen on them all.
        """
        candidates = {q: Candidates.from_json(c) for q, c in lists.items()}
        qrels = self.data.qrels
        self.choice = choose_alpha(candidates, qrels)
        reranked: Run = {}
        for part in parts:
            others = {q: c for q, c in candidates.items() if q not in part}
            alpha = choose_alpha(others, qrels).chosen if others else PRIOR_ALPHA
            reranked.update(fuse({q: candidates[q] for q in part}, alpha))
        return compare(fuse(candidates, 0.0), reranked, qrels, method)

    def keep(self, verdict: Any) -> dict[str, Any]:
        """The weight chosen where a gain shows, else 0: search, rerank and serve then keep the
        first stage's ranking (and do not run the cross-encoder)."""
        first = self.config.first_stages[0]
        figures = verdict.figures("re-ranked", f"for the first stage alone ({first})")
        alpha = self.choice.chosen if verdict.shown_better else 0.0
        entry = record_alpha(self.out_dir, alpha, self.choice, verdict.to_json())
        if verdict.shown_better:
            line = f"held-out check: {figures}: shown better; interpolation weight {alpha:g}"
        else:
            line = (
                f"held-out check: {figures}: not shown better, so {self.out_dir} records "
                "interpolation weight 0 (re-ranking keeps the first stage's ranking; "
                "--interpolate W to use it anyway)"
            )
        logger.log(logging.INFO if verdict.shown_better else logging.WARNING, line)
        return {"check": {"interpolation_alpha": alpha, "line": line}, "interpolation": entry}

    def record(self) -> dict[str, Any]:
        config, cross_encoder = self.config, self.cross_encoder
        return self.record_entries(
            self.pools_meta,
            (cross_encoder.path, cross_encoder.fingerprint),
            {"max_length": cross_encoder.max_length},
            {"name": config.loss, "group_size": 1 + config.n_negatives},
            interpolation=getattr(self, "interpolation", {}),
            pairs_per_example=1 + config.n_negatives,
        )


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


def cat_param_groups(model: torch.nn.Module, config: CatConfig) -> list[dict[str, Any]]:
    """AdamW groups: the encoder as in ``train dot``; the head at ``lr * head_lr_scale``."""
    head = [p for n, p in model.named_parameters() if n.startswith("classifier.")]
    ids = {id(p) for p in head}
    groups = [
        {**g, "params": [p for p in g["params"] if id(p) not in ids]}
        for g in param_groups(model, config.weight_decay)
    ]
    groups.append({"params": head, "weight_decay": 0.0, "lr": config.lr * config.head_lr_scale})
    return [g for g in groups if g["params"]]


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

    The loss (:func:`~dotcat.losses.listwise.lce_loss` over each group, or
    :func:`~dotcat.losses.pointwise.bce_loss` over every pair with the positive labelled 1) is a
    mean over groups of equal size, so it is computed ``pairs_per_forward // group size`` groups at
    a time, each chunk's loss weighted by its share of the batch: the same gradient as one pass, in
    a chunk's memory. Gradients accumulate in ``.grad``; returns the batch loss times ``scale``.
    With ``teacher`` (one list of scores per group) and ``teacher_weight`` > 0, LCE becomes
    :func:`~dotcat.losses.listwise.soft_lce_loss`.
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
    with torch.inference_mode():
        return score_candidates(first, queries, doc_texts, cross_encoder, depth)


def dev_score(candidates: Mapping[str, Any], qrels: Qrels, alpha: float = 1.0) -> float:
    """Dev nDCG@10 of the re-ranked lists (``alpha``: see :func:`dotcat.search.reranker.fuse`)."""
    return _dev_report(candidates, qrels, alpha).aggregate[DEV_MEASURE]


def _dev_report(candidates: Mapping[str, Any], qrels: Qrels, alpha: float) -> Any:
    qrels = {q: dict(qrels[q]) for q in candidates}
    return evaluate(fuse(candidates, alpha), qrels, measures=[DEV_MEASURE])


def choose_alpha(candidates: Mapping[str, Candidates], qrels: Qrels) -> Choice:
    """The interpolation weight of :data:`ALPHAS` the paired one-standard-error rule chooses
    (:func:`dotcat.evaluation.choice.choose`, prior :data:`PRIOR_ALPHA`) on re-ranked lists."""
    per_query = {
        a: {q: v[DEV_MEASURE] for q, v in _dev_report(candidates, qrels, a).per_query.items()}
        for a in ALPHAS
    }
    return choose(per_query, PRIOR_ALPHA, ALPHAS)


def record_alpha(
    out_dir: Path, alpha: float, choice: Choice | None = None, check: Any = None
) -> dict[str, Any]:
    """Write the interpolation weight (how it was chosen, and the held-out check's verdict,
    where there are) into the model's ``dotcat_cross_encoder.json``, which ``--interpolate
    auto`` reads; returns the run record's ``interpolation`` entry."""
    entry: dict[str, Any] = {"alpha": alpha}
    if choice is not None:
        entry["dev_scores"] = {str(a): round(s, 6) for a, s in choice.means.items()}
        entry["choice"] = choice.to_json()
        curve = ", ".join(f"{a:g} {s:.4f}" for a, s in choice.means.items())
        logger.info("interpolation, %s: %s", DEV_MEASURE, curve)
        logger.info("interpolation: alpha %g; %s", choice.chosen, choice.reason)
    path = out_dir / "dotcat_cross_encoder.json"
    record = json.loads(path.read_text()) if path.is_file() else {}
    record.update({f"interpolation_{k}": v for k, v in entry.items()})
    if check is not None:
        record["heldout_check"] = check
    write_json(path, record)
    return entry
