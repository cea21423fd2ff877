"""dotcat.evaluation.evaluate against hand-computed values and its query/document bookkeeping."""

from __future__ import annotations

import math

import ir_measures
import pytest

from dotcat.errors import DotcatError
from dotcat.evaluation import DEFAULT_MEASURES, evaluate, parse_measures

# q1: relevant d1 (1) and d3 (2) at ranks 2 and 3; q2: its only relevant doc first;
# q3: judged but absent from the run; q4: in the run but not judged.
QRELS = {
    "q1": {"d1": 1, "d3": 2, "d9": 0},
    "q2": {"d4": 1},
    "q3": {"d5": 1},
}
RUN = {
    "q1": {"d2": 3.0, "d1": 2.0, "d3": 1.0},
    "q2": {"d4": 5.0, "d5": 1.0},
    "q4": {"d1": 1.0},
}


def _ndcg(gains: list[int], ideal: list[int]) -> float:
    """trec_eval's nDCG: sum rel_i / log2(i + 1), over the ideal ordering's sum."""
    dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains))
    idcg = sum(g / math.log2(i + 2) for i, g in enumerate(sorted(ideal, reverse=True)))
    return dcg / idcg


Q1_NDCG = _ndcg([0, 1, 2], [1, 2])  # (1/log2 3 + 2/2) / (2 + 1/log2 3) = 0.6199
Q1_AP = (1 / 2 + 2 / 3) / 2


def test_hand_computed_values_per_query():
    report = evaluate(RUN, QRELS)
    assert report.measures == list(DEFAULT_MEASURES)
    q1, q2, q3 = (report.per_query[q] for q in ("q1", "q2", "q3"))
    assert q1["nDCG@10"] == pytest.approx(Q1_NDCG)
    assert q1["nDCG@10"] == pytest.approx(0.6199, abs=1e-4)
    assert q1["RR@10"] == pytest.approx(0.5)
    assert q1["R@100"] == pytest.approx(1.0)
    assert q1["AP@100"] == pytest.approx(Q1_AP)
    assert q2 == pytest.approx({"nDCG@10": 1.0, "RR@10": 1.0, "R@100": 1.0, "AP@100": 1.0})
    assert q3 == {"nDCG@10": 0.0, "RR@10": 0.0, "R@100": 0.0, "AP@100": 0.0}


def test_missing_query_counts_as_zero_in_the_mean():
    report = evaluate(RUN, QRELS)
    assert report.n_queries == 3
    assert report.missing_queries == ["q3"]
    assert report.aggregate["nDCG@10"] == pytest.approx((Q1_NDCG + 1.0) / 3)
    assert report.aggregate["RR@10"] == pytest.approx((0.5 + 1.0) / 3)
    assert report.aggregate["AP@100"] == pytest.approx((Q1_AP + 1.0) / 3)
    # Averaging over the answered queries only (trec_eval without -c) would give this instead:
    assert report.aggregate["nDCG@10"] != pytest.approx((Q1_NDCG + 1.0) / 2)
    # ir-measures >= 0.3 also counts the missing query as 0; the two must agree.
    plain = ir_measures.calc_aggregate(parse_measures(DEFAULT_MEASURES), QRELS, RUN)
    assert {str(m): v for m, v in plain.items()} == pytest.approx(report.aggregate)


def test_a_value_the_provider_leaves_out_is_filled(monkeypatch):
    real_iter_calc = ir_measures.iter_calc

    def dropping_iter_calc(measures, qrels, run):  # an old-style provider: run queries only
        return (m for m in real_iter_calc(measures, qrels, run) if m.query_id in run)

    monkeypatch.setattr(ir_measures, "iter_calc", dropping_iter_calc)
    report = evaluate(RUN, QRELS, measures=["nDCG@10"])
    assert report.per_query["q3"] == {"nDCG@10": 0.0}
    assert report.aggregate["nDCG@10"] == pytest.approx((Q1_NDCG + 1.0) / 3)


def test_empty_ranking_is_missing_too():
    report = evaluate({**RUN, "q3": {}}, QRELS, measures=["RR@10"])
    assert report.missing_queries == ["q3"]
    assert report.aggregate["RR@10"] == pytest.approx(0.5)


def test_unjudged_run_queries_are_ignored_and_listed():
    report = evaluate(RUN, QRELS)
    assert report.unjudged_queries == ["q4"]
    assert "q4" not in report.per_query
    assert any("no qrels" in line for line in report.notes())


def test_ranked_lists_and_score_dicts_give_the_same_report():
    ranked = {q: sorted(d.items(), key=lambda x: -x[1]) for q, d in RUN.items()}
    assert evaluate(ranked, QRELS) == evaluate(RUN, QRELS)


def test_unknown_queries_are_reported_and_not_evaluated():
    report = evaluate(RUN, QRELS, known_queries={"q1": "text", "q2": "text", "q4": "text"})
    assert report.unknown_queries == ["q3"]
    assert report.n_queries == 2
    assert report.missing_queries == []
    assert report.aggregate["nDCG@10"] == pytest.approx((Q1_NDCG + 1.0) / 2)
    asked = evaluate(RUN, QRELS, known_queries={"q1": "text", "q4": "text"})
    assert asked.unknown_queries == ["q2", "q3"] and asked.unjudged_queries == ["q4"]  # not q2


