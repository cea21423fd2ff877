"""What a pool is made of and how judgements are read back, checked before anything loads.

:class:`PoolConfig` (``dotcat judge pool``, the page's typed queries) and
:class:`QrelsConfig` (``dotcat judge qrels``/``export``): settings dataclasses in the manner of
:mod:`dotcat.options`, with their help text, choices and checks; :data:`GRADES` is the scale
the page offers. Nothing here imports a model library.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dotcat.options import (
    DEVICE_HELP,
    PRECISION_HELP,
    PRECISIONS,
    Check,
    Settings,
    at_least,
    one_of,
    setting,
)
from dotcat.search.stages import first_stage_choices

#: The graded scale of the page, four levels as TREC's graded tracks use: grade -> what it
#: means to the assessor. Every grade above 0 is relevant to the binary measures (RR, R, AP:
#: ir-measures counts a grade > 0), and nDCG takes the grade as the gain.
GRADES = {
    0: "not relevant",
    1: "partly relevant: touches on it",
    2: "relevant: answers it",
    3: "highly relevant: the answer, fully",
}
#: The judging orders (:func:`dotcat.judging.priority.priority`): ``weight``, the summed nDCG
#: discount over the pooled systems; ``rank``, best rank first; ``docid``, TREC's order.
ORDERS = ("weight", "rank", "docid")
#: How the grades of several assessors of one pair become one (:mod:`dotcat.judging.export`).
COMBINE = ("median", "max", "min")
#: Where a pool's judgements are kept by default: beside the index, so that rebuilding the
#: index (``--overwrite``) never deletes them.
STORE_SUFFIX = ".judgments.sqlite"


def default_store(index_dir: str | Path) -> Path:
    """``my-index.judgments.sqlite`` beside ``my-index/``."""
    index_dir = Path(index_dir)
    return index_dir.with_name(index_dir.resolve().name + STORE_SUFFIX)


@dataclass(frozen=True, repr=False)
class PoolConfig(Settings):
    """How a pool is built (:func:`dotcat.judging.pool.build_pool`): depth-k pooling as TREC
    does it, the union of each system's top ``pool_depth``, de-duplicated.

    Attributes:
        pool_depth: documents taken from the top of each system's ranking (TREC's pool depth).
        systems: first stages run over the index: any registered one
            (:func:`dotcat.search.stages.first_stage_choices`); ``auto``: every one it serves.
        rerank: a BERT_CAT; with it the default first stage re-ranked is pooled too.
        runs: TREC run files pooled beside the systems (each a system named by its file).
        order: the order documents are shown in (:data:`ORDERS`).
        device, precision: where the models run.
    """

    pool_depth: int = setting(
        10, help="Documents pooled from the top of each system (depth-k pool)."
    )
    systems: tuple[str, ...] = setting(
        ("auto",),
        help="First stages pooled (repeat): any first stage (dense, bm25, hybrid...); auto: "
        "every one the index serves.",
        flags=("--system",),
    )
    rerank: str | None = setting(
        None, help="Also pool the default first stage re-ranked by this BERT_CAT."
    )
    runs: tuple[str, ...] = setting(
        (), help="TREC run files pooled as systems too (repeat).", flags=("--run",)
    )
    order: str = setting(
        "weight",
        help="Judging order: weight (documents the systems rank high, and several of them, "
        "first), rank (best rank first), docid (TREC's: no order hint).",
        choices=ORDERS,
    )
    device: str = setting("auto", help=DEVICE_HELP)
    precision: str = setting("auto", help=PRECISION_HELP, choices=PRECISIONS)

    def __post_init__(self) -> None:
        for name in ("systems", "runs"):
            value = getattr(self, name)
            object.__setattr__(self, name, (value,) if isinstance(value, str) else tuple(value))

    def checks(self) -> list[Check]:
        return [
            at_least("pool_depth", self.pool_depth, 1),
            *(one_of("systems", s, first_stage_choices()) for s in self.systems),
            (
                bool(self.systems) or bool(self.runs) or self.rerank is not None,
                "systems",
                "systems: a pool needs at least one system or run",
            ),
        ]


@dataclass(frozen=True, repr=False)
class QrelsConfig(Settings):
    """How judgements become qrels (:func:`dotcat.judging.export.judged_qrels`)."""

    assessor: str | None = setting(
        None, help="Only this assessor's judgements (default: every assessor's, combined)."
    )
    combine: str = setting(
        "median",
        help="Several assessors of one document: median (the lower middle grade), max or min.",
        choices=COMBINE,
    )


@dataclass(frozen=True, repr=False)
class ExportConfig(Settings):
    """Where a BEIR export of judgements goes (:func:`dotcat.judging.export.export_beir`)."""

    split: str = setting("test", help="The qrels split written (qrels/SPLIT.tsv).")
    overwrite: bool = setting(False, help="Replace an earlier export there (only).")


JUDGMENTS_HELP = "The judgements file (default: INDEX.judgments.sqlite beside the index)."


@dataclass(frozen=True, repr=False)
class StoreConfig(Settings):
    """Which judgements file a command reads and writes (:class:`~.store.JudgmentStore`)."""

    judgments: str | None = setting(None, help=JUDGMENTS_HELP)

    def path(self, index_dir: str | Path) -> Path:
        """The file: as given, else beside the index (:func:`default_store`)."""
        return Path(self.judgments) if self.judgments else default_store(index_dir)


@dataclass(frozen=True, repr=False)
class TopicsConfig(Settings):
    """Where a pool's queries come from (:mod:`dotcat.judging.topics`)."""

    queries: str | None = setting(
        None, help="Queries file (JSONL, TSV) or BEIR dir; JSONL may add a description."
    )
    split: str | None = setting(None, help="With a BEIR dir: only this split's queries.")
    query_log: str | None = setting(
        None, help="Or the queries a server was asked (dotcat serve --query-log FILE)."
    )
    max_queries: int | None = setting(None, help="At most this many (a log's most asked).")

    def checks(self) -> list[Check]:
        return [
            (
                self.queries is None or self.query_log is None,
                "queries",
                "queries and query_log: give one of them",
            ),
            at_least("max_queries", self.max_queries, 1),
        ]
