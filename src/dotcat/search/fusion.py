"""Hybrid retrieval: one ranking from a dense and a BM25 ranking of the same query.

Two fusions, both over each first stage's top ``depth``:

- Reciprocal rank fusion (Cormack, Clarke & Büttcher, "Reciprocal Rank Fusion outperforms
  Condorcet and individual Rank Learning Methods", SIGIR 2009)::

      s(d) = sum over rankings r of 1 / (k + rank_r(d)),   k = 60

  It needs no scores and no tuning; it is one of the fusions the dev choice judges.
- Normalised linear fusion (the hybrid of e.g. Pyserini's ``HybridSearcher`` and Ma et al.
  2021)::

      s(d) = w * norm(s_dense(d)) + (1 - w) * norm(s_bm25(d))

  with ``norm`` the min-max normalisation over the query's list (a list of equal scores, e.g.
  BM25's one match, is its own best: 1); a document missing from one list scores 0 on that side.
  The lowest candidate of every list it is in would then score 0, as one no side found: with a
  filter of few documents, a shown hit (the second of two showed 0.0000). So the ``n``
  candidates' scores are put on ``[1 / (n + 1), 1]`` (``(n * s + 1) / (n + 1)``, add-one
  smoothing of their place between the lists' lowest and best): an increasing map, the ranking
  min-max's own, and a hit never scores 0.
  Linear 0.5 (:data:`PRIOR`, :func:`default_fusion`) is what a hybrid search runs where nothing
  was chosen on dev.

Where the data has dev queries, :func:`choose_fusion` picks the fusion (RRF, or linear with a
weight in 0, 0.1, ..., 1) by dev nDCG@10 with the paired one-standard-error rule
(:func:`dotcat.evaluation.choice.choose`): linear 0.5, the prior (:data:`PRIOR`), is kept unless
the best fusion beats it by more than a standard error of their per-query differences, else the
fusion nearest it among those within a standard error of the best; argmax on ~100 dev queries
chased noise. The index manifest records the choice with its curve, tied set and reason.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field

from dotcat import options
from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate
from dotcat.evaluation.choice import choose
from dotcat.types import Qrels, Ranking, Run

logger = logging.getLogger(__name__)

#: The fusion methods (:data:`dotcat.options.FUSIONS` less ``auto``: the index's choice).
FUSIONS = tuple(method for method in options.FUSIONS if method != "auto")
RRF_K = 60
#: Linear weights tried on dev (the dense side's share).
WEIGHTS = tuple(round(0.1 * i, 1) for i in range(11))
DEV_MEASURE = "nDCG@10"
#: The prior of the dev choice, kept where dev cannot tell it from the best, and the fusion of an
#: index without dev queries (fewer than the rule's minimum, none at all): the centre of the
#: grid, equal trust in both sides. Not RRF: on every collection's dev split linear 0.5 beat RRF
#: (SciFact, pylib, faq, pydoc, debian and man indexed as folders: +0.0016 to +0.0371 nDCG@10,
#: mean +0.0247; ``eval/benchmarks/results/fusion_default.md``), and in the dev choice RRF was
#: never within a standard error of the best (``eval/studies/choices``); Bruch et al. ("An
#: Analysis of Fusion Functions for Hybrid Retrieval", TOIS 2023) found the normalised convex
#: combination above RRF in and out of domain.
PRIOR = f"linear {options.FUSION_WEIGHT:g}"


@dataclass(frozen=True)
class Fusion:
    """How to fuse a dense and a BM25 ranking.

    Attributes:
        method: ``rrf`` or ``linear``.
        weight: linear: the dense side's weight in [0, 1] (1 - weight goes to BM25).
        k: RRF's constant.
        dev: what the choice was made on (``source``, per-candidate dev scores); empty when
            it is a default.
    """

    method: str = "rrf"
    weight: float = options.FUSION_WEIGHT
    k: int = RRF_K
    dev: dict = field(default_factory=dict, compare=False)

    def __post_init__(self) -> None:
        if self.method not in FUSIONS:
            raise DotcatError(f"unknown fusion {self.method!r} ({', '.join(FUSIONS)})")
        if not 0.0 <= self.weight <= 1.0:
            raise DotcatError(f"fusion weight must be in [0, 1], got {self.weight}")
        if self.k < 1:
            raise DotcatError(f"RRF k must be >= 1, got {self.k}")

    def fuse(self, dense: Ranking, bm25: Ranking) -> list[tuple[str, float]]:
        """One query's fused ranking, best first (ties: document id)."""
        if self.method == "rrf":
            return reciprocal_rank_fusion([dense, bm25], self.k)
        return linear_fusion(dense, bm25, self.weight)

    def shares(self, dense: Ranking, bm25: Ranking) -> dict[str, tuple[float, float]]:
        """Each document's part of its fused score from each side: ``(dense, bm25)``
        (``1 / (k + rank)`` each for RRF, ``w * norm`` and ``(1 - w) * norm`` for linear,
        before the linear score is put on ``[1 / (n + 1), 1]``)."""
        if self.method == "rrf":
            a = {d: 1.0 / (self.k + r) for r, (d, _) in enumerate(dense, start=1)}
            b = {d: 1.0 / (self.k + r) for r, (d, _) in enumerate(bm25, start=1)}
        else:
            a = {d: self.weight * s for d, s in _minmax(dense).items()}
            b = {d: (1 - self.weight) * s for d, s in _minmax(bm25).items()}
        return {d: (a.get(d, 0.0), b.get(d, 0.0)) for d in {**a, **b}}

    def fuse_runs(self, dense: Mapping[str, Ranking], bm25: Mapping[str, Ranking]) -> Run:
        """:meth:`fuse` for every query of either run."""
        return {q: self.fuse(dense.get(q, ()), bm25.get(q, ())) for q in {**dense, **bm25}}

    def describe(self) -> str:
        if self.method == "rrf":
            return f"RRF (k={self.k})"
        return f"linear (dense weight {self.weight:g})"

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, value: Mapping) -> Fusion:
        return cls(**{k: v for k, v in value.items() if k in ("method", "weight", "k", "dev")})


