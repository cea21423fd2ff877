"""Run :func:`dotcat.serve.app.create_app` under uvicorn (what ``dotcat serve`` calls)."""

from __future__ import annotations

import logging
import socket
import sys
from collections.abc import Callable
from pathlib import Path

from dotcat.errors import DotcatError
from dotcat.serve.app import ServeConfig, create_app

logger = logging.getLogger(__name__)


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
    index_dir: str | Path,
    pipeline_config,
    config: ServeConfig,
    *,
    access_log: bool = True,
    on_ready: Callable[[str, object], None] | None = None,
) -> None:
    """Load the pipeline, then listen until interrupted (Ctrl-C or SIGTERM end it cleanly).

    Args:
        on_ready: called with the URL and the pipeline once everything is loaded, just
            before the port opens (the CLI prints its banner there).
    """
    import uvicorn

    from dotcat.search.pipeline import SearchPipeline

    config.check()
    check_port(config.host, config.port)
    pipeline = SearchPipeline(index_dir, pipeline_config)
    pipeline.one_thread_small_calls()
    app = create_app(pipeline, config)
    if access_log:
        enable_access_log()
    host = f"[{config.host}]" if ":" in config.host else config.host
    if on_ready is not None:
        on_ready(f"http://{host}:{config.port}", pipeline)
    server = uvicorn.Server(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            log_level="warning",
            access_log=False,  # ours is structured (dotcat.serve.access)
            timeout_graceful_shutdown=5,
        )
    )
    server.run()
