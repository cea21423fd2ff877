"""``dotcat judge pool|status|qrels|export|import``: a test collection of one's own.

Pool several systems' top results for one's queries, judge them on the page (``dotcat serve
INDEX --judge``), read the judgements back as qrels or a whole BEIR directory. Every option
is a field of :mod:`dotcat.judging.config`; models load after every check.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from dotcat.cli.main import sub_app
from dotcat.cli.params import INDEX_DIR, with_settings
from dotcat.errors import DotcatError
from dotcat.index.manifest import check_index
from dotcat.judging.config import ExportConfig, PoolConfig, QrelsConfig, StoreConfig, TopicsConfig
from dotcat.search.config import PipelineConfig, check_pipeline

judge_app = sub_app(
    "judge", "Judge pooled results for your queries: a test collection of your own."
)


def _index(index_dir: Path) -> Path:
    check_index(index_dir, shards=False)
    return index_dir


def _store(index_dir: Path, judgments: str | None, *, create: bool = False):
    from dotcat.judging.store import JudgmentStore

    return JudgmentStore(StoreConfig(judgments).path(index_dir), index_dir, create=create)


def _topics(config: TopicsConfig, store) -> list:
    from dotcat.judging.topics import read_query_log, read_topics

    if config.query_log is not None:
        return read_query_log(config.query_log, config.max_queries)
    if config.queries is not None:
        return read_topics(config.queries, config.split)[: config.max_queries]
    topics = store.topics()
    if not topics:
        raise DotcatError(
            f"{store.path}: no queries pooled yet; give --queries FILE or --query-log FILE"
        )
    return topics


@judge_app.command("pool")
@with_settings(TopicsConfig, "topics_config")
@with_settings(StoreConfig, "store_config")
@with_settings(PoolConfig, "config")
def pool(
    index_dir: Path = INDEX_DIR,
    topics_config: TopicsConfig = None,
    store_config: StoreConfig = None,
    config: PoolConfig = None,
) -> None:
    """Pool the top --pool-depth of several systems for your queries (TREC's depth-k pool).

    The systems: every first stage the index serves (dense, BM25, hybrid), the hybrid
    re-ranked with --rerank, and any --run files. Without --queries or --query-log, the
    queries pooled before are pooled again (say, with a new --run). Then judge them on
    `dotcat serve INDEX_DIR --judge` (the page at /judge).
    """
    pipeline_config = PipelineConfig(
        rerank=config.rerank, device=config.device, precision=config.precision
    )
    check_pipeline(_index(index_dir), pipeline_config)
    for run in config.runs:
        if not Path(run).is_file():
            raise DotcatError(f"--run {run}: no such file")
    store = _store(index_dir, store_config.judgments, create=True)
    topics = _topics(topics_config, store)

    from dotcat.judging.pool import build_pool
    from dotcat.search.pipeline import SearchPipeline

    pipeline = SearchPipeline(index_dir, pipeline_config)
    summary = build_pool(pipeline, store, topics, config, show_progress=True)
    depth = config.pool_depth
    store_given = f" --judgments {store_config.judgments}" if store_config.judgments else ""
    typer.echo(
        f"pooled {summary.topics} queries ({summary.added_topics} new) at depth {depth} "
        f"over {', '.join(summary.systems)}: {summary.pooled} documents ({summary.per_query:.1f} "
        f"a query, {summary.new} new) in {store.path}\n"
        f"judge them: dotcat serve {index_dir} --judge{store_given}, then open /judge"
    )


@judge_app.command("status")
@with_settings(StoreConfig, "store_config")
@with_settings(QrelsConfig, "qrels_config", exclude=("combine",))
def status(
    index_dir: Path = INDEX_DIR,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    store_config: StoreConfig = None,
    qrels_config: QrelsConfig = None,
) -> None:
    """Each query's pool and how much of it is judged; the assessors' agreement (kappa)."""
    store = _store(_index(index_dir), store_config.judgments)
    assessor = qrels_config.assessor
    from dotcat.judging.agreement import assessor_agreement, format_agreement

    who = assessor or (store.assessors()[0] if len(store.assessors()) == 1 else None)
    progress = store.progress(who)
    pairs = assessor_agreement(store)
    if as_json:
        typer.echo(json.dumps({
            "assessors": store.assessors(), "assessor": who, "pools": store.pools(),
            "queries": {q: p.__dict__ for q, p in progress.items()},
            "agreement": [p.to_json() for p in pairs],
        }, indent=2))  # fmt: skip
        return
    pooled = sum(p.pooled for p in progress.values())
    judged = sum(p.judged for p in progress.values())
    typer.echo(f"{store.path}: {len(progress)} queries, {pooled} pooled documents; "
               f"assessors: {', '.join(store.assessors()) or 'none yet'}")  # fmt: skip
    if who is None:
        for name in store.assessors():
            done = sum(p.judged for p in store.progress(name).values())
            typer.echo(f"  {name}: {done} of {pooled} judged (--assessor {name}: per query)")
    else:
        typer.echo(f"{who} judged {judged} of {pooled}:")
        for topic in store.topics():
            p = progress[topic.qid]
            typer.echo(f"  {topic.qid}: {p.judged}/{p.pooled} judged, {p.skipped} skipped")
    typer.echo(format_agreement(pairs))


@judge_app.command("qrels")
@with_settings(StoreConfig, "store_config")
@with_settings(QrelsConfig, "config")
def qrels(
    index_dir: Path = INDEX_DIR,
    output: Path = typer.Argument(
        ..., help="The qrels file: BEIR layout for a .tsv name, else TREC.", metavar="OUTPUT"
    ),
    store_config: StoreConfig = None,
    config: QrelsConfig = None,
) -> None:
    """Write the judgements as a qrels file (TREC `qid 0 docid grade`, or BEIR's .tsv)."""
    from dotcat.data import check_output_file, load_corpus
    from dotcat.judging.export import judged_qrels, write_qrels

    check_output_file(output)
    store = _store(_index(index_dir), store_config.judgments)
    found = judged_qrels(store, config, load_corpus(index_dir)["id"])
    layout = write_qrels(found, output)
    total = sum(len(d) for d in found.values())
    typer.echo(f"{total} judgements of {len(found)} queries written to {output} ({layout})")


@judge_app.command("export")
@with_settings(StoreConfig, "store_config")
@with_settings(QrelsConfig, "config")
@with_settings(ExportConfig, "export_config")
def export(
    index_dir: Path = INDEX_DIR,
    out_dir: Path = typer.Argument(..., help="The BEIR directory to write.", metavar="OUT_DIR"),
    store_config: StoreConfig = None,
    config: QrelsConfig = None,
    export_config: ExportConfig = None,
) -> None:
    """Write a BEIR directory: the index's documents, the judged queries, qrels/SPLIT.tsv.

    `dotcat eval`, `experiment`, `rerank` and `train` read it like any benchmark.
    """
    store = _store(_index(index_dir), store_config.judgments)
    from dotcat.judging.export import export_beir

    done = export_beir(store, index_dir, out_dir, config, export_config)
    typer.echo(
        f"{done.path}: {done.documents} documents, {done.queries} judged queries, "
        f"{done.judgments} judgements in qrels/{done.split}.tsv"
    )


@judge_app.command("import")
@with_settings(StoreConfig, "store_config")
@with_settings(QrelsConfig, "config", exclude=("combine",), required=("assessor",),
               words={"assessor": "Whose judgements these are."})  # fmt: skip
def import_(
    index_dir: Path = INDEX_DIR,
    qrels_file: Path = typer.Argument(..., help="A qrels file (TREC or BEIR).", metavar="QRELS"),
    store_config: StoreConfig = None,
    config: QrelsConfig = None,
) -> None:
    """Add judgements you already have (a qrels file) to the pool, as ASSESSOR's."""
    store = _store(_index(index_dir), store_config.judgments)
    assessor = config.assessor
    from dotcat.data import load_corpus
    from dotcat.judging.imports import import_qrels

    count = import_qrels(store, qrels_file, assessor, load_corpus(index_dir)["id"])
    typer.echo(f"{count} judgements by {assessor} added to {store.path}")
