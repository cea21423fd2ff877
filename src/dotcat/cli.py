"""The ``dotcat`` command line: a thin shell over library functions.

Every command parses its arguments, calls one importable function, and prints. A
:class:`~dotcat.errors.DotcatError` becomes one line on stderr and exit status 2.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import signal
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Annotated

import click
import typer
from typer.core import TyperGroup

from dotcat.cli_datasets import datasets_app
from dotcat.errors import DotcatError


class _Terminated(KeyboardInterrupt):
    """SIGTERM (``timeout``, ``kill``, a scheduler), raised like Ctrl-C so cleanup runs."""


def _raise_terminated(signum, frame) -> None:
    raise _Terminated


class _Group(TyperGroup):
    """Turns a DotcatError (bad input, refused index...) into one line and exit status 2.

    Ctrl-C and SIGTERM stop the work the same orderly way (a build's folder removed, its
    lock released): "dotcat: interrupted", exit status 130 (Ctrl-C) or 143 (SIGTERM).
    """

    def invoke(self, ctx: click.Context):
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, _raise_terminated)
        try:
            return super().invoke(ctx)
        except DotcatError as e:
            click.echo(f"dotcat: error: {e}", err=True)
            ctx.exit(2)
        except _Terminated:
            click.echo("dotcat: interrupted (SIGTERM)", err=True)
            ctx.exit(143)
        except KeyboardInterrupt:
            click.echo("dotcat: interrupted", err=True)
            ctx.exit(130)


app = typer.Typer(
    cls=_Group,
    add_completion=False,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    help="dotcat: index a corpus with BERT_DOT + FAISS, search it, re-rank, evaluate.",
)
logger = logging.getLogger("dotcat")


class _StderrHandler(logging.Handler):
    """Log lines to whatever ``sys.stderr`` is at the time (test runners swap it)."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            sys.stderr.write(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 - logging must never take the command down
            self.handleError(record)


def _configure_logging(verbose: bool) -> None:
    """One stderr handler on the root logger, at WARNING (INFO with -v).

    The level is set on the handler too: a library that forces its own logger to DEBUG
    still cannot print below the level the user asked for.
    """
    level = logging.INFO if verbose else logging.WARNING
    root = logging.getLogger()
    handler = next((h for h in root.handlers if isinstance(h, _StderrHandler)), None)
    if handler is None:
        handler = _StderrHandler()
        handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
    handler.setLevel(level)
    root.setLevel(level)


@app.callback()
def _setup(
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Log progress details.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress bars.")] = False,
) -> None:
    from dotcat.progress import set_quiet

    _configure_logging(verbose)
    set_quiet(quiet)


_PRECISION_HELP = (
    "auto (int8 on CPUs with VNNI, else bf16 where the CPU has native bf16 or on a GPU, else "
    "fp32), fp32, bf16, or int8 (CPU only, exported on first use); DOTCAT_NATIVE_BF16=on|off "
    "overrides the detection."
)
_PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
#: `--teacher` naming the lexical teacher (dotcat.training.config.LEXICAL_TEACHER).
_LEXICAL_TEACHER = "bm25"
_RERANK_BACKEND_HELP = (
    "The re-ranker's int8 runtime: auto (openvino where installed), openvino or onnxruntime."
)
_INT8_BACKENDS = ("auto", "openvino", "onnxruntime")

# Every command checks its arguments, paths and outputs with light modules (no torch, no
# FAISS) before importing the stages that do the work: a typo is reported in milliseconds,
# not after 10-25 s of imports or hours of encoding.


def _at_least(option: str, value: float | None, minimum: float = 1) -> None:
    if value is not None and value < minimum:
        raise DotcatError(f"{option} must be >= {minimum}, got {value}")


def _auto_or_count(option: str, value: str) -> int | str:
    """``auto``, or a whole number >= 0."""
    if value == "auto":
        return value
    try:
        count = int(value)
    except ValueError:
        raise DotcatError(f"{option} must be 'auto' or a number >= 0, got {value!r}") from None
    _at_least(option, count, 0)
    return count


def _one_of(option: str, value: str, choices: tuple[str, ...]) -> None:
    if value not in choices:
        raise DotcatError(f"{option} must be one of {', '.join(choices)}, got {value!r}")


def _query_text(query: str) -> str:
    if not query.strip():
        raise DotcatError("the query is empty; give some words to search for")
    return query


def _check_model(model: str) -> None:
    """Resolve a model argument and check it is a model directory (no torch imported)."""
    from dotcat.models.resolve import read_model_config, resolve_model
    from dotcat.models.st_config import read_st_settings

    path = resolve_model(model)
    read_model_config(path, read_st_settings(path).transformer_dir)


def _check_index(index_dir: Path) -> None:
    """An index directory (restored first if a killed build left it aside), or a folder of
    shard indexes."""
    from dotcat.index.layout import recover_for_reading
    from dotcat.index.manifest import MANIFEST_NAME, Manifest

    recover_for_reading(index_dir)
    index_dir = Path(index_dir)
    if index_dir.is_dir() and not (index_dir / MANIFEST_NAME).exists():
        shards = [p for p in sorted(index_dir.iterdir()) if (p / MANIFEST_NAME).is_file()]
        for shard in shards:
            Manifest.read(shard)
        if shards:
            return
    Manifest.read(index_dir)


def _check_training_args(data: Path, out_dir: Path, base: str, **counts: int) -> None:
    """What a training run needs, checked before torch is imported: data, output, model."""
    from dotcat.data import find_corpus_file
    from dotcat.files import check_can_create_in

    for name, value in counts.items():
        _at_least("--" + name.replace("_", "-"), value)
    find_corpus_file(data)
    if out_dir.exists() and not out_dir.is_dir():
        raise DotcatError(f"{out_dir}: exists and is not a directory")
    check_can_create_in(out_dir)
    _check_model(base)


def _load_topics(queries: Path, split: str) -> dict[str, str]:
    from dotcat.data import load_queries

    return load_queries(queries, split=split)  # a queries file ignores the split


def _parse_search_params(nprobe: int | None, ef_search: int | None) -> dict[str, float]:
    params: dict[str, float] = {}
    if nprobe is not None:
        params["nprobe"] = nprobe
    if ef_search is not None:
        params["efSearch"] = ef_search
    return params


_CORPUS_HELP = (
    "A BEIR directory, a corpus file (JSONL, JSON, CSV, TSV, Parquet; .gz ok) or a folder of "
    "files (.txt .md .rst .html .pdf, and record files), walked recursively."
)
_IdField = Annotated[
    str | None,
    typer.Option(help="The records' id field (JSONL, JSON, CSV, TSV, Parquet); default _id or id."),
]
_TitleField = Annotated[str | None, typer.Option(help="The records' title field; default title.")]
_TextField = Annotated[
    str | None, typer.Option(help="The records' text field; default text or contents.")
]
_Include = Annotated[
    list[str] | None,
    typer.Option(
        help="Only a folder's files matching this glob (repeat): *.md matches names, "
        "notes/*.md paths."
    ),
]
_Exclude = Annotated[
    list[str] | None,
    typer.Option(help="Skip a folder's files and folders matching this glob (repeat)."),
]
_Strict = Annotated[
    bool,
    typer.Option(
        help="Stop at a folder's first file that cannot be read (default: skip it, and name "
        "the skipped ones in one warning)."
    ),
]
_Hidden = Annotated[bool, typer.Option(help="Also read hidden files and folders (.name).")]


def _corpus_options(id_field, title_field, text_field, include, exclude, strict, hidden):
    """The :class:`dotcat.data.CorpusOptions` of ``index`` and ``add`` (checked here)."""
    from dotcat.data import CorpusOptions

    return CorpusOptions(
        id_field=id_field,
        title_field=title_field,
        text_field=text_field,
        include=tuple(include or ()),
        exclude=tuple(exclude or ()),
        strict=strict,
        hidden=hidden,
    )


