"""The ``cat`` recipe: BERT_CAT on relevance labels, LCE or BCE over first-stage negatives.

Batches: one example per judged (query, relevant document), each paired every epoch with
``n_negatives`` documents drawn from its first-stage pool
(:func:`~dotcat.training.cat_trainer.sample_negatives`). Loss: one from
:data:`dotcat.training.losses.LOSSES` ``["cat"]`` over the groups' logits
(:func:`~dotcat.training.cat_trainer.backward_groups`), optionally with the first stages as a
teacher. Dev: the dev queries' first-stage top ``dev_depth`` re-ranked; at the end the
interpolation weight is chosen on the best epoch's dev lists. The loop is
:func:`dotcat.training.loop.train`.
"""

from __future__ import annotations

import gzip
import json
import logging
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from dotcat.data.splits import DEV_SEED, split_dev
from dotcat.errors import DotcatError
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.models.resolve import weights_fingerprint
from dotcat.models.runtime import resolve_device
from dotcat.search.reranker import Candidates
from dotcat.training.cat_trainer import (
    ALPHAS,
    NEGATIVES_FILE,
    TEACHER_FILE,
    CatTrainConfig,
    backward_groups,
    build_cat_examples,
    cat_param_groups,
    dev_candidates,
    dev_score,
    first_stage_only,
    first_stage_run,
    group_teacher,
    negative_pools,
    record_alpha,
    sample_negatives,
    set_attention_dropout,
    teacher_scores,
)
from dotcat.training.examples import load_training_data
from dotcat.training.loop import DEV_MEASURE, data_record, resolve_bf16, split_record
from dotcat.training.mining import load_negatives, negatives_meta, save_negatives

logger = logging.getLogger(__name__)

Run = dict[str, list[tuple[str, float]]]


