"""First stages as parts: the protocol every first stage follows, and the registry of them.

A first stage takes a batch of queries and gives each its top ``k`` documents, scored on one scale
(its ``score_kind``), optionally within the documents a filter admits (``admitted``:
:class:`dotcat.index.filtered.Admitted`, from :mod:`dotcat.search.filters`): the filter is applied
while ranking, never to a ranking afterwards, so k documents come back whenever k are admitted.
Dense search (:mod:`dotcat.search.dense`), BM25 (:mod:`dotcat.search.lexical`) and the fusion of
two stages (:mod:`dotcat.search.hybrid`) are the built-in ones; pseudo-relevance feedback wraps the
stage whose side it rewrites (:mod:`dotcat.search.feedback`), and the re-ranker is a later stage
(:mod:`dotcat.search.reranker`). :class:`~dotcat.search.pipeline.SearchPipeline` composes them from
its settings, the way ir_measures chooses a provider from a registry and PyLate splits retrieval
from ranking.

Adding a first stage takes one module and one registry entry: a factory that builds the stage
from a :class:`StageContext` (the open index, its BM25 side, the settings, the shared query
encoder), and its :class:`StageEntry` in :data:`REGISTRY`, or, from another package, an entry
point in the group ``dotcat.first_stages`` (``name = "module:factory"``), or
:func:`register_stage` at run time. The command line's ``--first-stage``, the server's
``first_stage`` parameter and an experiment's ``first_stage`` then offer it; the pipeline, the
command line and the experiment code are not touched.

This module imports nothing heavy: the settings check first-stage names against the registry
before any model loads, and each factory's module is imported when a stage is first built.
"""

from __future__ import annotations

import inspect
import pkgutil
import threading
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from dotcat.errors import DotcatError

if TYPE_CHECKING:
    from dotcat.index.bm25 import BM25Index
    from dotcat.index.dense_index import DenseIndex
    from dotcat.index.shards import ShardSet

#: The entry-point group through which other packages register first stages.
ENTRY_POINT_GROUP = "dotcat.first_stages"
#: The first stage that follows the index (the default): hybrid where it has BM25, else dense.
AUTO = "auto"
#: Filters whose admitted documents are kept, the last ones asked (a pipeline's, a shard's).
ADMITTED_KEPT = 32


@runtime_checkable
class FirstStage(Protocol):
    """A batch of queries in, each query's top documents out.

    Attributes:
        name: the stage's registry name (``dense``, ``bm25``, ``hybrid``...).
        score_kind: the scale of its scores (:data:`dotcat.search.hits.SCORE_KINDS`).
    """

    name: str
    score_kind: str

    def search(
        self, queries: Mapping[str, str], k: int, *, show_progress: bool = False
    ) -> dict[str, list[Any]]:
        """``{qid: [Match, ...]}``: each query's top ``k`` documents, best first, each with
        the passages that matched it (:class:`dotcat.search.aggregation.Match`).

        A stage that filters also takes ``admitted`` (keyword, default None): the documents
        a filter admits (:class:`dotcat.index.filtered.Admitted`), the only ones it may rank
        (the built-in stages do; :func:`filters` says whether a stage does)."""
        ...


def filters(stage: Any) -> bool:
    """Whether a first stage searches within a filter's documents (its ``search`` takes
    ``admitted``)."""
    try:
        parameters = inspect.signature(stage.search).parameters
    except (TypeError, ValueError):
        return False
    return "admitted" in parameters or any(
        p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values()
    )


@dataclass(frozen=True)
class StageEntry:
    """A registered first stage.

    Attributes:
        factory: a callable, or ``"module:callable"`` (imported when first built), that takes a
            :class:`StageContext` and returns a :class:`FirstStage`.
        sides: what of an index it reads: ``dense`` (the bi-encoder and FAISS, which every
            index has), ``bm25`` (the BM25 index inside, which an index may lack). A stage is
            available where the index has every side it reads, and feedback applies to a stage
            that reads the side the feedback rewrites.
        help: one line for the help texts.
        sharded: over a folder of shards, a factory (as ``factory``) taking the front's
            context that searches in the collection's terms; None: the stage is built on each
            shard and their answers merged (:class:`~dotcat.search.fan_out.FanOutStage`).
    """

    factory: str | Callable[[StageContext], FirstStage]
    sides: tuple[str, ...] = ()
    help: str = ""
    sharded: str | Callable[[StageContext], FirstStage] | None = None

    def load(self, sharded: bool = False) -> Callable[[StageContext], FirstStage]:
        """The factory (``sharded``: over shards), imported from ``module:callable`` here."""
        factory = self.sharded if sharded else self.factory
        return factory if callable(factory) else pkgutil.resolve_name(factory)


