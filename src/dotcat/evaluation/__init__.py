"""Evaluation: ir-measures over runs and qrels, reports, significance tests.

>>> report = evaluate(run, qrels)                      # nDCG@10, RR@10, R@100, AP@100
>>> print(format_table({"BM25": report}))
>>> comparisons = compare_to_baseline({"BM25": report, "dense": other}, "BM25")
>>> print(format_comparison_table({"BM25": report, "dense": other}, comparisons, "BM25"))
"""

from dotcat.evaluation.metrics import (
    DEFAULT_MEASURES,
    EvalReport,
    evaluate,
    evaluate_runs,
    parse_measures,
    qid_sort_key,
)
from dotcat.evaluation.significance import (
    Comparison,
    PairedTestResult,
    TTestResult,
    compare_to_baseline,
    holm_across,
    holm_bonferroni,
    paired_randomisation_test,
    paired_ttest,
    wins_ties_losses,
)
from dotcat.evaluation.tables import (
    comparison_note,
    comparison_to_json,
    format_comparison_table,
    format_per_query,
    format_table,
    to_json,
)

__all__ = [
    "DEFAULT_MEASURES",
    "Comparison",
    "EvalReport",
    "PairedTestResult",
    "TTestResult",
    "compare_to_baseline",
    "comparison_note",
    "comparison_to_json",
    "evaluate",
    "evaluate_runs",
    "format_comparison_table",
    "format_per_query",
    "format_table",
    "holm_across",
    "holm_bonferroni",
    "paired_randomisation_test",
    "paired_ttest",
    "parse_measures",
    "qid_sort_key",
    "to_json",
    "wins_ties_losses",
]
