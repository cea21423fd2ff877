"""``dotcat search``, ``rerank``, ``bm25``: queries in, rankings out (a table, JSON, a run).

The models, FAISS and bm25s are imported inside each command, after its checks.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from pathlib import Path

import typer

from dotcat.cli.main import app
from dotcat.cli.output import print_hits, search_lines
from dotcat.cli.params import INDEX_DIR, given_settings, refuse_with, with_settings
from dotcat.data import (
    check_output_file,
    find_corpus_file,
    load_corpus,
    load_queries,
    ranked,
    read_run,
    write_run,
)
from dotcat.data.catalog import resolve_data_path
from dotcat.data.sources import CorpusOptions, open_source
from dotcat.errors import DotcatError
from dotcat.index.config import BM25Config
from dotcat.models.resolve import check_model
from dotcat.options import K_HELP
from dotcat.search.cluster import ClusterConfig, is_shard_folder
from dotcat.search.config import RUN_RERANK_SETTINGS, PipelineConfig, check_query, results_per_query
from dotcat.serve.client import PER_REQUEST, ServerClient

logger = logging.getLogger(__name__)

SPLIT_HELP = "With a BEIR dir: the qrels split whose queries to run."
TAG_HELP = "Run tag (TREC column 6)."


def _tag(value: str) -> str:
    """Checked before any work (a run is written last): one word, as TREC's columns are."""
    if not value or any(c.isspace() for c in value):
        raise DotcatError(f"--tag {value!r}: a run tag is one word (TREC's sixth column)")
    return value


OUTPUT_HELP = "TREC run file to write ('-': standard output)."


#: ``-k``: one option, one default (10 shown, 100 into a run), for search and bm25.
K_OPTION = typer.Option(None, "-k", help=K_HELP)
#: What a re-ranking of a run does not take: the first stage's settings.
_NOT_RERANK = tuple(
    f.name for f in dataclasses.fields(PipelineConfig) if f.name not in RUN_RERANK_SETTINGS
)


@app.command()
@with_settings(PipelineConfig, "config")
@with_settings(ClusterConfig, "cluster")
def search(
    index_dir: str | None = typer.Argument(None, help=INDEX_DIR.help, metavar="INDEX_DIR"),
    query: str | None = typer.Argument(
        None,
        help="Query text; none: read queries line by line (or use --queries).",
        metavar="QUERY",
    ),
    k: int | None = K_OPTION,
    as_json: bool = typer.Option(
        False, "--json", help="JSON output: each hit's snippet, highlights, passage, fields."
    ),
    full_text: bool = typer.Option(
        False, "--full-text", help="With --json: each hit's whole text too."
    ),
    queries: Path | None = typer.Option(None, help="Queries file or BEIR dir, for a run."),
    split: str = typer.Option("test", help=SPLIT_HELP),
    output: Path | None = typer.Option(
        None, help=OUTPUT_HELP + " With --queries (default: standard output)."
    ),
    tag: str = typer.Option("dotcat", help=TAG_HELP, callback=_tag),
    server: str | None = typer.Option(
        None, help="Ask a running `dotcat serve` at this URL instead (it has its index)."
    ),
    config: PipelineConfig = None,
    cluster: ClusterConfig = None,
) -> None:
    """Search an index: one query (a table or --json), a queries file into a TREC run, or
    queries read line by line (models loaded once).

    With --rerank MODEL the top --depth results are re-ordered by the cross-encoder; with
    --filter only documents whose fields match are searched. A folder of shards is searched
    as one index: in this process, or on Ray (--ray).
    """
    _check_paired(as_json, full_text, queries, split, tag)
    if server is not None:  # `dotcat search --server URL "query"`: the one positional is it
        refuse_with("--server", given_settings(ClusterConfig), "the server runs its shards")
        _search_remote(server, [x for x in (index_dir, query) if x is not None], k, as_json,
                       config, (queries, output, split, tag), full_text)  # fmt: skip
        return
    if index_dir is None:
        raise DotcatError("give an INDEX directory (or --server URL)")
    if query is not None and queries is not None:
        raise DotcatError("give either a QUERY or --queries, not both")
    if output is not None and queries is None:
        raise DotcatError("--output writes a run of --queries; give --queries too")
    if queries is not None and output is None:
        output = Path("-")  # the run to standard output, as trec_eval and pipes expect
    k = results_per_query(k, run=queries is not None)
    if query is not None:
        check_query(query)

    if output is not None:
        check_output_file(output)
    if not is_shard_folder(index_dir):
        why = "they place the shards of a folder of shards (this is one index)"
        refuse_with("one index", given_settings(ClusterConfig), why)
        cluster = None
    elif queries is not None and "budget_s" not in given_settings(ClusterConfig):
        cluster = dataclasses.replace(cluster, budget_s=None)  # a run: whole, or an error
    topics = load_queries(queries, split=split) if queries is not None else None

    from dotcat.search.pipeline import SearchPipeline

    pipeline = SearchPipeline(index_dir, config, cluster=cluster)
    if topics is not None:
        return _write_run(pipeline, topics, k, output, tag)

    def one(text: str):
        _warn_if_cut(pipeline, check_query(text))
        hits = pipeline.search(text, k)
        _warn_if_partial(pipeline)
        return hits

    if query is not None:
        print_hits(one(query), as_json, query=query, full_text=full_text)
    else:
        search_lines(one, as_json, full_text)


