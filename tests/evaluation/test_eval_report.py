"""Markdown tables, JSON and the paired t-test of dotcat.evaluation."""

from __future__ import annotations

import json
import math
import statistics

import pytest

from dotcat.errors import DotcatError
from dotcat.evaluation import EvalReport, format_per_query, format_table, paired_ttest, to_json


def _report(values: dict[str, float], measure: str = "nDCG@10", missing=()) -> EvalReport:
    return EvalReport(
        aggregate={measure: sum(values.values()) / len(values)},
        per_query={q: {measure: v} for q, v in values.items()},
        n_queries=len(values),
        missing_queries=list(missing),
    )


def test_format_table_rows_are_systems_columns_measures():
    bm25 = EvalReport({"nDCG@10": 0.67621, "RR@10": 0.5}, {}, n_queries=300)
    dense = EvalReport({"nDCG@10": 0.645}, {}, n_queries=300)
    lines = format_table({"BM25": bm25, "dense|mini": dense}, show_queries=True).splitlines()
    assert [c.strip() for c in lines[0].strip("|").split("|")] == [
        "system",
        "nDCG@10",
        "RR@10",
        "queries",
    ]
    assert lines[1].replace(" ", "").startswith("|---")
    assert [c.strip() for c in lines[2].strip("|").split("|")] == [
        "BM25",
        "0.6762",
        "0.5000",
        "300",
    ]
    assert "dense\\|mini" in lines[3] and "n/a" in lines[3]
    assert len({len(line) for line in lines}) == 1  # padded columns


def test_format_table_single_report_and_measure_selection():
    table = format_table(_report({"1": 0.25, "2": 0.75}), measures=["nDCG@10"], name="BM25")
    assert "| BM25   |  0.5000 |" in table


def test_format_per_query_marks_missing_and_ends_with_all():
    table = format_per_query(_report({"10": 0.5, "2": 0.0, "1": 1.0}, missing=["2"]))
    rows = [line.split("|")[1].strip() for line in table.splitlines()[2:]]
    assert rows == ["1", "2 *", "10", "all"]
    assert "0.5000" in table.splitlines()[-1]


def test_to_json_is_serialisable():
    report = _report({"1": 0.25, "2": float("nan")})
    data = json.loads(json.dumps(to_json(report)))
    assert data["per_query"]["1"]["nDCG@10"] == 0.25
    assert data["per_query"]["2"]["nDCG@10"] is None
    assert data["n_queries"] == 2


def test_paired_ttest_matches_the_formula():
    a = {"1": 0.1, "2": 0.4, "3": 0.3, "4": 0.8}
    b = {"1": 0.3, "2": 0.5, "3": 0.2, "4": 1.0}
    d = [b[q] - a[q] for q in a]
    t = statistics.mean(d) / (statistics.stdev(d) / math.sqrt(len(d)))
    result = paired_ttest(_report(a), _report(b), "ndcg_cut_10")
    assert result.measure == "nDCG@10" and result.n == 4
    assert result.statistic == pytest.approx(t)
    assert result.diff == pytest.approx(statistics.mean(d))
    assert 0 < result.pvalue < 1


def test_paired_ttest_identical_runs_and_mismatched_queries():
    a = _report({"1": 0.1, "2": 0.4})
    assert paired_ttest(a, a, "nDCG@10").pvalue == 1.0
    with pytest.raises(DotcatError, match="same queries"):
        paired_ttest(a, _report({"1": 0.1, "3": 0.4}), "nDCG@10")
    with pytest.raises(DotcatError, match="RR@10"):
        paired_ttest(a, a, "RR@10")
