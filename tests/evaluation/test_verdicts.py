"""One verdict per comparison: over random per-query scores (hypothesis), every method's
interval excludes 0 exactly when the comparison is significant after Holm's correction, in the
comparisons, in the line a person reads and in the table's marks; the line's wording."""

from __future__ import annotations

import re

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dotcat.evaluation import (
    EvalReport,
    compare_to_baseline,
    comparison_text,
    format_table,
    holm_across,
    verdict,
)
from dotcat.evaluation.significance import TESTS, ComparisonConfig
from dotcat.evaluation.tables import SIGNIFICANT_MARK

#: Few draws: the property holds for any number, and hypothesis runs many examples.
DRAWS = {"t": {}, "randomisation": {"permutations": 199}, "bootstrap": {"bootstrap": 199}}
MEASURES = ("nDCG@10", "RR@10")
#: A verdict line: the difference, the interval and the decision (tables.verdict).
LINE = re.compile(
    r"^(?P<system>\S+) vs (?P<baseline>\S+)(?: on \S+)?: (?P<measure>\S+) (?P<diff>\S+) "
    r"\[(?P<low>\S+), (?P<high>\S+)\], (?P<decision>not significant|significantly higher|"
    r"significantly lower) over (?P<n>\d+) queries \((?P<confidence>[\d.]+)% interval, "
)


def _values(draw, n: int, grid: int | None) -> np.ndarray:
    element = st.floats(0, 1) if grid is None else st.integers(0, grid).map(lambda i: i / grid)
    return np.array(draw(st.lists(element, min_size=n, max_size=n)))


@st.composite
def evaluations(draw, datasets: int = 1) -> list[dict[str, EvalReport]]:
    """Reports of a baseline and 1-4 systems on 2-25 queries, per dataset: scores on a grid
    (1: binary, 4, 10: many ties) or any in [0, 1]; each system shifted from the baseline by
    its own amount, so that some differences are significant and some not."""
    systems = draw(st.integers(2, 5))
    shifts = [0.0] + [draw(st.floats(-0.5, 0.5)) for _ in range(systems - 1)]
    out = []
    for _ in range(datasets):
        n, grid = draw(st.integers(2, 25)), draw(st.sampled_from([None, 1, 4, 10]))
        per_query: dict[str, dict[str, dict[str, float]]] = {f"s{i}": {} for i in range(systems)}
        for measure in MEASURES:
            base = _values(draw, n, grid)
            for i, shift in enumerate(shifts):
                noise = _values(draw, n, grid) - 0.5 if i else 0.0
                v = np.clip(base + shift + 0.4 * noise, 0, 1)
                v = np.round(v * grid) / grid if grid else v
                for q, x in enumerate(v):
                    per_query[f"s{i}"].setdefault(f"q{q}", {})[measure] = float(x)
        out.append({name: EvalReport({m: float(np.mean([v[m] for v in pq.values()]))
                                      for m in MEASURES}, pq, n)
                    for name, pq in per_query.items()})  # fmt: skip
    return out


def _number(text: str) -> float:
    return float(text.replace("inf", "Infinity"))


def assert_one_verdict(comparisons, alpha: float) -> None:
    """Every comparison's decision, adjusted p-value, interval and line say the same."""
    for measures in comparisons.values():
        for c in measures.values():
            inside = c.low <= 0.0 <= c.high
            assert c.significant == (c.pvalue_holm <= alpha) == (not inside), c
            assert c.low <= c.diff <= c.high or c.low == c.high == c.diff or not inside
            # The method's own interval at its step's level agrees but for rounding (which
            # only moves a bound lying within 1e-9 of 0 to its side).
            k = round(alpha / (1.0 - c.confidence))
            low, high = c.method.bounds(k, alpha)
            if c.significant == (low <= 0.0 <= high):
                assert min(abs(low), abs(high)) < 1e-9, (c, low, high)
            shown = LINE.match(verdict(c))
            assert shown is not None, verdict(c)
            low, high = _number(shown["low"]), _number(shown["high"])
            assert (
                (shown["decision"] != "not significant") == c.significant == (low > 0 or high < 0)
            ), verdict(c)