def _warn_if_cut(pipeline, query: str) -> None:
    cut = pipeline.query_cut(query)
    if cut is not None:
        logger.warning(
            "the query is %d tokens long; the encoder reads its first %d (its window)", *cut
        )


def _warn_if_partial(pipeline) -> None:
    coverage = pipeline.stages.coverage()
    if coverage is not None and not coverage.full:
        logger.warning(
            "partial answer: shard(s) %s did not answer within the budget; %d of %d documents "
            "searched", ", ".join(coverage.missing), coverage.documents, coverage.total,
        )  # fmt: skip


def _check_paired(as_json: bool, full_text: bool, queries: Path | None, split: str, tag: str):
    """Refuse an option given without the one it goes with."""
    if full_text and not as_json:
        raise DotcatError("--full-text goes with --json (the table shows snippets)")
    if as_json and queries is not None:
        raise DotcatError("--json shows one query's hits (or line mode's); --queries writes a run")
    if queries is None and (split != "test" or tag != "dotcat"):
        raise DotcatError("--split and --tag go with --queries (a run's queries and its name)")


def _write_run(pipeline, topics: dict[str, str], k: int, output: Path, tag: str) -> None:
    """``search --queries``: every query's top k into a TREC run."""

    start = time.perf_counter()
    run = pipeline.run(topics, k, show_progress=True)
    seconds = time.perf_counter() - start
    coverage = pipeline.stages.coverage()
    if coverage is not None and not coverage.full:
        raise DotcatError(
            f"shard(s) {', '.join(coverage.missing)} did not answer within --budget; no run "
            "written (without --budget a run waits for every shard)"
        )
    write_run(run, output, tag=tag)
    what = f"{pipeline.first_stage} first stage, {pipeline.score_kind()} scores"
    r = pipeline.reranker
    if r is not None and r.alpha:
        what += (
            f", re-ranked top {r.depth} with {r.cross_encoder.path} (interpolation "
            f"{r.alpha:g}, {r.alpha_source})"
        )
    elif r is not None:
        what += f", not re-ranked: {r.cross_encoder.path} has weight 0 here ({r.alpha_source})"
    _wrote(f"searched {len(topics)} queries in {seconds:.1f} s, top {k} each ({what})", output)


def _wrote(summary: str, output: Path) -> None:
    """The summary line of a run written to ``output``: on standard error where the run goes
    to standard output (a pipe reads only the run)."""
    where = "standard output" if str(output) == "-" else output
    typer.echo(f"{summary}; wrote {where}", err=str(output) == "-")


def _search_remote(url, positional, k, as_json, config: PipelineConfig, run_args,
                   full_text=False) -> None:  # fmt: skip
    """``dotcat search --server URL [QUERY]``: the same output, answered by a running server
    with its own pipeline (only the first stage is asked per request); with ``--queries`` and
    ``--output`` (``run_args``, with ``--split`` and ``--tag``), a run."""
    queries, output, split, tag = run_args
    if len(positional) > 1 or (positional and queries is not None):
        raise DotcatError(
            "with --server, give only the QUERY or --queries (the server has its index)"
        )
    if output is not None and queries is None:
        raise DotcatError("--output writes a run of --queries; give --queries too")
    if queries is not None and output is None:
        output = Path("-")  # the run to standard output, as without --server
    if config.rerank is not None:
        raise DotcatError(
            "--rerank: a server re-ranks with the cross-encoder it was started with (dotcat "
            "serve --rerank MODEL); with --server, leave --rerank out"
        )
    pipeline_options = given_settings(PipelineConfig) - PER_REQUEST
    why = "the server searches with the pipeline it was started with (dotcat serve)"
    refuse_with("--server", pipeline_options, why)
    k = results_per_query(k, run=queries is not None)
    client = ServerClient(url)
    stage = None if config.first_stage == "auto" else config.first_stage
    if queries is not None:
        check_output_file(output)
        topics = load_queries(queries, split=split)
        start = time.perf_counter()
        run = client.run(topics, k, first_stage=stage, filter=config.filter)
        write_run(run, output, tag=tag)
        seconds = time.perf_counter() - start
        _wrote(f"searched {len(topics)} queries on {url} in {seconds:.1f} s, top {k} each", output)
        return

    def ask(text: str):
        return client.search(check_query(text), k=k, first_stage=stage, full_text=full_text,
                             filter=config.filter)  # fmt: skip

    if positional:
        print_hits(ask(positional[0]), as_json, query=positional[0], full_text=full_text)
    else:
        search_lines(ask, as_json, full_text)


