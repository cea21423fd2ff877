"""The report folder of an experiment: ``results.json``, ``report.md`` and the plots.

``results.json`` holds everything a program needs (per system: aggregate and per-query
values, the comparison with the baseline, the stages with their fingerprints, timings and
whether they were reused; the recall curves; the configuration; the machine).
``report.md`` is the same for a person: the table with significance marks and one verdict per
comparison (:func:`dotcat.evaluation.tables.verdict`), the plots, the
systems with their timings, the configuration file.
"""

from __future__ import annotations

import datetime as dt
import sys
import time
from pathlib import Path
from typing import Any

from dotcat.evaluation import comparison_text, comparison_to_json
from dotcat.evaluation.plots import per_query_difference_plot, recall_plot
from dotcat.evaluation.tables import markdown_table, to_json
from dotcat.experiment.config import fuses, slug
from dotcat.experiment.results import ExperimentResult, SuiteResult, SystemOutcome
from dotcat.files import write_json, write_text
from dotcat.search.feedback import RM3, Rocchio
from dotcat.version import __version__

RESULTS_NAME = "results.json"
REPORT_NAME = "report.md"
RECALL_PLOT = "recall.png"


def plot_measure(result: ExperimentResult) -> str:
    """The measure of the per-query plot: nDCG@10 when evaluated, else the first measure."""
    measures = next(iter(result.reports.values())).measures
    return "nDCG@10" if "nDCG@10" in measures else measures[0]


def comparison_table(result: ExperimentResult) -> str:
    """The marked table, one verdict per comparison with the baseline, and the note."""
    config = result.config
    return comparison_text(result.reports, result.comparisons, config.baseline, config, "- ")


def write_report(
    result: ExperimentResult, source_text: str | None, source_name: str | None, started: float
) -> None:
    """Write the plots, ``results.json`` and ``report.md`` into ``result.output``."""
    out = result.output
    measure = plot_measure(result)
    per_query = per_query_difference_plot(
        result.reports, result.config.baseline, measure, out / f"per_query_{slug(measure)}.png"
    )
    recall = recall_plot(result.recall, out / RECALL_PLOT)
    result.files |= {per_query.name: per_query, recall.name: recall}
    seconds = time.perf_counter() - started
    text = report_markdown(result, source_text, source_name, seconds, [per_query, recall])
    write_outputs(result, results_json(result, source_name, seconds), text)


def write_outputs(result: ExperimentResult | SuiteResult, record: dict, text: str) -> None:
    """``results.json`` and ``report.md`` into ``result.output``, named in ``result.files``."""
    out = result.output
    write_json(out / RESULTS_NAME, record)
    write_text(out / REPORT_NAME, [text])  # atomic: a crash leaves the old report whole
    result.files |= {RESULTS_NAME: out / RESULTS_NAME, REPORT_NAME: out / REPORT_NAME}


def results_json(result: ExperimentResult, source_name: str | None, seconds: float) -> dict:
    """The machine-readable record of an experiment (see the module docstring)."""
    config = result.config
    systems = {}
    for o in result.outcomes:
        run, vs = f"runs/{result.run_files[o.name].name}", result.comparisons.get(o.name)
        systems[o.name] = system_json(result, o, run, result.reports[o.name], vs)
    return {
        "format": "dotcat-experiment",
        "format_version": 1,
        **run_json(result, source_name),
        "dataset": {
            "path": str(result.dataset.path),
            "split": result.dataset.split,
            "queries": len(result.dataset.queries),
            "fingerprint": result.dataset.fingerprint,
        },
        "baseline": config.baseline,
        "systems": systems,
        "recall_curve": {
            name: {"depths": list(curve), "recall": list(curve.values())}
            for name, curve in result.recall.items()
        },
        "computed": [f"{s.kind} {Path(s.path).name}" for s in result.computed],
        "seconds": round(seconds, 3),
    }


def system_json(
    result: ExperimentResult | SuiteResult, outcome: SystemOutcome, run: str, report: Any, vs: Any
) -> dict:
    """A system's entry of ``results.json``: its run, settings, stages, measures and its
    comparison ``vs`` with the baseline."""
    config = result.config
    return {
        "run": run,
        "settings": outcome.config.model_dump(exclude_defaults=True),
        "stages": [stage.to_json() for stage in outcome.stages],
        "reused": outcome.reused,
        "seconds_this_run": round(outcome.seconds, 3),
        **to_json(report),
        "notes": report.notes(),
        "vs_baseline": None if vs is None else comparison_to_json(vs, config.baseline, config),
    }


def run_json(result: ExperimentResult | SuiteResult, source_name: str | None) -> dict:
    """When and where an experiment ran, and from which file and settings."""
    env = result.environment
    return {
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "config_file": source_name,
        "config": result.config.model_dump(),
        "dotcat_version": __version__,
        "torch_version": torch_version(),
        "machine": env.machine,
        "device": env.device,
        "precision": env.precision,
    }


