"""``dotcat index``, ``add``, ``delete``, ``merge``, ``export``: making and changing indexes.

Each command checks its settings and paths with light modules (no torch, no model weights)
before importing the stages that do the work (inside the command: torch, FAISS, the models),
so a typo is reported in milliseconds, not after 10-25 s of imports or hours of encoding.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from dotcat.cli.app import app
from dotcat.cli.params import option, settings
from dotcat.data.sources import CorpusOptions, open_source
from dotcat.errors import DotcatError
from dotcat.index.config import IndexConfig, MergeConfig, parse_shard
from dotcat.index.layout import check_target
from dotcat.index.manifest import check_index
from dotcat.index.passages import PassageConfig
from dotcat.models.config import EncoderConfig, ExportConfig
from dotcat.models.resolve import check_model

CORPUS_HELP = (
    "A BEIR directory, a corpus file (JSONL, JSON, CSV, TSV, Parquet; .gz ok) or a folder of "
    "files (.txt .md .rst .html .pdf, and record files), walked recursively."
)
INDEX_HELP = "An index directory from `dotcat index`."


def corpus_options(values: dict) -> CorpusOptions:
    """The :class:`CorpusOptions` of a command's corpus options (``id_field``...)."""
    return settings(CorpusOptions, values, include=tuple(values["include"] or ()),
                    exclude=tuple(values["exclude"] or ()))  # fmt: skip


@app.command()
def index(
    corpus: Path = typer.Argument(..., help=CORPUS_HELP, metavar="CORPUS"),
    index_dir: Path = typer.Argument(
        ..., help="Where to write the index directory.", metavar="INDEX_DIR"
    ),
    model: str = option(EncoderConfig, "model"),
    pooling: str | None = option(EncoderConfig, "pooling"),
    similarity: str | None = option(EncoderConfig, "similarity"),
    max_length: int | None = option(EncoderConfig, "max_length"),
    batch_size: int | None = option(EncoderConfig, "batch_size"),
    device: str = option(EncoderConfig, "device"),
    faiss_spec: str = option(IndexConfig, "faiss_spec", "--faiss"),
    bm25: bool = option(IndexConfig, "bm25"),
    overwrite: bool = typer.Option(False, help="Replace an existing index."),
    keep_vectors: bool = option(IndexConfig, "keep_vectors"),
    precision: str = option(EncoderConfig, "precision"),
    backend: str = option(EncoderConfig, "backend", "--int8-backend"),
    shard: str | None = option(IndexConfig, "shard"),
    chunk_size: int = option(IndexConfig, "chunk_size"),
    fresh: bool = typer.Option(False, help="Start over instead of resuming an interrupted build."),
    ray: str | None = option(IndexConfig, "ray", metavar="ADDRESS"),
    ray_workers: int | None = option(IndexConfig, "ray_workers"),
    passages: bool | None = option(PassageConfig, "enabled", "--passages/--no-passages"),
    window: int | None = option(PassageConfig, "window", "--passage-window"),
    stride: int | None = option(PassageConfig, "stride", "--passage-stride"),
    sentence_aware: bool = option(PassageConfig, "sentence_aware"),
    id_field: str | None = option(CorpusOptions, "id_field"),
    title_field: str | None = option(CorpusOptions, "title_field"),
    text_field: str | None = option(CorpusOptions, "text_field"),
    include: list[str] = option(CorpusOptions, "include", metavar="GLOB"),
    exclude: list[str] = option(CorpusOptions, "exclude", metavar="GLOB"),
    strict: bool = option(CorpusOptions, "strict"),
    hidden: bool = option(CorpusOptions, "hidden"),
) -> None:
    """Encode a corpus with BERT_DOT and build a FAISS index directory (and BM25 beside it).

    Where most documents are more than twice as long as the encoder's window, long documents
    are split into overlapping passages (each encoded, and indexed by BM25, on its own) and a
    search ranks documents by their passages (`dotcat search --aggregation`); elsewhere each
    document is one vector cut at the window, with a warning that counts them. --passages /
    --no-passages force either.

    A folder's documents have their relative paths as ids (a record file's records
    PATH#ID); files that cannot be read are skipped and named in one warning (--strict:
    an error). An interrupted build (Ctrl-C, kill -9, power loss) resumes after its last
    finished chunk when the same command runs again. With BM25 and a BEIR directory that has
    dev or train qrels, the hybrid fusion is chosen on its dev queries.
    """
    from dotcat.index.preflight import check_build

    encoder = settings(EncoderConfig, locals())
    encoder.validate()
    split = settings(PassageConfig, locals(), enabled=passages)
    config = settings(IndexConfig, locals(), shard=parse_shard(shard) if shard else None,
                      passages=split)  # fmt: skip
    options = corpus_options(locals())
    check_build(corpus, index_dir, config, overwrite=overwrite, fresh=fresh, model=model,
                options=options, max_length=max_length)  # fmt: skip

    from dotcat.search.pipeline import build_and_tune

    built = build_and_tune(corpus, index_dir, encoder, config, overwrite=overwrite, fresh=fresh,
                           corpus_options=options)  # fmt: skip
    manifest, n = built.manifest, built.manifest.documents["count"]
    entry, split = manifest.encoder, manifest.passages
    passages = f" as {split['count']} passages of {split['window']} tokens" if split else ""
    typer.echo(
        f"indexed {n} documents{passages} into {index_dir} in {built.seconds:.1f} s "
        f"({n / built.seconds:.1f} docs/s); encoder {entry['name']} ({entry['pooling']}, "
        f"{entry['similarity']}, max {entry['max_length']} tokens), "
        f"FAISS {manifest.faiss['spec']}{', BM25' if bm25 else ''}"
    )
    if bm25 and config.shard is None:
        typer.echo(describe_fusion(built.fusion))


