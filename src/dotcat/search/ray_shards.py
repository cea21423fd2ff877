"""Shards as services on Ray: each shard held by actors that Ray places on the cluster.

Every shard of a collection is loaded by ``replicas`` Ray actors
(:class:`~dotcat.search.shard.ShardSearcher`, one process each), spread over the cluster's
nodes (Ray's ``SPREAD`` scheduling, so that the replicas of a shard tend to sit on different
nodes). The front (:mod:`dotcat.search.sharded`, in the ``dotcat serve`` process or a Python
program) sends each call of a search to one replica of every shard, taking turns, and waits
until every shard has answered or the search's budget is spent:

* an actor that dies (its process killed, its node lost) is started again by Ray (actors are
  created with ``max_restarts=-1``; Ray reruns the constructor with the same arguments, which
  holds the collection's BM25 statistics, so a restarted shard scores as before); the call
  it was serving fails at once with ``ActorDiedError``/``ActorUnavailableError``, and is sent
  to another replica of that shard, if any;
* a replica that failed, or did not answer within the budget, is left out of later calls
  until it answers a health probe (a call of ``describe``, every :data:`PROBE_INTERVAL_S`):
  a shard whose every replica is out is left out of a search at once, and the answer is
  partial (its :class:`~dotcat.search.sharded.Coverage` names the shard), never an error and
  never a wait past the budget.

The shards' BM25 statistics are gathered first, by one Ray task per shard (on whichever node
sees its files), summed in the front, and given to each shard's actors as they are created.

References: Ray's actor fault tolerance (https://docs.ray.io/en/latest/ray-core/fault_tolerance/actors.html)
and scheduling strategies (https://docs.ray.io/en/latest/ray-core/scheduling/index.html).
Every node must see the shards at the paths the front uses (a shared file system, or the same
copies), and have dotcat installed.
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import re
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dotcat.errors import DotcatError, first_line
from dotcat.index.bm25_global import CollectionStatistics
from dotcat.index.ray_encoding import check_reachable
from dotcat.search.cluster import ClusterConfig
from dotcat.search.shard import ShardSearcher, ShardSpec, collection_statistics, statistics_of

logger = logging.getLogger(__name__)

INSTALL_HINT = "pip install 'dotcat[ray]'"
#: Seconds between health probes of the replicas left out.
PROBE_INTERVAL_S = 0.5
#: Seconds the cluster gets to place and load every shard's actors.
START_TIMEOUT_S = 600.0
#: An array argument bigger than this (bytes) is put in Ray's object store once and read by
#: every shard; a smaller one goes inline with each call, as Ray sends arguments of up to
#: 100 KiB, which costs less than a put (about a millisecond each).
SHARED_BYTES = 100_000
_CAUSE = re.compile(r"(?:DotcatError|SettingError|DiskFullError): (.*)")


def start_on_ray(
    specs: list[ShardSpec], cluster: ClusterConfig
) -> tuple[RayShards, CollectionStatistics | None]:
    """The shards' actors on the cluster ``cluster.ray`` names, their BM25 statistics summed.

    Raises:
        DotcatError: Ray is not installed, the cluster cannot be reached, or a shard cannot
            be loaded there (its error, in one line), or the cluster did not place every
            actor within :data:`START_TIMEOUT_S`.
    """
    ray = _import_ray()
    needed = math.ceil(len(specs) * cluster.replicas * cluster.shard_cpus)
    started = _connect(ray, cluster.ray, needed)
    try:
        task = ray.remote(statistics_of).options(num_cpus=0)
        parts = _get(ray, [task.remote(s) for s in specs])
        stats = collection_statistics(parts)
        views = [None if stats is None else ray.put(stats.view(p)) for p in parts]
        return RayShards(ray, specs, views, cluster, started), stats
    except BaseException:
        if started:
            ray.shutdown()
        raise


def _import_ray() -> Any:
    try:  # an optional extra (dotcat[ray])
        import ray
    except ImportError as exc:
        raise DotcatError(f"--ray needs Ray, which is not installed: {INSTALL_HINT}") from exc
    return ray


def _connect(ray: Any, address: str, cpus: int) -> bool:
    """Join the cluster at ``address``, or start a local one with at least ``cpus`` CPUs to
    place the actors on; True when this call started Ray (and must shut it down)."""
    if ray.is_initialized():
        logger.info("reusing the Ray runtime already initialised in this process")
        return False
    main = threading.current_thread() is threading.main_thread()
    # ray.init sets SIGTERM to exit at once; ours (dotcat.cli.main) stops in order.
    sigterm = signal.getsignal(signal.SIGTERM) if main else None
    try:
        check_reachable(address)  # (not "local": it starts a Ray here, whatever RAY_ADDRESS names)
        here = {"num_cpus": max(os.cpu_count() or 1, cpus)} if address == "local" else {}
        ray.init(address=address, include_dashboard=False, **here)
    except (ConnectionError, ValueError, RuntimeError, TimeoutError) as exc:
        raise DotcatError(f"cannot connect to Ray at {address!r}: {first_line(exc)}") from exc
    finally:
        if main and sigterm is not None:
            signal.signal(signal.SIGTERM, sigterm)
    logger.info("connected to Ray at %s: %s", address, ray.cluster_resources())
    return True


def _get(ray: Any, refs: list, timeout: float = START_TIMEOUT_S) -> list:
    """``ray.get``, a shard's failure as a one-line DotcatError."""
    try:
        return ray.get(refs, timeout=timeout)
    except ray.exceptions.GetTimeoutError:
        raise DotcatError(
            f"the Ray cluster did not place and load every shard within {timeout:g} s "
            f"(its resources: {ray.available_resources()})"
        ) from None
    except ray.exceptions.RayError as exc:
        found = _CAUSE.search(str(exc))
        raise DotcatError(found.group(1) if found else first_line(exc)) from None


