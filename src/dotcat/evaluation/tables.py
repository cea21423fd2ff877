"""Render :class:`~dotcat.evaluation.metrics.EvalReport` objects as Markdown tables or JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dotcat.evaluation.metrics import EvalReport, qid_sort_key
from dotcat.evaluation.significance import Comparison

#: The mark of a value significantly different from the baseline's (after correction).
SIGNIFICANT_MARK = "†"  # dagger
#: How reports name the paired tests.
TEST_NAMES = {"t": "paired t-test", "randomisation": "paired randomisation test"}


def format_table(
    reports: Mapping[str, EvalReport] | EvalReport,
    measures: Sequence[str] | None = None,
    digits: int = 4,
    name: str = "run",
    show_queries: bool = False,
) -> str:
    """A Markdown table: one row per system, one column per measure.

    Args:
        reports: one report, or system name -> report (rows keep the mapping's order).
        measures: columns to show; default: every measure of the reports, in first-seen order.
        digits: decimals per value.
        name: the row label when a single report is given.
        show_queries: add a column with the number of evaluated queries.

    A measure a report lacks is shown as ``n/a``.
    """
    if isinstance(reports, EvalReport):
        reports = {name: reports}
    columns = list(measures) if measures is not None else _all_measures(reports.values())
    header = ["system", *columns] + (["queries"] if show_queries else [])
    rows = []
    for system, report in reports.items():
        row = [_escape(system)]
        row += [_fmt(report.aggregate.get(m), digits) for m in columns]
        if show_queries:
            row.append(str(report.n_queries))
        rows.append(row)
    return markdown_table(header, rows)


def format_per_query(
    report: EvalReport, measures: Sequence[str] | None = None, digits: int = 4
) -> str:
    """A Markdown table of per-query values (numeric ids in numeric order), ending in ``all``.

    Queries that had no results in the run (scored 0) are marked with ``*``.
    """
    columns = list(measures) if measures is not None else report.measures
    missing = set(report.missing_queries)
    rows = []
    for qid in sorted(report.per_query, key=qid_sort_key):
        label = _escape(qid) + (" *" if qid in missing else "")
        rows.append([label, *(_fmt(report.per_query[qid].get(m), digits) for m in columns)])
    rows.append(["all", *(_fmt(report.aggregate.get(m), digits) for m in columns)])
    return markdown_table(["query", *columns], rows)


def format_comparison_table(
    reports: Mapping[str, EvalReport],
    comparisons: Mapping[str, Mapping[str, Comparison]],
    baseline: str,
    measures: Sequence[str] | None = None,
    digits: int = 4,
    show_queries: bool = True,
) -> str:
    """A Markdown table of systems against a baseline (:func:`compare_to_baseline`'s output).

    Per measure four columns: the value (marked with :data:`SIGNIFICANT_MARK` where the
    corrected p-value is below alpha), ``Δ`` (the difference to the baseline), ``p`` (the
    Holm-corrected p-value) and ``W/T/L`` (queries won, tied, lost against the baseline).
    The baseline's row shows its values only; :func:`comparison_note` explains the marks.
    """
    columns = list(measures) if measures is not None else reports[baseline].measures
    header = ["system"]
    for measure in columns:
        header += [measure, "Δ", "p", "W/T/L"]
    header += ["queries"] if show_queries else []
    rows = []
    for system, report in reports.items():
        label = _escape(system) + (" (baseline)" if system == baseline else "")
        row = [label]
        for measure in columns:
            value = _fmt(report.aggregate.get(measure), digits)
            c = comparisons.get(system, {}).get(measure)
            if c is None:
                row += [value, "", "", ""]
                continue
            mark = SIGNIFICANT_MARK if c.significant else ""
            row += [
                value + mark,
                f"{c.diff:+.{digits}f}",
                _fmt_p(c.pvalue_holm),
                f"{c.wins}/{c.ties}/{c.losses}",
            ]
        if show_queries:
            row.append(str(report.n_queries))
        rows.append(row)
    return markdown_table(header, rows)


def comparison_note(
    baseline: str, n_systems: int, test: str, alpha: float, permutations: int | None = None
) -> str:
    """The lines under a :func:`format_comparison_table` saying what its marks mean."""
    name = TEST_NAMES.get(test, test)
    if test == "randomisation" and permutations:
        name += f" ({permutations} permutations)"
    others = max(n_systems - 1, 0)
    return (
        f"{SIGNIFICANT_MARK} significantly different from the baseline {baseline} "
        f"(p < {alpha:g} after Holm-Bonferroni correction over the {others} system"
        f"{'' if others == 1 else 's'} compared with it, per measure). "
        f"Δ: difference to the baseline; p: two-sided {name} p-value, Holm-corrected; "
        "W/T/L: queries where the system scores higher / the same / lower than the baseline."
    )


def comparison_to_json(
    comparisons: Mapping[str, Comparison],
    baseline: str,
    test: str,
    alpha: float,
    permutations: int | None = None,
    seed: int | None = None,
) -> dict[str, Any]:
    """A JSON-ready dict of one system's comparisons (measure -> :class:`Comparison`)."""
    return {
        "baseline": baseline,
        "test": test,
        "correction": "holm-bonferroni",
        "alpha": alpha,
        "permutations": permutations if test == "randomisation" else None,
        "seed": seed if test == "randomisation" else None,
        "measures": {m: c.to_json() for m, c in comparisons.items()},
    }


def to_json(report: EvalReport) -> dict[str, Any]:
    """A JSON-ready dict of the report (NaN becomes ``None``)."""
    return {
        "aggregate": {m: _json_float(v) for m, v in report.aggregate.items()},
        "n_queries": report.n_queries,
        "missing_queries": list(report.missing_queries),
        "unknown_queries": list(report.unknown_queries),
        "unknown_docs": report.unknown_docs,
        "unjudged_queries": list(report.unjudged_queries),
        "per_query": {
            q: {m: _json_float(v) for m, v in values.items()}
            for q, values in report.per_query.items()
        },
    }


def _all_measures(reports) -> list[str]:
    seen: list[str] = []
    for report in reports:
        for m in report.aggregate:
            if m not in seen:
                seen.append(m)
    return seen


def _fmt(value: float | None, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def _fmt_p(p: float) -> str:
    return "<0.001" if p < 0.001 else f"{p:.3f}"


def _json_float(value: float) -> float | None:
    return None if math.isnan(value) else value


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def markdown_table(header: list[str], rows: list[list[str]], left: int = 1) -> str:
    """A Markdown table, padded: the first ``left`` columns (names, descriptions)
    left-aligned, the others (figures) right-aligned."""
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    rule = [
        *("-" * max(w, 3) for w in widths[:left]),
        *(("-" * max(w - 1, 3)) + ":" for w in widths[left:]),
    ]
    widths = [max(w, len(r)) for w, r in zip(widths, rule, strict=True)]

    def line(cells: list[str]) -> str:
        padded = [c.ljust(w) for c, w in zip(cells[:left], widths[:left], strict=True)]
        padded += [c.rjust(w) for c, w in zip(cells[left:], widths[left:], strict=True)]
        return "| " + " | ".join(padded) + " |"

    return "\n".join([line(header), line(rule), *(line(r) for r in rows)])
