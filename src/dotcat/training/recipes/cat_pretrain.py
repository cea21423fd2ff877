"""The ``cat`` recipe's first step: label-free pre-training on its corpus, before the qrels.

A cross-encoder that starts from a bi-encoder checkpoint (all-MiniLM-L6-v2) has a new head and
has never read a query beside a document; a few hundred labelled queries are little to learn
both from. The corpus itself provides pairs without labels (the title-body signal used to
pre-train retrievers: Lee et al. 2019, ICT; Wang et al. 2022, GPL): each document's title (or a
sentence cut from it, :mod:`dotcat.data.pseudo`) is a query whose positive is the document
without it, and the first stages' other top documents are its negatives. ``train cat
--pretrain-queries N`` trains one epoch on N such pairs (:func:`pretrain_config` is that run's
config, :meth:`dotcat.training.recipes.cat.CatRecipe.first_steps` runs it), then fine-tunes on
the qrels from there.

Layout under the run's output directory::

    OUT/pretrain/data/    the pseudo-pairs as a BEIR dir (train split)
    OUT/pretrain/model/   the pre-trained cross-encoder (a finished ``train cat`` run)

Both are kept, so a resumed run skips what is done; ``--overwrite`` redoes them.
"""

from __future__ import annotations

import dataclasses
import logging
import shutil
from pathlib import Path

from dotcat.data.corpus import iter_corpus
from dotcat.data.pseudo import pseudo_queries, write_pseudo_dataset
from dotcat.errors import DotcatError
from dotcat.files import atomic_dir, read_json_or_none, write_json
from dotcat.models.resolve import TRAINING_RECORD
from dotcat.training.config import AUTO, CatConfig

logger = logging.getLogger(__name__)

PRETRAIN_DIR = "pretrain"
#: What the pseudo-pairs were made with (a resume must ask for the same).
SETTINGS_FILE = "dotcat_pretrain.json"
#: Fewer pseudo-queries than this cannot teach anything (and leave no dev split).
MIN_PSEUDO_QUERIES = 8
#: Share of the pseudo-queries held out to check the pre-training (nothing is chosen on it).
PRETRAIN_DEV_FRACTION = 0.05
#: ``pretrain_queries="auto"`` (the default): this many pseudo-queries where the corpus gives
#: at least :data:`AUTO_MIN_QUERIES`, else no pre-training. It helped the plain logit on
#: SciFact (+0.015 / +0.020 nDCG@10 on 724 held-out training queries, p 0.035 / 0.011) and on
#: two collections the models never saw (+0.08 on pydoc, +0.12 on debian).
AUTO_QUERIES = 1600
AUTO_MIN_QUERIES = 200


def pretrain_config(config: CatConfig) -> CatConfig:
    """The pre-training run of ``config`` (``pretrain_queries`` > 0), its pseudo-pairs written.

    That config with the pseudo-pairs as its data (:func:`pseudo_dataset`), ``OUT/pretrain/model``
    as its output, one epoch, no qrels, and only the first stages that can rank new queries
    (``bm25`` and index directories; a TREC run covers the labelled queries only).
    """
    root = Path(config.out_dir) / PRETRAIN_DIR
    if config.overwrite and root.exists():
        shutil.rmtree(root)
    data = pseudo_dataset(config, root / "data")
    stages = tuple(s for s in config.first_stages if not Path(s).is_file()) or ("bm25",)
    pre = dataclasses.replace(
        config,
        data=data,
        out_dir=root / "model",
        split="train",
        queries=None,
        qrels=None,
        first_stages=stages,
        negatives_file=None,
        epochs=1,
        dev_fraction=PRETRAIN_DEV_FRACTION,
        pretrain_queries=0,
        check=False,  # label-free: the fine-tuning is what the check judges
    )
    logger.info("pre-training on %s (%s), then fine-tuning on the qrels", data, ", ".join(stages))
    return pre


def resolve_pretrain_queries(config: CatConfig) -> int:
    """``config.pretrain_queries`` as a number; ``auto`` is decided once per output directory.

    A resumed run keeps its first decision: the pseudo-pairs it wrote record their count, and a
    run that began its fine-tuning without them (a training record and no pseudo-pairs) goes on
    without. Otherwise ``auto`` is :data:`AUTO_QUERIES` (or all the corpus has, if fewer) where
    the corpus gives at least :data:`AUTO_MIN_QUERIES` pseudo-queries, else 0.
    """
    if config.pretrain_queries != AUTO:
        return int(config.pretrain_queries)
    out = Path(config.out_dir)
    if config.resume:
        made = read_json_or_none(out / PRETRAIN_DIR / "data" / SETTINGS_FILE)
        if isinstance(made, dict) and "pretrain_queries" in made:
            return int(made["pretrain_queries"])
        if (out / TRAINING_RECORD).is_file():
            return 0
    available = len(pseudo_queries(iter_corpus(config.data), seed=config.seed).queries)
    n = min(AUTO_QUERIES, available) if available >= AUTO_MIN_QUERIES else 0
    logger.info(
        "pre-training (auto): %s (the corpus gives %d pseudo-queries; %d needed)",
        f"{n} pseudo-queries" if n else "off", available, AUTO_MIN_QUERIES,
    )  # fmt: skip
    return n


def pseudo_dataset(config: CatConfig, target: Path) -> Path:
    """``target``: ``config.pretrain_queries`` pseudo-queries of the corpus as a BEIR dir."""
    settings = {"pretrain_queries": config.pretrain_queries, "seed": config.seed}
    if (target / "qrels" / "train.tsv").is_file():  # written whole by an earlier run
        made = read_json_or_none(target / SETTINGS_FILE)
        if made != settings:
            raise DotcatError(
                f"{target}: made with {made}, this run asks for {settings}; resume with the "
                "same --pretrain-queries and --seed, or --overwrite"
            )
        return target
    pseudo = pseudo_queries(
        iter_corpus(config.data), max_queries=config.pretrain_queries, seed=config.seed
    )
    if len(pseudo.queries) < MIN_PSEUDO_QUERIES:
        raise DotcatError(
            f"{config.data}: only {len(pseudo.queries)} pseudo-queries for pre-training "
            f"({pseudo.summary()}); it needs at least {MIN_PSEUDO_QUERIES} (titles of 3+ words "
            "or texts of several sentences); train without --pretrain-queries"
        )

    def fill(tmp: Path) -> None:
        write_pseudo_dataset(pseudo, tmp)
        write_json(tmp / SETTINGS_FILE, settings)

    atomic_dir(target, fill)
    logger.info("pseudo-pairs for pre-training: %s", pseudo.summary())
    return target
