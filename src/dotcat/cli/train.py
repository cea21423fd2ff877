"""``dotcat train dot|cat|distill``, ``adapt``, ``calibrate``: models fitted to the user's data.

Every option is a field of the run's config (:mod:`dotcat.training.config`), with its
default and help; the config is checked (:meth:`validate`, :meth:`check_files`) before torch
is imported.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from dotcat.cli.app import app, train_app
from dotcat.cli.params import AUTO, auto_number, option, settings
from dotcat.index.layout import check_writable
from dotcat.index.manifest import check_index
from dotcat.search.config import CalibrationConfig, PipelineConfig, check_pipeline
from dotcat.training.config import AdaptConfig, CatConfig, DistillConfig, DotConfig

# Arguments every trainer shares.
_DATA_HELP = "BEIR dir (or corpus file with --queries/--qrels)."


def _train(config) -> Path:
    """Check, then train (torch is imported here, after every check)."""
    config.validate()
    config.check_files()
    from dotcat.training.run import train

    return train(config)


def _index_hint(what: str, path: Path) -> str:
    return f"{what} written to {path}; index with: dotcat index CORPUS INDEX --model {path}"


@train_app.command("dot")
def train_dot(
    data: Path = typer.Argument(..., help=_DATA_HELP, metavar="DATA"),
    out_dir: Path = typer.Argument(
        ..., help="Where the trained model directory goes.", metavar="OUT_DIR"
    ),
    split: str = option(DotConfig, "split"),
    queries: Path | None = option(DotConfig, "queries"),
    qrels: Path | None = option(DotConfig, "qrels"),
    base: str = option(DotConfig, "base"),
    loss: str = option(DotConfig, "loss"),
    negatives: str = option(DotConfig, "negatives"),
    negatives_file: Path | None = option(DotConfig, "negatives_file"),
    n_negatives: int = option(DotConfig, "n_negatives"),
    window_start: int = option(DotConfig, "window", part=0, help="Mine negatives from this rank"),
    window_end: int = option(DotConfig, "window", part=1, help="...up to (excluding) this rank."),
    remine_each_epoch: bool = option(DotConfig, "remine_each_epoch", "--remine/--no-remine"),
    epochs: int = option(DotConfig, "epochs"),
    batch_size: int = option(DotConfig, "batch_size"),
    grad_accum_steps: int = option(DotConfig, "grad_accum_steps", "--grad-accum"),
    cache_chunk_size: int | None = option(DotConfig, "cache_chunk_size", "--cache-chunk"),
    lr: float = option(DotConfig, "lr"),
    warmup_ratio: float = option(DotConfig, "warmup_ratio"),
    temperature: float | None = option(DotConfig, "temperature"),
    margin: float = option(DotConfig, "margin"),
    max_length: int = option(DotConfig, "max_length"),
    query_max_length: int = option(DotConfig, "query_max_length"),
    dev_fraction: float = option(DotConfig, "dev_fraction"),
    dev_max_docs: int = option(DotConfig, "dev_max_docs"),
    seed: int = option(DotConfig, "seed"),
    bf16: str = option(DotConfig, "bf16"),
    device: str = option(DotConfig, "device"),
    checkpoint_every: int = option(DotConfig, "checkpoint_every"),
    resume: bool = option(DotConfig, "resume"),
    overwrite: bool = option(DotConfig, "overwrite"),
) -> None:
    """Train a BERT_DOT bi-encoder on relevance labels (works under torchrun for DDP)."""
    config = settings(DotConfig, locals(), window=(window_start, window_end),
                      cache_chunk_size=cache_chunk_size or None)  # fmt: skip
    typer.echo(_index_hint("trained model", _train(config)))


@train_app.command("distill")
def train_distill(
    data: Path = typer.Argument(..., help=_DATA_HELP, metavar="DATA"),
    out_dir: Path = typer.Argument(
        ..., help="Where the distilled BERT_DOT goes.", metavar="OUT_DIR"
    ),
    teacher: str = option(DistillConfig, "teacher", default=...),
    base: str = option(DistillConfig, "base", "--student"),
    split: str = option(DistillConfig, "split"),
    queries: Path | None = option(DistillConfig, "queries"),
    qrels: Path | None = option(DistillConfig, "qrels"),
    distill_loss: str = option(DistillConfig, "distill_loss", "--loss"),
    contrastive_weight: float = option(DistillConfig, "contrastive_weight"),
    kl_temperature: float = option(DistillConfig, "kl_temperature"),
    teacher_alpha: str = option(DistillConfig, "teacher_alpha", default=AUTO),
    teacher_dense: str | None = option(DistillConfig, "teacher_dense"),
    teacher_precision: str = option(DistillConfig, "teacher_precision"),
    teacher_scale: str = option(DistillConfig, "teacher_scale", default=AUTO),
    negatives: str = option(DistillConfig, "negatives"),
    negatives_file: Path | None = option(DistillConfig, "negatives_file"),
    n_negatives: int = option(DistillConfig, "n_negatives"),
    window_start: int = option(DistillConfig, "window", part=0, help="Mine from this rank"),
    window_end: int = option(DistillConfig, "window", part=1, help="...up to (excluding) this."),
    remine_each_epoch: bool = option(DistillConfig, "remine_each_epoch", "--remine/--no-remine"),
    epochs: int = option(DistillConfig, "epochs"),
    batch_size: int = option(DistillConfig, "batch_size"),
    grad_accum_steps: int = option(DistillConfig, "grad_accum_steps", "--grad-accum"),
    cache_chunk_size: int | None = option(DistillConfig, "cache_chunk_size", "--cache-chunk"),
    lr: float = option(DistillConfig, "lr"),
    warmup_ratio: float = option(DistillConfig, "warmup_ratio"),
    temperature: float | None = option(DistillConfig, "temperature"),
    max_length: int = option(DistillConfig, "max_length"),
    query_max_length: int = option(DistillConfig, "query_max_length"),
    dev_fraction: float = option(DistillConfig, "dev_fraction"),
    seed: int = option(DistillConfig, "seed"),
    bf16: str = option(DistillConfig, "bf16"),
    device: str = option(DistillConfig, "device"),
    checkpoint_every: int = option(DistillConfig, "checkpoint_every"),
    resume: bool = option(DistillConfig, "resume"),
    overwrite: bool = option(DistillConfig, "overwrite"),
) -> None:
    """Distil a BERT_CAT into a BERT_DOT with Margin-MSE (Hofstätter et al. 2020)."""
    config = settings(
        DistillConfig,
        locals(),
        window=(window_start, window_end),
        cache_chunk_size=cache_chunk_size or None,
        teacher_alpha=auto_number("teacher_alpha", teacher_alpha),
        teacher_scale=auto_number("teacher_scale", teacher_scale),
    )
    typer.echo(_index_hint("distilled model", _train(config)))


@train_app.command("cat")
def train_cat(
    data: Path = typer.Argument(..., help=_DATA_HELP, metavar="DATA"),
    out_dir: Path = typer.Argument(
        ..., help="Where the trained cross-encoder goes.", metavar="OUT_DIR"
    ),
    split: str = option(CatConfig, "split"),
    queries: Path | None = option(CatConfig, "queries"),
    qrels: Path | None = option(CatConfig, "qrels"),
    base: str = option(CatConfig, "base"),
    loss: str = option(CatConfig, "loss"),
    first_stages: list[str] = option(CatConfig, "first_stages", "--first-stage"),
    depth: int = option(CatConfig, "depth"),
    n_negatives: int = option(CatConfig, "n_negatives"),
    negatives_file: Path | None = option(CatConfig, "negatives_file"),
    epochs: int = option(CatConfig, "epochs"),
    batch_size: int = option(CatConfig, "batch_size"),
    grad_accum_steps: int = option(CatConfig, "grad_accum_steps", "--grad-accum"),
    pairs_per_forward: int = option(CatConfig, "pairs_per_forward"),
    lr: float = option(CatConfig, "lr"),
    head_lr_scale: float = option(CatConfig, "head_lr_scale"),
    warmup_ratio: float = option(CatConfig, "warmup_ratio"),
    max_length: int | None = option(CatConfig, "max_length"),
    attention_dropout: float = option(
        CatConfig,
        "attention_dropout",
        help="Attention-probability dropout in training (-1: the model's).",
    ),
    teacher_weight: float = option(CatConfig, "teacher_weight"),
    teacher_temperature: float = option(CatConfig, "teacher_temperature"),
    dev_fraction: float = option(CatConfig, "dev_fraction"),
    dev_depth: int = option(CatConfig, "dev_depth"),
    pretrain_queries: str = option(CatConfig, "pretrain_queries"),
    seed: int = option(CatConfig, "seed"),
    bf16: str = option(CatConfig, "bf16"),
    device: str = option(CatConfig, "device"),
    checkpoint_every: int = option(CatConfig, "checkpoint_every"),
    resume: bool = option(CatConfig, "resume"),
    overwrite: bool = option(CatConfig, "overwrite"),
) -> None:
    """Train a BERT_CAT cross-encoder (re-ranker) on relevance labels."""
    pretrain = pretrain_queries.strip()
    config = settings(
        CatConfig,
        locals(),
        first_stages=tuple(first_stages),
        attention_dropout=None if attention_dropout < 0 else attention_dropout,
        pretrain_queries=int(pretrain) if pretrain.lstrip("-").isdigit() else pretrain,
    )
    path = _train(config)
    typer.echo(
        f"trained cross-encoder written to {path}; re-rank with: "
        f"dotcat rerank RUN DATA {path} --output RUN2"
    )


@app.command()
def adapt(
    corpus: Path = typer.Argument(
        ..., help="Your corpus: BEIR dir, JSONL or TSV.", metavar="CORPUS"
    ),
    out_dir: Path = typer.Argument(..., help="Where the adapted BERT_DOT goes.", metavar="OUT_DIR"),
    model: str = option(AdaptConfig, "model"),
    budget_minutes: float = option(AdaptConfig, "budget_minutes"),
    max_queries: int | None = option(AdaptConfig, "max_queries"),
    prefer: str = option(AdaptConfig, "prefer"),
    dense_negatives: bool = option(AdaptConfig, "dense_negatives"),
    teacher: str | None = option(AdaptConfig, "teacher"),
    teacher_alpha: str = option(AdaptConfig, "teacher_alpha", default=AUTO),
    teacher_precision: str = option(AdaptConfig, "teacher_precision"),
    n_negatives: int = option(AdaptConfig, "n_negatives"),
    contrastive_weight: float = option(AdaptConfig, "contrastive_weight"),
    batch_size: int = option(AdaptConfig, "batch_size"),
    lr: float = option(AdaptConfig, "lr"),
    cache_chunk: int = option(AdaptConfig, "cache_chunk"),
    max_length: int = option(AdaptConfig, "max_length"),
    seed: int = option(AdaptConfig, "seed"),
    bf16: str = option(AdaptConfig, "bf16"),
    device: str = option(AdaptConfig, "device"),
    resume: bool = option(AdaptConfig, "resume"),
    overwrite: bool = option(AdaptConfig, "overwrite"),
) -> None:
    """Adapt a BERT_DOT to a corpus without labels: pseudo-queries from its titles and
    sentences, BM25 and dense negatives, contrastive training (or a teacher BERT_CAT's
    margins) within a time budget."""
    config = settings(AdaptConfig, locals(), cache_chunk=cache_chunk or None,
                      teacher_alpha=auto_number("teacher_alpha", teacher_alpha))  # fmt: skip
    config.validate()
    config.check_files()
    from dotcat.training.adapt import adapt as run_adapt

    typer.echo(_index_hint("adapted model", run_adapt(config)))


@app.command()
def calibrate(
    index_dir: Path = typer.Argument(
        ..., help="An index directory from `dotcat index`.", metavar="INDEX_DIR"
    ),
    rerank: str = option(PipelineConfig, "rerank", default=..., help="The BERT_CAT to calibrate."),
    depth: int = option(PipelineConfig, "depth"),
    queries: int = option(CalibrationConfig, "queries"),
    documents: int = option(CalibrationConfig, "documents"),
    seed: int = option(CalibrationConfig, "seed"),
    first_stage: str = option(PipelineConfig, "first_stage"),
    record: bool = option(CalibrationConfig, "record"),
    device: str = option(PipelineConfig, "device"),
    precision: str = option(PipelineConfig, "precision"),
    rerank_backend: str = option(PipelineConfig, "rerank_backend"),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
) -> None:
    """Choose how much to trust a cross-encoder on this index's corpus, without labels.

    Pseudo-queries (titles, or sentences cut out of documents) are asked of the index's first
    stage; the cross-encoder re-ranks each top --depth; the interpolation weight (0 = first
    stage, 1 = plain logit) with the best nDCG@10 against the known answers is recorded in
    the index, and `dotcat search/serve --rerank MODEL` use it (--interpolate auto).
    """
    calibration = settings(CalibrationConfig, locals())
    calibration.validate()
    config = settings(PipelineConfig, locals())
    check_index(index_dir, shards=False)
    check_pipeline(index_dir, config)
    if record:
        check_writable(index_dir)  # before the calibration, not after it

    from dotcat.search.calibrate import calibrate_reranker, record_corpus_weight
    from dotcat.search.pipeline import SearchPipeline

    # advise=False: not the hint to run `dotcat calibrate`; it is running.
    pipeline = SearchPipeline(index_dir, config, advise=False)
    weight = calibrate_reranker(pipeline, queries, documents, seed)
    if record:
        record_corpus_weight(index_dir, weight)
    if as_json:
        typer.echo(json.dumps(weight.to_json(), indent=2))
        return
    _print_calibration(weight, pipeline, depth, index_dir if record else None)


def _print_calibration(weight, pipeline, depth: int, recorded_in: Path | None) -> None:
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
    where = f"recorded in {recorded_in}" if recorded_in else "not recorded (--no-record)"
    typer.echo(
        f"interpolation weight {weight.alpha:g} {where}; before: {previous[0]:g} ({previous[1]})"
    )