@app.command()
def index(
    corpus: Annotated[Path, typer.Argument(help=_CORPUS_HELP)],
    index_dir: Annotated[Path, typer.Argument(help="Where to write the index directory.")],
    model: Annotated[
        str, typer.Option(help="Local model dir, hub name, or 'default'.")
    ] = "default",
    pooling: Annotated[
        str | None, typer.Option(help="cls or mean (default: model's config).")
    ] = None,
    similarity: Annotated[
        str | None, typer.Option(help="dot or cos (default: model's config).")
    ] = None,
    max_length: Annotated[int | None, typer.Option(help="Max tokens per document.")] = None,
    batch_size: Annotated[
        int | None, typer.Option(help="Encoding batch size (default: 32 on CPU, 256 on a GPU).")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    faiss: Annotated[
        str, typer.Option("--faiss", help="FAISS factory string, e.g. Flat, HNSW32, IVF4096,Flat.")
    ] = "Flat",
    bm25: Annotated[
        bool,
        typer.Option(
            help="Also build a BM25 index inside (for BM25 and hybrid search); with a BEIR dir "
            "that has dev or train qrels, the hybrid fusion is chosen on its dev queries."
        ),
    ] = True,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing index.")] = False,
    keep_vectors: Annotated[bool, typer.Option(help="Keep vectors.npy in the index.")] = False,
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    int8_backend: Annotated[
        str,
        typer.Option(
            help="The encoder's int8 runtime: auto (onnxruntime), onnxruntime or openvino; "
            "recorded in the manifest, queries follow it."
        ),
    ] = "auto",
    shard: Annotated[
        str | None,
        typer.Option(help="I/N: index only the I-th (0-based) of N equal parts of the corpus."),
    ] = None,
    chunk_size: Annotated[
        int, typer.Option(help="Documents per chunk: the unit saved to disk and resumed.")
    ] = 8192,
    fresh: Annotated[
        bool, typer.Option(help="Start over instead of resuming an interrupted build.")
    ] = False,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            metavar="ADDRESS",
            help="Encode on Ray: 'local' (this machine), 'auto', host:port or "
            "ray://host:10001 (pip install 'dotcat[ray]').",
        ),
    ] = None,
    ray_workers: Annotated[
        int | None,
        typer.Option(help="Encoder actors on Ray (default: one per GPU, else one per CPU)."),
    ] = None,
    id_field: _IdField = None,
    title_field: _TitleField = None,
    text_field: _TextField = None,
    include: _Include = None,
    exclude: _Exclude = None,
    strict: _Strict = False,
    hidden: _Hidden = False,
) -> None:
    """Encode a corpus with BERT_DOT and build a FAISS index directory (and BM25 beside it).

    A folder's documents have their relative paths as ids (a record file's records
    PATH#ID); files that cannot be read are skipped and named in one warning (--strict:
    an error). An interrupted build (Ctrl-C, kill -9, power loss) resumes after its last
    finished chunk when the same command runs again.
    """
    from dotcat.index.preflight import check_build

    _at_least("--batch-size", batch_size)
    _at_least("--max-length", max_length, 2)
    _at_least("--chunk-size", chunk_size)
    _at_least("--ray-workers", ray_workers)
    _one_of("--precision", precision, _PRECISIONS)
    _one_of("--int8-backend", int8_backend, _INT8_BACKENDS)
    shard_spec = _parse_shard(shard) if shard else None
    options = _corpus_options(id_field, title_field, text_field, include, exclude, strict, hidden)
    check_build(
        corpus, index_dir, faiss, overwrite=overwrite, model=model, shard=shard_spec,
        options=options,
    )  # fmt: skip

    from dotcat.index import IndexConfig, build_index
    from dotcat.models import EncoderConfig

    encoder = EncoderConfig(
        model=model,
        pooling=pooling,
        similarity=similarity,
        max_length=max_length,
        batch_size=batch_size,
        device=device,
        precision=precision,
        backend=int8_backend,
    )
    config = IndexConfig(
        faiss_spec=faiss,
        device=device,
        keep_vectors=keep_vectors,
        bm25=bm25,
        shard=shard_spec,
        chunk_size=chunk_size,
        ray=ray,
        ray_workers=ray_workers,
    )
    start = time.perf_counter()
    manifest = build_index(
        corpus, index_dir, encoder, config, overwrite=overwrite, fresh=fresh,
        corpus_options=options,
    )  # fmt: skip
    seconds = time.perf_counter() - start
    n = manifest.documents["count"]
    typer.echo(
        f"indexed {n} documents into {index_dir} in {seconds:.1f} s ({n / seconds:.1f} docs/s); "
        f"encoder {manifest.encoder['name']} ({manifest.encoder['pooling']}, "
        f"{manifest.encoder['similarity']}, max {manifest.encoder['max_length']} tokens), "
        f"FAISS {manifest.faiss['spec']}{', BM25' if bm25 else ''}"
    )
    if bm25 and shard_spec is None:
        from dotcat.search.pipeline import tune_fusion

        fusion = tune_fusion(index_dir, corpus, device=device, precision=precision)
        if fusion is None:
            typer.echo("hybrid fusion: RRF (k=60) (no dev queries in the data to choose on)")
        else:
            scores = fusion.dev["scores"]
            best = scores["rrf"] if fusion.method == "rrf" else scores[f"linear {fusion.weight:g}"]
            typer.echo(
                f"hybrid fusion chosen on dev ({fusion.dev['source']}, {fusion.dev['queries']} "
                f"queries): {fusion.describe()}, nDCG@10 {best:.4f} (RRF {scores['rrf']:.4f}, "
                f"dense {scores['linear 1']:.4f}, BM25 {scores['linear 0']:.4f})"
            )


def _parse_shard(value: str) -> tuple[int, int]:
    try:
        i, n = (int(part) for part in value.split("/"))
    except ValueError:
        raise DotcatError(f"--shard {value!r}: expected I/N, e.g. 0/4") from None
    if n < 1 or not 0 <= i < n:
        raise DotcatError(f"--shard {value}: expected I/N with 0 <= I < N")
    return i, n


def _print_hits(hits, as_json: bool) -> None:
    if as_json:
        typer.echo(json.dumps([h.__dict__ for h in hits], ensure_ascii=False, indent=2))
        return
    if not hits:
        typer.echo("no results")
        return
    id_width = max(6, *(len(h.doc_id) for h in hits))
    typer.echo(f"{'rank':>4}  {'score':>8}  {'doc id':<{id_width}}  title / snippet")
    for h in hits:
        title = textwrap.shorten(h.title or "(no title)", 70, placeholder="...")
        snippet = textwrap.shorten(h.text, 100, placeholder="...")
        typer.echo(f"{h.rank:>4}  {h.score:>8.4f}  {h.doc_id:<{id_width}}  {title}")
        typer.echo(f"{'':>4}  {'':>8}  {'':<{id_width}}  {snippet}")


_INTERPOLATE_HELP = (
    "Mix first-stage and cross-encoder scores (min-max normalised): 'auto' (default) uses the "
    "weight `dotcat calibrate` chose for the model on this index's corpus, else the one "
    "`train cat` chose on dev, else the plain cross-encoder score; a number in [0, 1] is the "
    "cross-encoder's weight (1: the plain logit)."
)
_FIRST_STAGES = ("auto", "dense", "bm25", "hybrid")


