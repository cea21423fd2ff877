"""``dotcat search``, ``rerank``, ``bm25``: queries in, rankings out (a table, JSON, a run).

The models, FAISS and bm25s are imported inside each command, after its checks.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import typer

from dotcat.cli.app import app
from dotcat.cli.index import corpus_options
from dotcat.cli.output import print_hits, search_lines
from dotcat.cli.params import option, settings
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
from dotcat.models.config import CrossEncoderConfig
from dotcat.models.resolve import check_model
from dotcat.options import K_HELP
from dotcat.search.config import (
    PipelineConfig,
    check_pipeline,
    check_query,
    results_per_query,
)
from dotcat.serve.client import ServerClient

logger = logging.getLogger(__name__)

INDEX_HELP = "An index directory from `dotcat index`."
SPLIT_HELP = "With a BEIR dir: the qrels split whose queries to run."
TAG_HELP = "Run tag (TREC column 6)."
OUTPUT_HELP = "TREC run file to write ('-': standard output)."


#: ``-k``: one option, one default (10 shown, 100 into a run), for search and bm25.
K_OPTION = typer.Option(None, "-k", help=K_HELP)


@app.command()
def search(
    index_dir: str | None = typer.Argument(None, help=INDEX_HELP, metavar="INDEX_DIR"),
    query: str | None = typer.Argument(
        None,
        help="Query text; none: read queries line by line (or use --queries).",
        metavar="QUERY",
    ),
    k: int | None = K_OPTION,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    queries: Path | None = typer.Option(None, help="Queries file or BEIR dir, for a run."),
    split: str = typer.Option("test", help=SPLIT_HELP),
    output: Path | None = typer.Option(None, help=OUTPUT_HELP + " With --queries."),
    first_stage: str = option(PipelineConfig, "first_stage"),
    fusion: str = option(PipelineConfig, "fusion"),
    fusion_weight: float | None = option(PipelineConfig, "fusion_weight"),
    prf: str = option(PipelineConfig, "prf"),
    fb_docs: int = option(PipelineConfig, "fb_docs"),
    fb_terms: int = option(PipelineConfig, "fb_terms"),
    original_query_weight: float = option(PipelineConfig, "original_query_weight"),
    rocchio_docs: int = option(PipelineConfig, "rocchio_docs"),
    rocchio_alpha: float = option(PipelineConfig, "rocchio_alpha"),
    rocchio_beta: float = option(PipelineConfig, "rocchio_beta"),
    model: str | None = option(PipelineConfig, "model"),
    device: str = option(PipelineConfig, "device"),
    nprobe: int | None = typer.Option(None, help="IVF lists to visit (FAISS nprobe)."),
    ef_search: int | None = typer.Option(None, help="HNSW's candidate list (FAISS efSearch)."),
    tag: str = typer.Option("dotcat", help=TAG_HELP),
    rerank: str | None = option(PipelineConfig, "rerank"),
    depth: int = option(PipelineConfig, "depth"),
    interpolate: str = option(PipelineConfig, "interpolate"),
    precision: str = option(PipelineConfig, "precision"),
    rerank_backend: str = option(PipelineConfig, "rerank_backend"),
    aggregation: str = option(PipelineConfig, "aggregation"),
    aggregate_top: int = option(PipelineConfig, "aggregate_top"),
    rerank_passages: int = option(PipelineConfig, "rerank_passages"),
    server: str | None = typer.Option(
        None, help="Ask a running `dotcat serve` at this URL instead (it has its index)."
    ),
) -> None:
    """Search an index: one query (a table or --json), a queries file into a TREC run, or
    queries read line by line (models loaded once).

    With --rerank MODEL the top --depth results are re-ordered by the cross-encoder.
    """
    if server is not None:  # `dotcat search --server URL "query"`: the one positional is it
        _search_remote(server, [x for x in (index_dir, query) if x is not None], k, as_json,
                       first_stage, rerank, (queries, output, split, tag))  # fmt: skip
        return
    if index_dir is None:
        raise DotcatError("give an INDEX directory (or --server URL)")
    if query is not None and queries is not None:
        raise DotcatError("give either a QUERY or --queries, not both")
    if (queries is None) != (output is None):
        raise DotcatError("--queries and --output go together: the queries, and the run to write")
    k = results_per_query(k, run=queries is not None)
    params = {name: v for name, v in (("nprobe", nprobe), ("efSearch", ef_search)) if v is not None}
    config = settings(PipelineConfig, locals(), search_params=params)
    if query is not None:
        check_query(query)

    if output is not None:
        check_output_file(output)
    check_pipeline(index_dir, config)
    topics = load_queries(queries, split=split) if queries is not None else None

    from dotcat.search.pipeline import SearchPipeline

    pipeline = SearchPipeline(index_dir, config)
    if topics is not None:
        _write_run(pipeline, topics, k, output, tag)
        return

    def one(text: str):
        _warn_if_cut(pipeline, check_query(text))
        return pipeline.search(text, k)

    if query is not None:
        print_hits(one(query), as_json)
    else:
        search_lines(one, as_json)


def _warn_if_cut(pipeline, query: str) -> None:
    cut = pipeline.query_cut(query)
    if cut is not None:
        logger.warning(
            "the query is %d tokens long; the encoder reads its first %d (its window)", *cut
        )


def _write_run(pipeline, topics: dict[str, str], k: int, output: Path, tag: str) -> None:
    """``search --queries``: every query's top k into a TREC run."""

    start = time.perf_counter()
    run = pipeline.run(topics, k, show_progress=True)
    seconds = time.perf_counter() - start
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
    where = "standard output" if str(output) == "-" else output
    typer.echo(
        f"searched {len(topics)} queries in {seconds:.1f} s, top {k} each ({what}); wrote {where}",
        err=str(output) == "-",
    )


