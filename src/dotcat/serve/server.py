"""Run :func:`dotcat.serve.app.create_app` under uvicorn (what ``dotcat serve`` calls).

One process by default. With ``workers`` > 1 the port is bound once here and handed to that many
worker processes (uvicorn's :class:`~uvicorn.supervisors.Multiprocess`: spawned, each with its own
pipeline, restarted if one dies; the kernel spreads connections over them). Each worker takes its
share of the cores (:func:`share_cores`) and micro-batches its own requests; what the processes add
is a second Python interpreter (HTTP parsing, JSON and the model calls' Python glue no longer share
one GIL), at the price of one copy of the models and the index per worker.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import socket
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.supervisors import Multiprocess
from uvicorn.supervisors.multiprocess import Process

from dotcat.errors import DotcatError
from dotcat.serve.app import ServeConfig, create_app
from dotcat.serve.refusals import JSONHttpProtocol

logger = logging.getLogger(__name__)
_uvicorn_log = logging.getLogger("uvicorn.error")  # the supervisor's own messages, shown with -v


def check_port(host: str, port: int) -> None:
    """Refuse at once a port another process holds (uvicorn would only log it and exit)."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as e:
            raise DotcatError(f"cannot listen on {host}:{port} ({e.strerror})") from None


def enable_access_log() -> None:
    """Access-log lines (JSON, one per request) to stderr, whatever the CLI's log level."""
    access = logging.getLogger("dotcat.serve.access")
    if not any(getattr(h, "_dotcat_access", False) for h in access.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler._dotcat_access = True  # type: ignore[attr-defined]
        handler.setFormatter(logging.Formatter("%(message)s"))
        access.addHandler(handler)
    access.setLevel(logging.INFO)
    access.propagate = False


def serve(
    index_dir: str | Path | Sequence[str | Path],
    pipeline_config,
    config: ServeConfig,
    *,
    access_log: bool = True,
    on_ready: Callable[[str, object], None] | None = None,
    cluster=None,
) -> None:
    """Load the pipeline, then listen until interrupted (Ctrl-C or SIGTERM end it cleanly).

    Args:
        index_dir: an index directory, or shards (a folder of them, or a list).
        on_ready: called with the URL and the pipeline once everything is loaded, just
            before the port opens (the CLI prints its banner there); with ``config.workers``
            > 1, once every worker answers, with None for the pipeline (each has its own).
        cluster: where shards run (:class:`dotcat.search.cluster.ClusterConfig`); None:
            one index, or shards in this process.
    """
    config.check()
    check_port(config.host, config.port)
    host = f"[{config.host}]" if ":" in config.host else config.host
    url = f"http://{host}:{config.port}"
    where = str(index_dir) if isinstance(index_dir, str | Path) else [str(p) for p in index_dir]
    factory = WorkerApp(where, pipeline_config, config, access_log, cluster=cluster)
    if config.workers > 1:
        _serve_workers(factory, url, on_ready)
        return
    app = factory()
    if on_ready is not None:
        on_ready(url, app.state.pipeline)
    uvicorn.Server(uvicorn_config(app, config)).run()


@dataclasses.dataclass
class WorkerApp:
    """What a server process needs to build its app: picklable, so that a spawned worker
    loads its own pipeline (``uvicorn.Config(WorkerApp(...), factory=True)``)."""

    index_dir: str | list[str]
    pipeline_config: object
    config: ServeConfig
    access_log: bool = True
    worker: bool = False  # a spawned worker: a load error is one line and the exit status
    cluster: object = None  # where shards run (ClusterConfig); None: in this process

    def __call__(self):
        from dotcat.search.pipeline import SearchPipeline

        if self.worker:
            share_cores(self.config.workers)
        try:
            pipeline = SearchPipeline(self.index_dir, self.pipeline_config, cluster=self.cluster)
        except DotcatError as e:
            if not self.worker:
                raise
            sys.stderr.write(f"dotcat: error: {e}\n")
            sys.exit(STARTUP_FAILURE)  # the supervisor stops rather than restarting it
        pipeline.one_thread_small_calls()
        app = create_app(pipeline, self.config)
        if self.access_log:
            enable_access_log()
        return app


def share_cores(workers: int) -> int:
    """Give this server process its share of the cores: ``cores // workers`` threads (at
    least 1) for PyTorch and every model runtime that follows its count.

    Each model load gives itself every core the process may use unless ``OMP_NUM_THREADS``
    says otherwise (:func:`dotcat.models.runtime.configure_threads`), so without this N
    workers on N cores would each start N encoder threads: N x N threads taking turns on N
    cores. A user's own ``OMP_NUM_THREADS`` wins.

    Returns:
        the thread count this process uses.
    """
    import torch

    from dotcat.models.runtime import available_cpus

    if os.environ.get("OMP_NUM_THREADS"):
        return torch.get_num_threads()  # the user's count (PyTorch read it when it started)
    threads = max(1, available_cpus() // workers)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # what each model load then keeps
    torch.set_num_threads(threads)
    return threads


def uvicorn_config(app, config: ServeConfig, **options) -> uvicorn.Config:
    """uvicorn's settings for ``app``: ``config``'s address, the HTTP protocol whose own
    refusals are JSON (:class:`dotcat.serve.refusals.JSONHttpProtocol`), our access log only."""
    # uvicorn's own messages (startup, a worker that died and its replacement) with -v only.
    verbose = logging.getLogger().isEnabledFor(logging.INFO)
    return uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        http=JSONHttpProtocol,
        log_level="info" if verbose else "warning",
        access_log=False,  # ours is structured (dotcat.serve.access)
        timeout_graceful_shutdown=5,
        **options,
    )


def _serve_workers(
    factory: WorkerApp, url: str, on_ready: Callable[[str, object], None] | None
) -> None:
    """Bind once, start ``config.workers`` processes on the socket, supervise them until
    SIGINT/SIGTERM; ``on_ready`` (with no pipeline: each worker has its own) once all answer.

    Raises:
        DotcatError: a worker failed while loading (the reason is in its log above).
    """
    config = factory.config
    factory = dataclasses.replace(factory, worker=True)
    # A worker answers the supervisor's health pings once its interpreter has started; on a
    # busy small CPU that can take longer than uvicorn's 5 s, and a replacement killed as "hung"
    # would be replaced again and again.
    uv_config = uvicorn_config(
        factory, config, factory=True, workers=config.workers, timeout_worker_healthcheck=30
    )
    sock = uv_config.bind_socket()

    def ready() -> None:
        if on_ready is not None:
            on_ready(url, None)

    supervisor = _Workers(uv_config, [sock], ready)
    try:
        supervisor.run()
    finally:
        sock.close()
    if supervisor.failed:
        raise DotcatError("a server worker failed to start (its error is logged above)")


class _Workers(Multiprocess):
    """uvicorn's supervisor, telling when every worker answers or one failed to load.

    A worker that dies while the others still load (killed, out of memory) is replaced, as
    uvicorn's ``keep_subprocess_alive`` replaces one later; only a worker that exits with
    ``STARTUP_FAILURE`` (its models or index cannot load: every replacement would fail alike)
    stops the server, and then :attr:`failed` is true.
    """

    #: Seconds every worker gets to load before the server gives up.
    startup_timeout = 600.0

    def __init__(self, config: uvicorn.Config, sockets: list, on_ready: Callable[[], object]):
        super().__init__(config, sockets)
        self.on_ready = on_ready
        self.interrupted = False  # Ctrl-C or SIGTERM, not a failure

    @property
    def failed(self) -> bool:
        """The supervisor stopped on its own: a worker could not load, or never got ready."""
        return self.should_exit.is_set() and not self.interrupted

    def init_processes(self) -> None:
        super().init_processes()
        # Ready means every worker answers, as one process does; until then the supervisor
        # does what its main loop does (signals, dead workers), from this one thread, the
        # only one that may use the workers' health-check pipes.
        deadline = time.monotonic() + self.startup_timeout
        while not self.should_exit.wait(0.1):
            self.handle_signals()
            self._replace_exited_workers()
            if self.should_exit.is_set():
                return
            if all(p.is_ready(timeout=1) for p in self.processes):
                self.on_ready()
                return
            if time.monotonic() > deadline:
                logger.error("the workers were not ready after %.0f s", self.startup_timeout)
                self.should_exit.set()

    def _replace_exited_workers(self) -> None:
        """While the workers load: one that exited is replaced, as uvicorn's
        ``keep_subprocess_alive`` would; one that exited with ``STARTUP_FAILURE`` stops the server.

        Unlike uvicorn's check this one does not ping the workers: a worker importing its libraries
        holds the GIL and cannot answer, and when it then fails to load and exits, the ping waits
        out the whole health-check timeout (30 s; this process keeps the pipe's other end open, so
        no end-of-file cuts it short). A hung worker is the startup timeout's business here.
        """
        for idx, process in enumerate(self.processes):
            if process.process.is_alive():
                continue
            process.join()
            if process.exitcode == STARTUP_FAILURE:
                _uvicorn_log.info("Child process [%s] failed to start, stopping", process.pid)
                self.should_exit.set()
                return
            _uvicorn_log.info("Child process [%s] died", process.pid)
            self.processes[idx] = replacement = Process(self.config, self.sockets)
            replacement.start()

    def handle_int(self) -> None:
        self.interrupted = True
        super().handle_int()

    def handle_term(self) -> None:
        self.interrupted = True
        super().handle_term()
