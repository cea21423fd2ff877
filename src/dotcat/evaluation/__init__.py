"""Evaluation: ir-measures over runs and qrels, reports, significance tests.

>>> report = evaluate(run, qrels)                      # nDCG@10, RR@10, R@100, AP@100
>>> print(format_table({"BM25": report}))
"""

from dotcat.evaluation.metrics import (
    DEFAULT_MEASURES,
    EvalReport,
    evaluate,
    parse_measures,
    qid_sort_key,
)
from dotcat.evaluation.report import format_per_query, format_table, to_json
from dotcat.evaluation.significance import TTestResult, paired_ttest

__all__ = [
    "DEFAULT_MEASURES",
    "EvalReport",
    "TTestResult",
    "evaluate",
    "format_per_query",
    "format_table",
    "paired_ttest",
    "parse_measures",
    "qid_sort_key",
    "to_json",
]
