"""``dotcat serve``: an index over HTTP (the API and the search page)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from dotcat.cli.main import app
from dotcat.cli.params import with_settings
from dotcat.search.config import PipelineConfig, check_pipeline
from dotcat.serve.config import ServeConfig


@app.command()
@with_settings(PipelineConfig, "pipeline_config")
@with_settings(ServeConfig, "config")
def serve(
    index_dir: Path = typer.Argument(
        ..., help="An index directory from `dotcat index`.", metavar="INDEX_DIR"
    ),
    access_log: bool = typer.Option(True, help="One JSON line per request on stderr."),
    config: ServeConfig = None,
    pipeline_config: PipelineConfig = None,
) -> None:
    """Serve an index over HTTP: a search API (OpenAPI at /docs) and a search page at /."""
    check_pipeline(index_dir, pipeline_config)
    workers = config.workers
    from dotcat.serve.server import serve as run_server

    def ready(url: str, pipeline) -> None:
        if pipeline is None:  # --workers: each process loaded its own
            stages = f"{workers} workers"
        else:
            stages = pipeline.first_stage
            if pipeline.config.prf != "none":
                stages += f" with {pipeline.describe_feedback()}"
            if pipeline.reranker is not None:
                r = pipeline.reranker
                stages += f" + BERT_CAT top {r.depth} (interpolation {r.alpha:g}, {r.alpha_source})"
        typer.echo(f"dotcat: serving {index_dir} on {url} ({stages}); page at {url}/", err=True)
        if config.judge:
            typer.echo(f"dotcat: judging page at {url}/judge", err=True)

    # Ctrl-C or SIGTERM: uvicorn shuts down gracefully, then raises KeyboardInterrupt (one
    # process) or returns (--workers: its supervisor stopped every worker).
    with contextlib.suppress(KeyboardInterrupt):
        run_server(index_dir, pipeline_config, config, access_log=access_log, on_ready=ready)
    typer.echo("dotcat: server stopped", err=True)