@pytest.mark.parametrize("test", TESTS)
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(found=evaluations(), alpha=st.sampled_from([0.05, 0.2]))
def test_an_interval_excludes_0_exactly_when_the_comparison_is_significant(test, found, alpha):
    reports = found[0]
    comparisons = compare_to_baseline(reports, "s0", alpha=alpha, test=test, **DRAWS[test])
    assert_one_verdict(comparisons, alpha)
    table = format_table(reports, show_queries=True, comparisons=comparisons, baseline="s0")
    for line in table.splitlines()[2:]:
        cells = [c.strip() for c in line.strip("| ").split("|")]
        for measure, cell in zip(MEASURES, cells[1:], strict=False):
            c = comparisons.get(cells[0], {}).get(measure)
            assert cell.endswith(SIGNIFICANT_MARK) == (c is not None and c.significant)


@pytest.mark.parametrize("test", TESTS)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(found=evaluations(datasets=3))
def test_holm_across_datasets_keeps_one_verdict(test, found):
    raw = {f"d{i}": compare_to_baseline(r, "s0", test=test, **DRAWS[test])
           for i, r in enumerate(found)}  # fmt: skip
    across = holm_across(raw)
    for dataset in across.values():
        assert_one_verdict(dataset, 0.05)
        for measures in dataset.values():
            assert all(c.family == 3 * (len(found[0]) - 1) for c in measures.values())


def _report(values) -> EvalReport:
    per_query = {f"q{i}": {"nDCG@10": float(v)} for i, v in enumerate(values)}
    return EvalReport({"nDCG@10": float(np.mean(values))}, per_query, len(values))


def test_the_line_reads_as_one_verdict():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.2, 0.8, 18)
    reports = {"bm25": _report(base), "hybrid": _report(base + rng.normal(0.1, 0.01, 18)),
               "dense": _report(base + np.resize([0.06, -0.05], 18))}  # fmt: skip
    config = ComparisonConfig()
    found = compare_to_baseline(reports, "bm25")
    hybrid, dense = found["hybrid"]["nDCG@10"], found["dense"]["nDCG@10"]
    assert hybrid.significant and not dense.significant
    assert verdict(hybrid) == (
        f"hybrid vs bm25: nDCG@10 +{hybrid.diff:.4f} [+{hybrid.low:.4f}, +{hybrid.high:.4f}], "
        "significantly higher over 18 queries (97.5% interval, paired t-test, Holm over 2: "
        f"p <0.001; won {hybrid.wins}, tied 0, lost 0)"
    )
    assert verdict(dense).startswith(f"dense vs bm25: nDCG@10 {dense.diff:+.4f} [")
    assert ", not significant over 18 queries (" in verdict(dense)
    assert f"Holm over 2: p {dense.pvalue_holm:.3f}; won {dense.wins}" in verdict(dense)
    text = comparison_text(reports, found, "bm25", config).splitlines()
    assert text[:2] == ["| system          | nDCG@10 | queries |",
                        "| --------------- | ------: | ------: |"]  # fmt: skip
    assert text[2].startswith("| bm25 (baseline) |") and text[3].endswith("† |      18 |")
    assert text[6:8] == [verdict(hybrid), verdict(dense)]
    assert "Holm's correction over the 2 systems compared with bm25, per measure" in text[-1]


def test_a_bound_beside_0_shows_its_side():
    from dataclasses import replace

    c = compare_to_baseline({"a": _report([0.1, 0.2, 0.3]), "b": _report([0.2, 0.2, 0.4])},
                            "a")["b"]["nDCG@10"]  # fmt: skip
    line = verdict(replace(c, low=0.00002, high=0.1, significant=True))
    assert "[+2e-05, +0.1000], significantly higher" in line
    assert "[-2e-05, +0.1000], not significant" in verdict(replace(c, low=-0.00002, high=0.1))
    assert "[-inf, +inf]" in verdict(replace(c, low=-np.inf, high=np.inf))