#: The built-in first stages, in the order the help texts and the server list them.
REGISTRY: dict[str, StageEntry] = {
    "dense": StageEntry("dotcat.search.dense:DenseStage.create", ("dense",), "BERT_DOT + FAISS",
                        "dotcat.search.fan_out:FanOutDense.create"),
    "bm25": StageEntry("dotcat.search.lexical:BM25Stage.create", ("bm25",), "the BM25 index",
                       "dotcat.search.fan_out:FanOutBM25.create"),
    "hybrid": StageEntry("dotcat.search.hybrid:HybridStage.create", ("dense", "bm25"),
                         "dense and BM25, fused", "dotcat.search.hybrid:HybridStage.create"),
}  # fmt: skip

_plugins_loaded = False


def registry() -> dict[str, StageEntry]:
    """Every first stage: the built-in ones, then those other packages register."""
    global _plugins_loaded
    if not _plugins_loaded:
        _plugins_loaded = True
        for point in entry_points(group=ENTRY_POINT_GROUP):
            if point.name not in REGISTRY:
                REGISTRY[point.name] = _plugin_entry(point)
    return REGISTRY


def _plugin_entry(point: Any) -> StageEntry:
    """An entry point's stage: a :class:`StageEntry` it names, or a factory (its ``sides``
    and docstring, if any, say what it reads and what it is)."""
    value = point.load()
    if isinstance(value, StageEntry):
        return value
    doc = (getattr(value, "__doc__", None) or "").strip().splitlines()
    return StageEntry(point.value, tuple(getattr(value, "sides", ())), doc[0] if doc else "")


def register_stage(
    name: str,
    factory: str | Callable[[StageContext], FirstStage],
    sides: tuple[str, ...] | None = None,
    help: str = "",
) -> None:
    """Register a first stage at run time (see the module docstring); ``sides`` default to
    the factory's owner's ``sides`` attribute, else none."""
    if not name or name == AUTO or not name.replace("_", "").replace("-", "").isalnum():
        raise DotcatError(f"a first stage needs a plain name (not {AUTO!r}), got {name!r}")
    if sides is None:
        owner = getattr(factory, "__self__", factory)
        sides = tuple(getattr(owner, "sides", ()))
    registry()[name] = StageEntry(factory, tuple(sides), help)


def stage_names() -> tuple[str, ...]:
    """The registered first stages' names."""
    return tuple(registry())


def first_stage_choices() -> tuple[str, ...]:
    """What a ``first_stage`` setting may be: ``auto`` or a registered stage."""
    return (AUTO, *stage_names())


def entry(name: str) -> StageEntry:
    """The registry entry of a first stage, or a one-line error naming the others."""
    try:
        return registry()[name]
    except KeyError:
        known = ", ".join(stage_names())
        raise DotcatError(f"no first stage {name!r}; the stages are {known}") from None


def recent(
    cache: OrderedDict, key: Any, make: Callable[[], Any], keep: Callable[[Any], bool] | None = None
) -> Any:
    """``cache[key]``, made by ``make()`` where missing and kept (unless ``keep`` says not)
    among the :data:`ADMITTED_KEPT` last used (least recently used out first)."""
    if key in cache:
        cache.move_to_end(key)
        return cache[key]
    value = make()
    if keep is None or keep(value):
        cache[key] = value
        if len(cache) > ADMITTED_KEPT:
            cache.popitem(last=False)
    return value