def torch_version() -> str | None:
    torch = sys.modules.get("torch")
    return getattr(torch, "__version__", None)


def report_markdown(
    result: ExperimentResult,
    source_text: str | None,
    source_name: str | None,
    seconds: float,
    plots: list[Path],
) -> str:
    """``report.md``: header, table, plots, systems and timings, configuration."""
    config, data = result.config, result.dataset
    lines = [
        *header_lines(result, source_name),
        f"Dataset: `{data.path}`, split `{data.split}`: {len(data.queries)} queries; "
        f"top {config.k} per query; measures by ir-measures.",
        "",
        "## Results",
        "",
        comparison_table(result),
        "",
    ]
    notes = [f"- {n}: {note}" for n, report in result.reports.items() for note in report.notes()]
    lines += [*notes, ""] if notes else []
    lines += ["## Plots", ""]
    lines += [f"![{p.stem}]({p.name})" for p in plots]
    lines += ["", "## Systems and timings", "", _timings_table(result), ""]
    return "\n".join([*lines, *closing_lines(result, source_text, seconds)])


def header_lines(
    result: ExperimentResult | SuiteResult, source_name: str | None, options: str = ""
) -> list[str]:
    """The title, the command, the date and the machine the models ran on."""
    config, env = result.config, result.environment
    machine = env.machine
    title = config.name or (Path(source_name).stem if source_name else "experiment")
    return [
        f"# Experiment: {title}",
        "",
        f"Command: `dotcat experiment {source_name or 'CONFIG'}{options}`",
        f"Date: {dt.datetime.now(dt.UTC):%Y-%m-%d %H:%M} UTC. "
        f"Machine: {machine['cpu']}; flags: {' '.join(machine['cpu_flags']) or 'none of note'}; "
        f"{machine['cores']} cores; models at {env.precision} on {env.device} "
        f"(precision {config.precision}); dotcat {__version__}, torch {torch_version()}.",
    ]


def closing_lines(
    result: ExperimentResult | SuiteResult, source_text: str | None, seconds: float
) -> list[str]:
    """What the timings mean and how many stages this run computed; the configuration."""
    total = sum(len(o.stages) for o in result.outcomes)
    computed = len(result.computed)
    config = result.config
    cache = config.cache if config.cache is not None else str(result.output / "cache")
    lines = [
        "Stage times are those of computing the stage, when it was computed; *reused* marks "
        f"stages this run found in the cache (`{cache}`), by fingerprint. "
        f"This run: {computed} of {total} stages computed, {seconds:.1f} s in all.",
        "",
    ]
    if source_text is not None:
        lines += ["## Configuration", "", "```toml", source_text.rstrip(), "```", ""]
    return lines


def _timings_table(result: ExperimentResult) -> str:
    header = ["system", "what", "index", "first stage", "re-ranking", "this run"]
    return markdown_table(header, [timing_row(o) for o in result.outcomes], left=2)


def timing_row(outcome: SystemOutcome) -> list[str]:
    """A system's row of the timings table: what it is, its stages' times, this run's."""
    stages = {s.kind: s for s in outcome.stages}
    index = "existing" if outcome.config.index else stage_time(stages.get("index"))
    times = [stage_time(stages.get(kind)) for kind in ("first_stage", "rerank")]
    return [outcome.name, describe_system(outcome), index, *times, f"{outcome.seconds:.1f} s"]


def stage_time(stage: Any) -> str:
    if stage is None:
        return "-"
    return f"{stage.seconds:.1f} s" + (" (reused)" if stage.reused else "")


def describe_system(outcome: SystemOutcome) -> str:
    """One line: the first stage, where it comes from, and the re-ranking."""
    s = outcome.config
    if s.first_stage == "bm25" and s.index is None:
        text = f"BM25 over the corpus (k1 {s.k1:g}, b {s.b:g})"
    else:
        source = f"index `{s.index}`" if s.index else f"model `{s.model}` (index built)"
        text = f"{s.first_stage} over {source}"
        if fuses(s.first_stage) and s.fusion != "auto":
            weight = f" {s.fusion_weight:g}" if s.fusion_weight is not None else ""
            text += f", fusion {s.fusion}{weight}"
    feedback = s.feedback
    if "fb_docs" in feedback:
        text += ", " + RM3(s.fb_docs, s.fb_terms, s.original_query_weight).describe()
    if "rocchio_docs" in feedback:
        text += ", " + Rocchio(s.rocchio_docs, s.rocchio_alpha, s.rocchio_beta).describe()
    rerank = next((st for st in outcome.stages if st.kind == "rerank"), None)
    if rerank is not None:
        alpha = rerank.details.get("interpolation")
        source = rerank.details.get("interpolation_source", "")
        mix = f", interpolation {alpha:g} ({source})" if alpha is not None else ""
        text += f" -> BERT_CAT `{s.rerank}` top {s.depth}{mix}"
    return text
