"""``dotcat serve``: an index over HTTP (the API and the search page)."""

from __future__ import annotations

import contextlib
from pathlib import Path

import typer

from dotcat.cli.main import app
from dotcat.cli.params import given_settings, refuse_with, with_settings
from dotcat.errors import DotcatError
from dotcat.index.manifest import Manifest
from dotcat.search.cluster import ServeClusterConfig, is_shard_folder
from dotcat.search.config import PipelineConfig, check_pipeline
from dotcat.serve.config import ServeConfig


@app.command()
@with_settings(PipelineConfig, "pipeline_config")
@with_settings(ServeConfig, "config")
@with_settings(ServeClusterConfig, "cluster")
def serve(
    index_dirs: list[Path] = typer.Argument(
        ...,
        help="An index directory from `dotcat index`; or shards (`dotcat index --shard I/N`): "
        "a folder of them, or their directories.",
        metavar="INDEX_DIR",
    ),
    access_log: bool = typer.Option(True, help="One JSON line per request on stderr."),
    config: ServeConfig = None,
    pipeline_config: PipelineConfig = None,
    cluster: ServeClusterConfig = None,
) -> None:
    """Serve an index over HTTP: a search API (OpenAPI at /docs) and a search page at /.

    Over shards, each shard is held by --replicas Ray actors (on a local Ray by default, or
    the cluster --ray names); every search asks all shards and merges their answers.
    """
    for index_dir in index_dirs:
        check_pipeline(index_dir, pipeline_config)
    sharded = len(index_dirs) > 1 or is_shard_folder(index_dirs[0])
    cluster = _cluster(sharded, cluster, config)
    if config.watch:
        from dotcat.serve.live import watched_corpus  # (watchfiles: only when asked)

        watched_corpus(Manifest.read(index_dirs[0]).corpus, index_dirs[0])
    target = index_dirs[0] if len(index_dirs) == 1 else index_dirs
    shown = " ".join(map(str, index_dirs))
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
            shards = pipeline.stages.status()
            if shards is not None:
                where = f"Ray at {cluster.ray}" if cluster.on_ray else "this process"
                stages += f"; {len(shards)} shards x {shards[0]['replicas']} on {where}"
        typer.echo(f"dotcat: serving {shown} on {url} ({stages}); page at {url}/", err=True)
        if config.judge:
            typer.echo(f"dotcat: judging page at {url}/judge", err=True)

    # Ctrl-C or SIGTERM: uvicorn shuts down gracefully, then raises KeyboardInterrupt (one
    # process) or returns (--workers: its supervisor stopped every worker).
    with contextlib.suppress(KeyboardInterrupt):
        run_server(target, pipeline_config, config, access_log=access_log, on_ready=ready,
                   cluster=cluster)  # fmt: skip
    typer.echo("dotcat: server stopped", err=True)


def _cluster(sharded: bool, cluster: ServeClusterConfig, config: ServeConfig):
    """Where the shards run (None for one index); what only applies to shards refused."""
    if sharded and (config.writable or config.watch):
        raise DotcatError(
            "--writable and --watch serve one index; shards are updated with `dotcat add` "
            "and `dotcat delete` (each document in the shard that holds it)"
        )
    if not sharded:
        why = "they place the shards of a folder of shards (this is one index)"
        refuse_with("one index", given_settings(ServeClusterConfig), why)
        return None
    if config.workers > 1:
        raise DotcatError(
            "--workers: a server over shards is one front process; the shards run as Ray "
            "actors (--replicas gives each shard more)"
        )
    cluster.check_within(config.timeout_s)
    return cluster