@app.command("rerank")
@with_settings(
    PipelineConfig, "config", exclude=_NOT_RERANK, positional=("rerank",), required=("rerank",),
    words={"rerank": "BERT_CAT: dotcat or sentence-transformers."},
)  # fmt: skip
def rerank_run(
    run: Path = typer.Argument(..., help="TREC run to re-rank (a first stage's).", metavar="RUN"),
    data: Path = typer.Argument(
        ..., help="BEIR dir or corpus file: the document texts.", metavar="DATA"
    ),
    output: Path = typer.Option(..., help=OUTPUT_HELP),
    queries: Path | None = typer.Option(None, help="Queries file (default: DATA's queries.jsonl)."),
    split: str = typer.Option("test", help="With a BEIR dir: only the queries of this split."),
    tag: str = typer.Option("dotcat-rerank", help=TAG_HELP, callback=_tag),
    config: PipelineConfig = None,
) -> None:
    """Re-rank a TREC run's top --depth with a BERT_CAT cross-encoder into a new TREC run."""
    find_corpus_file(data)
    check_output_file(output)
    first = ranked(read_run(run))
    source = queries if queries is not None else data
    topics = load_queries(source, split=split)
    if resolve_data_path(source).is_dir():  # the split's judged queries only, as `search` runs
        kept = {q: docs for q, docs in first.items() if q in topics}
        if not kept:
            raise DotcatError(f"{run}: no query of split {split!r} of {source}")
        if len(kept) < len(first):
            logger.warning("%s: %d of its %d queries are not of split %r of %s; left out", run,
                           len(first) - len(kept), len(first), split, source)  # fmt: skip
        first = kept
    check_model(config.rerank, cross_encoder=True)

    from dotcat.search.reranker import Reranker, corpus_texts

    reranker = Reranker.from_config(config)
    depth = config.depth
    needed = {doc for docs in first.values() for doc, _ in docs[:depth]}
    texts = corpus_texts(load_corpus(data), needed)
    start = time.perf_counter()
    out = reranker.rerank(first, topics, texts, show_progress=True)
    seconds = time.perf_counter() - start
    write_run(out, output, tag=tag)
    pairs = sum(min(depth, len(d)) for d in first.values())
    done = (f"re-ranked {len(out)} queries ({pairs} pairs) in {seconds:.1f} s "
            f"({pairs / max(seconds, 1e-9):.1f} pairs/s")  # fmt: skip
    if reranker.alpha == 0.0:  # Reranker.rerank does not run the model
        done = f"kept the first stage's order of {len(out)} queries (the model not run"
    _wrote(f"{done}, interpolation {reranker.alpha:g} {reranker.alpha_source})", output)


@app.command()
@with_settings(BM25Config, "config")
@with_settings(CorpusOptions, "options")
def bm25(
    corpus: Path = typer.Argument(
        ..., help="The documents: as `dotcat index` reads them.", metavar="CORPUS"
    ),
    queries: Path = typer.Option(..., help="Queries file or BEIR dir."),
    output: Path = typer.Option(..., help=OUTPUT_HELP),
    split: str = typer.Option("test", help=SPLIT_HELP),
    k: int | None = K_OPTION,
    tag: str = typer.Option("bm25", help=TAG_HELP, callback=_tag),
    config: BM25Config = None,
    options: CorpusOptions = None,
) -> None:
    """BM25 (bm25s, Snowball stemming, English stop words) over a corpus into a TREC run."""
    k = results_per_query(k, run=True)
    open_source(corpus, options)  # a missing path, an empty folder, a misplaced option
    check_output_file(output)
    topics = load_queries(queries, split=split)

    from dotcat.search.lexical import bm25_search

    start = time.perf_counter()
    run = bm25_search(load_corpus(corpus, options=options), topics, k=k, config=config)
    seconds = time.perf_counter() - start
    write_run(run, output, tag=tag)
    _wrote(f"BM25: searched {len(topics)} queries in {seconds:.1f} s, top {k} each (bm25 "
           "scores)", output)  # fmt: skip