def write_json_gz(path: Path, value: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    with gzip.open(tmp, "wt", encoding="utf-8") as f:
        json.dump(value, f)
    tmp.replace(path)


def read_json_gz(path: Path) -> Any:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return json.load(f)


class CatRecipe:
    """BERT_CAT trained by :func:`dotcat.training.loop.train` (see the module docstring)."""

    kind = "cat"
    stale_files = (NEGATIVES_FILE, TEACHER_FILE)
    # Epoch 0 is the first stage alone: a score to beat, not a model to keep.
    base_is_candidate = False

    def __init__(self, config: CatTrainConfig) -> None:
        self.config = config
        self.out_dir = Path(config.out_dir)
        # The model is loaded in prepare(), after the loop seeded the random generators.
        self.device = resolve_device(config.device)
        self.mining_seconds = 0.0
        self.best_score: float | None = None
        self.best_candidates: dict[str, Any] = {}

    def prepare(self) -> None:
        """Data and dev split, the model's training settings, pools and examples."""
        config = self.config
        data = load_training_data(config.data, config.split, config.queries, config.qrels)
        self.cross_encoder = CrossEncoder.load(
            # PyTorch weights, trained in place (never an export); autocast is set below.
            CrossEncoderConfig(
                model=config.base,
                max_length=config.max_length,
                device=config.device,
                precision="fp32",
            ),
            seed=config.seed,
        )
        self.model = self.cross_encoder.model
        # DEV_SEED, not the run's seed: the same held-out queries as every other stage.
        train_qids, dev_qids = split_dev(list(data.queries), config.dev_fraction, DEV_SEED)
        self.data = data
        self.data_info = data_record(config, len(data.corpus))
        self.train_queries = {q: data.queries[q] for q in train_qids}
        self.dev_queries = {q: data.queries[q] for q in dev_qids}
        self.model.requires_grad_(True)
        if config.attention_dropout is not None:
            set_attention_dropout(self.model, config.attention_dropout)
        self.bf16 = resolve_bf16(config.bf16, self.device)
        # The run's precision governs its dev scoring too: --bf16 off means fp32 throughout.
        self.cross_encoder.autocast_dtype = torch.bfloat16 if self.bf16 else None

        t0 = time.perf_counter()
        self.pools, self.pools_meta, first_run, self.teacher = self._pools(data.queries)
        if self.dev_queries and first_run is None:  # pools read back: the dev first stage again
            first_run = first_stage_run(
                config.first_stages[0], data, self.dev_queries, config.dev_depth
            )
        self.mining_seconds = time.perf_counter() - t0
        self.examples = build_cat_examples(self.train_queries, data.qrels, self.pools)
        if not self.examples:
            raise DotcatError("no training examples (no judged query with first-stage negatives)")
        self.dev_first = {q: first_run.get(q, []) for q in self.dev_queries} if first_run else {}
        self.doc_texts = self._texts()

    def _pools(
        self, queries: Mapping[str, str]
    ) -> tuple[dict[str, list[str]], dict[str, Any], Run | None, dict[str, dict[str, float]]]:
        """Negative pools (saved, or read back on resume), the first stage's run for dev, and
        the first stages' teacher scores when ``teacher_weight`` > 0 (saved likewise)."""
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
        pools, meta = load_negatives(path)
        teacher: dict[str, dict[str, float]] = {}
        if want_teacher:
            if runs:
                write_json_gz(teacher_path, teacher_scores(runs, config.depth))
            teacher = read_json_gz(teacher_path)
        meta = {k: v for k, v in meta.items() if k != "format"}
        return pools, meta, runs[0] if runs else None, teacher

    def _texts(self) -> dict[str, str]:
        """The texts of every document a training group or a dev list can hold."""
        from dotcat.search.reranker import corpus_texts

        needed = {e.positive_id for e in self.examples}
        needed |= {d for q in self.train_queries for d in self.pools.get(q, [])}
        depth = self.config.dev_depth
        needed |= {d for docs in self.dev_first.values() for d, _ in docs[:depth]}
        return corpus_texts(self.data.corpus, needed)

    def param_groups(self) -> list[dict[str, Any]]:
        return cat_param_groups(self.model, self.config)

    def begin_epoch(self, epoch: int) -> None:
        pass

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
            docs = [self.doc_texts[e.positive_id]] + [self.doc_texts[d] for d in negs]
            groups.append((e.query, docs))
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
        if epoch == 0:
            first = {q: first_stage_only(d) for q, d in self.dev_first.items()}
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
            "mining_seconds": self.mining_seconds,
            "best_dev_score": self.best_score,
            "best_candidates": {q: c.to_json() for q, c in self.best_candidates.items()},
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        self.mining_seconds = state.get("mining_seconds", self.mining_seconds)
        self.best_score = state.get("best_dev_score", state["best"]["score"])
        self.best_candidates = {
            q: Candidates.from_json(c) for q, c in state.get("best_candidates", {}).items()
        }

    def finish(self, out_dir: Path) -> None:
        """Choose the interpolation weight of first-stage and cross-encoder scores on dev."""
        self.interpolation: dict[str, Any] = {}
        if not self.best_candidates:
            return
        scores = {a: dev_score(self.best_candidates, self.data.qrels, a) for a in ALPHAS}
        alpha = max(scores, key=lambda a: (scores[a], a))  # ties: more cross-encoder
        self.interpolation = {
            "alpha": alpha,
            "dev_scores": {str(a): round(s, 6) for a, s in scores.items()},
        }
        record_alpha(out_dir, alpha, scores)

    def record(self) -> dict[str, Any]:
        config, out = self.config, self.out_dir
        return {
            "data": self.data_info,
            "split": split_record(config, self),
            "negatives": self.pools_meta,
            "base_model": {
                "name": config.base,
                "path": str(self.cross_encoder.path),
                "fingerprint": self.cross_encoder.fingerprint,
            },
            "model": {
                "max_length": self.cross_encoder.max_length,
                "fingerprint": weights_fingerprint(out)
                if (out / "model.safetensors").exists()
                else None,
            },
            "loss": {"name": config.loss, "group_size": 1 + config.n_negatives},
            "device": str(self.device),
            "bf16": self.bf16,
            "interpolation": getattr(self, "interpolation", {}),
            "pairs_per_example": 1 + config.n_negatives,
            "timings": {"mining_seconds": round(self.mining_seconds, 3)},
        }
