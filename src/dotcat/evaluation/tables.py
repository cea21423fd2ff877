"""Render :class:`~dotcat.evaluation.metrics.EvalReport` objects as Markdown tables or JSON."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dotcat.evaluation.metrics import EvalReport, qid_sort_key
from dotcat.evaluation.significance import TEST_NAMES, Comparison

#: The mark of a value significantly different from the baseline's (after correction).
SIGNIFICANT_MARK = "†"  # dagger


def format_table(
    reports: Mapping[str, EvalReport] | EvalReport,
    measures: Sequence[str] | None = None,
    digits: int = 4,
    name: str = "run",
    show_queries: bool = False,
    comparisons: Mapping[str, Mapping[str, Comparison]] | None = None,
    baseline: str | None = None,
) -> str:
    """A Markdown table: one row per system, one column per measure.

    Args:
        reports: one report, or system name -> report (rows keep the mapping's order).
        measures: columns to show; default: every measure of the reports, in first-seen order.
        digits: decimals per value.
        name: the row label when a single report is given.
        show_queries: add a column with the number of evaluated queries.
        comparisons, baseline: :func:`compare_to_baseline`'s output and its baseline: values
            significantly different from the baseline's get :data:`SIGNIFICANT_MARK`.

    A measure a report lacks is shown as ``n/a``.
    """
    if isinstance(reports, EvalReport):
        reports = {name: reports}
    if measures is None:
        measures = dict.fromkeys(m for report in reports.values() for m in report.aggregate)
    columns = list(measures)
    header = ["system", *columns] + (["queries"] if show_queries else [])
    rows = []
    for system, report in reports.items():
        row = [_escape(system) + (" (baseline)" if system == baseline else "")]
        for m in columns:
            c = (comparisons or {}).get(system, {}).get(m)
            mark = SIGNIFICANT_MARK if c is not None and c.significant else ""
            row.append(_fmt(report.aggregate.get(m), digits) + mark)
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


def verdict(c: Comparison, digits: int = 4, where: str = "") -> str:
    """One comparison in one line: the difference, its interval, the decision and how it was
    reached (``where``: e.g. " on scifact")::

        hybrid vs bm25: nDCG@10 +0.0280 [-0.0220, +0.0790], not significant over 18 queries
        (97.5% interval, paired t-test, Holm over 2: p 0.310; won 8, tied 4, lost 6)
    """
    direction = "higher" if c.diff > 0 else "lower"
    decision = f"significantly {direction}" if c.significant else "not significant"
    holm = f", Holm over {c.family}" if c.family > 1 else ""
    p = "<0.001" if c.pvalue_holm < 0.001 else f"{c.pvalue_holm:.3f}"
    return (
        f"{c.system} vs {c.baseline}{where}: {c.measure} {_signed(c.diff, digits)} "
        f"[{_signed(c.low, digits)}, {_signed(c.high, digits)}], {decision} over {c.n} queries "
        f"({100 * c.confidence:.4g}% interval, {c.method.name}{holm}: p {p}; "
        f"won {c.wins}, tied {c.ties}, lost {c.losses})"
    )


def comparison_note(config: Any, family: str) -> str:
    """What the marks, verdicts and intervals mean; ``config`` has ``test``, ``alpha``,
    ``permutations``, ``bootstrap`` (a :class:`ComparisonConfig` or an experiment's), and
    ``family`` says what one Holm family is ("the 2 systems compared with it, per measure")."""
    method = {"randomisation": f" ({config.permutations} sign draws, seed {config.seed})",
              "bootstrap": f" ({config.bootstrap} resamples, seed {config.seed})"}  # fmt: skip
    return (
        f"{SIGNIFICANT_MARK} significant: p <= {config.alpha:g} after Holm's correction over "
        f"{family} (p as shown: Holm-adjusted, two-sided {TEST_NAMES[config.test]}"
        f"{method.get(config.test, '')}). Each interval is that test's, at the level Holm's "
        "procedure tests the comparison at, so it excludes 0 exactly when the comparison is "
        "significant. Won/tied/lost: queries where the system scores higher, the same, lower."
    )


def comparison_text(
    reports: Mapping[str, EvalReport],
    comparisons: Mapping[str, Mapping[str, Comparison]],
    baseline: str,
    config: Any,
    bullet: str = "",
) -> str:
    """The marked table, one :func:`verdict` per system and measure (each after ``bullet``:
    ``"- "`` makes a Markdown list), and the note: what ``dotcat eval --baseline`` prints and
    an experiment's report shows."""
    table = format_table(reports, reports[baseline].measures, show_queries=True,
                         comparisons=comparisons, baseline=baseline)  # fmt: skip
    lines = [bullet + verdict(c) for measures in comparisons.values() for c in measures.values()]
    others = len(reports) - 1
    family = f"the {others} system{'s' * (others != 1)} compared with {baseline}, per measure"
    return "\n".join([table, "", *lines, "", comparison_note(config, family)])


def comparison_to_json(
    comparisons: Mapping[str, Comparison], baseline: str, config: Any
) -> dict[str, Any]:
    """A JSON-ready dict of one system's comparisons (measure -> :class:`Comparison`);
    ``config`` as :func:`comparison_note`'s."""
    test = config.test
    return {
        "baseline": baseline,
        "test": test,
        "correction": "holm-bonferroni",
        "alpha": config.alpha,
        "permutations": config.permutations if test == "randomisation" else None,
        "bootstrap": config.bootstrap if test == "bootstrap" else None,
        "seed": config.seed if test != "t" else None,
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


def _fmt(value: float | None, digits: int) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:.{digits}f}"


def _signed(value: float, digits: int) -> str:
    """``value`` with its sign; more digits where rounding would show a bound beside 0 as 0
    (the side of 0 is what an interval says)."""
    value += 0.0  # -0.0 -> 0.0
    text = f"{value:+.{digits}f}"
    return f"{value:+.2g}" if value and not float(text) else text


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
