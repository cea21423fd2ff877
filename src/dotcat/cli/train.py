"""``dotcat train dot|cat|distill``, ``adapt``, ``calibrate``: models fitted to the user's data.

Every option is a field of the run's config (:mod:`dotcat.training.config`), with its default and
help; the config is checked (:meth:`validate`, :meth:`check_files`) before torch is imported.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer

from dotcat.cli.main import app, train_app
from dotcat.cli.params import INDEX_DIR, with_settings
from dotcat.files import read_json_or_none
from dotcat.index.layout import check_writable
from dotcat.index.manifest import check_index
from dotcat.models.resolve import TRAINING_RECORD
from dotcat.search.config import CalibrationConfig, PipelineConfig, check_pipeline
from dotcat.training.config import AdaptConfig, CatConfig, DistillConfig, DotConfig


def _train(config) -> Path:
    """Check, then train (torch is imported here, after every check)."""
    config.validate()
    config.check_files()
    from dotcat.training.run import train

    path = train(config)
    if (read_json_or_none(path / TRAINING_RECORD) or {}).get("status") == "stopped":
        typer.echo(f"stopped (--stop-after-steps): no model in {path} yet; --resume continues")
        raise typer.Exit(0)
    return path


def _index_hint(what: str, path: Path) -> str:
    return f"{what} written to {path}; index with: dotcat index CORPUS INDEX --model {path}"


def _check(path: Path) -> dict:
    """The run's held-out check, as its record holds it (empty: none)."""
    return (read_json_or_none(path / TRAINING_RECORD) or {}).get("heldout_check") or {}


def _gain(check: dict) -> str:
    """The check's line where it showed a gain (where it did not, its warning said so)."""
    return check["line"] + "\n" if check.get("shown_better") else ""


@train_app.command("dot")
@with_settings(DotConfig, "config")
def train_dot(config: DotConfig) -> None:
    """Train a BERT_DOT bi-encoder on relevance labels (works under torchrun for DDP), then
    check it on held-out judged queries (--no-check: not)."""
    path = _train(config)
    check = _check(path)
    if check.get("kept") == "base":
        typer.echo(f"{path} holds the base model; the trained one is in {check['trained_model']}")
        return
    typer.echo(_gain(check) + _index_hint("trained model", path))


@train_app.command("distill")
@with_settings(DistillConfig, "config", exclude=("loss",), required=("teacher",))
def train_distill(config: DistillConfig) -> None:
    """Distil a BERT_CAT into a BERT_DOT with Margin-MSE (Hofstätter et al. 2020)."""
    typer.echo(_index_hint("distilled model", _train(config)))


@train_app.command("cat")
@with_settings(CatConfig, "config")
def train_cat(config: CatConfig) -> None:
    """Train a BERT_CAT cross-encoder (re-ranker) on relevance labels, then check it on
    held-out judged queries (--no-check: not)."""
    path = _train(config)
    typer.echo(
        f"{_gain(_check(path))}trained cross-encoder written to {path}; re-rank with: "
        f"dotcat rerank RUN DATA {path} --output RUN2"
    )


@app.command()
@with_settings(AdaptConfig, "config")
def adapt(config: AdaptConfig) -> None:
    """Adapt a BERT_DOT to a corpus without labels: pseudo-queries from its titles and
    sentences, BM25 and dense negatives, contrastive training (or a teacher BERT_CAT's
    margins) within a time budget."""
    config.check_files()
    from dotcat.training.adapt import adapt as run_adapt

    typer.echo(_index_hint("adapted model", run_adapt(config)))


@app.command()
@with_settings(PipelineConfig, "config", exclude=("interpolate",), required=("rerank",),
               words={"rerank": "The BERT_CAT to calibrate."})  # fmt: skip
@with_settings(CalibrationConfig, "calibration")
def calibrate(
    index_dir: Path = INDEX_DIR,
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    config: PipelineConfig = None,
    calibration: CalibrationConfig = None,
) -> None:
    """Choose how much to trust a cross-encoder on this index's corpus, without labels.

    Pseudo-queries (titles, or sentences cut out of documents) are asked of the index's first
    stage; the cross-encoder re-ranks each top --depth; the interpolation weight (0 = first
    stage, 1 = plain logit) is judged by nDCG@10 against the known answers and chosen by the
    one-standard-error rule (0.2 kept unless a weight beats it beyond the noise, else the
    weight nearest 0.2 within the noise of the best); it is recorded in the index, and
    `dotcat search/serve --rerank MODEL` use it (--interpolate auto).
    """
    check_index(index_dir, shards=False)
    check_pipeline(index_dir, config)
    if calibration.record:
        check_writable(index_dir)  # before the calibration, not after it

    from dotcat.search.calibrate import calibrate_reranker, record_corpus_weight
    from dotcat.search.pipeline import SearchPipeline

    # advise=False: not the hint to run `dotcat calibrate`; it is running.
    pipeline = SearchPipeline(index_dir, config, advise=False)
    c = calibration
    weight = calibrate_reranker(pipeline, c.queries, c.documents, c.seed)
    if c.record:
        record_corpus_weight(index_dir, weight)
    if as_json:
        typer.echo(json.dumps(weight.to_json(), indent=2))
        return
    _print_calibration(weight, pipeline, config.depth, index_dir if c.record else None)


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
    if weight.choice.get("reason"):
        typer.echo(f"chosen by the {weight.choice['rule']} rule: {weight.choice['reason']}")
    where = f"recorded in {recorded_in}" if recorded_in else "not recorded (--no-record)"
    typer.echo(
        f"interpolation weight {weight.alpha:g} {where}; before: {previous[0]:g} ({previous[1]})"
    )