def _search_remote(url, positional, k, as_json, first_stage, rerank, run_args) -> None:
    """``dotcat search --server URL [QUERY]``: the same output, answered by a running server;
    with ``--queries`` and ``--output`` (``run_args``, with ``--split`` and ``--tag``), a run."""
    queries, output, split, tag = run_args
    if len(positional) > 1 or (positional and queries is not None):
        raise DotcatError(
            "with --server, give only the QUERY or --queries (the server has its index)"
        )
    if (queries is None) != (output is None):
        raise DotcatError("--queries and --output go together: the queries, and the run to write")
    if rerank is not None:
        raise DotcatError(
            "--rerank: a server re-ranks with the cross-encoder it was started with (dotcat "
            "serve --rerank MODEL); with --server, leave --rerank out"
        )
    PipelineConfig(first_stage=first_stage)  # checked here, before asking
    k = results_per_query(k, run=queries is not None)
    client = ServerClient(url)
    stage = None if first_stage == "auto" else first_stage
    if queries is not None:
        check_output_file(output)
        topics = load_queries(queries, split=split)
        start = time.perf_counter()
        run = client.run(topics, k, first_stage=stage)
        write_run(run, output, tag=tag)
        where = "standard output" if str(output) == "-" else output
        typer.echo(
            f"searched {len(topics)} queries on {url} in {time.perf_counter() - start:.1f} s, "
            f"top {k} each; wrote {where}",
            err=str(output) == "-",
        )
        return

    def ask(text: str):
        return client.search(check_query(text), k=k, first_stage=stage)

    if positional:
        print_hits(ask(positional[0]), as_json)
    else:
        search_lines(ask, as_json)