@app.command()
def search(
    index_dir: Annotated[
        str | None, typer.Argument(help="An index directory from `dotcat index`.")
    ] = None,
    query: Annotated[
        str | None,
        typer.Argument(help="Query text; none: read queries line by line (or use --queries)."),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="How many results.")] = 10,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    queries: Annotated[
        Path | None, typer.Option(help="Queries file or BEIR dir, for batch search.")
    ] = None,
    split: Annotated[
        str, typer.Option(help="With a BEIR dir: the qrels split whose queries to run.")
    ] = "test",
    output: Annotated[
        Path | None, typer.Option(help="TREC run file to write (batch search).")
    ] = None,
    first_stage: Annotated[
        str,
        typer.Option(
            help="auto (hybrid where the index has BM25, else dense), dense, bm25, hybrid."
        ),
    ] = "auto",
    fusion: Annotated[
        str,
        typer.Option(help="Hybrid fusion: auto (the index's dev choice, else rrf), rrf, linear."),
    ] = "auto",
    fusion_weight: Annotated[
        float | None, typer.Option(help="Linear fusion's dense weight in [0, 1].")
    ] = None,
    model: Annotated[
        str | None, typer.Option(help="Query encoder, if not the one recorded.")
    ] = None,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    nprobe: Annotated[int | None, typer.Option(help="IVF lists to visit.")] = None,
    ef_search: Annotated[int | None, typer.Option(help="HNSW efSearch.")] = None,
    tag: Annotated[str, typer.Option(help="Run tag (TREC column 6).")] = "dotcat",
    rerank: Annotated[
        str | None, typer.Option(help="Re-rank with this BERT_CAT cross-encoder.")
    ] = None,
    depth: Annotated[int, typer.Option(help="With --rerank: how many results to re-rank.")] = 100,
    interpolate: Annotated[str, typer.Option(help=_INTERPOLATE_HELP)] = "auto",
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    rerank_backend: Annotated[str, typer.Option(help=_RERANK_BACKEND_HELP)] = "auto",
    server: Annotated[
        str | None, typer.Option(help="Ask a running `dotcat serve` at this URL instead.")
    ] = None,
) -> None:
    """Search an index: one query (a table or --json), a queries file into a TREC run, or
    queries read line by line (models loaded once).

    With --rerank MODEL the top --depth results are re-ordered by the cross-encoder.
    """
    if server is not None:  # `dotcat search --server URL "query"`: the one positional is it
        _search_remote(server, index_dir, query, k, as_json, first_stage, rerank, depth)
        return
    if index_dir is None:
        raise DotcatError("give an INDEX directory (or --server URL)")
    if query is not None and queries is not None:
        raise DotcatError("give either a QUERY or --queries, not both")
    if queries is not None and output is None:
        raise DotcatError("--queries needs --output RUN (the TREC run file to write)")
    if query is not None:
        query = _query_text(query)
    for option, value in (("-k", k), ("--depth", depth), ("--nprobe", nprobe)):
        _at_least(option, value)
    _at_least("--ef-search", ef_search)
    _one_of("--precision", precision, _PRECISIONS)
    _one_of("--rerank-backend", rerank_backend, _INT8_BACKENDS)
    _one_of("--first-stage", first_stage, _FIRST_STAGES)
    if output is not None:
        from dotcat.data import check_output_file

        check_output_file(output)
    _check_index(Path(index_dir))
    topics = _load_topics(queries, split) if queries is not None else None
    if rerank:
        _check_model(rerank)

    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    pipeline = SearchPipeline(
        index_dir,
        PipelineConfig(
            first_stage=first_stage,
            fusion=fusion,
            fusion_weight=fusion_weight,
            rerank=rerank,
            depth=depth,
            interpolate=interpolate,
            model=model,
            device=device,
            precision=precision,
            rerank_backend=rerank_backend,
            search_params=_parse_search_params(nprobe, ef_search),
        ),
    )
    if query is not None:
        _print_hits(pipeline.search(query, k), as_json)
    elif topics is not None:
        from dotcat.data import write_run

        start = time.perf_counter()
        run = pipeline.run(topics, k, show_progress=True)
        seconds = time.perf_counter() - start
        write_run(run, output, tag=tag)
        what = f"{pipeline.first_stage} first stage"
        if pipeline.reranker is not None:
            r = pipeline.reranker
            what += (
                f", re-ranked top {r.depth} with {rerank} (interpolation {r.alpha:g}, "
                f"{r.alpha_source})"
                if r.alpha
                else f", not re-ranked: {rerank} has weight 0 here ({r.alpha_source})"
            )
        typer.echo(f"searched {len(topics)} queries in {seconds:.1f} s ({what}); wrote {output}")
    else:
        _search_lines(lambda text: pipeline.search(text, k), as_json)


def _search_lines(search_one, as_json: bool) -> None:
    """Queries from stdin, one per line, answered as they come (a prompt on a terminal).

    Blank lines are skipped; a bad query prints its error and the loop goes on. With --json,
    one JSON object per line (``{"query": ..., "hits": [...]}``), for programs.
    """
    interactive = sys.stdin.isatty()
    while True:
        if interactive:
            typer.echo("query> ", nl=False, err=True)
        line = sys.stdin.readline()
        if not line:
            break
        text = line.strip()
        if not text:
            continue
        try:
            hits = search_one(text)
        except DotcatError as e:
            typer.echo(f"dotcat: error: {e}", err=True)
            continue
        if as_json:
            record = {"query": text, "hits": [h.__dict__ for h in hits]}
            typer.echo(json.dumps(record, ensure_ascii=False))
        else:
            _print_hits(hits, False)
            typer.echo("")
        sys.stdout.flush()


def _search_remote(url, first, second, k, as_json, first_stage, rerank, depth) -> None:
    """``dotcat search --server URL [QUERY]``: the same output, answered by a running server."""
    from dotcat.serve.client import ServerClient

    positional = [x for x in (first, second) if x is not None]
    if len(positional) > 1:
        raise DotcatError("with --server, give only the QUERY (the server has its index)")
    _at_least("-k", k)
    _at_least("--depth", depth)
    _one_of("--first-stage", first_stage, _FIRST_STAGES)
    client = ServerClient(url)
    options = {"first_stage": None if first_stage == "auto" else first_stage}
    options.update(rerank=bool(rerank) if rerank else None, depth=depth if rerank else None)

    def ask(text: str):
        return client.search(_query_text(text), k=k, **options)

    if positional:
        _print_hits(ask(positional[0]), as_json)
    else:
        _search_lines(ask, as_json)


@app.command()
def merge(
    paths: Annotated[
        list[Path], typer.Argument(help="SHARD [SHARD ...] OUT: shard indexes, then the new index.")
    ],
    faiss: Annotated[
        str | None,
        typer.Option("--faiss", help="FAISS spec of the merged index (default: the shards')."),
    ] = None,
    on_disk: Annotated[
        str,
        typer.Option(help="IVF lists on disk: auto (when over half the free memory), yes, no."),
    ] = "auto",
    bm25: Annotated[
        bool | None,
        typer.Option(help="Build BM25 over the merged corpus (default: as the shards)."),
    ] = None,
    overwrite: Annotated[bool, typer.Option(help="Replace an existing index.")] = False,
) -> None:
    """Merge shard indexes (`dotcat index --shard I/N`) into one index directory."""
    if len(paths) < 2:
        raise DotcatError("usage: dotcat merge SHARD [SHARD ...] OUT")
    *shards, out = paths
    _one_of("--on-disk", on_disk, ("auto", "yes", "no"))
    for shard in shards:
        _check_index(shard)
    from dotcat.index.layout import check_target

    check_target(out, overwrite)
    from dotcat.index.shards import merge_indexes

    start = time.perf_counter()
    manifest = merge_indexes(shards, out, faiss, on_disk=on_disk, bm25=bm25, overwrite=overwrite)
    typer.echo(
        f"merged {len(shards)} shards ({manifest.documents['count']} documents) into {out} in "
        f"{time.perf_counter() - start:.1f} s; FAISS {manifest.faiss['spec']}"
        + (" with on-disk lists" if manifest.faiss.get("on_disk") else "")
    )


@app.command()
def add(
    index_dir: Annotated[Path, typer.Argument(help="An index directory from `dotcat index`.")],
    corpus: Annotated[Path, typer.Argument(help="The new documents. " + _CORPUS_HELP)],
    upsert: Annotated[
        bool, typer.Option(help="Replace documents whose id the index holds already.")
    ] = False,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    id_field: _IdField = None,
    title_field: _TitleField = None,
    text_field: _TextField = None,
    include: _Include = None,
    exclude: _Exclude = None,
    strict: _Strict = False,
    hidden: _Hidden = False,
) -> None:
    """Add documents to an index (encoded with its own encoder); atomic."""
    from dotcat.data.sources import open_source

    _one_of("--precision", precision, _PRECISIONS)
    _check_single_index(index_dir)
    options = _corpus_options(id_field, title_field, text_field, include, exclude, strict, hidden)
    open_source(corpus, options)  # a missing path, an empty folder, a misplaced option
    from dotcat.index.updates import add_documents

    start = time.perf_counter()
    result = add_documents(
        index_dir,
        corpus,
        upsert=upsert,
        device=device,
        precision=precision,
        corpus_options=options,
    )
    typer.echo(
        f"added {result.added} and replaced {result.replaced} documents in {index_dir} in "
        f"{time.perf_counter() - start:.1f} s; it holds {result.documents} documents"
    )


