"""Depth-k pools: the documents several systems rank highest for each query, to be judged.

TREC's pooling (Harman, "Overview of the first TREC conference", 1993; Voorhees and Harman, "TREC:
Experiment and Evaluation in Information Retrieval", 2005): each system ranks the collection for a
query, the top ``depth`` of every system are put together without duplicates, and only that pool is
judged; a document outside every pool counts as not relevant. The systems here are the first stages
an index serves (dense, BM25, and their hybrid fusion, over passages where the index has them),
optionally the default first stage re-ranked by a BERT_CAT, and any TREC run files given: what a
user compares. Each pooled document keeps the rank each system gave it (the pool's provenance, with
the systems' settings, is recorded in the store), its judging priority
(:mod:`dotcat.judging.priority`) and the passage that matched, which the page shows first.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotcat.data import ranked, read_run
from dotcat.errors import DotcatError
from dotcat.judging.config import PoolConfig
from dotcat.judging.priority import priority
from dotcat.judging.store import JudgmentStore, PoolEntry, Topic

logger = logging.getLogger(__name__)

#: A system's ranking of one query: ``(doc_id, start, stop)`` best first; ``start``/``stop``
#: the characters of the passage that matched (None: the whole document, or unknown).
Ranked = list[tuple[str, int | None, int | None]]


@dataclass
class SystemRanking:
    """One pooled system: its name, what it is (for the provenance), its rankings."""

    name: str
    describe: dict[str, Any]
    rankings: dict[str, Ranked] = field(default_factory=dict)


@dataclass(frozen=True)
class PoolSummary:
    """What one pooling did: the topics pooled and added, documents pooled and new."""

    pool: int
    topics: int
    added_topics: int
    pooled: int
    new: int
    systems: list[str]
    sizes: dict[str, int]

    @property
    def per_query(self) -> float:
        return self.pooled / max(1, self.topics)


def pool_stages(pipeline: Any, systems: Sequence[str]) -> list[str]:
    """The first stages to pool: ``auto`` is every one the index serves.

    Raises:
        DotcatError: a stage the index cannot serve (BM25 without a BM25 index).
    """
    available = pipeline.describe()["stages_available"]
    stages: list[str] = []
    for system in systems:
        for stage in available if system == "auto" else [system]:
            if stage not in available:
                raise DotcatError(
                    f"systems: {stage!r} needs what this index lacks (it serves "
                    f"{', '.join(available)}); rebuild it with `dotcat index ... --bm25`"
                )
            if stage not in stages:
                stages.append(stage)
    return stages


def _matches_ranked(found: Mapping[str, Sequence[Any]]) -> dict[str, Ranked]:
    """``pipeline.matches`` output as :data:`Ranked` lists, with the best passage's span."""
    out = {}
    for qid, matches in found.items():
        rows = []
        for match in matches:
            span = next(((ref.start, ref.stop) for ref, _ in match.passages
                         if ref.stop is not None), (None, None))  # fmt: skip
            rows.append((match.doc_id, *span))
        out[qid] = rows
    return out


def run_systems(
    pipeline: Any, topics: Sequence[Topic], config: PoolConfig, show_progress: bool = False
) -> list[SystemRanking]:
    """Every pooled system's top ``config.pool_depth`` for ``topics`` (runs read from files)."""
    queries, depth = {t.qid: t.text for t in topics}, config.pool_depth
    described = pipeline.describe()
    out = []
    for stage in pool_stages(pipeline, config.systems):
        found = pipeline.matches(
            queries, depth, first_stage=stage, rerank=False, show_progress=show_progress
        )
        info = {"kind": "first stage", "first_stage": stage, "passages": described["passages"],
                "aggregation": described["aggregation"]}  # fmt: skip
        fusion = getattr(pipeline.stage(stage), "fusion", None)  # a stage that fuses two
        if fusion is not None:
            info["fusion"] = fusion.describe()
        out.append(SystemRanking(stage, info, _matches_ranked(found)))
    if pipeline.reranker is not None:
        found = pipeline.matches(queries, depth, rerank=True, show_progress=show_progress)
        info = {"kind": "re-ranked", "first_stage": pipeline.first_stage,
                "reranker": described["reranker"]}  # fmt: skip
        out.append(SystemRanking(f"{pipeline.first_stage}+rerank", info, _matches_ranked(found)))
    for path in config.runs:
        out.append(run_file_system(Path(path), queries, depth, pipeline))
    return out


