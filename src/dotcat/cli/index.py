"""``dotcat index``, ``add``, ``delete``, ``merge``, ``export``: making and changing indexes.

Each command checks its settings and paths with light modules (no torch, no model weights)
before importing the stages that do the work (inside the command: torch, FAISS, the models),
so a typo is reported in milliseconds, not after 10-25 s of imports or hours of encoding.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer

from dotcat.cli.main import app
from dotcat.cli.params import INDEX_DIR, given_settings, option, with_settings
from dotcat.data.sources import CorpusOptions, open_source
from dotcat.errors import DotcatError
from dotcat.index.config import IndexConfig, MergeConfig
from dotcat.index.layout import check_target
from dotcat.index.manifest import built_from, check_index
from dotcat.index.passages import PassageConfig
from dotcat.models.config import EncoderConfig, ExportConfig
from dotcat.models.resolve import check_model
from dotcat.search.cluster import is_shard_folder

CORPUS_HELP = (
    "A BEIR directory, a corpus file (JSONL, JSON, CSV, TSV, Parquet; .gz ok) or a folder of "
    "files (.txt .md .rst .html .pdf, text without a suffix, and record files), walked recursively."
)


@app.command()
@with_settings(EncoderConfig, "encoder")
@with_settings(IndexConfig, "config")
@with_settings(CorpusOptions, "options")
def index(
    corpus: Path = typer.Argument(..., help=CORPUS_HELP, metavar="CORPUS"),
    index_dir: Path = typer.Argument(
        ..., help="Where to write the index directory.", metavar="INDEX_DIR"
    ),
    overwrite: bool = typer.Option(
        False, help="Replace an existing index (else one built from CORPUS is brought up to date)."
    ),
    fresh: bool = typer.Option(False, help="Start over instead of resuming an interrupted build."),
    encoder: EncoderConfig = None,
    config: IndexConfig = None,
    options: CorpusOptions = None,
) -> None:
    """Encode a corpus with BERT_DOT and build a FAISS index directory (and BM25 beside it).

    Where most documents are more than twice as long as the encoder's window, long documents
    are split into overlapping passages (each encoded, and indexed by BM25, on its own) and a
    search ranks documents by their passages (`dotcat search --aggregation`); elsewhere each
    document is one vector cut at the window, with a warning that counts them. --passages /
    --no-passages force either.

    A folder's documents have their relative paths as ids (a record file's records
    PATH#ID); files that cannot be read are skipped and named in one warning (--strict:
    an error). An interrupted build (Ctrl-C, kill -9, power loss) resumes where it stopped,
    less at most a minute of encoding, when the same command runs again. With BM25 and a BEIR
    directory that has dev or train qrels, the hybrid fusion is chosen on its dev queries.

    On an index built from CORPUS it brings the index up to date: files added, changed or
    removed since are added, encoded again or deleted, the others left as they are (one
    summary line); a setting that would change every vector is refused.
    """
    if not overwrite and built_from(corpus, index_dir):
        from dotcat.index.sync import sync_index

        if fresh:
            raise DotcatError("--fresh restarts an interrupted build; --overwrite rebuilds")
        given = given_settings(EncoderConfig) | given_settings(IndexConfig)
        settings = {n: getattr(encoder if hasattr(encoder, n) else config, n) for n in given}
        settings |= {n: getattr(config.passages, n) for n in given_settings(PassageConfig)}
        done = sync_index(corpus, index_dir, settings=settings, corpus_options=options)
        typer.echo(done.line(corpus, index_dir))
        return
    from dotcat.index.preflight import check_build

    check_build(corpus, index_dir, config, overwrite=overwrite, fresh=fresh,
                model=encoder.model, options=options, max_length=encoder.max_length)  # fmt: skip

    from dotcat.index.encoder import describe_precision, prepare_queries
    from dotcat.tuning import build_and_tune

    built = build_and_tune(corpus, index_dir, encoder, config, overwrite=overwrite, fresh=fresh,
                           corpus_options=options)  # fmt: skip
    prepare_queries(built.manifest.encoder, encoder.device)  # `dotcat search` starts fast
    manifest, n = built.manifest, built.manifest.documents["count"]
    entry, split = manifest.encoder, manifest.passages
    passages = f" as {split['count']} passages of {split['window']} tokens" if split else ""
    typer.echo(
        f"indexed {n} documents{passages} into {index_dir} in {built.seconds:.1f} s "
        f"({n / built.seconds:.1f} docs/s); encoder {entry['name']} ({entry['pooling']}, "
        f"{entry['similarity']}, max {entry['max_length']} tokens), "
        f"FAISS {manifest.faiss['spec']}{', BM25' if config.bm25 else ''}"
    )
    typer.echo(describe_precision(entry, encoder.precision))
    if config.bm25 and config.shard is None:
        typer.echo(describe_fusion(built.fusion))


def describe_fusion(fusion) -> str:
    """One line on the hybrid fusion an index build chose (or did not)."""
    none = "no dev queries in the data to choose on"
    if fusion is None:
        return f"hybrid fusion: linear (dense weight 0.5) ({none})"
    if "scores" not in fusion.dev:  # recorded by the build: the encoder does not read the text
        return f"hybrid fusion: {fusion.describe()} ({fusion.dev['reason']}; {none})"
    scores = fusion.dev["scores"]
    best = scores["rrf"] if fusion.method == "rrf" else scores[f"linear {fusion.weight:g}"]
    line = (
        f"hybrid fusion chosen on dev ({fusion.dev['source']}, {fusion.dev['queries']} "
        f"queries): {fusion.describe()}, nDCG@10 {best:.4f} (RRF {scores['rrf']:.4f}, "
        f"dense {scores['linear 1']:.4f}, BM25 {scores['linear 0']:.4f})"
    )
    reason = fusion.dev.get("reason")  # absent from a manifest written before the rule
    return f"{line}\n  why ({fusion.dev['rule']} rule): {reason}" if reason else line


@app.command()
@with_settings(CorpusOptions, "options")
def add(
    index_dir: Path = INDEX_DIR,
    corpus: Path = typer.Argument(..., help="The new documents. " + CORPUS_HELP, metavar="CORPUS"),
    upsert: bool = typer.Option(False, help="Replace documents whose id the index holds already."),
    device: str = option(EncoderConfig, "device"),
    precision: str = option(EncoderConfig, "precision"),
    options: CorpusOptions = None,
) -> None:
    """Add documents to an index (encoded with its own encoder); atomic. To a folder of
    shards: each document to the shard that holds it, a new one to the shard its id hashes to."""

    EncoderConfig(device=device, precision=precision).validate()
    check_index(index_dir)
    open_source(corpus, options)  # a missing path, an empty folder, a misplaced option
    from dotcat.index.shard_updates import add_to_shards
    from dotcat.index.updates import add_documents

    add = add_to_shards if is_shard_folder(index_dir) else add_documents
    start = time.perf_counter()
    result = add(index_dir, corpus, upsert=upsert, device=device, precision=precision,
                 corpus_options=options)  # fmt: skip
    typer.echo(
        f"added {result.added} and replaced {result.replaced} documents in {index_dir} in "
        f"{time.perf_counter() - start:.1f} s; it holds {result.documents} documents"
    )


@app.command()
def delete(
    index_dir: Path = INDEX_DIR,
    doc_ids: list[str] | None = typer.Argument(
        None, help="Document ids to delete.", metavar="DOC_IDS"
    ),
    ids: Path | None = typer.Option(None, help="A file of document ids to delete, one per line."),
    missing_ok: bool = typer.Option(False, help="Delete the ids the index has; skip the others."),
) -> None:
    """Delete documents from an index (FAISS and doc store; BM25 follows); atomic. From a
    folder of shards: from the shards that hold them."""

    check_index(index_dir)
    wanted = [i for i in (*(doc_ids or []), *(read_ids(ids) if ids else [])) if i.strip()]
    if not wanted:
        raise DotcatError("give document ids to delete (as arguments or --ids FILE)")
    from dotcat.index.shard_updates import delete_from_shards
    from dotcat.index.updates import delete_documents

    delete = delete_from_shards if is_shard_folder(index_dir) else delete_documents
    result = delete(index_dir, wanted, missing_ok=missing_ok)
    typer.echo(f"deleted {result.deleted} documents from {index_dir}; it holds {result.documents}")


def read_ids(path: Path) -> list[str]:
    """The non-blank lines of a file of document ids."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as e:
        raise DotcatError(f"{path}: cannot read ({e.strerror})") from None
    return [line.strip() for line in lines if line.strip()]


