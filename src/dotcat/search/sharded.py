"""A folder of shard indexes searched as one index: a front that fans out and merges.

``dotcat index --shard I/N`` splits a corpus into shards, each a complete index of its
documents (with their passages). :class:`ShardedStages` is what
:class:`~dotcat.search.pipeline.SearchPipeline` searches over such a folder (or a list of
shard directories): the query-time parts of one index, with each shard's part done where
the shard is (:class:`~dotcat.search.shard.ShardSearcher`; in this process, or by Ray actors
on a cluster, :mod:`dotcat.search.ray_shards`) and the rest done here, once (the fan-out
stages: :mod:`dotcat.search.fan_out`):

* **dense**: the query encoded here, once; each shard returns its top-k documents (ranked from its
  passages), and the lists are merged by score, ties by shard then rank, which is the merged index's
  order: every shard's top-k holds every document of the collection's top-k that it owns;
* **BM25**: every shard scores with the collection's statistics
  (:mod:`dotcat.index.bm25_global`), so a shard's score is the merged index's and the merge
  by score (ties by id, as BM25 orders them) is the merged index's ranking;
* **feedback**: Rocchio reads the collection's top vectors (each shard's top, merged), RM3
  the collection's top rows and their terms (each shard's, merged, in collection term ids),
  and the rewritten query is searched as any;
* **hybrid** fuses the two merged rankings (:class:`~dotcat.search.hybrid.HybridStage`), and
  re-ranking reads the texts from the shards that hold them, after the merge, as on one index;
* **filters** are parsed once here, against the shards' fields merged
  (:func:`dotcat.index.fields.merged_kinds`); each shard admits its own documents from its
  own fields table and every search above ranks only those (:class:`ShardedAdmitted`), so a
  filtered search over shards is the same filtered search over the merged index; a hit's
  fields come from its shard.

A search waits for the shards at most :attr:`ClusterConfig.budget_s`; a shard that has not
answered by then (every replica of it dead or stuck) is left out, and the answer's
:class:`Coverage` says how much of the collection it searched, as Vespa reports coverage.
Without a budget (``budget_s`` None: a run written to a file), a shard none of whose replicas
answers fails the search instead.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from dotcat.errors import DotcatError
from dotcat.index.bm25_global import CollectionStatistics
from dotcat.index.config import BM25Config
from dotcat.index.docstore import PassageRef, StoredDocument
from dotcat.index.fields import FieldInfo, merged_kinds, with_distinct
from dotcat.index.manifest import Manifest
from dotcat.index.shards import check_compatible, collection_manifest
from dotcat.search.cluster import ClusterConfig
from dotcat.search.fan_out import FanOutStage
from dotcat.search.shard import (
    FilterQuery,
    ShardSearcher,
    ShardSpec,
    collection_statistics,
    statistics_of,
)
from dotcat.search.stages import FirstStage, StageContext, entry, registry

__all__ = ["Coverage", "HitList", "LocalShards", "ShardedAdmitted", "ShardedStages"]

logger = logging.getLogger(__name__)

#: The least time a call for documents' texts gets, even past the search's budget (the shards
#: that hold them answered the search a moment before).
FETCH_GRACE_S = 1.0
#: Fields with at most this many distinct values in every shard have them counted exactly
#: across the shards (their values' union); others, summed (an upper bound).
EXACT_DISTINCT = 1000


@dataclass(frozen=True)
class Coverage:
    """How much of the collection a search covered (Vespa's ``coverage``).

    Attributes:
        documents: documents in the shards that answered.
        total: documents in the collection.
        shards, answered: the shards, and those that answered every call of the search.
        missing: the names of the shards left out.
    """

    documents: int
    total: int
    shards: int
    answered: int
    missing: tuple[str, ...] = ()

    @property
    def full(self) -> bool:
        return not self.missing

    @property
    def share(self) -> float:
        """The share of the collection's documents searched, in [0, 1]."""
        return self.documents / self.total if self.total else 1.0


@dataclass(frozen=True)
class ShardedAdmitted:
    """What a filter admits of the shards (:meth:`ShardedIndex.admit`): the filter as each
    shard gets it (each keeps its own admitted set) and the counts the shards gave.

    Attributes:
        query: the filter's SQL and parameters (:data:`dotcat.search.shard.FilterQuery`).
        documents, vectors: admitted, summed over the shards that answered.
        complete: whether every shard answered (a count to keep).
    """

    query: FilterQuery
    documents: int
    vectors: int
    complete: bool = True


class HitList(list):
    """A query's hits with the coverage of the search that found them (a plain list
    otherwise: what :meth:`SearchPipeline.search_many` gives over one index)."""

    def __init__(self, hits: Sequence[Any], coverage: Coverage | None) -> None:
        super().__init__(hits)
        self.coverage = coverage


class ShardGroup(Protocol):
    """The shards, wherever they run: calls a :class:`ShardSearcher` method on each.

    ``call`` returns one answer per shard, in shard order: None for a shard not asked, or
    that did not answer within ``deadline`` (it is then in ``missed``).
    """

    specs: list[ShardSpec]
    missed: set[int]
    deadline: float | None

    def call(
        self, method: str, args: tuple = (), *, only: Mapping[int, tuple] | None = None
    ) -> list[Any]: ...

    def status(self) -> list[dict[str, Any]]: ...

    def close(self) -> None: ...


class LocalShards:
    """Every shard searched in this process, one after the other (no deadline: a shard here
    fails only with the process)."""

    def __init__(self, specs: list[ShardSpec], views: Sequence[Any]) -> None:
        self.specs = specs
        self.searchers = [ShardSearcher(s, v) for s, v in zip(specs, views, strict=True)]
        self.missed: set[int] = set()
        self.deadline: float | None = None

    def call(
        self, method: str, args: tuple = (), *, only: Mapping[int, tuple] | None = None
    ) -> list[Any]:
        asked = only if only is not None else dict.fromkeys(range(len(self.specs)), args)
        return [
            getattr(searcher, method)(*asked[i]) if i in asked else None
            for i, searcher in enumerate(self.searchers)
        ]

    def status(self) -> list[dict[str, Any]]:
        out = []
        for searcher in self.searchers:
            about = searcher.describe()
            process = {k: about[k] for k in ("pid", "host", "node")}
            out.append({**about, "replicas": 1, "up": 1, "state": "ok",
                        "processes": [{**process, "up": True}]})  # fmt: skip
        return out

    def close(self) -> None:
        for searcher in self.searchers:
            searcher.index.store.close()


def plan(paths: Sequence[Path], device: str, config: Any) -> tuple[list[ShardSpec], list]:
    """Each shard's :class:`ShardSpec` (its place: the ids and positions before it) and
    manifest, shards checked compatible (one encoder, one passage split, no overlap)."""
    manifests = [Manifest.read(p) for p in paths]
    check_compatible(list(zip(paths, manifests, strict=True)))
    vectors = np.cumsum([0] + [m.next_vector_id for m in manifests]).tolist()
    positions = np.cumsum(
        [0] + [int(m.documents.get("next_pos", m.documents["count"])) for m in manifests]
    ).tolist()
    params = dict(config.search_params or {})
    specs = [
        ShardSpec(str(p.resolve()), i, int(vectors[i]), int(positions[i]), device, params,
                  config.aggregation, config.aggregate_top)
        for i, p in enumerate(paths)
    ]  # fmt: skip
    return specs, manifests


def start_local(specs: list[ShardSpec]) -> tuple[LocalShards, CollectionStatistics | None]:
    """The shards in this process, BM25 scored with the collection's statistics."""
    parts = [statistics_of(s) for s in specs]
    stats = collection_statistics(parts)
    views = [stats.view(p) for p in parts] if stats is not None else [None] * len(specs)
    return LocalShards(specs, views), stats


class ShardedStages(StageContext):
    """What a pipeline's stages are built from over shards (see the module docstring): the
    shards (:class:`ShardGroup`), the collection (:class:`ShardedIndex`), its BM25 statistics
    (the context's ``bm25``: None where the shards have no BM25 index).

    Args:
        index_dir: the folder of shards (a list's common folder): the collection's name.
        paths: the shard directories, in shard order.
        config: the pipeline's settings.
        cluster: where the shards run (:class:`ClusterConfig`).
    """

    def __init__(
        self, index_dir: Path, paths: list[Path], config: Any, cluster: ClusterConfig
    ) -> None:
        device = config.device if config.device != "auto" else "cpu"
        specs, manifests = plan(paths, device, config)
        if cluster.on_ray:
            from dotcat.search.ray_shards import start_on_ray  # Ray: an optional extra

            group, stats = start_on_ray(specs, cluster)
        else:
            group, stats = start_local(specs)
        self.group, self.cluster = group, cluster
        index = ShardedIndex(index_dir, manifests, group)
        super().__init__(index_dir, index, stats, config)
        self.bm25_config = _bm25_config(manifests) if stats is not None else None

    def missing(self, name: str) -> str | None:
        """Why the shards cannot serve ``name``: as one index, and a registered stage that
        reads BM25 (only dense, BM25 and hybrid score in the collection's BM25 statistics)."""
        reason, found = super().missing(name), entry(name)
        if reason is None and found.sharded is None and "bm25" in found.sides:
            only = ", ".join(n for n, e in registry().items() if e.sharded)
            return (f"{self.index_dir}: first stage {name!r} reads BM25, which a folder of "
                    f"shards scores in the collection's terms for {only} only")  # fmt: skip
        return reason

    def _build(self, name: str) -> FirstStage:
        """The sharded stage ``name`` (its registry entry's ``sharded``)."""
        found = entry(name)
        return found.load(sharded=True)(self) if found.sharded else FanOutStage.create(self, name)

    # -- one search at a time: its deadline and what it covered ---------------------------

    def begin_call(self) -> None:
        """A search starts: the shards get :attr:`ClusterConfig.budget_s` from now."""
        budget = self.cluster.budget_s
        self.group.missed.clear()
        self.group.deadline = None if budget is None else time.monotonic() + budget
        self.index.owners.clear()

    def coverage(self) -> Coverage:
        """What the search since :meth:`begin_call` covered."""
        missed = sorted(self.group.missed)
        counts = [int(m.documents["count"]) for m in self.index.manifests]
        return Coverage(
            documents=sum(c for i, c in enumerate(counts) if i not in missed),
            total=sum(counts),
            shards=len(counts),
            answered=len(counts) - len(missed),
            missing=tuple(self.group.specs[i].name for i in missed),
        )

    def status(self) -> list[dict[str, Any]]:
        """Each shard: its documents, replicas and their state (for ``/info``)."""
        return self.group.status()

    def close(self) -> None:
        """Stop the shards (Ray actors) and let go of their files."""
        self.group.close()


def _bm25_config(manifests: Sequence[Manifest]) -> BM25Config:
    configs = {repr(sorted(m.bm25["config"].items())) for m in manifests}
    if len(configs) > 1:
        raise DotcatError("the shards' BM25 indexes were built with different settings")
    return BM25Config(**manifests[0].bm25["config"])


class ShardedIndex:
    """The collection as a pipeline reads an index: its manifest and counts, and its
    documents' and passages' texts, fetched from the shards that hold them."""

    def __init__(self, folder: Path, manifests: list[Manifest], group: ShardGroup) -> None:
        self.dir = Path(folder)
        self.manifests = manifests
        self.manifest = collection_manifest(manifests)
        self.group = group
        self.store = self  # what `index.store.by_ids` reads
        self.passages = self.manifest.passages
        #: Which shard holds each document of the current search's answers.
        self.owners: dict[str, int] = {}
        self._kinds: dict[str, FieldInfo] | None = None

    def __len__(self) -> int:
        return sum(m.vector_count for m in self.manifests)

    @property
    def document_count(self) -> int:
        return int(self.manifest.documents["count"])

    def by_ids(self, doc_ids: Sequence[str]) -> dict[str, StoredDocument]:
        """The documents with these ids (asked of the shards that hold them where known,
        else of all); a document whose shard stopped answering since it found it comes with
        an empty text (the answer's coverage says so)."""
        if not doc_ids:
            return {}
        known = {d: self.owners[d] for d in doc_ids if d in self.owners}
        unknown = [d for d in doc_ids if d not in known]
        asked: dict[int, list[str]] = {}
        for doc_id, shard in known.items():
            asked.setdefault(shard, []).append(doc_id)
        if unknown:
            for shard in range(len(self.manifests)):
                asked.setdefault(shard, []).extend(unknown)
        answers = _fetch(self.group, "documents", {s: (ids,) for s, ids in asked.items()})
        found = {d: doc for answer in answers for d, doc in (answer or {}).items()}
        for doc_id in known:
            found.setdefault(doc_id, StoredDocument(-1, doc_id, "", ""))
        return found

    def passage_texts(self, refs: Sequence[PassageRef]) -> dict[int, str]:
        """``pid -> title + passage text`` from the shards whose id ranges hold them."""
        asked = _by_shard([s.first_vector for s in self.group.specs], [r.pid for r in refs])
        answers = _fetch(self.group, "passage_texts", {s: (p,) for s, p in asked.items()})
        found = {pid: text for answer in answers for pid, text in (answer or {}).items()}
        return {ref.pid: found.get(ref.pid, "") for ref in refs}

    # -- fields and filters --------------------------------------------------------------------

    def field_kinds(self) -> dict[str, FieldInfo]:
        """The shards' fields as one (:func:`dotcat.index.fields.merged_kinds`), with the
        distinct values of those that have few (at most :data:`EXACT_DISTINCT` in every
        shard) counted exactly, as the merged index counts them; asked once (shards are not
        updated while searched)."""
        if self._kinds is not None:
            return self._kinds
        every = dict.fromkeys(range(len(self.manifests)), ())
        parts = _fetch(self.group, "field_kinds", every)
        kinds = merged_kinds(p for p in parts if p is not None)
        few = [name for name in kinds
               if all(p is None or p.get(name) is None or p[name].distinct_values <= EXACT_DISTINCT
                      for p in parts)]  # fmt: skip
        answers = _fetch(self.group, "field_values", {s: (few,) for s in every}) if few else []
        values: dict[str, set[str]] = {name: set() for name in few}
        for answer in answers:
            for name, seen in (answer or {}).items():
                values[name] |= seen
        kinds = with_distinct(kinds, values)
        if all(p is not None for p in parts) and all(a is not None for a in answers):
            self._kinds = kinds  # (a shard left out: ask again next time)
        return kinds

    def fields_of(self, positions: Sequence[int]) -> dict[int, dict[str, Any]]:
        """The fields of the documents at these collection positions (as :meth:`by_ids`
        gives them: -1, a document no shard gave, is skipped), from the shards holding them."""
        firsts = [s.first_position for s in self.group.specs]
        asked = _by_shard(firsts, [p for p in positions if p >= 0])
        answers = _fetch(self.group, "fields_of", {s: (p,) for s, p in asked.items()})
        return {pos: f for answer in answers for pos, f in (answer or {}).items()}

    def admit(self, sql: str, params: Sequence[Any]) -> ShardedAdmitted:
        """The documents a filter admits (its SQL over a ``fields`` table,
        :meth:`dotcat.search.filters.Filter.sql`), each shard admitting its own."""
        query = (sql, tuple(params))
        answers = self.group.call("admit", (query,))
        counted = [a for a in answers if a is not None]
        return ShardedAdmitted(query, sum(d for d, _ in counted), sum(v for _, v in counted),
                               complete=len(counted) == len(answers))  # fmt: skip


def _by_shard(firsts: Sequence[int], ids: Sequence[int]) -> dict[int, list[int]]:
    """``ids`` (collection ids or positions) by the shard whose range holds each (``firsts``:
    each shard's first)."""
    asked: dict[int, list[int]] = {}
    for i in ids:
        asked.setdefault(int(np.searchsorted(firsts, i, side="right")) - 1, []).append(int(i))
    return asked


def _fetch(group: ShardGroup, method: str, asked: Mapping[int, tuple]) -> list[Any]:
    """A call for texts: given at least :data:`FETCH_GRACE_S` even past the search's budget."""
    deadline = group.deadline
    if deadline is not None:
        group.deadline = max(deadline, time.monotonic() + FETCH_GRACE_S)
    try:
        return group.call(method, only=asked)
    finally:
        group.deadline = deadline