@app.command()
def delete(
    index_dir: Annotated[Path, typer.Argument(help="An index directory from `dotcat index`.")],
    doc_ids: Annotated[list[str] | None, typer.Argument(help="Document ids to delete.")] = None,
    ids: Annotated[
        Path | None, typer.Option(help="A file of document ids to delete, one per line.")
    ] = None,
    missing_ok: Annotated[
        bool, typer.Option(help="Delete the ids the index has; skip the others.")
    ] = False,
) -> None:
    """Delete documents from an index (FAISS and doc store; BM25 follows); atomic."""
    _check_single_index(index_dir)
    wanted = list(doc_ids or [])
    if ids is not None:
        try:
            wanted += [line.strip() for line in ids.read_text(encoding="utf-8").splitlines()]
        except OSError as e:
            raise DotcatError(f"{ids}: cannot read ({e.strerror})") from None
    wanted = [i for i in wanted if i]
    if not wanted:
        raise DotcatError("give document ids to delete (as arguments or --ids FILE)")
    from dotcat.index.updates import delete_documents

    result = delete_documents(index_dir, wanted, missing_ok=missing_ok)
    typer.echo(f"deleted {result.deleted} documents from {index_dir}; it holds {result.documents}")


def _check_single_index(index_dir: Path) -> None:
    from dotcat.index.layout import recover_for_reading
    from dotcat.index.manifest import Manifest

    recover_for_reading(index_dir)
    Manifest.read(index_dir)  # one index (a folder of shards is updated shard by shard)


@app.command()
def serve(
    index_dir: Annotated[Path, typer.Argument(help="An index directory from `dotcat index`.")],
    rerank: Annotated[
        str | None, typer.Option(help="Re-rank with this BERT_CAT cross-encoder.")
    ] = None,
    depth: Annotated[int, typer.Option(help="With --rerank: how many results to re-rank.")] = 20,
    interpolate: Annotated[str, typer.Option(help=_INTERPOLATE_HELP)] = "auto",
    first_stage: Annotated[
        str,
        typer.Option(help="auto (hybrid if the index has BM25, else dense), dense, bm25, hybrid."),
    ] = "auto",
    host: Annotated[
        str, typer.Option(help="Address to listen on; beyond loopback an API key is required.")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8080,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="DOTCAT_API_KEY", help="Clients must send it (X-API-Key header)."),
    ] = None,
    max_batch: Annotated[int, typer.Option(help="Most queries per model call.")] = 64,
    batch_window_ms: Annotated[
        float,
        typer.Option(help="Most ms a batch waits for the crowd the last one saw (0: never)."),
    ] = 5.0,
    queue_size: Annotated[
        int, typer.Option(help="Most requests waiting; beyond, 503 with Retry-After.")
    ] = 64,
    timeout: Annotated[float, typer.Option(help="Seconds one request may take (504).")] = 30.0,
    workers: Annotated[
        int, typer.Option(help="Server processes, each with its own models (memory x N).")
    ] = 1,
    access_log: Annotated[bool, typer.Option(help="One JSON line per request on stderr.")] = True,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    rerank_backend: Annotated[str, typer.Option(help=_RERANK_BACKEND_HELP)] = "auto",
) -> None:
    """Serve an index over HTTP: a search API (OpenAPI at /docs) and a search page at /."""
    _at_least("--depth", depth)
    _one_of("--precision", precision, _PRECISIONS)
    _one_of("--rerank-backend", rerank_backend, _INT8_BACKENDS)
    _one_of("--first-stage", first_stage, _FIRST_STAGES)
    _check_index(index_dir)
    if rerank:
        _check_model(rerank)
    from dotcat.search.pipeline import PipelineConfig, parse_interpolate
    from dotcat.serve.app import ServeConfig
    from dotcat.serve.server import serve as run_server

    parse_interpolate(interpolate)
    config = ServeConfig(
        host=host,
        port=port,
        api_key=api_key,
        max_batch=max_batch,
        batch_window_ms=batch_window_ms,
        queue_size=queue_size,
        timeout_s=timeout,
        workers=workers,
    )
    config.check()
    pipeline_config = PipelineConfig(
        first_stage=first_stage,
        rerank=rerank,
        depth=depth,
        interpolate=interpolate,
        device=device,
        precision=precision,
        rerank_backend=rerank_backend,
    )

    def ready(url: str, pipeline) -> None:
        if pipeline is None:  # --workers: each process loaded its own
            stages = f"{workers} workers"
        else:
            stages = pipeline.first_stage
            if pipeline.reranker is not None:
                r = pipeline.reranker
                stages += f" + BERT_CAT top {r.depth} (interpolation {r.alpha:g}, {r.alpha_source})"
        typer.echo(f"dotcat: serving {index_dir} on {url} ({stages}); page at {url}/", err=True)

    # Ctrl-C or SIGTERM: uvicorn shuts down gracefully, then raises KeyboardInterrupt (one
    # process) or returns (--workers: its supervisor stopped every worker).
    with contextlib.suppress(KeyboardInterrupt):
        run_server(index_dir, pipeline_config, config, access_log=access_log, on_ready=ready)
    typer.echo("dotcat: server stopped", err=True)


@app.command()
def bm25(
    corpus: Annotated[Path, typer.Argument(help="BEIR directory, or a JSONL/TSV corpus (.gz ok).")],
    queries: Annotated[Path, typer.Option(help="Queries file or BEIR dir.")],
    output: Annotated[Path, typer.Option(help="TREC run file to write.")],
    split: Annotated[
        str, typer.Option(help="With a BEIR dir: the qrels split whose queries to run.")
    ] = "test",
    k: Annotated[int, typer.Option("-k", help="How many results per query.")] = 100,
    k1: Annotated[float, typer.Option(help="BM25 k1 (Pyserini's BEIR default 0.9).")] = 0.9,
    b: Annotated[float, typer.Option(help="BM25 b (Pyserini's BEIR default 0.4).")] = 0.4,
    tag: Annotated[str, typer.Option(help="Run tag (TREC column 6).")] = "bm25",
) -> None:
    """BM25 (bm25s, Snowball stemming, English stop words) into a TREC run."""
    from dotcat.data import check_output_file, find_corpus_file

    _at_least("-k", k)
    _at_least("--k1", k1, 0)
    _at_least("--b", b, 0)
    if b > 1:
        raise DotcatError(f"--b must be <= 1, got {b}")
    find_corpus_file(corpus)
    check_output_file(output)
    topics = _load_topics(queries, split)

    from dotcat.data import load_corpus, write_run
    from dotcat.index.bm25 import BM25Config
    from dotcat.search.bm25 import bm25_search

    start = time.perf_counter()
    run = bm25_search(load_corpus(corpus), topics, k=k, config=BM25Config(k1=k1, b=b))
    seconds = time.perf_counter() - start
    write_run(run, output, tag=tag)
    typer.echo(f"BM25: searched {len(topics)} queries in {seconds:.1f} s; wrote {output}")


@app.command()
def export(
    model: Annotated[str, typer.Argument(help="Model directory (BERT_DOT or BERT_CAT).")],
    precision: Annotated[str, typer.Option(help="int8 (per-channel weights) or fp32.")] = "int8",
    keep_fp32: Annotated[
        str, typer.Option(help="Linear layers left in fp32 under int8: none or ffn_output.")
    ] = "none",
    variant: Annotated[
        str | None,
        typer.Option(help="int8 kernels: avx512_vnni or avx2 (7-bit weights); default: this CPU."),
    ] = None,
    backend: Annotated[
        str,
        typer.Option(
            help="int8 runtime: auto (a cross-encoder: openvino where installed; an encoder: "
            "onnxruntime), onnxruntime or openvino."
        ),
    ] = "auto",
) -> None:
    """Export a model beside its weights where sentence-transformers looks (onnx/, openvino/)."""
    _one_of("--precision", precision, ("int8", "fp32"))
    _one_of("--backend", backend, _INT8_BACKENDS)
    _one_of("--keep-fp32", keep_fp32, ("none", "ffn_output"))
    if variant is not None:
        _one_of("--variant", variant, ("avx512_vnni", "avx2"))
    _check_model(model)

    from dotcat.models.int8 import export_model

    start = time.perf_counter()
    kind, path = export_model(
        model, precision, keep_fp32=keep_fp32, variant=variant, backend=backend
    )
    seconds = time.perf_counter() - start
    typer.echo(f"exported {kind} {model} at {precision} in {seconds:.1f} s: {path}")