class StageContext:
    """What stages are built from: one open index and the pipeline's settings.

    Stages are built once and kept (a hybrid and a dense call share the dense stage), and the
    query encoder is loaded once for every stage that reads the dense side.

    Args:
        index_dir: the index directory.
        index: the open index (:func:`dotcat.index.shards.open_index`).
        bm25: its BM25 index, or None.
        config: the pipeline's :class:`~dotcat.search.config.PipelineConfig`.
    """

    def __init__(
        self, index_dir: Path, index: DenseIndex | ShardSet, bm25: BM25Index | None, config: Any
    ) -> None:
        self.index_dir, self.index, self.bm25, self.config = index_dir, index, bm25, config
        self.manifest = index.manifest
        self.small_call_threads: int | None = None  # see one_thread_small_calls
        #: The generation opened (:func:`dotcat.index.layout.generation_id`; None: shards).
        self.generation_id: tuple[int, ...] | None = None
        self._lock = threading.RLock()
        self._shared: dict[str, Any] = {}
        self._stages: dict[str, FirstStage] = {}
        self._admitted: OrderedDict[str, Any] = OrderedDict()  # filter -> its documents

    def doc_ids(self) -> list[str]:
        """Every document's id, in the order indexed (for a stage that ranks whole documents:
        each one a :meth:`Match.whole <dotcat.search.aggregation.Match.whole>`)."""
        return self.index.store.all_ids()

    @property
    def has(self) -> dict[str, bool]:
        """Which sides this index has."""
        return {"dense": True, "bm25": self.bm25 is not None}

    def missing(self, name: str) -> str | None:
        """Why this index cannot serve the stage ``name`` (None: it can)."""
        lacking = [side for side in entry(name).sides if not self.has.get(side, False)]
        if not lacking:
            return None
        return (
            f"{self.index_dir}: first stage {name!r} needs a BM25 index; rebuild it with "
            "`dotcat index ... --bm25`"
            if lacking == ["bm25"]
            else f"{self.index_dir}: first stage {name!r} needs {' and '.join(lacking)}"
        )

    def available(self) -> list[str]:
        """The stages this index can serve, in registry order."""
        return [name for name in stage_names() if self.missing(name) is None]

    def resolve(self, name: str) -> str:
        """``auto`` -> hybrid where the index has BM25, else dense; any other name checked."""
        if name == AUTO:
            return "hybrid" if self.bm25 is not None else "dense"
        reason = self.missing(name)
        if reason is not None:
            raise DotcatError(reason)
        return name

    def stage(self, name: str) -> FirstStage:
        """The stage ``name`` (built on first use, with the feedback on its side)."""
        name = self.resolve(name)
        with self._lock:
            if name not in self._stages:
                self._stages[name] = self._build(name)
            return self._stages[name]

    def _build(self, name: str) -> FirstStage:
        return entry(name).load()(self)

    def admitted(self, filter: str) -> Any:
        """The documents a filter admits (:class:`dotcat.index.filtered.Admitted`; over
        shards, :class:`dotcat.search.sharded.ShardedAdmitted`: each shard admits its own),
        found once per filter (:func:`recent`).

        Raises:
            FilterError: a syntax error, a field the index does not have or a value of the
                wrong kind, naming the column and the token.
        """
        from dotcat.search.filters import parse_filter

        def admit() -> Any:
            sql, params = parse_filter(filter).sql(self.index.field_kinds())
            return self.index.admit(sql, params)

        with self._lock:  # a shard left out (not `complete`): counted again next time
            return recent(self._admitted, filter, admit, lambda a: getattr(a, "complete", True))

    def search(
        self,
        stage: FirstStage,
        queries: Mapping[str, str],
        k: int,
        show_progress: bool = False,
        filter: str | None = None,
    ) -> dict[str, list[Any]]:
        """``stage``'s matches, within the documents ``filter`` admits where given (none
        admitted: no match, and no search)."""
        if not filter:
            return stage.search(queries, k, show_progress=show_progress)
        admitted = self.admitted(filter)
        if admitted.documents == 0:
            return {q: [] for q in queries}
        if not filters(stage):
            raise DotcatError(
                f"first stage {stage.name!r} cannot search within a filter (its search takes "
                "no `admitted`)"
            )
        return stage.search(queries, k, show_progress=show_progress, admitted=admitted)

    def shared(self, key: str, make: Callable[[], Any]) -> Any:
        """What several stages share, made once (the query encoder: ``dense`` and a hybrid's
        dense side search with one)."""
        with self._lock:
            if key not in self._shared:
                self._shared[key] = make()
            return self._shared[key]

    def made(self, key: str) -> Any:
        """What :meth:`shared` made under ``key``, or None."""
        return self._shared.get(key)

    def one_thread_small_calls(self) -> None:
        """Encode single queries (and other small calls) on one intra-op thread.

        For a server: its event loop, and on a shared machine its clients, need a core the
        moment an answer is ready, and OpenMP workers spin-waiting after a two-thread call
        take it (one client's p50 17.6 ms with two threads on a quiet 2-core Zen 4, 14.9 ms
        with one thread while another process held a core).
        """
        self.small_call_threads = 1
        retriever = self.made("dense")
        if retriever is not None:
            retriever.encoder.single_query_threads = 1

    # What a context over shards (:class:`dotcat.search.sharded.ShardedStages`) does more:
    # one index answers whole, at once, in this process.

    def begin_call(self) -> None:
        """A search starts (over shards: its deadline, its coverage counted from here)."""

    def coverage(self) -> Any:
        """How much of the collection the search since :meth:`begin_call` covered (None:
        all of one index)."""
        return None

    def status(self) -> list[dict[str, Any]] | None:
        """Each shard's state (None: one index)."""
        return None

    def close(self) -> None:
        """Let go of what the stages hold beyond this process (shards on Ray)."""
