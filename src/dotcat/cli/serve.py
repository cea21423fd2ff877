"""``dotcat serve``: an index over HTTP (the API and the search page)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from dotcat.cli.app import app
from dotcat.cli.params import option, settings
from dotcat.search.config import PipelineConfig, check_pipeline
from dotcat.serve.config import API_KEY_ENV, ServeConfig


@app.command()
def serve(
    index_dir: Path = typer.Argument(
        ..., help="An index directory from `dotcat index`.", metavar="INDEX_DIR"
    ),
    rerank: str | None = option(PipelineConfig, "rerank"),
    depth: int = option(PipelineConfig, "depth"),
    interpolate: str = option(PipelineConfig, "interpolate"),
    first_stage: str = option(PipelineConfig, "first_stage"),
    prf: str = option(PipelineConfig, "prf"),
    fb_docs: int = option(PipelineConfig, "fb_docs"),
    fb_terms: int = option(PipelineConfig, "fb_terms"),
    original_query_weight: float = option(PipelineConfig, "original_query_weight"),
    rocchio_docs: int = option(PipelineConfig, "rocchio_docs"),
    rocchio_alpha: float = option(PipelineConfig, "rocchio_alpha"),
    rocchio_beta: float = option(PipelineConfig, "rocchio_beta"),
    host: str = option(ServeConfig, "host"),
    port: int = option(ServeConfig, "port"),
    api_key: str | None = option(ServeConfig, "api_key", envvar=API_KEY_ENV),
    max_batch: int = option(ServeConfig, "max_batch"),
    batch_window_ms: float = option(ServeConfig, "batch_window_ms"),
    queue_size: int = option(ServeConfig, "queue_size"),
    timeout_s: float = option(ServeConfig, "timeout_s", "--timeout"),
    workers: int = option(ServeConfig, "workers"),
    judge: bool = option(ServeConfig, "judge"),
    judgments: str | None = option(ServeConfig, "judgments"),
    query_log: str | None = option(ServeConfig, "query_log"),
    access_log: bool = typer.Option(True, help="One JSON line per request on stderr."),
    device: str = option(PipelineConfig, "device"),
    precision: str = option(PipelineConfig, "precision"),
    rerank_backend: str = option(PipelineConfig, "rerank_backend"),
    aggregation: str = option(PipelineConfig, "aggregation"),
    aggregate_top: int = option(PipelineConfig, "aggregate_top"),
    rerank_passages: int = option(PipelineConfig, "rerank_passages"),
) -> None:
    """Serve an index over HTTP: a search API (OpenAPI at /docs) and a search page at /."""
    config = settings(ServeConfig, locals())
    config.validate()
    pipeline_config = settings(PipelineConfig, locals())
    check_pipeline(index_dir, pipeline_config)
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
        if judge:
            typer.echo(f"dotcat: judging page at {url}/judge", err=True)

    # Ctrl-C or SIGTERM: uvicorn shuts down gracefully, then raises KeyboardInterrupt (one
    # process) or returns (--workers: its supervisor stopped every worker).
    with contextlib.suppress(KeyboardInterrupt):
        run_server(index_dir, pipeline_config, config, access_log=access_log, on_ready=ready)
    typer.echo("dotcat: server stopped", err=True)