@app.command("eval")
def eval_(
    paths: Annotated[
        list[Path],
        typer.Argument(help="RUN [RUN ...] QRELS: TREC runs, then a qrels file or BEIR dir."),
    ],
    split: Annotated[str, typer.Option(help="With a BEIR dir: the qrels split.")] = "test",
    measure: Annotated[
        list[str] | None, typer.Option("--measure", "-m", help="ir-measures name; repeat.")
    ] = None,
    per_query: Annotated[bool, typer.Option(help="Also print one row per query.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
    baseline: Annotated[
        str | None,
        typer.Option(
            help="Compare every run with this one (one of the RUNs, by path or file name): "
            "difference, paired p-value (Holm-corrected), wins/ties/losses per measure."
        ),
    ] = None,
    test: Annotated[
        str, typer.Option(help="With --baseline: paired test, t or randomisation.")
    ] = "t",
    permutations: Annotated[
        int, typer.Option(help="Randomisation test: random permutations drawn.")
    ] = 10_000,
    seed: Annotated[int, typer.Option(help="Randomisation test: random seed.")] = 0,
    alpha: Annotated[
        float, typer.Option(help="With --baseline: significance level (after correction).")
    ] = 0.05,
) -> None:
    """Evaluate TREC runs with ir-measures (default nDCG@10 RR@10 R@100 AP@100).

    Queries with judgements but no results count as 0; qrels naming unknown queries or
    documents (checked when QRELS is a BEIR directory) are counted and reported. With
    --baseline, each measure gets the difference to the baseline, a paired t-test (or
    randomisation test) p-value with Holm-Bonferroni correction across the runs, and the
    queries won/tied/lost; a dagger marks significant differences.
    """
    from dotcat.data import load_corpus, load_qrels, load_queries, read_run
    from dotcat.data.catalog import resolve_data_path
    from dotcat.evaluation import (
        DEFAULT_MEASURES,
        evaluate,
        format_per_query,
        format_table,
        to_json,
    )

    if len(paths) < 2:
        raise DotcatError("usage: dotcat eval RUN [RUN ...] QRELS")
    *runs, qrels = paths
    test = _check_comparison(test, permutations, alpha)
    baseline_name = _baseline_name(baseline, runs) if baseline is not None else None
    judgements = load_qrels(qrels, split=split)
    known_queries = known_docs = None
    qrels = resolve_data_path(qrels)  # a dataset name (beir/NAME): its BEIR directory
    if qrels.is_dir():  # a BEIR dir: check qrels ids against its queries and corpus
        known_queries = set(load_queries(qrels))
        known_docs = set(load_corpus(qrels)["id"])
    measures = tuple(measure) if measure else DEFAULT_MEASURES
    reports = {
        run.name: evaluate(
            read_run(run),
            judgements,
            measures=measures,
            known_queries=known_queries,
            known_docs=known_docs,
        )
        for run in runs
    }
    if baseline_name is not None:
        _print_comparison(reports, baseline_name, test, alpha, permutations, seed, as_json)
    elif as_json:
        typer.echo(json.dumps({name: to_json(r) for name, r in reports.items()}, indent=2))
    else:
        typer.echo(format_table(reports, show_queries=True))
    if as_json:
        return
    for name, report in reports.items():
        for note in report.notes():
            typer.echo(f"note ({name}): {note}")
        if per_query:
            typer.echo(f"\n{name}, per query:\n{format_per_query(report)}")


def _check_comparison(test: str, permutations: int, alpha: float) -> str:
    """The options of ``eval --baseline``, checked; returns the test's canonical name."""
    from dotcat.evaluation.significance import normalise_test

    _at_least("--permutations", permutations)
    if not 0.0 < alpha < 1.0:
        raise DotcatError(f"--alpha must be in (0, 1), got {alpha}")
    return normalise_test(test)


def _baseline_name(baseline: str, runs: list[Path]) -> str:
    """The report name (file name) of the run ``--baseline`` names, by path or file name."""
    for run in runs:
        if baseline == run.name or Path(baseline) == run:
            return run.name
    for run in runs:
        if Path(baseline).resolve() == run.resolve():
            return run.name
    names = ", ".join(run.name for run in runs)
    raise DotcatError(f"--baseline {baseline!r} is not one of the runs ({names})")


def _print_comparison(reports, baseline, test, alpha, permutations, seed, as_json) -> None:
    """``dotcat eval --baseline``: the marked table and its note, or JSON with comparisons."""
    from dotcat.evaluation import (
        compare_to_baseline,
        comparison_note,
        comparison_to_json,
        format_comparison_table,
        to_json,
    )

    comparisons = compare_to_baseline(
        reports, baseline, test=test, alpha=alpha, permutations=permutations, seed=seed
    )
    if as_json:
        out = {}
        for name, report in reports.items():
            vs = comparisons.get(name)
            out[name] = to_json(report) | {
                "vs_baseline": None
                if vs is None
                else comparison_to_json(vs, baseline, test, alpha, permutations, seed)
            }
        typer.echo(json.dumps(out, indent=2))
        return
    typer.echo(format_comparison_table(reports, comparisons, baseline))
    typer.echo("\n" + comparison_note(baseline, len(reports), test, alpha, permutations))


@app.command()
def experiment(
    config: Annotated[Path, typer.Argument(help="The experiment file (TOML).")],
    output: Annotated[
        Path | None, typer.Option(help="Report folder (default: the file's `output`).")
    ] = None,
    only: Annotated[
        str | None,
        typer.Option(
            metavar="DATASET",
            help="Run this dataset (its name in [[datasets]]) only; the others' cached runs "
            "fill the rest of the table.",
        ),
    ] = None,
) -> None:
    """Run a benchmark from a TOML file: systems (BM25, dense, hybrid, + BERT_CAT) on a
    dataset or several ([[datasets]]), evaluated against a baseline with significance tests;
    writes runs, results.json, report.md and plots.

    Indexes and runs are cached by fingerprint: a second run with nothing changed only
    evaluates again; a changed setting recomputes what depends on it.
    """
    from dotcat.experiment import check_paths, load_config

    settings = load_config(config)
    if output is not None:
        settings = settings.model_copy(update={"output": str(output)})
    check_paths(settings, str(config), only)
    from dotcat.files import check_can_create_in

    check_can_create_in(Path(settings.output) / "report.md")

    from dotcat.experiment.report import comparison_table
    from dotcat.experiment.runner import run_experiment
    from dotcat.experiment.suite_report import suite_tables

    def done(outcome) -> None:
        stages = ", ".join(
            f"{s.kind.replace('_', ' ')} {'reused' if s.reused else f'{s.seconds:.1f} s'}"
            for s in outcome.stages
        )
        where = f"{outcome.dataset}: " if settings.datasets else ""
        typer.echo(f"{where}{outcome.name}: {stages}", err=True)

    text = config.read_text(encoding="utf-8")
    result = run_experiment(settings, text, str(config), on_system=done, only=only)
    typer.echo(suite_tables(result) if settings.datasets else comparison_table(result))
    computed = result.computed
    total = sum(len(o.stages) for o in result.outcomes)
    typer.echo(
        f"\n{len(result.outcomes)} system runs, {total - len(computed)} of {total} stages reused, "
        f"{len(computed)} computed, in {result.seconds:.1f} s; report in "
        f"{result.output / 'report.md'}"
    )


train_app = typer.Typer(cls=_Group, no_args_is_help=True, help="Train BERT_DOT or BERT_CAT.")
app.add_typer(train_app, name="train")
app.add_typer(datasets_app, name="datasets")


# Options every trainer shares: one declaration for `train dot`, `train distill`, `train cat`.
_TrainData = Annotated[
    Path, typer.Argument(help="BEIR dir (or corpus file with --queries/--qrels).")
]
_Split = Annotated[str, typer.Option(help="Qrels split to train on.")]
_QueriesFile = Annotated[Path | None, typer.Option(help="Queries file (with a corpus file).")]
_QrelsFile = Annotated[Path | None, typer.Option(help="Qrels file (with a corpus file).")]
_NegativesFile = Annotated[Path | None, typer.Option(help="Reuse saved negatives.")]
_Epochs = Annotated[int, typer.Option(help="Training epochs.")]
_GradAccum = Annotated[int, typer.Option(help="Gradient accumulation steps.")]
_Lr = Annotated[float, typer.Option(help="Peak learning rate (AdamW).")]
_Warmup = Annotated[float, typer.Option(help="Share of steps warming up.")]
_DevFraction = Annotated[float, typer.Option(help="Share of train queries held out.")]
_Seed = Annotated[int, typer.Option(help="Random seed.")]
_Bf16 = Annotated[str, typer.Option(help="auto, on or off.")]
_CheckpointEvery = Annotated[int, typer.Option(help="Checkpoint every N steps (0: off).")]
_Resume = Annotated[bool, typer.Option(help="Continue from the last checkpoint.")]
_Overwrite = Annotated[bool, typer.Option(help="Replace an earlier run in OUT_DIR.")]
_DocumentTokens = Annotated[int, typer.Option(help="Max document tokens.")]
_QueriesPerBatch = Annotated[int, typer.Option(help="Queries per batch.")]
_WindowStart = Annotated[int, typer.Option(help="Mine negatives from this rank...")]
_WindowEnd = Annotated[int, typer.Option(help="...up to (excluding) this rank.")]
_Remine = Annotated[bool, typer.Option(help="Re-mine dense negatives each epoch.")]
_CacheChunk = Annotated[int | None, typer.Option(help="GradCache chunk size (0: off).")]
_QueryMaxLength = Annotated[int, typer.Option(help="Max query tokens.")]
_Temperature = Annotated[
    float | None,
    typer.Option(help="InfoNCE temperature (default: 0.05 for cos, 1 for dot similarity)."),
]


@train_app.command("dot")
def train_dot(
    data: _TrainData,
    out_dir: Annotated[Path, typer.Argument(help="Where the trained model directory goes.")],
    split: _Split = "train",
    queries: _QueriesFile = None,
    qrels: _QrelsFile = None,
    base: Annotated[
        str, typer.Option(help="Base model: local dir, hub name, 'default'.")
    ] = "default",
    loss: Annotated[str, typer.Option(help="contrastive (InfoNCE) or triplet.")] = "contrastive",
    negatives: Annotated[str, typer.Option(help="Hard negatives: bm25, dense or none.")] = "bm25",
    negatives_file: _NegativesFile = None,
    n_negatives: Annotated[int, typer.Option(help="Hard negatives per query.")] = 1,
    window_start: _WindowStart = 10,
    window_end: _WindowEnd = 100,
    remine: _Remine = False,
    epochs: _Epochs = 2,
    batch_size: _QueriesPerBatch = 32,
    grad_accum: _GradAccum = 1,
    cache_chunk: _CacheChunk = None,
    lr: _Lr = 1e-4,
    warmup_ratio: _Warmup = 0.1,
    temperature: _Temperature = None,
    margin: Annotated[float, typer.Option(help="Triplet margin gamma.")] = 0.1,
    max_length: _DocumentTokens = 256,
    query_max_length: _QueryMaxLength = 64,
    dev_fraction: _DevFraction = 0.1,
    dev_max_docs: Annotated[int, typer.Option(help="Corpus sample for dev evaluation.")] = 50_000,
    seed: _Seed = 42,
    bf16: _Bf16 = "auto",
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    checkpoint_every: _CheckpointEvery = 0,
    resume: _Resume = False,
    overwrite: _Overwrite = False,
) -> None:
    """Train a BERT_DOT bi-encoder on relevance labels (works under torchrun for DDP)."""
    _check_training_args(data, out_dir, base, epochs=epochs, batch_size=batch_size)
    _at_least("--n-negatives", n_negatives, 0)
    _at_least("--max-length", max_length, 2)
    _at_least("--query-max-length", query_max_length, 2)

    from dotcat.training.config import DotConfig

    config = _dot_config(DotConfig, locals())
    config.validate()  # before torch is imported

    from dotcat.training.run import train

    path = train(config)
    typer.echo(
        f"trained model written to {path}; index with: dotcat index CORPUS INDEX --model {path}"
    )


@train_app.command("distill")
def train_distill(
    data: _TrainData,
    out_dir: Annotated[Path, typer.Argument(help="Where the distilled BERT_DOT goes.")],
    teacher: Annotated[
        str, typer.Option(help="The BERT_CAT teacher (a train cat output); bm25: BM25 + dense.")
    ],
    base: Annotated[
        str, typer.Option("--student", help="BERT_DOT to start from: dir, hub name, 'default'.")
    ] = "default",
    split: _Split = "train",
    queries: _QueriesFile = None,
    qrels: _QrelsFile = None,
    distill_loss: Annotated[
        str, typer.Option("--loss", help="margin-mse (Hofstätter et al.) or kl.")
    ] = "margin-mse",
    contrastive_weight: Annotated[
        float, typer.Option(help="Weight of in-batch InfoNCE on the labels (0: none).")
    ] = 1.0,
    kl_temperature: Annotated[float, typer.Option(help="Temperature of the kl loss.")] = 1.0,
    teacher_alpha: Annotated[
        str, typer.Option(help="Cross-encoder share of the teacher score; auto: its dev weight.")
    ] = "auto",
    teacher_dense: Annotated[
        str | None, typer.Option(help="BERT_DOT mixed into the teacher (default: the student).")
    ] = None,
    teacher_precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    teacher_scale: Annotated[
        str,
        typer.Option(help="Factor on the teacher's scores; auto: to the student's spread; 1: raw."),
    ] = "auto",
    negatives: Annotated[
        str, typer.Option(help="Hard negatives: dense (the student's own) or bm25.")
    ] = "dense",
    negatives_file: _NegativesFile = None,
    n_negatives: Annotated[int, typer.Option(help="Hard negatives (margins) per query.")] = 4,
    window_start: _WindowStart = 0,
    window_end: _WindowEnd = 30,
    remine: _Remine = False,
    epochs: _Epochs = 2,
    batch_size: _QueriesPerBatch = 32,
    grad_accum: _GradAccum = 1,
    cache_chunk: _CacheChunk = 16,
    lr: _Lr = 1e-4,
    warmup_ratio: _Warmup = 0.1,
    temperature: _Temperature = None,
    max_length: _DocumentTokens = 256,
    query_max_length: _QueryMaxLength = 64,
    dev_fraction: _DevFraction = 0.1,
    seed: _Seed = 42,
    bf16: _Bf16 = "auto",
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    checkpoint_every: _CheckpointEvery = 0,
    resume: _Resume = False,
    overwrite: _Overwrite = False,
) -> None:
    """Distil a BERT_CAT into a BERT_DOT with Margin-MSE (Hofstätter et al. 2020)."""
    _check_training_args(data, out_dir, base, epochs=epochs, batch_size=batch_size)
    if teacher != _LEXICAL_TEACHER:
        _check_model(teacher)
    _at_least("--n-negatives", n_negatives, 1)
    _one_of("--teacher-precision", teacher_precision, _PRECISIONS)
    alpha = None if teacher_alpha == "auto" else _unit_float("--teacher-alpha", teacher_alpha)
    scale = None if teacher_scale == "auto" else _positive_float("--teacher-scale", teacher_scale)

    from dotcat.training.config import DistillConfig

    config = _dot_config(DistillConfig, locals(), teacher_alpha=alpha, teacher_scale=scale)
    config.validate()  # before torch is imported

    from dotcat.training.run import train

    path = train(config)
    typer.echo(
        f"distilled model written to {path}; index with: dotcat index CORPUS INDEX --model {path}"
    )


#: Flags shorter than the config field they set.
_CONFIG_FIELDS = {
    "grad_accum": "grad_accum_steps",
    "cache_chunk": "cache_chunk_size",
    "remine": "remine_each_epoch",
}


def _dot_config(cls: type, options: dict, **fields: object) -> object:
    """A ``train dot``-style config from a command's options (its ``locals()``): flags renamed
    to their fields, the rank window joined, ``fields`` overriding; other names ignored."""
    values = {_CONFIG_FIELDS.get(k, k): v for k, v in options.items()}
    values["window"] = (values.pop("window_start"), values.pop("window_end"))
    values["cache_chunk_size"] = values.get("cache_chunk_size") or None
    values.update(fields)
    names = {f.name for f in dataclasses.fields(cls)}
    return cls(**{k: v for k, v in values.items() if k in names})


def _unit_float(name: str, value: str) -> float:
    """``value`` as a float in [0, 1], or a one-line error naming the option."""
    return _float_option(name, value, "a number in [0, 1]", lambda x: 0.0 <= x <= 1.0)


def _positive_float(name: str, value: str) -> float:
    """``value`` as a finite float > 0, or a one-line error naming the option."""
    return _float_option(name, value, "a number > 0", lambda x: 0.0 < x < math.inf)


def _float_option(name: str, value: str, expected: str, ok) -> float:
    """``value`` as a float that passes ``ok`` (NaN never does), else a one-line error."""
    try:
        number = float(value)
    except ValueError:
        number = math.nan
    if not ok(number):
        raise DotcatError(f"{name}: expected 'auto' or {expected}, got {value!r}")
    return number


@app.command("rerank")
def rerank_cmd(
    run: Annotated[Path, typer.Argument(help="TREC run to re-rank (a first stage's).")],
    data: Annotated[Path, typer.Argument(help="BEIR dir or corpus file: the document texts.")],
    model: Annotated[str, typer.Argument(help="BERT_CAT: dotcat or sentence-transformers.")],
    output: Annotated[Path, typer.Option(help="TREC run file to write.")],
    depth: Annotated[int, typer.Option(help="How many results per query to re-rank.")] = 100,
    queries: Annotated[
        Path | None, typer.Option(help="Queries file (default: DATA's queries.jsonl).")
    ] = None,
    split: Annotated[
        str, typer.Option(help="With a BEIR dir: only the run queries judged in this split.")
    ] = "test",
    interpolate: Annotated[str, typer.Option(help=_INTERPOLATE_HELP)] = "auto",
    batch_size: Annotated[int, typer.Option(help="Most pairs per forward pass.")] = 32,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    tag: Annotated[str, typer.Option(help="Run tag (TREC column 6).")] = "dotcat-rerank",
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    rerank_backend: Annotated[str, typer.Option(help=_RERANK_BACKEND_HELP)] = "auto",
) -> None:
    """Re-rank a TREC run's top --depth with a BERT_CAT cross-encoder into a new TREC run."""
    from dotcat.data import check_output_file, find_corpus_file, ranked, read_run

    _at_least("--depth", depth)
    _at_least("--batch-size", batch_size)
    _one_of("--precision", precision, _PRECISIONS)
    _one_of("--rerank-backend", rerank_backend, _INT8_BACKENDS)
    find_corpus_file(data)
    check_output_file(output)
    first = ranked(read_run(run))
    source = queries if queries is not None else data
    topics = _load_topics(source, split)
    if Path(source).is_dir():  # the split's judged queries only, as `search --queries` runs
        first = {q: docs for q, docs in first.items() if q in topics}
        if not first:
            raise DotcatError(f"{run}: no query of split {split!r} of {source}")
    _check_model(model)
    from dotcat.search.pipeline import parse_interpolate

    parse_interpolate(interpolate)

    from dotcat.data import load_corpus, write_run
    from dotcat.search.pipeline import Reranker
    from dotcat.search.reranker import corpus_texts

    reranker = Reranker.load(
        model,
        depth,
        interpolate,
        device=device,
        precision=precision,
        backend=rerank_backend,
        batch_size=batch_size,
    )
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
        f"{reranker.alpha_source}); wrote {output}"
    )


@app.command()
def calibrate(
    index_dir: Annotated[Path, typer.Argument(help="An index directory from `dotcat index`.")],
    rerank: Annotated[str, typer.Option(help="The BERT_CAT cross-encoder to calibrate.")],
    depth: Annotated[int, typer.Option(help="How many results to re-rank per query.")] = 100,
    queries: Annotated[int, typer.Option(help="Pseudo-queries to ask.")] = 200,
    documents: Annotated[
        int, typer.Option(help="Most documents sampled from the index to ask them on.")
    ] = 10_000,
    seed: Annotated[int, typer.Option(help="Changes the sample and the pseudo-queries.")] = 0,
    first_stage: Annotated[
        str, typer.Option(help="The first stage to re-rank: auto, dense, bm25, hybrid.")
    ] = "auto",
    record: Annotated[
        bool, typer.Option(help="Record the weight in the index (--no-record: only print it).")
    ] = True,
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    rerank_backend: Annotated[str, typer.Option(help=_RERANK_BACKEND_HELP)] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="JSON output.")] = False,
) -> None:
    """Choose how much to trust a cross-encoder on this index's corpus, without labels.

    Pseudo-queries (titles, or sentences cut out of documents) are asked of the index's first
    stage; the cross-encoder re-ranks each top --depth; the interpolation weight (0 = first
    stage, 1 = plain logit) with the best nDCG@10 against the known answers is recorded in
    the index, and `dotcat search/serve --rerank MODEL` use it (--interpolate auto).
    """
    for option, value in (("--depth", depth), ("--queries", queries), ("--documents", documents)):
        _at_least(option, value)
    _one_of("--precision", precision, _PRECISIONS)
    _one_of("--rerank-backend", rerank_backend, _INT8_BACKENDS)
    _one_of("--first-stage", first_stage, _FIRST_STAGES)
    _check_single_index(index_dir)
    _check_model(rerank)

    from dotcat.search.calibrate import calibrate_reranker, record_corpus_weight
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    config = PipelineConfig(
        first_stage=first_stage,
        rerank=rerank,
        depth=depth,
        device=device,
        precision=precision,
        rerank_backend=rerank_backend,
    )
    # advise=False: not the hint to run `dotcat calibrate`; it is running.
    pipeline = SearchPipeline(index_dir, config, advise=False)
    weight = calibrate_reranker(pipeline, queries, documents, seed)
    if record:
        record_corpus_weight(index_dir, weight)
    if as_json:
        typer.echo(json.dumps(weight.to_json(), indent=2))
        return
    previous = pipeline.reranker.alpha, pipeline.reranker.alpha_source
    typer.echo(
        f"{weight.queries} pseudo-queries on {weight.documents} documents, "
        f"{weight.first_stage} first stage, top {depth} re-ranked; {weight.measure}:"
    )
    for alpha, score in weight.scores.items():
        mark = "  <- chosen" if float(alpha) == weight.alpha else ""
        label = {"0.0": " (first stage)", "1.0": " (plain logit)"}.get(alpha, "")
        typer.echo(f"  weight {alpha}{label}: {score:.4f}{mark}")
    if weight.best:
        verdict = "kept" if weight.alpha else "not kept: the first stage stays"
        typer.echo(
            f"best weight {weight.best:g}: paired t-test against the first stage p "
            f"{weight.p_value:.3f} ({verdict}; kept below 0.05)"
        )
    where = f"recorded in {index_dir}" if record else "not recorded (--no-record)"
    typer.echo(
        f"interpolation weight {weight.alpha:g} {where}; before: {previous[0]:g} ({previous[1]})"
    )


