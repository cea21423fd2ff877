"""Render :class:`~dotcat.evaluation.metrics.EvalReport` objects as Markdown tables or JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dotcat.evaluation.metrics import EvalReport, qid_sort_key


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
    return _markdown(header, rows)


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
    return _markdown(["query", *columns], rows)


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


def _json_float(value: float) -> float | None:
    return None if math.isnan(value) else value


def _escape(text: str) -> str:
    return str(text).replace("|", "\\|")


def _markdown(header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    # The first column (names) is left-aligned, figures right-aligned.
    rule = [
        "-" * widths[0],
        *(("-" * max(w - 1, 3)) + ":" for w in widths[1:]),
    ]
    widths = [max(w, len(r)) for w, r in zip(widths, rule, strict=True)]

    def line(cells: list[str]) -> str:
        padded = [cells[0].ljust(widths[0])]
        padded += [c.rjust(w) for c, w in zip(cells[1:], widths[1:], strict=True)]
        return "| " + " | ".join(padded) + " |"

    return "\n".join([line(header), line(rule), *(line(r) for r in rows)])