@app.command()
@with_settings(MergeConfig, "config")
def merge(
    paths: list[Path] = typer.Argument(
        ...,
        help="SHARD [SHARD ...] OUT: shard indexes, then the new index.",
        metavar="SHARD... OUT",
    ),
    overwrite: bool = typer.Option(False, help="Replace an existing index."),
    config: MergeConfig = None,
) -> None:
    """Merge shard indexes (`dotcat index --shard I/N`) into one index directory."""
    if len(paths) < 2:
        raise DotcatError("usage: dotcat merge SHARD [SHARD ...] OUT")
    *shards, out = paths

    for shard in shards:
        check_index(shard)
    check_target(out, overwrite)
    from dotcat.index.shards import merge_indexes

    start = time.perf_counter()
    manifest = merge_indexes(shards, out, config.faiss_spec, on_disk=config.on_disk,
                             bm25=config.bm25, overwrite=overwrite)  # fmt: skip
    typer.echo(
        f"merged {len(shards)} shards ({manifest.documents['count']} documents) into {out} in "
        f"{time.perf_counter() - start:.1f} s; FAISS {manifest.faiss['spec']}"
        + (" with on-disk lists" if manifest.faiss.get("on_disk") else "")
    )


@app.command()
@with_settings(ExportConfig, "config")
def export(
    model: str = typer.Argument(
        ..., help="Model directory (BERT_DOT or BERT_CAT).", metavar="MODEL"
    ),
    config: ExportConfig = None,
) -> None:
    """Export a model beside its weights where sentence-transformers looks (onnx/, openvino/)."""
    check_model(model)
    from dotcat.models.int8 import export_model

    start = time.perf_counter()
    kind, path = export_model(model, config.precision, keep_fp32=config.keep_fp32,
                              variant=config.variant, backend=config.backend)  # fmt: skip
    seconds = time.perf_counter() - start
    typer.echo(f"exported {kind} {model} at {config.precision} in {seconds:.1f} s: {path}")
