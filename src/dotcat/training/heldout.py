"""The held-out check: is the trained pipeline better than its first stage on judged queries it
never trained on?

A model trained on a few judged queries can be much worse than what it replaces: ``train cat``
on 18 judged queries gave nDCG@10 0.556 re-ranked against the first stage's 0.815, on the very
queries it had trained on (issue 64). So ``train dot`` and ``train cat`` (``check``, on any
labels) estimate their effect on queries they did not train on:

- under :data:`~dotcat.training.config.KFOLD_BELOW` training queries, by k-fold cross-validation
  (Stone, "Cross-validatory choice and assessment of statistical predictions", JRSS B, 1974; Hastie,
  Tibshirani and Friedman, *The Elements of Statistical Learning*, 2009, section 7.10): the queries
  are dealt into ``check_folds`` folds (:func:`folds`), the run is repeated per fold with the same
  settings on the other folds' queries (``held_out``), and that run's pipeline ranks the fold; the
  run itself trains on every query, without a dev split;
- with more, on the run's dev split, on which its best epoch was chosen too (a small optimism).

The recipe ranks each held-out query with and without the trained model (``judge``);
:func:`compare` pairs them with dotcat.evaluation's comparison. A gain is shown where the
interval lies above 0; elsewhere the recipe keeps the first stage as the default (``keep``),
saying so in one line with the figures. The verdict goes into ``dotcat_training.json``
(``heldout_check``). Each fold's lists are saved (``OUT_DIR/heldout/fold-I.json``): a resumed
check trains only the folds not done.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotcat.data.splits import DEV_SEED, unit_hash
from dotcat.errors import DotcatError
from dotcat.evaluation import compare_to_baseline, evaluate_runs
from dotcat.files import read_json_or_none, write_json
from dotcat.models.resolve import TRAINING_RECORD, weights_fingerprint
from dotcat.progress import quiet_logger
from dotcat.training import loop
from dotcat.training.config import TrainConfig
from dotcat.training.ddp import DistributedContext
from dotcat.types import Qrels, RunLike

logger = logging.getLogger(__name__)

#: The run record's entry.
RECORD_KEY = "heldout_check"
#: The check's measure (the loop's: what chooses the kept epoch).
MEASURE = loop.DEV_MEASURE
FIRST, TRAINED = "first stage", "trained"


@dataclass(frozen=True)
class Verdict:
    """The trained pipeline against its first stage on held-out judged queries.

    Attributes:
        method: how the queries were held out (``5-fold cross-validation``, ``the dev split``).
        queries: held-out queries compared.
        first, trained: the first stage's and the trained pipeline's mean ``MEASURE``.
        diff, low, high: the mean paired difference (trained - first) and its interval.
        pvalue: the paired comparison's p-value.
        shown_better: the interval lies above 0.
    """

    method: str
    queries: int
    first: float
    trained: float
    diff: float
    low: float
    high: float
    pvalue: float

    @property
    def shown_better(self) -> bool:
        return self.low > 0

    def figures(self, trained: str, first: str) -> str:
        """``MEASURE T for TRAINED against F for FIRST: +d [low, high] over n held-out queries
        (method)``."""
        if self.queries < 2:
            return f"{self.queries} held-out judged queries ranked ({self.method}): too few"
        return (
            f"{MEASURE} {self.trained:.4f} {trained} against {self.first:.4f} {first}: "
            f"{self.diff:+.4f} [{self.low:+.4f}, {self.high:+.4f}] over {self.queries} held-out "
            f"judged queries ({self.method})"
        )

    def to_json(self) -> dict[str, Any]:
        out = {"measure": MEASURE, **dataclasses.asdict(self), "shown_better": self.shown_better}
        return {k: None if isinstance(v, float) and not math.isfinite(v) else v
                for k, v in out.items()}  # fmt: skip


def folds(qids: Sequence[str], k: int) -> list[list[str]]:
    """``qids`` dealt into ``min(k, len(qids))`` folds: sorted by a hash of each id
    (:func:`~dotcat.data.splits.unit_hash` of ``DEV_SEED``), then dealt in turn, so the folds
    differ in size by one at most and a query's fold depends on the ids alone."""
    order = sorted(qids, key=lambda q: unit_hash(DEV_SEED, "fold", q))
    k = max(1, min(k, len(order)))
    return [order[i::k] for i in range(k)]


