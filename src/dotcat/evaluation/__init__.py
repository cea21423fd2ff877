"""Evaluation: ir-measures over runs and qrels, reports, significance tests.

>>> report = evaluate(run, qrels)                      # nDCG@10, RR@10, R@100, AP@100
>>> print(format_table({"BM25": report}))
>>> comparisons = compare_to_baseline({"BM25": report, "dense": other}, "BM25")
>>> print(verdict(comparisons["dense"]["nDCG@10"]))   # dense vs BM25: nDCG@10 +0.0280 [...]
"""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "DEFAULT_MEASURES": "dotcat.evaluation.metrics",
    "EvalReport": "dotcat.evaluation.metrics",
    "evaluate": "dotcat.evaluation.metrics",
    "evaluate_runs": "dotcat.evaluation.metrics",
    "parse_measures": "dotcat.evaluation.metrics",
    "qid_sort_key": "dotcat.evaluation.metrics",
    "comparison_note": "dotcat.evaluation.tables",
    "comparison_text": "dotcat.evaluation.tables",
    "comparison_to_json": "dotcat.evaluation.tables",
    "verdict": "dotcat.evaluation.tables",
    "format_per_query": "dotcat.evaluation.tables",
    "format_table": "dotcat.evaluation.tables",
    "to_json": "dotcat.evaluation.tables",
    "Comparison": "dotcat.evaluation.significance",
    "PairedTestResult": "dotcat.evaluation.significance",
    "compare": "dotcat.evaluation.significance",
    "compare_to_baseline": "dotcat.evaluation.significance",
    "holm": "dotcat.evaluation.significance",
    "holm_across": "dotcat.evaluation.significance",
    "holm_bonferroni": "dotcat.evaluation.significance",
    "paired_ttest": "dotcat.evaluation.significance",
    "wins_ties_losses": "dotcat.evaluation.significance",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
