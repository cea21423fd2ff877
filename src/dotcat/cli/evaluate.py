"""``dotcat eval`` and ``dotcat experiment``: runs against qrels, measured and compared."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from dotcat.cli.main import app
from dotcat.cli.params import with_settings
from dotcat.data import load_judgements, read_run
from dotcat.errors import DotcatError
from dotcat.evaluation import (
    DEFAULT_MEASURES,
    compare,
    comparison_text,
    comparison_to_json,
    evaluate_runs,
    format_per_query,
    format_table,
    to_json,
)
from dotcat.evaluation.significance import ComparisonConfig
from dotcat.evaluation.uncertainty import Uncertainty, uncertainty
from dotcat.files import check_can_create_in


@app.command("eval")
@with_settings(ComparisonConfig, "comparison")
def eval_runs(
    paths: list[Path] = typer.Argument(
        ...,
        help="RUN [RUN ...] QRELS: TREC runs, then a qrels file or BEIR dir.",
        metavar="RUN... QRELS",
    ),
    split: str = typer.Option("test", help="With a BEIR dir: the qrels split."),
    measure: list[str] | None = typer.Option(
        None,
        "--measure",
        "-m",
        help="ir-measures name; repeat (default: nDCG@10 RR@10 R@100 AP@100).",
    ),  # fmt: skip
    per_query: bool = typer.Option(False, help="Also print one row per query."),
    as_json: bool = typer.Option(False, "--json", help="JSON output."),
    baseline: str | None = typer.Option(
        None,
        help="Compare every run with this one (one of the RUNs, by path or file name): per "
        "measure the difference, its interval and one verdict (--test, Holm-corrected).",
    ),
    queries: Path | None = typer.Option(
        None, help="The queries the runs answer (a file): qrels of others are left out."
    ),
    corpus: Path | None = typer.Option(
        None,
        help="The documents ranked (an index, a corpus file or folder): qrels naming others "
        "are counted.",
    ),
    comparison: ComparisonConfig = None,
) -> None:
    """Evaluate TREC runs with ir-measures (default nDCG@10 RR@10 R@100 AP@100).

    Every measure ranks a run as trec_eval does: by score, tied scores by descending document
    id (the runs dotcat writes hold no ties). Queries with judgements but no results count as
    0; qrels naming unknown queries or documents (checked when QRELS is a BEIR directory) are
    counted and reported; a run with
    fewer results per query than a measure's cutoff is named in a warning. With --baseline,
    one line per run and measure gives the difference to the baseline, its interval and one
    verdict: the paired test (--test: t, randomisation or bootstrap) gives both the p-value
    and the interval, Holm-corrected across the runs, each interval at the level its
    comparison is tested at, so it excludes 0 exactly when a dagger marks the value; and the
    queries won/tied/lost. Each run's means get a bootstrap interval (--bootstrap resamples,
    --seed). Each run's judged@10 is reported: under 80%, its figures count unjudged
    documents as not relevant (Bpref and nDCG(judged_only=True)@10 tolerate them).
    """
    if len(paths) < 2:
        raise DotcatError("usage: dotcat eval RUN [RUN ...] QRELS")
    *runs, qrels = paths
    names = _run_names(runs)
    baseline_name = _baseline_name(baseline, runs, names) if baseline is not None else None

    judged = load_judgements(qrels, split=split, queries=queries, corpus=corpus)
    read = {name: read_run(run) for name, run in zip(names, runs, strict=True)}
    measures = tuple(measure) if measure else DEFAULT_MEASURES
    reports = evaluate_runs(read, judged.qrels, measures, judged.known_queries, judged.known_docs)
    extra = uncertainty(read, judged.qrels, reports, comparison)
    if baseline_name is not None:
        _print_comparison(reports, baseline_name, comparison, as_json, extra)
    elif as_json:
        out = {name: to_json(r) | extra.to_json(name) for name, r in reports.items()}
        typer.echo(json.dumps(out, indent=2))
    else:
        typer.echo(format_table(reports, show_queries=True))
    if not as_json:
        typer.echo(extra.text())
        _print_notes(reports, per_query)


def _print_notes(reports: dict, per_query: bool) -> None:
    """What a reader of the figures should know about each run, and its rows per query."""

    for name, report in reports.items():
        for note in report.notes():
            typer.echo(f"note ({name}): {note}")
        if per_query:
            typer.echo(f"\n{name}, per query:\n{format_per_query(report)}")


def _run_names(runs: list[Path]) -> list[str]:
    """Each run's report name: its file name, or its path where runs share a file name
    (``bm25/run.trec``, ``hybrid/run.trec``); a run given twice is refused."""
    names = [run.name for run in runs]
    names = [str(run) if names.count(run.name) > 1 else run.name for run in runs]
    if twice := sorted({n for n in names if names.count(n) > 1}):
        raise DotcatError(f"the run {twice[0]} is given twice")
    return names


def _baseline_name(baseline: str, runs: list[Path], names: list[str]) -> str:
    """The report name of the run ``--baseline`` names, by its name or path."""
    if len(runs) == 1:
        raise DotcatError(
            f"--baseline {baseline!r} is the only run: give the runs to compare with it"
        )
    for run, name in zip(runs, names, strict=True):
        if baseline == name or Path(baseline) in (run, run.resolve()):
            return name
    raise DotcatError(f"--baseline {baseline!r} is not one of the runs ({', '.join(names)})")


def _print_comparison(
    reports, baseline: str, config: ComparisonConfig, as_json: bool, extra: Uncertainty
) -> None:
    """``dotcat eval --baseline``: the marked table, one verdict per comparison and the note,
    or JSON with the comparisons."""
    comparisons = compare(reports, baseline, config)
    if not as_json:
        typer.echo(comparison_text(reports, comparisons, baseline, config) + "\n")
        return
    vs = {n: comparison_to_json(c, baseline, config) for n, c in comparisons.items()}
    out = {n: to_json(r) | {"vs_baseline": vs.get(n)} for n, r in reports.items()}
    typer.echo(json.dumps({n: o | extra.to_json(n) for n, o in out.items()}, indent=2))


@app.command()
def experiment(
    config: Path = typer.Argument(..., help="The experiment file (TOML).", metavar="CONFIG"),
    output: Path | None = typer.Option(None, help="Report folder (default: the file's `output`)."),
    only: str | None = typer.Option(
        None,
        metavar="DATASET",
        help="Run this dataset (its name in [[datasets]]) only; the others' cached runs fill "
        "the rest of the table.",
    ),
) -> None:
    """Run a benchmark from a TOML file: systems (BM25, dense, hybrid, + BERT_CAT) on a
    dataset or several ([[datasets]]), evaluated against a baseline with significance tests;
    writes runs, results.json, report.md and plots.

    Indexes and runs are cached by fingerprint: a second run with nothing changed only
    evaluates again; a changed setting recomputes what depends on it.
    """
    from dotcat.experiment import check_paths, load_config

    settings_ = load_config(config)
    if output is not None:
        settings_ = settings_.model_copy(update={"output": str(output)})
    check_paths(settings_, str(config), only)
    check_can_create_in(Path(settings_.output) / "report.md")

    from dotcat.experiment.report import comparison_table
    from dotcat.experiment.runner import run_experiment
    from dotcat.experiment.suite_report import suite_tables

    def done(outcome) -> None:
        stages = ", ".join(
            f"{s.kind.replace('_', ' ')} {'reused' if s.reused else f'{s.seconds:.1f} s'}"
            for s in outcome.stages
        )
        where = f"{outcome.dataset}: " if settings_.datasets else ""
        typer.echo(f"{where}{outcome.name}: {stages}", err=True)

    text = config.read_text(encoding="utf-8")
    result = run_experiment(settings_, text, str(config), on_system=done, only=only)
    typer.echo(suite_tables(result) if settings_.datasets else comparison_table(result))
    computed = result.computed
    total = sum(len(o.stages) for o in result.outcomes)
    typer.echo(
        f"\n{len(result.outcomes)} system runs, {total - len(computed)} of {total} stages "
        "reused, "
        f"{len(computed)} computed, in {result.seconds:.1f} s; report in "
        f"{result.output / 'report.md'}"
    )