@train_app.command("cat")
def train_cat(
    data: _TrainData,
    out_dir: Annotated[Path, typer.Argument(help="Where the trained cross-encoder goes.")],
    split: _Split = "train",
    queries: _QueriesFile = None,
    qrels: _QrelsFile = None,
    base: Annotated[
        str, typer.Option(help="BERT checkpoint or cross-encoder to start from.")
    ] = "default",
    loss: Annotated[str, typer.Option(help="lce (listwise softmax) or bce (pointwise).")] = "lce",
    first_stage: Annotated[
        list[str] | None,
        typer.Option(help="Negatives from: bm25, an index dir, or a TREC run; repeat to mix."),
    ] = None,
    depth: Annotated[int, typer.Option(help="Negatives from each first stage's top DEPTH.")] = 100,
    n_negatives: Annotated[int, typer.Option(help="Negatives per positive.")] = 7,
    negatives_file: _NegativesFile = None,
    epochs: _Epochs = 2,
    batch_size: Annotated[int, typer.Option(help="Queries (groups) per batch.")] = 4,
    grad_accum: _GradAccum = 1,
    pairs_per_forward: Annotated[int, typer.Option(help="Pairs per forward chunk.")] = 16,
    lr: _Lr = 1e-4,
    head_lr_scale: Annotated[
        float, typer.Option(help="The new head's learning rate is lr times this.")
    ] = 20.0,
    warmup_ratio: _Warmup = 0.1,
    max_length: Annotated[int | None, typer.Option(help="Max tokens per pair.")] = None,
    attention_dropout: Annotated[
        float, typer.Option(help="Attention-probability dropout in training (-1: model's).")
    ] = 0.0,
    teacher_weight: Annotated[
        float,
        typer.Option(help="Weight of the first stages' fused scores in the LCE target (0: off)."),
    ] = 0.0,
    teacher_temperature: Annotated[
        float, typer.Option(help="Softmax temperature of the teacher's scores.")
    ] = 0.1,
    dev_fraction: _DevFraction = 0.1,
    dev_depth: Annotated[int, typer.Option(help="Re-ranking depth of the dev check.")] = 20,
    pretrain_queries: Annotated[
        str,
        typer.Option(
            help="First pre-train on this many label-free corpus pseudo-pairs (titles or "
            "sentences as queries): auto (1600 where the corpus gives 200 or more, else "
            "off), a number, or 0 (off)."
        ),
    ] = "auto",
    seed: _Seed = 42,
    bf16: _Bf16 = "auto",
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    checkpoint_every: _CheckpointEvery = 0,
    resume: _Resume = False,
    overwrite: _Overwrite = False,
) -> None:
    """Train a BERT_CAT cross-encoder (re-ranker) on relevance labels."""
    _check_training_args(data, out_dir, base, epochs=epochs, batch_size=batch_size)
    _at_least("--n-negatives", n_negatives)
    _at_least("--depth", depth)
    _at_least("--max-length", max_length, 8)
    pretrain = _auto_or_count("--pretrain-queries", pretrain_queries)

    from dotcat.training.config import CatConfig

    config = CatConfig(
        data=data,
        out_dir=out_dir,
        split=split,
        queries=queries,
        qrels=qrels,
        base=base,
        loss=loss,
        first_stages=tuple(first_stage or ["bm25"]),
        depth=depth,
        n_negatives=n_negatives,
        negatives_file=negatives_file,
        epochs=epochs,
        batch_size=batch_size,
        grad_accum_steps=grad_accum,
        pairs_per_forward=pairs_per_forward,
        lr=lr,
        head_lr_scale=head_lr_scale,
        warmup_ratio=warmup_ratio,
        max_length=max_length,
        attention_dropout=None if attention_dropout < 0 else attention_dropout,
        teacher_weight=teacher_weight,
        teacher_temperature=teacher_temperature,
        dev_fraction=dev_fraction,
        dev_depth=dev_depth,
        pretrain_queries=pretrain,
        seed=seed,
        bf16=bf16,
        device=device,
        checkpoint_every=checkpoint_every,
        resume=resume,
        overwrite=overwrite,
    )
    config.validate()  # before torch is imported

    from dotcat.training.run import train

    path = train(config)
    typer.echo(
        f"trained cross-encoder written to {path}; re-rank with: "
        f"dotcat rerank RUN DATA {path} --output RUN2"
    )