def compare(first: RunLike, trained: RunLike, qrels: Qrels, method: str) -> Verdict:
    """Both runs evaluated on ``qrels`` (their queries only) and compared query by query by
    :func:`dotcat.evaluation.significance.compare_to_baseline` (its default paired test, and the
    interval that inverts it: the interval excludes 0 exactly where the difference is
    significant)."""
    queries = set(first) | set(trained)
    judged = {q: dict(qrels[q]) for q in queries if q in qrels}
    if len(judged) < 2:  # a paired comparison needs two queries: nothing is shown
        return Verdict(method, len(judged), math.nan, math.nan, 0.0, -math.inf, math.inf, 1.0)
    with quiet_logger("dotcat.evaluation"):  # e.g. lists shorter than 10 on a tiny corpus
        reports = evaluate_runs({FIRST: first, TRAINED: trained}, judged, measures=[MEASURE])
    a, b = reports[FIRST].aggregate[MEASURE], reports[TRAINED].aggregate[MEASURE]
    paired = compare_to_baseline(reports, FIRST, [MEASURE])[TRAINED][MEASURE]
    return Verdict(method, paired.n, a, b, paired.diff, paired.low, paired.high, paired.pvalue)


def pending(out_dir: Path, config: TrainConfig) -> bool:
    """Whether a finished run in ``out_dir`` still owes its held-out check."""
    record = read_json_or_none(out_dir / TRAINING_RECORD) or {}
    return config.check and not config.held_out and RECORD_KEY not in record


def check(recipe: Any, config: TrainConfig, ctx: DistributedContext) -> Verdict | None:
    """The held-out check of a finished run (``recipe``: its prepared recipe), its verdict
    recorded and acted on (:meth:`keep`); None where it cannot run (under ``torchrun``)."""
    out_dir = Path(config.out_dir)
    if ctx.enabled:
        if ctx.is_main:
            logger.warning(
                "the held-out check does not run under torchrun: `dotcat train %s ... --resume` "
                "in one process runs it on this finished run", recipe.kind,
            )  # fmt: skip
        return None
    qids = list(recipe.data.queries)
    if config.kfold(len(qids)):
        parts = folds(qids, config.check_folds)
        lists: dict[str, Any] = {}
        for i, part in enumerate(parts):
            lists.update(_fold_lists(recipe, config, ctx, i, len(parts), part))
        parts = [[q for q in part if q in lists] for part in parts]
        method = f"{len(parts)}-fold cross-validation"
    else:
        parts = folds(list(recipe.dev_queries), config.check_folds)
        lists = recipe.dev_lists()
        method = "the dev split"
    # Fewer than two queries ranked (every fold failed to train): nothing can be shown.
    verdict = recipe.judge(lists, parts, method) if len(lists) > 1 else compare({}, {}, {}, method)
    updates = recipe.keep(verdict)
    record = read_json_or_none(out_dir / TRAINING_RECORD) or {}
    record[RECORD_KEY] = {**verdict.to_json(), **updates.pop("check", {})}
    record.update(updates)
    if isinstance(record.get("model"), dict):  # the weights OUT_DIR holds now
        record["model"]["fingerprint"] = weights_fingerprint(out_dir)
    write_json(out_dir / TRAINING_RECORD, record)
    shutil.rmtree(out_dir / loop.HELDOUT_DIR, ignore_errors=True)
    return verdict


def _fold_lists(
    recipe: Any, config: TrainConfig, ctx: DistributedContext, i: int, k: int, held: list[str]
) -> dict[str, Any]:
    """Fold ``i``: the run repeated without the ``held`` queries (quietly: its lines would be
    the run's own again), then its model's lists for them (:meth:`heldout_lists`); saved, and
    read back by a resumed check."""
    work = Path(config.out_dir) / loop.HELDOUT_DIR
    saved = work / f"fold-{i}.json"
    done = read_json_or_none(saved) if config.resume else None
    if isinstance(done, dict) and done.get("held_out") == sorted(held):
        return done["lists"]
    fold_dir = work / f"fold-{i}"
    shutil.rmtree(fold_dir, ignore_errors=True)
    fold_dir.mkdir(parents=True)
    for name in recipe.fold_files:  # e.g. the run's teacher scores: not computed again
        if (Path(config.out_dir) / name).is_file():
            shutil.copy2(Path(config.out_dir) / name, fold_dir / name)
    negatives = Path(config.out_dir) / recipe.negatives_name
    fold_config = dataclasses.replace(
        config, out_dir=fold_dir, held_out=tuple(held), check=False, resume=False,
        overwrite=True, checkpoint_every=0, stop_after_steps=None,
        negatives_file=negatives if negatives.is_file() else config.negatives_file,
    )  # fmt: skip
    logger.info(
        "held-out check, fold %d of %d: trained on %d queries, %d held out",
        i + 1, k, len(recipe.data.queries) - len(held), len(held),
    )  # fmt: skip
    fold = type(recipe)(fold_config, ctx)
    try:
        with quiet_logger("dotcat"):
            loop.train(fold, fold_config, ctx)
        lists = recipe.heldout_lists(fold.trained, held)
    except DotcatError as e:  # e.g. the other folds hold no example: nothing to judge with
        logger.warning("held-out check, fold %d of %d: %s; its %d queries are left out",
                       i + 1, k, e, len(held))  # fmt: skip
        lists = {}
    del fold
    write_json(saved, {"held_out": sorted(held), "lists": lists}, indent=None)
    shutil.rmtree(fold_dir, ignore_errors=True)
    return lists