@dataclass
class Replica:
    """One actor of a shard, and whether calls go to it."""

    actor: Any
    up: bool = True
    pid: int | None = None
    host: str | None = None
    node: str | None = None
    ping: Any = field(default=None, repr=False)  # the health probe waiting for an answer


class RayShards:
    """The shards' replicas on Ray, called as a :class:`~dotcat.search.sharded.ShardGroup`
    (see the module docstring)."""

    def __init__(
        self,
        ray: Any,
        specs: list[ShardSpec],
        views: Sequence[Any],
        cluster: ClusterConfig,
        started: bool,
    ) -> None:
        self.ray, self.specs, self.cluster, self.started = ray, specs, cluster, started
        # Held for the actors' lifetime: Ray restarts an actor with these same arguments.
        self.views = list(views)
        self.missed: set[int] = set()
        self.deadline: float | None = None
        actor = ray.remote(ShardSearcher).options(
            max_restarts=-1, max_task_retries=0, num_cpus=cluster.shard_cpus,
            scheduling_strategy="SPREAD",
        )  # fmt: skip
        self.replicas = [
            [Replica(actor.remote(spec, view)) for _ in range(cluster.replicas)]
            for spec, view in zip(specs, views, strict=True)
        ]
        self._next = [0] * len(specs)
        self._lock = threading.Lock()
        try:
            described = _get(ray, [r.actor.describe.remote() for rs in self.replicas for r in rs])
        except BaseException:
            self._kill()
            raise
        for replica, about in zip(self._all(), described, strict=True):
            replica.pid, replica.host, replica.node = about["pid"], about["host"], about["node"]
        self.describe = [described[i * cluster.replicas] for i in range(len(specs))]
        self._stop = threading.Event()
        self._prober = threading.Thread(target=self._probe, name="dotcat-shard-probe", daemon=True)
        self._prober.start()
        logger.info("%d shards x %d replicas on Ray", len(specs), cluster.replicas)

    def _all(self) -> list[Replica]:
        return [r for rs in self.replicas for r in rs]

    # -- calls ---------------------------------------------------------------------------------

    def call(
        self, method: str, args: tuple = (), *, only: Mapping[int, tuple] | None = None
    ) -> list[Any]:
        """``method(*args)`` on one replica of each shard (of ``only``'s shards, with their
        own arguments): the answers in shard order, None for a shard left out."""
        if only is None:
            shared = tuple(self._shared(a) for a in args)
            only = dict.fromkeys(range(len(self.specs)), shared)
        answers: list[Any] = [None] * len(self.specs)
        pending: dict[Any, tuple[int, int]] = {}
        tried: dict[int, set[int]] = {s: set() for s in only}
        for shard in only:
            self._send(shard, method, only[shard], pending, tried)
        while pending:
            remaining = None if self.deadline is None else max(self.deadline - time.monotonic(), 0)
            ready = self.ray.wait(list(pending), num_returns=1, timeout=remaining)[0]
            if not ready:
                break
            for ref in ready:
                shard, index = pending.pop(ref)
                try:
                    answers[shard] = self.ray.get(ref)
                except self.ray.exceptions.RayTaskError as exc:
                    raise exc.as_instanceof_cause() from None  # the shard's own error
                except self.ray.exceptions.RayError as exc:
                    self._leave_out(shard, index, first_line(exc))
                    self._send(shard, method, only[shard], pending, tried)
        for shard, index in pending.values():
            self._leave_out(shard, index, "no answer within the budget")
        missed = [s for s in only if answers[s] is None]
        if missed and self.deadline is None:  # no budget: whole, or an error
            names = ", ".join(self.specs[s].name for s in missed)
            raise DotcatError(f"shard(s) {names}: no replica answered (see the log above)")
        self.missed.update(missed)
        return answers

    def _shared(self, arg: Any) -> Any:
        """``arg`` as every shard's call takes it: a large array put once, else itself."""
        return self.ray.put(arg) if getattr(arg, "nbytes", 0) > SHARED_BYTES else arg

    def _send(self, shard: int, method: str, args: tuple, pending: dict, tried: dict) -> None:
        """The call to the next replica of ``shard`` that is up and not yet tried, if any."""
        with self._lock:
            replicas = self.replicas[shard]
            order = [(self._next[shard] + i) % len(replicas) for i in range(len(replicas))]
            chosen = next((i for i in order if replicas[i].up and i not in tried[shard]), None)
            if chosen is None:
                return
            self._next[shard] = (chosen + 1) % len(replicas)
        tried[shard].add(chosen)
        ref = getattr(replicas[chosen].actor, method).remote(*args)
        pending[ref] = (shard, chosen)

    def _leave_out(self, shard: int, index: int, why: str) -> None:
        with self._lock:
            replica = self.replicas[shard][index]
            if replica.up:
                logger.warning("shard %s, replica %d (pid %s) left out: %s",
                               self.specs[shard].name, index, replica.pid, why)  # fmt: skip
            replica.up = False

    # -- health ---------------------------------------------------------------------------------

    def _probe(self) -> None:
        """Bring back the replicas left out once they answer ``describe`` (a restarted actor
        answers when Ray has loaded it again)."""
        ray = self.ray
        while not self._stop.wait(PROBE_INTERVAL_S):
            with self._lock:
                down = [r for r in self._all() if not r.up]
            for replica in down:
                if replica.ping is None:
                    replica.ping = replica.actor.describe.remote()
            pings = [r.ping for r in down]
            if not pings:
                continue
            ready = set(ray.wait(pings, num_returns=len(pings), timeout=0)[0])
            for replica in down:
                if replica.ping in ready:
                    self._probed(replica)

    def _probed(self, replica: Replica) -> None:
        ping, replica.ping = replica.ping, None
        try:
            about = self.ray.get(ping)
        except self.ray.exceptions.RayError:
            return  # still restarting, or gone: probed again
        with self._lock:
            replica.pid, replica.host, replica.node = about["pid"], about["host"], about["node"]
            replica.up = True
        logger.info("shard %s: replica (pid %s) answers again", about["shard"], about["pid"])

    def status(self) -> list[dict[str, Any]]:
        """Each shard: its documents, its replicas (process, host, up) and its state: ``ok``
        (every replica up), ``degraded`` (some) or ``down`` (none: searches leave it out)."""
        out = []
        with self._lock:
            for about, replicas in zip(self.describe, self.replicas, strict=True):
                up = sum(r.up for r in replicas)
                state = "ok" if up == len(replicas) else "degraded" if up else "down"
                out.append({
                    "shard": about["shard"], "number": about["number"],
                    "documents": about["documents"], "vectors": about["vectors"],
                    "replicas": len(replicas), "up": up, "state": state,
                    "processes": [
                        {"pid": r.pid, "host": r.host, "node": r.node, "up": r.up}
                        for r in replicas
                    ],
                })  # fmt: skip
        return out

    def pids(self) -> list[list[int | None]]:
        """Each shard's replicas' process ids (as last seen)."""
        with self._lock:
            return [[r.pid for r in rs] for rs in self.replicas]

    def close(self) -> None:
        """Stop probing, end the actors, and Ray if this front started it."""
        stop = getattr(self, "_stop", None)
        if stop is not None:
            stop.set()
            self._prober.join(timeout=5)
        self._kill()
        if self.started:
            self.ray.shutdown()

    def _kill(self) -> None:
        for replica in self._all():
            with contextlib.suppress(Exception):  # already gone
                self.ray.kill(replica.actor, no_restart=True)