def _ranked(scores: Mapping[str, float]) -> list[tuple[str, float]]:
    return sorted(scores.items(), key=lambda x: (-x[1], x[0]))


def reciprocal_rank_fusion(rankings: Sequence[Ranking], k: int = RRF_K) -> list[tuple[str, float]]:
    """RRF: ``sum_r 1 / (k + rank_r(d))`` with ranks from 1 (Cormack et al. 2009)."""
    scores: dict[str, float] = {}
    for ranking in rankings:
        for rank, (doc, _) in enumerate(ranking, start=1):
            scores[doc] = scores.get(doc, 0.0) + 1.0 / (k + rank)
    return _ranked(scores)


def _minmax(ranking: Ranking) -> dict[str, float]:
    """Scores scaled to [0, 1] over the list; all equal (one match) -> all 1, each the list's
    best (a lone BM25 match keeps its side's full share, as it tops its list under RRF)."""
    if not ranking:
        return {}
    values = [s for _, s in ranking]
    low, high = min(values), max(values)
    span = high - low
    return {d: (s - low) / span if span > 0 else 1.0 for d, s in ranking}


def linear_fusion(dense: Ranking, bm25: Ranking, weight: float) -> list[tuple[str, float]]:
    """``w * norm(dense) + (1 - w) * norm(bm25)``, a missing side counting 0, put on
    ``[1 / (n + 1), 1]`` over the ``n`` candidates (module docstring)."""
    a, b = _minmax(dense), _minmax(bm25)
    n = len({**a, **b})
    fused = {d: weight * a.get(d, 0.0) + (1 - weight) * b.get(d, 0.0) for d in {**a, **b}}
    return _ranked({d: (n * s + 1) / (n + 1) for d, s in fused.items()})


def fusion_grid() -> dict[str, Fusion]:
    """The fusions judged on dev, by name (``rrf``, ``linear 0`` ... ``linear 1``), in the
    grid's order."""
    return {"rrf": Fusion("rrf"), **{f"linear {w:g}": Fusion("linear", weight=w) for w in WEIGHTS}}


def default_fusion() -> Fusion:
    """The fusion a hybrid search runs where the index recorded no dev choice: :data:`PRIOR`."""
    return fusion_grid()[PRIOR]


def choose_fusion(
    dense: Mapping[str, Ranking], bm25: Mapping[str, Ranking], qrels: Qrels, source: str
) -> Fusion:
    """The fusion :func:`dotcat.evaluation.choice.choose` picks on dev nDCG@10 from
    :func:`fusion_grid`, :data:`PRIOR` the prior default; ``Fusion.dev`` records the choice
    (``source``, ``measure`` and :meth:`Choice.to_json`: the curve, the tied set, the reason)."""
    grid = fusion_grid()
    per_query = {}
    for name, fusion in grid.items():
        report = evaluate(fusion.fuse_runs(dense, bm25), qrels, measures=[DEV_MEASURE])
        per_query[name] = {q: v[DEV_MEASURE] for q, v in report.per_query.items()}
    choice = choose(per_query, PRIOR, list(grid))
    chosen = grid[choice.chosen]
    dev = {"source": source, "measure": DEV_MEASURE, **choice.to_json()}
    curve = ", ".join(f"{name} {score:.4f}" for name, score in dev["scores"].items())
    logger.info("fusion on dev (%s), %s: %s", source, DEV_MEASURE, curve)
    logger.info(
        "fusion chosen: %s (tied with the best: %s); %s",
        chosen.describe(), ", ".join(dev["tied"]) or "not tested", choice.reason,
    )  # fmt: skip
    return Fusion(chosen.method, chosen.weight, chosen.k, dev)