def run_file_system(
    path: Path, queries: Mapping[str, str], depth: int, pipeline: Any
) -> SystemRanking:
    """A TREC run pooled as a system: its top ``depth`` for the topics; documents the index
    does not hold are left out (they could not be shown), with one warning."""
    run = ranked(read_run(path))
    tops = {q: [d for d, _ in run.get(q, [])][:depth] for q in queries}
    known = set(pipeline.index.store.by_ids(sorted({d for docs in tops.values() for d in docs})))
    missing = sorted({d for docs in tops.values() for d in docs} - known)
    if missing:
        logger.warning(
            "%s: %d documents of its top %d are not in the index and are not pooled (e.g. %s)",
            path, len(missing), depth, ", ".join(repr(d) for d in missing[:5]),
        )  # fmt: skip
    unanswered = [q for q in queries if q not in run]
    if unanswered:
        logger.warning("%s: no results for %d of %d queries", path, len(unanswered), len(queries))
    rankings = {q: [(d, None, None) for d in docs if d in known] for q, docs in tops.items()}
    info = {"kind": "run file", "file": str(path.resolve())}
    return SystemRanking(path.name, info, rankings)


def pool_entries(systems: Sequence[SystemRanking], qid: str, depth: int) -> list[PoolEntry]:
    """One query's depth-``depth`` pool: the union of each system's top ``depth``, with the
    rank each gave and the passage of the best-ranked system that has one.

    >>> a = SystemRanking("a", {}, {"q": [("d1", None, None), ("d2", None, None)]})
    >>> b = SystemRanking("b", {}, {"q": [("d2", 5, 9)]})
    >>> [(e.doc_id, e.ranks, e.start) for e in pool_entries([a, b], "q", 10)]
    [('d2', {'a': 2, 'b': 1}, 5), ('d1', {'a': 1}, None)]
    """
    ranks: dict[str, dict[str, int]] = {}
    spans: dict[str, tuple[int, int | None, int | None]] = {}
    for system in systems:
        for rank, (doc, start, stop) in enumerate(system.rankings.get(qid, [])[:depth], 1):
            ranks.setdefault(doc, {})[system.name] = rank
            if start is not None and (doc not in spans or rank < spans[doc][0]):
                spans[doc] = (rank, start, stop)
    entries = [
        PoolEntry(doc, r, priority(r), *spans.get(doc, (0, None, None))[1:])
        for doc, r in ranks.items()
    ]
    return sorted(entries, key=lambda e: (-e.weight, e.best_rank, e.doc_id))


def provenance(pipeline: Any, systems: Sequence[SystemRanking], config: PoolConfig,
               topics: Sequence[Topic]) -> dict[str, Any]:  # fmt: skip
    """What a pool was made from: the index, the systems, the depth, the order, the topics."""
    described = pipeline.describe()
    return {
        "index": str(Path(pipeline.index_dir).resolve()),
        "documents": described["documents"],
        "encoder": described["encoder"].get("name"),
        "depth": config.pool_depth,
        "order": config.order,
        "systems": {s.name: s.describe for s in systems},
        "topics": [t.qid for t in topics],
    }


def build_pool(
    pipeline: Any,
    store: JudgmentStore,
    topics: Sequence[Topic],
    config: PoolConfig | None = None,
    show_progress: bool = False,
) -> PoolSummary:
    """Pool ``topics`` over ``pipeline``'s index into ``store`` (see the module docstring).

    Topics already in the store keep their documents and judgements; the new systems' ranks
    join them (a document pooled before keeps its place, gaining the new systems' weight).

    Args:
        pipeline: a :class:`dotcat.search.pipeline.SearchPipeline` over the index (with a
            re-ranker where ``config.rerank`` asks for one).
        store: where the pool and its provenance are written.

    Raises:
        DotcatError: no topics, a stage the index lacks, an unreadable run file, a topic
            already pooled with another text.
    """
    config = config or PoolConfig()
    config.validate()
    if not topics:
        raise DotcatError("no queries to pool")
    added = store.add_topics(topics)  # first: a clash of texts is refused before any search
    systems = run_systems(pipeline, topics, config, show_progress)
    pool = store.add_pool(provenance(pipeline, systems, config, topics))
    store.set_meta("order", config.order)
    pooled = new = 0
    sizes = {}
    for topic in topics:
        entries = pool_entries(systems, topic.qid, config.pool_depth)
        new += store.add_pooled(topic.qid, entries, pool)
        pooled += len(entries)
        sizes[topic.qid] = len(entries)
    summary = PoolSummary(pool, len(topics), len(added), pooled, new, [s.name for s in systems],
                          sizes)  # fmt: skip
    logger.info(
        "pool %d: %d queries, %d documents (%.1f a query), %d new, systems %s",
        pool, summary.topics, pooled, summary.per_query, new, ", ".join(summary.systems),
    )  # fmt: skip
    return summary
