"""What graded judgements give a training run beyond its positives: judged negatives, and a
dev split only where there are queries enough to choose with.

Judgements from a pool (:mod:`dotcat.judging`) name, for each query, documents a person read
and found not relevant (grade 0) among those the systems ranked highest: the hardest true
negatives there are, free of the false negatives mining brings (Qu et al., "RocketQA",
NAACL 2021, found a quarter of mined negatives to be unlabelled positives). They join each
query's mined negatives, first (:func:`with_judged_negatives`). A document graded above 0 but
below the run's ``min_relevance`` is neither: it answers in part.

A dev split of a handful of queries chooses an epoch (or a re-ranker's weight) by noise, so
:func:`dev_split` holds out ``dev_fraction`` of the queries only when that makes at least
``min_dev_queries``; with fewer, every judged query trains and the last epoch is kept. A
re-ranker's interpolation weight needs more (``at_least``: 20, the rule's minimum, where the
set has 40 or more): 50 judged queries held out 6-7 by the fraction, too few for the rule, which
then kept the plain cross-encoder; trained on 44 queries, it lost 0.08 and 0.17 nDCG@10 to its
first stage on SciFact and pylib (``eval/benchmarks/results/judge_loop.md``). A run whose
held-out check is k-fold (under :data:`~dotcat.training.config.KFOLD_BELOW` queries) holds out
no dev split at all: its folds judge it (:mod:`dotcat.training.heldout`), and every query
trains (:func:`split_queries`).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence

from dotcat.data.splits import DEV_SEED, split_dev
from dotcat.training.config import TrainConfig
from dotcat.types import Qrels

logger = logging.getLogger(__name__)


def judged_negatives(qrels: Qrels) -> dict[str, list[str]]:
    """qid -> the documents judged not relevant (grade <= 0), in qrels order."""
    negatives = {q: [doc for doc, grade in docs.items() if grade <= 0] for q, docs in qrels.items()}
    return {qid: docs for qid, docs in negatives.items() if docs}


def with_judged_negatives(
    mined: Mapping[str, Sequence[str]] | None, qrels: Qrels, queries: Sequence[str]
) -> dict[str, list[str]] | None:
    """Each query's judged-irrelevant documents, then its mined ones (once each); ``mined``
    as it is when nothing is judged irrelevant."""
    judged = judged_negatives({q: qrels[q] for q in queries if q in qrels})
    if not judged:
        return None if mined is None else {q: list(d) for q, d in mined.items()}
    mined = mined or {}
    out = {q: list(dict.fromkeys([*judged.get(q, []), *mined.get(q, [])])) for q in queries}
    logger.info(
        "%d judged-irrelevant documents join the negatives of %d queries",
        sum(len(d) for d in judged.values()), len(judged),
    )  # fmt: skip
    return {q: docs for q, docs in out.items() if docs}


def dev_split(
    qids: Sequence[str], dev_fraction: float, min_dev_queries: int, at_least: int = 0
) -> tuple[list[str], list[str]]:
    """``(train, dev)`` query ids: :func:`dotcat.data.splits.split_dev` (:data:`DEV_SEED`,
    ``at_least`` dev queries where there are twice as many queries) when ``dev_fraction`` of the
    queries makes ``min_dev_queries`` or more, else all train."""
    if dev_fraction > 0 and len(qids) * dev_fraction < min_dev_queries:
        logger.warning(
            "%d judged queries: %.0f%% of them is under %d, too few to choose an epoch on; "
            "every query trains and the last epoch is kept (judge more queries for a dev split)",
            len(qids), 100 * dev_fraction, min_dev_queries,
        )  # fmt: skip
        return list(qids), []
    return split_dev(list(qids), dev_fraction, DEV_SEED, at_least=at_least)


def split_queries(
    config: TrainConfig, qids: Sequence[str], at_least: int = 0
) -> tuple[list[str], list[str]]:
    """A run's ``(train, dev)`` query ids: without its ``held_out`` queries (a fold of the
    held-out check trains on the others, and holds out nothing else), every query trains where
    the check is k-fold, else :func:`dev_split`."""
    held = set(config.held_out)
    qids = [q for q in qids if q not in held]
    if held:
        return qids, []
    if config.kfold(len(qids)):
        logger.info(
            "%d judged queries: every one trains, and a %d-fold check judges the run",
            len(qids), config.check_folds,
        )  # fmt: skip
        return qids, []
    return dev_split(qids, config.dev_fraction, config.min_dev_queries, at_least)
