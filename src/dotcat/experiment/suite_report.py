"""The report folder of an experiment over several datasets (``[[datasets]]``).

``report.md``: per measure, the systems x datasets table with each system's mean over the datasets,
daggers where a system differs from the baseline on a dataset (paired test on that dataset's
queries, Holm-corrected over every cell of the table); one verdict per system and dataset on the
first measure (:func:`dotcat.evaluation.tables.verdict`); one summary plot; each system's stages and
times per dataset; the configuration. ``results.json``: the same for a program, with every per-query
value. Each dataset's runs are in ``runs/<dataset>/<system>.trec``.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dotcat.evaluation import comparison_note, verdict
from dotcat.evaluation.plots import datasets_plot
from dotcat.evaluation.tables import SIGNIFICANT_MARK, markdown_table
from dotcat.experiment.config import slug
from dotcat.experiment.report import (
    closing_lines,
    header_lines,
    run_json,
    system_json,
    timing_row,
    write_outputs,
)
from dotcat.experiment.results import SuiteResult


def write_suite_report(
    result: SuiteResult,
    source_text: str | None,
    source_name: str | None,
    only: str | None,
    started: float,
) -> None:
    """Write the summary plot, ``results.json`` and ``report.md`` into ``result.output``."""
    out = result.output
    out.mkdir(parents=True, exist_ok=True)
    measure = result.config.measures[0]
    plot = summary_plot(result, measure, out / f"summary_{slug(measure)}.png")
    result.files[plot.name] = plot
    seconds = time.perf_counter() - started
    text = suite_markdown(result, source_text, source_name, only, seconds, plot)
    write_outputs(result, suite_json(result, source_name, only, seconds), text)


def summary_plot(result: SuiteResult, measure: str, path: Path) -> Path:
    """``measure`` of every system on every dataset run, and the means, as grouped bars."""
    names = [d.name for d in result.datasets if d.complete]
    values, marks = {}, {}
    for system in _systems(result):
        values[system] = {n: result.value(system, n, measure) for n in names}
        values[system]["mean"] = result.mean(system, measure)[0]
        marks[system] = {n: _significant(result, n, system, measure) for n in names}
    return datasets_plot(values, measure, path, marks)


def _systems(result: SuiteResult) -> list[str]:
    return [s.name for s in result.config.systems]


def _significant(result: SuiteResult, dataset: str, system: str, measure: str) -> bool:
    comparison = result.comparisons.get(dataset, {}).get(system, {}).get(measure)
    return comparison is not None and comparison.significant


def measure_table(result: SuiteResult, measure: str, digits: int = 4) -> str:
    """Systems x datasets (and the mean) of one measure, daggers where significant."""
    names = [d.name for d in result.datasets]
    rows = []
    for system in _systems(result):
        label = system + (" (baseline)" if system == result.config.baseline else "")
        row = [label]
        for name in names:
            value = result.value(system, name, measure)
            mark = SIGNIFICANT_MARK if _significant(result, name, system, measure) else ""
            row.append("-" if value is None else f"{value:.{digits}f}{mark}")
        mean, count = result.mean(system, measure)
        partial = f" ({count} of {len(names)})" if count < len(names) else ""
        row.append("-" if mean is None else f"{mean:.{digits}f}{partial}")
        rows.append(row)
    return markdown_table(["system", *names, "mean"], rows)


def verdicts(result: SuiteResult, measure: str) -> list[str]:
    """One verdict per system and dataset against the baseline on ``measure``, as a Markdown
    list."""
    return [
        "- " + verdict(result.comparisons[d.name][system][measure], where=f" on {d.name}")
        for system in _systems(result)
        if system != result.config.baseline
        for d in result.datasets
        if d.complete
    ]


def table_note(result: SuiteResult) -> str:
    """What the marks, the verdicts and the mean column mean."""
    config = result.config
    cells = (len(config.systems) - 1) * sum(d.complete for d in result.datasets)
    family = (f"the {cells} system x dataset cells of the table, per measure (each on that "
              f"dataset's queries, against the baseline {config.baseline})")  # fmt: skip
    return (
        f"{comparison_note(config, family)} mean: the unweighted mean of the per-dataset "
        "figures (as BEIR averages its datasets)."
    )


def suite_tables(result: SuiteResult) -> str:
    """The tables of every measure, the first measure's verdicts and the note, as the command
    line prints them."""
    parts = []
    for measure in result.config.measures:
        parts += [f"{measure}:", measure_table(result, measure), ""]
    verdicts_ = verdicts(result, result.config.measures[0])
    return "\n".join([*parts, *verdicts_, *([""] if verdicts_ else []), table_note(result)])


def suite_markdown(
    result: SuiteResult,
    source_text: str | None,
    source_name: str | None,
    only: str | None,
    seconds: float,
    plot: Path,
) -> str:
    """``report.md`` (module docstring)."""
    config = result.config
    lines = [
        *header_lines(result, source_name, f" --only {only}" if only else ""),
        f"Top {config.k} per query; measures by ir-measures.",
        "",
        "## Datasets",
        "",
        _datasets_table(result),
        "",
    ]
    for i, measure in enumerate(config.measures):
        lines += [f"## {measure}", "", measure_table(result, measure), ""]
        if i == 0:
            lines += [table_note(result), ""]
            notes = [
                f"- {d.name}, {system}: {note}"
                for d in result.datasets
                for system, report in d.reports.items()
                for note in report.notes()
            ]
            lines += [*notes, ""] if notes else []
            if len(config.systems) > 1:
                lines += [f"Against the baseline ({measure}):", "", *verdicts(result, measure), ""]
    lines += ["## Plot", "", f"![{plot.stem}]({plot.name})", ""]
    lines += ["## Systems and timings", "", _timings_table(result), ""]
    return "\n".join([*lines, *closing_lines(result, source_text, seconds)])


def _datasets_table(result: SuiteResult) -> str:
    rows = []
    for d in result.datasets:
        data = d.dataset
        if not d.complete:
            status = "not run: some run is not in the cache (run without --only)"
        elif d.computed_here:
            status = "run"
        else:
            status = "from the cache (--only another dataset)"
        queries = str(len(data.queries)) if d.complete else "-"
        rows.append([d.name, f"`{data.given}`", data.split, status, queries])
    return markdown_table(["dataset", "path", "split", "this run", "queries"], rows, left=4)


def _timings_table(result: SuiteResult) -> str:
    header = ["dataset", "system", "what", "index", "first stage", "re-ranking", "this run"]
    rows = [[d.name, *timing_row(o)] for d in result.datasets for o in d.outcomes or ()]
    return markdown_table(header, rows, left=3)


def suite_json(
    result: SuiteResult, source_name: str | None, only: str | None, seconds: float
) -> dict[str, Any]:
    """The machine-readable record (module docstring)."""
    config = result.config
    datasets = {}
    for d in result.datasets:
        datasets[d.name] = {
            "path": d.dataset.given,
            "directory": str(d.dataset.path),
            "split": d.dataset.split,
            "queries": len(d.dataset.queries),
            "fingerprint": d.dataset.fingerprint,
            "complete": d.complete,
            "computed_here": d.computed_here,
            "systems": {o.name: _system_json(result, d, o) for o in d.outcomes or ()},
        }
    return {
        "format": "dotcat-experiment-datasets",
        "format_version": 1,
        **run_json(result, source_name),
        "only": only,
        "baseline": config.baseline,
        "datasets": datasets,
        "table": {
            measure: {
                system: {
                    **{d.name: result.value(system, d.name, measure) for d in result.datasets},
                    "mean": result.mean(system, measure)[0],
                }
                for system in _systems(result)
            }
            for measure in config.measures
        },
        "computed": [f"{s.kind} {Path(s.path).name}" for s in result.computed],
        "seconds": round(seconds, 3),
    }


def _system_json(result: SuiteResult, d, outcome) -> dict[str, Any]:
    vs = result.comparisons.get(d.name, {}).get(outcome.name)
    run = f"runs/{slug(d.name)}/{d.run_files[outcome.name].name}"
    out = system_json(result, outcome, run, d.reports[outcome.name], vs)
    if vs is not None:
        out["vs_baseline"] |= {"correction": "holm-bonferroni over the systems x datasets table"}
    return out
