"""Recall curves and the PNG plots of dotcat.evaluation."""

from __future__ import annotations

import matplotlib.image
import pytest

from dotcat.errors import DotcatError
from dotcat.evaluation import EvalReport, evaluate
from dotcat.evaluation.metrics import recall_curve
from dotcat.evaluation.plots import (
    DPI,
    PANEL_INCHES,
    WIDTH_INCHES,
    per_query_difference_plot,
    recall_plot,
)

QRELS = {"q1": {"a": 1, "b": 1}, "q2": {"c": 2}, "q3": {"d": 1}}
RUN = {"q1": [("x", 3.0), ("a", 2.0), ("b", 1.0)], "q2": [("c", 5.0)]}  # q3 unanswered


def test_recall_curve_is_ir_measures_recall_at_each_depth():
    curve = recall_curve(RUN, QRELS, [3, 1, 2])
    assert list(curve) == [1, 2, 3]
    report = evaluate(RUN, QRELS, ["R@1", "R@2", "R@3"])
    assert curve == {d: report.aggregate[f"R@{d}"] for d in (1, 2, 3)}
    assert curve[1] == pytest.approx((0 + 1 + 0) / 3)  # q3 has no results: 0
    assert curve[3] == pytest.approx((1 + 1 + 0) / 3)
    with pytest.raises(DotcatError):
        recall_curve(RUN, QRELS, [0])


def _report(values: list[float]) -> EvalReport:
    per_query = {f"q{i}": {"nDCG@10": v} for i, v in enumerate(values)}
    return EvalReport({"nDCG@10": sum(values) / len(values)}, per_query, len(values))


def test_per_query_plot_is_a_png_with_a_panel_per_system(tmp_path):
    reports = {
        "base": _report([0.5, 0.2, 0.9, 0.4]),
        "better": _report([0.7, 0.3, 0.9, 0.6]),
        "worse": _report([0.1, 0.2, 0.8, 0.0]),
    }
    path = per_query_difference_plot(reports, "base", "nDCG@10", tmp_path / "pq.png")
    image = matplotlib.image.imread(path)
    height, width = image.shape[:2]
    assert (width, height) == (round(WIDTH_INCHES * DPI), round((0.8 + 2 * PANEL_INCHES) * DPI))
    assert image.min() < 0.5  # something drawn on white


def test_recall_plot_is_a_png(tmp_path):
    curves = {"BM25": {1: 0.2, 2: 0.4, 10: 0.8}, "dense": {1: 0.3, 2: 0.5, 10: 0.9}}
    image = matplotlib.image.imread(recall_plot(curves, tmp_path / "recall.png"))
    assert image.shape[1::-1] == (round(WIDTH_INCHES * DPI), round(5.5 * DPI))
