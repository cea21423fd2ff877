"""The ``distill`` recipe: a BERT_CAT teaches a BERT_DOT (``dotcat train distill``).

Hofstätter et al. (2020), "Improving Efficient Neural Ranking Models with Cross-Architecture
Knowledge Distillation" (arXiv:2010.02666): the student is trained on the teacher's score
*margins*, ``MSE((s(q,d+) - s(q,d-)), (t(q,d+) - t(q,d-)))`` (Margin-MSE), so it needs no
calibration between the two models, only a common scale; or (option) on the teacher's
distribution over the positive and the negatives, ``KL(softmax(t/T) || softmax(s/T))``.
Either can be added to in-batch InfoNCE with a weight (``contrastive_weight``).

Everything else is the ``dot`` recipe (:class:`~dotcat.training.recipes.dot.DotRecipe`):
negatives mined as ``train dot`` mines them, the same examples, batches, dev evaluation,
checkpoints and output. Before training, the teacher scores every (query, document) pair the
examples hold once, into ``OUT_DIR/teacher_scores.jsonl`` (resumable, a progress bar;
:mod:`dotcat.training.data.teacher`).

The teacher. A re-ranker trained on little data can be weaker alone than the first stage it
re-ranks, and its dev-chosen interpolation with that first stage stronger than either
(``interpolation_alpha`` in the cross-encoder's record). The teacher is then that
interpolation: ``t = alpha * logit + (1 - alpha) * c * dense``, ``dense`` the score of a
BERT_DOT (``teacher_dense``; default the student's own starting model), ``c`` the ratio of the
two scores' within-query standard deviations (the dense score brought to the logit's scale; a
per-query shift does not matter, margins cancel it). ``alpha`` 1 is the plain cross-encoder.
With ``teacher="bm25"`` BM25's score takes the logit's place (the lexical teacher: a dense
student taught BM25's ranking beside its own, as SPAR's Lambda learns BM25's; Chen et al.,
ACL 2022, "Salient Phrase Aware Dense Retrieval"), at ``alpha`` 0.5 unless given.

The student's score is its similarity divided by the contrastive temperature (cosines in [-1, 1] /
0.05; inner products / 1), the scale its own InfoNCE trains it on. A cosine student's margins are
bounded (at most 2 / 0.05), a confident teacher's are not: a cross-encoder pre-trained to a loss of
1e-4 spreads its logits over +-18, and Margin-MSE then asks the student for margins it can reach
only by pulling its whole space apart (on SciFact, dev nDCG@10 fell from 0.787 to 0.674 in one
epoch). So by default (``teacher_scale`` None) the teacher's scores are multiplied by one factor,
``s = sigma_student / sigma_teacher``, the ratio of the two pooled within-query standard deviations
(the student's as it starts, in its score units): the teacher's *relative* margins, at the spread
the student already has. One factor for all queries, not a per-query normalisation, so a query the
teacher is sure of still teaches larger margins than one it hesitates on.
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from dotcat.errors import DotcatError
from dotcat.index.bm25 import BM25Index
from dotcat.losses import pick_loss, scale_to_global
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.training.config import LEXICAL_ALPHA, LEXICAL_TEACHER, DistillConfig, is_lexical
from dotcat.training.data.teacher import DECIMALS, TeacherScores, score_pairs, teacher_header
from dotcat.training.ddp import DistributedContext
from dotcat.training.recipes.dot import DotRecipe

logger = logging.getLogger(__name__)

TEACHER_FILE = "teacher_scores.jsonl"
DENSE_TEACHER_FILE = "teacher_dense_scores.jsonl"
STUDENT_START_FILE = "student_start_scores.jsonl"


def pooled_within_query_std(scores: Mapping[tuple[str, str], float]) -> float:
    """sqrt of the mean within-query variance of ``(qid, doc) -> score``.

    >>> round(pooled_within_query_std({("a", "x"): 0.0, ("a", "y"): 2.0, ("b", "x"): 5.0}), 3)
    1.0
    """
    groups: dict[str, list[float]] = defaultdict(list)
    for (qid, _), value in scores.items():
        groups[qid].append(value)
    variances = [np.var(v) for v in groups.values() if len(v) > 1]
    return float(np.sqrt(np.mean(variances))) if variances else 0.0


class DistillRecipe(DotRecipe):
    """The ``dot`` recipe with a teacher's scores in the loss (see the module docstring)."""

    kind = "distill"

    def __init__(self, config: DistillConfig, ctx: DistributedContext) -> None:
        super().__init__(config, ctx)
        self.teacher_info: dict[str, Any] = {}
        self.teacher_seconds = 0.0
        self.teacher: dict[tuple[str, str], float] = {}

    def build_examples(self, negatives: Mapping[str, Sequence[str]] | None) -> None:
        """The ``dot`` examples, then the teacher's score of every pair they hold."""
        super().build_examples(negatives)
        t0 = time.perf_counter()
        pairs = sorted(
            {(e.qid, d) for e in self.examples for d in (e.positive_id, *e.negative_ids)}
        )
        if self.ctx.is_main:
            self._score_teacher(pairs)
        self.ctx.barrier()
        if not self.ctx.is_main:
            self._score_teacher(pairs)  # every pair is cached by now: a read
        self.teacher_seconds += time.perf_counter() - t0

    def _score_teacher(self, pairs: Sequence[tuple[str, str]]) -> None:
        config = self.config
        queries = {q: self.data.queries[q] for q, _ in pairs}
        # The examples' texts carry the student's document prompt; the teachers read the text.
        prefix = len(self.model.document_prefix)
        texts = {d: self.doc_texts[d][prefix:] for _, d in pairs}
        alpha, first = self._first_component(pairs, queries, texts)
        if alpha == 0:
            teacher = dense = self._dense_teacher_alone(pairs, queries, texts)
        else:
            teacher, dense = first(), None
            if alpha < 1:
                dense = self._dense_scores(
                    self._dense_name(), DENSE_TEACHER_FILE, pairs, queries, texts
                )
                c = pooled_within_query_std(teacher) / max(pooled_within_query_std(dense), 1e-12)
                teacher = {p: alpha * teacher[p] + (1 - alpha) * c * dense[p] for p in pairs}
                self.teacher_info.update(dense_model=self._dense_name(), dense_scale=round(c, 6))
        scale = config.teacher_scale
        if scale is None:
            scale = self._student_spread(pairs, queries, texts, dense) / max(
                pooled_within_query_std(teacher), 1e-12
            )
        self.teacher = {p: scale * v for p, v in teacher.items()}
        self.teacher_info["scale"] = float(f"{scale:.6g}")

    def _first_component(
        self, pairs: Sequence[tuple[str, str]], queries: Mapping[str, str], texts: Mapping[str, str]
    ) -> tuple[float, Any]:
        """The teacher's weight ``alpha`` and a function giving its scores of ``pairs``: the
        cross-encoder's logits, or BM25's for the lexical teacher (``teacher="bm25"``)."""
        config = self.config
        if is_lexical(config.teacher):
            alpha = config.teacher_alpha if config.teacher_alpha is not None else LEXICAL_ALPHA
            self.teacher_info = {"model": LEXICAL_TEACHER, "alpha": alpha, "pairs": len(pairs)}
            return alpha, lambda: self._bm25_scores(pairs, queries)
        ce = CrossEncoder.load(
            CrossEncoderConfig(
                model=str(config.teacher), device=config.device, precision=config.teacher_precision
            )
        )
        alpha = config.teacher_alpha
        if alpha is None:
            alpha = ce.interpolation_alpha if ce.interpolation_alpha is not None else 1.0
        self.teacher_info = {
            "model": str(config.teacher),
            "fingerprint": ce.fingerprint,
            "backend": ce.backend,
            "alpha": alpha,
            "pairs": len(pairs),
        }
        header = teacher_header(ce.name, ce.fingerprint, ce.backend, ce.max_length)
        return alpha, lambda: self._scored(TEACHER_FILE, header, ce.score, pairs, queries, texts)

    def _bm25_scores(
        self, pairs: Sequence[tuple[str, str]], queries: Mapping[str, str]
    ) -> dict[tuple[str, str], float]:
        """BM25's score of every pair, over the training corpus (its term statistics), with
        ``dotcat bm25``'s settings. Seconds for SciFact's 5k documents: not cached."""
        index = BM25Index.build(self.data.corpus, show_progress=self.config.show_progress)
        by_query: dict[str, list[str]] = defaultdict(list)
        for qid, doc in pairs:
            by_query[qid].append(doc)
        scores = {qid: index.pair_scores(queries[qid], docs) for qid, docs in by_query.items()}
        return {(qid, doc): round(value, DECIMALS) for qid, docs in by_query.items()
                for doc, value in zip(docs, scores[qid], strict=True)}  # fmt: skip

    def _dense_teacher_alone(
        self, pairs: Sequence[tuple[str, str]], queries: Mapping[str, str], texts: Mapping[str, str]
    ) -> dict[tuple[str, str], float]:
        """The teacher when the cross-encoder's weight is 0: the dense model's score itself.

        The cross-encoder's scores would be multiplied by 0, so they are not computed (on
        SciFact that saved about 2 minutes); the dense score is not brought to the logit's
        spread either (the teacher scale, automatic by default, sets the spread).
        """
        config = self.config
        kind = "BM25" if is_lexical(config.teacher) else "cross-encoder"
        logger.warning(
            "%s: the teacher's %s weight is 0 (%s), so the teacher is %s's dense score alone "
            "and %s teaches nothing; --teacher-alpha 1 distils %s alone",
            config.teacher, kind, "given" if config.teacher_alpha is not None else "its record",
            self._dense_name(), kind, kind,
        )  # fmt: skip
        self.teacher_info["dense_model"] = self._dense_name()
        return self._dense_scores(self._dense_name(), DENSE_TEACHER_FILE, pairs, queries, texts)

    def _dense_name(self) -> str:
        return str(self.config.teacher_dense or self.config.base)

    def _student_spread(
        self,
        pairs: Sequence[tuple[str, str]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
        dense: Mapping[tuple[str, str], float] | None,
    ) -> float:
        """Pooled within-query std of the starting student's scores over ``pairs``, in the
        units the loss sees (similarity / temperature)."""
        if dense is None or self._dense_name() != str(self.config.base):
            dense = self._dense_scores(
                str(self.config.base), STUDENT_START_FILE, pairs, queries, texts
            )
        spread = pooled_within_query_std(dense) / self.loss.temperature
        self.teacher_info["student_spread"] = float(f"{spread:.6g}")
        return spread

    def _dense_scores(
        self,
        model: str,
        file: str,
        pairs: Sequence[tuple[str, str]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
    ) -> dict[tuple[str, str], float]:
        """A BERT_DOT's score of every pair (cached like the cross-encoder's)."""
        encoder = BiEncoder.load(EncoderConfig(model=model, device=self.config.device))

        def score(qs: list[str], ds: list[str]) -> np.ndarray:
            return np.einsum("ij,ij->i", encoder.encode_queries(qs), encoder.encode_documents(ds))

        header = teacher_header(encoder.name, encoder.fingerprint, "bi-encoder", encoder.max_length)
        return self._scored(file, header, score, pairs, queries, texts)

    def _scored(
        self,
        file: str,
        header: dict,
        score: Callable[..., Any],
        pairs: Sequence[tuple[str, str]],
        queries: Mapping[str, str],
        texts: Mapping[str, str],
    ) -> dict[tuple[str, str], float]:
        """Every pair's score by ``score`` (a cross-encoder's logit, a BERT_DOT's similarity),
        cached on disk in ``OUT_DIR/file`` (resumable)."""
        path, show = self.out_dir / file, self.config.show_progress
        cached = score_pairs(path, header, pairs, queries, texts, score, show_progress=show)
        return {p: _score(cached, p) for p in pairs}

    def backward(self, batch: Sequence[int], epoch: int, scale: float, last: bool) -> float:
        """The ``dot`` batch with the teacher's loss added (``contrastive_weight`` x InfoNCE)."""
        examples = [self.examples[i] for i in batch]
        teacher = torch.tensor(
            [
                [self.teacher[(e.qid, d)] for d in (e.positive_id, *e.negative_ids)]
                for e in examples
            ],
            dtype=torch.float32,
            device=self.ctx.device,
        )
        sizes = self.ctx.sizes(len(examples))
        distill = pick_loss("distill", self.config.distill_loss)
        inverse_t = 1.0 / self.loss.temperature
        similarity = self.model.similarity

        def extra(q: Tensor, pos: Tensor, negs: Tensor | None, rows: slice) -> Tensor:
            student = student_scores(q, pos, negs, similarity) * inverse_t
            local = distill(student, teacher[rows], self.config.kl_temperature)
            return scale_to_global(local, sizes, self.ctx.rank)

        return self.backward_examples(
            examples, scale, last, weight=self.config.contrastive_weight, extra=extra
        )

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "teacher_seconds": self.teacher_seconds}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        super().load_state_dict(state)
        self.teacher_seconds = state.get("teacher_seconds", self.teacher_seconds)

    def record(self) -> dict[str, Any]:
        out = super().record()
        config = self.config
        out["teacher"] = self.teacher_info
        out["loss"] = {
            **out["loss"],
            "distill": config.distill_loss,
            "contrastive_weight": config.contrastive_weight,
            "student_scale": 1.0 / self.loss.temperature,
        }
        out["timings"]["teacher_seconds"] = round(self.teacher_seconds, 3)
        return out


def _score(scores: TeacherScores, pair: tuple[str, str]) -> float:
    value = scores.get(*pair)
    if value is None:
        raise DotcatError(f"the teacher scores lack the pair {pair}")
    return value


def student_scores(q: Tensor, pos: Tensor, negs: Tensor | None, similarity: str) -> Tensor:
    """``[b, 1 + n]`` similarities of each query to its positive, then its negatives."""
    if negs is None:
        raise DotcatError("distillation needs hard negatives")
    if similarity == "cos":
        q, pos, negs = F.normalize(q, dim=-1), F.normalize(pos, dim=-1), F.normalize(negs, dim=-1)
    q, pos, negs = q.float(), pos.float(), negs.float()
    positive = (q * pos).sum(-1, keepdim=True)
    negative = torch.einsum("bd,bnd->bn", q, negs)
    return torch.cat([positive, negative], dim=1)