def describe_fusion(fusion) -> str:
    """One line on the hybrid fusion an index build chose (or did not)."""
    if fusion is None:
        return "hybrid fusion: RRF (k=60) (no dev queries in the data to choose on)"
    scores = fusion.dev["scores"]
    best = scores["rrf"] if fusion.method == "rrf" else scores[f"linear {fusion.weight:g}"]
    return (
        f"hybrid fusion chosen on dev ({fusion.dev['source']}, {fusion.dev['queries']} "
        f"queries): {fusion.describe()}, nDCG@10 {best:.4f} (RRF {scores['rrf']:.4f}, "
        f"dense {scores['linear 1']:.4f}, BM25 {scores['linear 0']:.4f})"
    )


@app.command()
def add(
    index_dir: Path = typer.Argument(..., help=INDEX_HELP, metavar="INDEX_DIR"),
    corpus: Path = typer.Argument(..., help="The new documents. " + CORPUS_HELP, metavar="CORPUS"),
    upsert: bool = typer.Option(False, help="Replace documents whose id the index holds already."),
    device: str = option(EncoderConfig, "device"),
    precision: str = option(EncoderConfig, "precision"),
    id_field: str | None = option(CorpusOptions, "id_field"),
    title_field: str | None = option(CorpusOptions, "title_field"),
    text_field: str | None = option(CorpusOptions, "text_field"),
    include: list[str] = option(CorpusOptions, "include", metavar="GLOB"),
    exclude: list[str] = option(CorpusOptions, "exclude", metavar="GLOB"),
    strict: bool = option(CorpusOptions, "strict"),
    hidden: bool = option(CorpusOptions, "hidden"),
) -> None:
    """Add documents to an index (encoded with its own encoder); atomic."""

    EncoderConfig(device=device, precision=precision).validate()
    check_index(index_dir, shards=False)  # a folder of shards is updated shard by shard
    options = corpus_options(locals())
    open_source(corpus, options)  # a missing path, an empty folder, a misplaced option
    from dotcat.index.updates import add_documents

    start = time.perf_counter()
    result = add_documents(index_dir, corpus, upsert=upsert, device=device, precision=precision,
                           corpus_options=options)  # fmt: skip
    typer.echo(
        f"added {result.added} and replaced {result.replaced} documents in {index_dir} in "
        f"{time.perf_counter() - start:.1f} s; it holds {result.documents} documents"
    )