@app.command("rerank")
def rerank_run(
    run: Path = typer.Argument(..., help="TREC run to re-rank (a first stage's).", metavar="RUN"),
    data: Path = typer.Argument(
        ..., help="BEIR dir or corpus file: the document texts.", metavar="DATA"
    ),
    model: str = typer.Argument(
        ..., help="BERT_CAT: dotcat or sentence-transformers.", metavar="MODEL"
    ),
    output: Path = typer.Option(..., help=OUTPUT_HELP),
    depth: int = option(PipelineConfig, "depth"),
    queries: Path | None = typer.Option(None, help="Queries file (default: DATA's queries.jsonl)."),
    split: str = typer.Option("test", help="With a BEIR dir: only the queries of this split."),
    interpolate: str = option(PipelineConfig, "interpolate"),
    batch_size: int = option(CrossEncoderConfig, "batch_size"),
    device: str = option(CrossEncoderConfig, "device"),
    tag: str = typer.Option("dotcat-rerank", help=TAG_HELP),
    precision: str = option(CrossEncoderConfig, "precision"),
    rerank_backend: str = option(PipelineConfig, "rerank_backend"),
) -> None:
    """Re-rank a TREC run's top --depth with a BERT_CAT cross-encoder into a new TREC run."""

    config = settings(PipelineConfig, locals(), rerank=model)
    find_corpus_file(data)
    check_output_file(output)
    first = ranked(read_run(run))
    source = queries if queries is not None else data
    topics = load_queries(source, split=split)
    if resolve_data_path(source).is_dir():  # the split's judged queries only, as `search` runs
        first = {q: docs for q, docs in first.items() if q in topics}
        if not first:
            raise DotcatError(f"{run}: no query of split {split!r} of {source}")
    check_model(model, cross_encoder=True)

    from dotcat.search.pipeline import Reranker
    from dotcat.search.reranker import corpus_texts

    reranker = Reranker.load(model, depth, interpolate, device=device, precision=precision,
                             backend=config.rerank_backend, batch_size=batch_size)  # fmt: skip
    needed = {doc for docs in first.values() for doc, _ in docs[:depth]}
    texts = corpus_texts(load_corpus(data), needed)
    start = time.perf_counter()
    out = reranker.rerank(first, topics, texts, show_progress=True)
    seconds = time.perf_counter() - start
    write_run(out, output, tag=tag)
    pairs = sum(min(depth, len(d)) for d in first.values())
    typer.echo(
        f"re-ranked {len(out)} queries ({pairs} pairs) in {seconds:.1f} s "
        f"({pairs / max(seconds, 1e-9):.1f} pairs/s, interpolation {reranker.alpha:g} "
        f"{reranker.alpha_source}); wrote {'standard output' if str(output) == '-' else output}",
        err=str(output) == "-",
    )


@app.command()
def bm25(
    corpus: Path = typer.Argument(
        ..., help="The documents: as `dotcat index` reads them.", metavar="CORPUS"
    ),
    queries: Path = typer.Option(..., help="Queries file or BEIR dir."),
    output: Path = typer.Option(..., help=OUTPUT_HELP),
    split: str = typer.Option("test", help=SPLIT_HELP),
    k: int | None = K_OPTION,
    k1: float = typer.Option(0.9, help="BM25 k1 (Pyserini's BEIR default 0.9)."),
    b: float = typer.Option(0.4, help="BM25 b (Pyserini's BEIR default 0.4)."),
    tag: str = typer.Option("bm25", help=TAG_HELP),
    id_field: str | None = option(CorpusOptions, "id_field"),
    title_field: str | None = option(CorpusOptions, "title_field"),
    text_field: str | None = option(CorpusOptions, "text_field"),
    include: list[str] = option(CorpusOptions, "include", metavar="GLOB"),
    exclude: list[str] = option(CorpusOptions, "exclude", metavar="GLOB"),
    strict: bool = option(CorpusOptions, "strict"),
    hidden: bool = option(CorpusOptions, "hidden"),
) -> None:
    """BM25 (bm25s, Snowball stemming, English stop words) over a corpus into a TREC run."""
    from dotcat.index.bm25 import BM25Config

    k = results_per_query(k, run=True)
    config = BM25Config(k1=k1, b=b)
    options = corpus_options(locals())
    open_source(corpus, options)  # a missing path, an empty folder, a misplaced option
    check_output_file(output)
    topics = load_queries(queries, split=split)

    from dotcat.search.bm25 import bm25_search

    start = time.perf_counter()
    run = bm25_search(load_corpus(corpus, options=options), topics, k=k, config=config)
    seconds = time.perf_counter() - start
    write_run(run, output, tag=tag)
    where = "standard output" if str(output) == "-" else output
    typer.echo(
        f"BM25: searched {len(topics)} queries in {seconds:.1f} s, top {k} each (bm25 scores); "
        f"wrote {where}",
        err=str(output) == "-",
    )