def test_unknown_docs_are_counted_and_kept():
    report = evaluate(RUN, QRELS, known_docs=["d1", "d2", "d3", "d4"])
    assert report.unknown_docs == 2  # d9 (q1) and d5 (q3)
    # d3 missing from the corpus would not change q1's ideal ranking: qrels are kept as given.
    report = evaluate(RUN, QRELS, known_docs=["d1", "d2", "d4", "d5", "d9"])
    assert report.unknown_docs == 1
    assert report.per_query["q1"]["nDCG@10"] == pytest.approx(Q1_NDCG)


def test_no_known_query_at_all_is_an_error():
    with pytest.raises(DotcatError, match="none of the qrels queries"):
        evaluate(RUN, QRELS, known_queries=["x"])


def test_empty_qrels_is_an_error():
    with pytest.raises(DotcatError, match="empty"):
        evaluate(RUN, {})


def test_unknown_measure_is_named():
    with pytest.raises(DotcatError, match="'nDGC@10'"):
        evaluate(RUN, QRELS, measures=["nDCG@10", "nDGC@10"])


def test_trec_eval_names_and_duplicates():
    assert [str(m) for m in parse_measures(["ndcg_cut_10", "nDCG@10", "P_5,10"])] == [
        "nDCG@10",
        "P@5",
        "P@10",
    ]
    report = evaluate(RUN, QRELS, measures="ndcg_cut_10")
    assert report.aggregate == {"nDCG@10": pytest.approx((Q1_NDCG + 1.0) / 3)}


def test_bad_relevance_value():
    with pytest.raises(DotcatError, match="q1.*d1.*not an integer"):
        evaluate(RUN, {"q1": {"d1": "high"}})


def test_numeric_query_ids_sort_numerically():
    qrels = {"10": {"a": 1}, "2": {"a": 1}, "1": {"a": 1}}
    report = evaluate({"2": {"a": 1.0}}, qrels, measures=["RR@10"])
    assert list(report.per_query) == ["1", "2", "10"]
    assert report.missing_queries == ["1", "10"]


def test_evaluate_runs_scores_each_run_as_evaluate_does_and_names_a_shallow_one(caplog):
    """Several runs, one qrels: each report is evaluate's; a run cut above a cutoff (here 3
    results against R@100) is named in one warning, a deep enough one is not."""
    from dotcat.evaluation import evaluate_runs

    with caplog.at_level("WARNING", logger="dotcat.evaluation.metrics"):
        reports = evaluate_runs({"a": RUN, "b": RUN}, QRELS, ["RR@3", "R@100"], ["q1", "q2"])
    assert list(reports) == ["a", "b"]
    assert reports["a"].aggregate == evaluate(RUN, QRELS, ["RR@3", "R@100"], ["q1", "q2"]).aggregate
    shallow = [r.message for r in caplog.records if "results per query" in r.message]
    assert len(shallow) == 2 and "a holds at most 3 results per query" in shallow[0]
    assert "unless that is all there is (BM25 returns only" in shallow[0]
    assert "R@100" in shallow[0] and "RR@3" not in shallow[0]
    caplog.clear()
    with caplog.at_level("WARNING", logger="dotcat.evaluation.metrics"):
        evaluate_runs({"a": RUN}, QRELS, ["nDCG@3"])
        evaluate_runs({"a": RUN}, QRELS, ["R@100"], known_docs=["d1", "d2", "d3"])  # all of it
    assert not [r for r in caplog.records if "results per query" in r.message]


def test_tied_scores_are_scored_in_one_order_by_every_measure_as_written(tmp_path):
    from dotcat.data import read_run, write_run

    qrels = {"q": {"a": 1}}
    measures = ["P@1", "RR", "RR@10", "nDCG@10", "AP"]
    # A ranking as listed: "a" is first and relevant, every other document tied with it.
    listed = {"q": [("a", 0.5), ("b", 0.5), ("c", 0.5), ("d", 0.1)]}
    assert set(evaluate(listed, qrels, measures).aggregate.values()) == {1.0}
    # Written and read back (evaluators sort by score alone): the same figures.
    write_run(listed, tmp_path / "run.trec")
    back = evaluate(read_run(tmp_path / "run.trec"), qrels, measures)
    assert set(back.aggregate.values()) == {1.0}
    # A mapping holds no order: trec_eval's, the larger id first, for every measure alike.
    mapped = evaluate({"q": {"a": 0.5, "b": 0.5, "c": 0.5}}, qrels, measures).aggregate
    assert mapped["P@1"] == 0.0 and mapped["RR"] == mapped["RR@10"] == pytest.approx(1 / 3)


def test_counts_take_unanswered_queries_and_odd_ids_and_nan_are_refused():
    qrels = {"1": {"a": 1, "b": 2}, "2": {"c": 1, "x": 0}, "²": {"d": 1}}
    report = evaluate({"1": {"a": 1.0}}, qrels, ["NumQ", "NumRel"])
    assert report.aggregate == {"NumQ": 3.0, "NumRel": 4.0}  # as trec_eval -c counts
    assert list(report.per_query) == ["1", "2", "²"]  # "²" is a digit, not a decimal
    with pytest.raises(DotcatError, match="document 'a' scores nan"):
        evaluate({"1": [("a", math.nan), ("b", 1.0)]}, qrels)