@app.command()
def delete(
    index_dir: Path = typer.Argument(..., help=INDEX_HELP, metavar="INDEX_DIR"),
    doc_ids: list[str] | None = typer.Argument(
        None, help="Document ids to delete.", metavar="DOC_IDS"
    ),
    ids: Path | None = typer.Option(None, help="A file of document ids to delete, one per line."),
    missing_ok: bool = typer.Option(False, help="Delete the ids the index has; skip the others."),
) -> None:
    """Delete documents from an index (FAISS and doc store; BM25 follows); atomic."""

    check_index(index_dir, shards=False)
    wanted = [i for i in (*(doc_ids or []), *(read_ids(ids) if ids else [])) if i.strip()]
    if not wanted:
        raise DotcatError("give document ids to delete (as arguments or --ids FILE)")
    from dotcat.index.updates import delete_documents

    result = delete_documents(index_dir, wanted, missing_ok=missing_ok)
    typer.echo(f"deleted {result.deleted} documents from {index_dir}; it holds {result.documents}")


def read_ids(path: Path) -> list[str]:
    """The non-blank lines of a file of document ids."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise DotcatError(f"{path}: cannot read ({e.strerror})") from None
    return [line.strip() for line in lines if line.strip()]


@app.command()
def merge(
    paths: list[Path] = typer.Argument(
        ...,
        help="SHARD [SHARD ...] OUT: shard indexes, then the new index.",
        metavar="SHARD... OUT",
    ),
    faiss_spec: str | None = option(MergeConfig, "faiss_spec", "--faiss"),
    on_disk: str = option(MergeConfig, "on_disk"),
    bm25: bool | None = option(MergeConfig, "bm25", "--bm25/--no-bm25"),
    overwrite: bool = typer.Option(False, help="Replace an existing index."),
) -> None:
    """Merge shard indexes (`dotcat index --shard I/N`) into one index directory."""
    if len(paths) < 2:
        raise DotcatError("usage: dotcat merge SHARD [SHARD ...] OUT")
    *shards, out = paths
    settings(MergeConfig, locals()).validate()

    for shard in shards:
        check_index(shard)
    check_target(out, overwrite)
    from dotcat.index.shards import merge_indexes

    start = time.perf_counter()
    manifest = merge_indexes(shards, out, faiss_spec, on_disk=on_disk, bm25=bm25,
                             overwrite=overwrite)  # fmt: skip
    typer.echo(
        f"merged {len(shards)} shards ({manifest.documents['count']} documents) into {out} in "
        f"{time.perf_counter() - start:.1f} s; FAISS {manifest.faiss['spec']}"
        + (" with on-disk lists" if manifest.faiss.get("on_disk") else "")
    )


@app.command()
def export(
    model: str = typer.Argument(
        ..., help="Model directory (BERT_DOT or BERT_CAT).", metavar="MODEL"
    ),
    precision: str = option(ExportConfig, "precision"),
    keep_fp32: str = option(ExportConfig, "keep_fp32"),
    variant: str | None = option(ExportConfig, "variant"),
    backend: str = option(ExportConfig, "backend"),
) -> None:
    """Export a model beside its weights where sentence-transformers looks (onnx/, openvino/)."""

    settings(ExportConfig, locals()).validate()
    check_model(model)
    from dotcat.models.int8 import export_model

    start = time.perf_counter()
    kind, path = export_model(
        model, precision, keep_fp32=keep_fp32, variant=variant, backend=backend
    )
    seconds = time.perf_counter() - start
    typer.echo(f"exported {kind} {model} at {precision} in {seconds:.1f} s: {path}")
