"""Where the shards of a sharded collection run, and how long a search waits for them.

A folder of shard indexes (``dotcat index --shard I/N``), or a list of them, is searched as
one index (:mod:`dotcat.search.sharded`): in this process, or by Ray actors on a cluster,
each shard with its replicas (:mod:`dotcat.search.ray_shards`). :class:`ClusterConfig` says
which; it is checked before anything loads (no Ray, no model here).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dotcat.data.index_source import indexes_in
from dotcat.index.manifest import MANIFEST_NAME
from dotcat.options import Applies, Check, Settings, at_least, first_failure, setting

#: ``ray`` values that search the shards in this process.
IN_PROCESS = (None, "none")

RAY_HELP = (
    "Run the shards of a folder of shards on Ray: 'local' (a Ray started on this machine), "
    "'auto' (the cluster this machine belongs to), host:port or ray://host:10001 (needs "
    "pip install 'dotcat[ray]'); 'none': in this process."
)


@dataclass(frozen=True, repr=False)
class ClusterConfig(Settings):
    """How a folder of shards is searched (``dotcat search``, Python: in this process by
    default; ``dotcat serve``: :class:`ServeClusterConfig`, on a local Ray by default).

    Attributes:
        ray: ``None``/``"none"``: the shards are searched in this process; ``"local"``: on a
            Ray started here; else a Ray address (``"auto"``, ``"host:6379"``,
            ``"ray://host:10001"``) whose cluster places the shards' actors.
        replicas: actors per shard on Ray; a request goes to one of them, and to another when
            it dies (Ray starts it again).
        budget_s: the longest one search waits for the shards; past it, the shards that have
            not answered are left out and the answer says how much of the collection it
            covers. None: no limit, and a shard none of whose replicas answers fails the
            search (``dotcat search --queries``: a run is whole or not written).
        shard_cpus: CPUs Ray reserves for each shard actor (its FAISS threads).
    """

    ray: str | None = setting(None, help=RAY_HELP, metavar="ADDRESS")
    replicas: int = setting(1, help="Ray actors per shard (one dying, another answers).")
    budget_s: float | None = setting(
        10.0,
        help="Seconds a search waits for the shards; past them the answer is partial and "
        "says how much of the collection it covers (a run written to a file waits for every "
        "shard unless this is given).",
        flags=("--budget",),
        cli_type=float,
    )
    shard_cpus: float = setting(1.0, help="CPUs Ray reserves for each shard actor.")

    @property
    def on_ray(self) -> bool:
        return self.ray not in IN_PROCESS

    def checks(self) -> list[Check]:
        return [
            at_least("replicas", self.replicas, 1),
            (
                self.budget_s is None or self.budget_s > 0,
                "budget_s",
                f"budget must be > 0 seconds, got {self.budget_s}",
            ),
            (self.shard_cpus > 0, "shard_cpus", f"shard_cpus must be > 0, got {self.shard_cpus}"),
        ]

    def applies(self) -> list[Applies]:
        return [(("replicas", "shard_cpus"), self.on_ray, "applies only on Ray (--ray)")]


@dataclass(frozen=True, repr=False)
class ServeClusterConfig(ClusterConfig):
    """:class:`ClusterConfig` as ``dotcat serve`` takes it: over a folder of shards, a local
    Ray by default."""

    ray: str | None = setting("local", help=RAY_HELP, metavar="ADDRESS")

    def check_within(self, timeout_s: float) -> None:
        """Refuse a budget that a request's time limit (``timeout_s``: its 504) would cut
        short: a partial answer must come before the request times out."""
        first_failure([
            (self.budget_s is not None and self.budget_s < timeout_s, "budget_s",
             f"budget_s {self.budget_s:g} must be below the server's timeout {timeout_s:g}: a "
             "partial answer must come before the request times out"),
        ])  # fmt: skip


def is_shard_folder(path: str | Path) -> bool:
    """Whether ``path`` is a folder of shard indexes (no index itself, indexes inside)."""
    path = Path(path)
    return False if not path.is_dir() or (path / MANIFEST_NAME).exists() else bool(indexes_in(path))