@app.command()
def adapt(
    corpus: Annotated[Path, typer.Argument(help="Your corpus: BEIR dir, JSONL or TSV.")],
    out_dir: Annotated[Path, typer.Argument(help="Where the adapted BERT_DOT goes.")],
    model: Annotated[str, typer.Option(help="BERT_DOT to adapt: dir, hub name, 'default'.")] = (
        "default"
    ),
    budget_minutes: Annotated[
        float, typer.Option(help="Wall-clock budget; sets how many pseudo-queries are used.")
    ] = 45.0,
    max_queries: Annotated[int | None, typer.Option(help="At most this many.")] = None,
    prefer: Annotated[
        str, typer.Option(help="Pseudo-queries from titles first (title) or sentences first.")
    ] = "title",
    dense_negatives: Annotated[
        bool, typer.Option(help="Also mine negatives with the model (when the budget allows).")
    ] = True,
    teacher: Annotated[
        str | None,
        typer.Option(
            help="A BERT_CAT whose scores label the pseudo pairs (Margin-MSE, GPL), or bm25 "
            "(BM25 + the model's score); default: contrastive on the pseudo pairs."
        ),
    ] = None,
    teacher_alpha: Annotated[
        str, typer.Option(help="Cross-encoder share of the teacher score; auto: its record.")
    ] = "auto",
    teacher_precision: Annotated[str, typer.Option(help=_PRECISION_HELP)] = "auto",
    n_negatives: Annotated[
        int, typer.Option(help="With a teacher: negatives per pseudo-query (a margin each).")
    ] = 1,
    contrastive_weight: Annotated[
        float, typer.Option(help="With a teacher: weight of in-batch InfoNCE added to it.")
    ] = 0.0,
    batch_size: _QueriesPerBatch = 32,
    lr: Annotated[float, typer.Option(help="Peak learning rate (AdamW).")] = 2e-5,
    cache_chunk: Annotated[int, typer.Option(help="GradCache chunk size (0: off).")] = 16,
    max_length: _DocumentTokens = 256,
    seed: Annotated[int, typer.Option(help="Random seed.")] = 42,
    bf16: Annotated[str, typer.Option(help="auto, on or off.")] = "auto",
    device: Annotated[str, typer.Option(help="auto, cpu or cuda.")] = "auto",
    resume: Annotated[bool, typer.Option(help="Continue an interrupted run.")] = False,
    overwrite: Annotated[bool, typer.Option(help="Replace an earlier run in OUT_DIR.")] = False,
) -> None:
    """Adapt a BERT_DOT to a corpus without labels: pseudo-queries from its titles and
    sentences, BM25 and dense negatives, contrastive training (or a teacher BERT_CAT's
    margins) within a time budget."""
    # Plain option values first: a wrong one is reported before any model is looked up.
    _at_least("--max-length", max_length, 2)
    if budget_minutes <= 0:
        raise DotcatError(f"--budget-minutes must be > 0, got {budget_minutes}")
    _one_of("--teacher-precision", teacher_precision, _PRECISIONS)
    alpha = None if teacher_alpha == "auto" else _unit_float("--teacher-alpha", teacher_alpha)
    _at_least("--n-negatives", n_negatives, 1)
    if contrastive_weight < 0:
        raise DotcatError(f"--contrastive-weight must be >= 0, got {contrastive_weight}")
    _check_training_args(corpus, out_dir, model, batch_size=batch_size)
    if teacher not in (None, _LEXICAL_TEACHER):
        _check_model(teacher)

    from dotcat.training.config import AdaptConfig

    config = AdaptConfig(
        corpus=corpus,
        out_dir=out_dir,
        model=model,
        budget_minutes=budget_minutes,
        max_queries=max_queries,
        prefer=prefer,
        dense_negatives=dense_negatives,
        teacher=teacher,
        teacher_alpha=alpha,
        teacher_precision=teacher_precision,
        n_negatives=n_negatives,
        contrastive_weight=contrastive_weight,
        batch_size=batch_size,
        lr=lr,
        cache_chunk=cache_chunk or None,
        max_length=max_length,
        seed=seed,
        bf16=bf16,
        device=device,
        resume=resume,
        overwrite=overwrite,
    )
    config.validate()  # before torch is imported

    from dotcat.training.adapt import adapt as run_adapt

    path = run_adapt(config)
    typer.echo(
        f"adapted model written to {path}; index with: dotcat index CORPUS INDEX --model {path}"
    )
