"""`dotcat eval RUN... QRELS --baseline RUN`: marks, one verdict per comparison, JSON; over
random runs (hypothesis), no interval excludes 0 without the mark, nor the reverse."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from scipy import stats
from tests.evaluation.test_verdicts import LINE, _number
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import write_run
from dotcat.evaluation import holm_bonferroni

runner = CliRunner()
N_QUERIES = 30


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _ranking(relevant_rank: int) -> list[tuple[str, float]]:
    """Ten documents; the relevant one (``rel``) at ``relevant_rank`` (0: not retrieved)."""
    docs = [f"n{i}" for i in range(10)]
    if relevant_rank:
        docs.insert(relevant_rank - 1, "rel")
    return [(doc, 100.0 - i) for i, doc in enumerate(docs[:10])]


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """qrels (one relevant document per query) and three runs: a baseline finding it at
    rank 3 to 6, a much better system (rank 1, else rank 8) and one about as good."""
    root = tmp_path_factory.mktemp("eval_baseline")
    rng = np.random.default_rng(0)
    qrels = root / "qrels.txt"
    qrels.write_text("".join(f"q{i} 0 rel 1\n" for i in range(N_QUERIES)))
    base = {f"q{i}": _ranking(int(rng.integers(3, 7))) for i in range(N_QUERIES)}
    better = {f"q{i}": _ranking(1 if i % 6 else 8) for i in range(N_QUERIES)}
    similar = {f"q{i}": _ranking(int(rng.integers(3, 7))) for i in range(N_QUERIES)}
    paths = {"qrels": qrels}
    for name, run in (("base", base), ("better", better), ("similar", similar)):
        paths[name] = root / f"{name}.trec"
        write_run(run, paths[name], tag=name)
    return paths


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def test_baseline_table_marks_significant_differences(runs):
    result = invoke(
        "eval", runs["base"], runs["better"], runs["similar"], runs["qrels"],
        "--baseline", "base.trec", "-m", "RR@10", "-m", "nDCG@10",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert _cells(lines[0]) == ["system", "RR@10", "nDCG@10", "queries"]
    rows = {_cells(line)[0]: _cells(line) for line in lines[2:5]}
    assert not rows["base.trec (baseline)"][1].endswith("†")
    assert rows["better.trec"][1].endswith("†") and rows["better.trec"][2].endswith("†")
    assert not rows["similar.trec"][1].endswith("†")
    verdicts = [line for line in lines if " vs base.trec: " in line]
    assert len(verdicts) == 4  # two systems x two measures
    better = next(v for v in verdicts if v.startswith("better.trec vs base.trec: RR@10 +"))
    # rank 1 on 25 queries, rank 8 (below any baseline) on 5
    assert better.endswith(", significantly higher over 30 queries (97.5% interval, paired "
                           "t-test, Holm over 2: p <0.001; won 25, tied 0, lost 5)")  # fmt: skip
    similar = next(v for v in verdicts if v.startswith("similar.trec vs base.trec: RR@10 +"))
    assert ", not significant over 30 queries (95% interval, paired t-test, Holm over 2: p " in (
        similar
    )
    note = next(line for line in lines if line.startswith("†"))
    assert "Holm's correction" in note and "paired t-test" in note and "base.trec" in note


def test_the_default_table_has_at_most_8_columns(runs):
    result = invoke("eval", runs["base"], runs["better"], runs["similar"], runs["qrels"],
                    "--baseline", "base.trec")  # fmt: skip
    assert result.exit_code == 0, result.output
    header = _cells(result.output.splitlines()[0])
    assert header == ["system", "nDCG@10", "RR@10", "R@100", "AP@100", "queries"]
    assert len(header) <= 8


def test_baseline_json_has_corrected_pvalues_equal_to_scipy(runs):
    result = invoke(
        "eval", runs["base"], runs["better"], runs["similar"], runs["qrels"],
        "--baseline", runs["base"], "-m", "RR@10", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["base.trec"]["vs_baseline"] is None
    per_query = {n: data[f"{n}.trec"]["per_query"] for n in ("base", "better", "similar")}
    queries = sorted(per_query["base"])
    values = {n: [per_query[n][q]["RR@10"] for q in queries] for n in per_query}
    raw = [stats.ttest_rel(values[n], values["base"]) for n in ("better", "similar")]
    corrected = holm_bonferroni([t.pvalue for t in raw])
    for name, t, p_holm in zip(("better", "similar"), raw, corrected, strict=True):
        vs = data[f"{name}.trec"]["vs_baseline"]
        assert vs["baseline"] == "base.trec" and vs["test"] == "t"
        assert vs["correction"] == "holm-bonferroni" and vs["alpha"] == 0.05
        c = vs["measures"]["RR@10"]
        assert c["pvalue"] == pytest.approx(t.pvalue, rel=1e-9)
        assert c["pvalue_holm"] == pytest.approx(p_holm, rel=1e-9)
        assert c["significant"] == (p_holm <= 0.05) == (not c["low"] <= 0 <= c["high"])
        # The t interval at the level of the comparison's Holm step (scipy's own).
        interval = t.confidence_interval(c["confidence"])
        assert (c["low"], c["high"]) == pytest.approx((interval.low, interval.high), rel=1e-9)
        assert c["wins"] + c["ties"] + c["losses"] == N_QUERIES
    assert data["better.trec"]["vs_baseline"]["measures"]["RR@10"]["significant"]


def test_baseline_randomisation_test_in_json(runs):
    result = invoke(
        "eval", runs["base"], runs["better"], runs["qrels"], "--baseline", "base.trec",
        "--test", "randomisation", "--permutations", "2000", "--seed", "3", "--json",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    vs = json.loads(result.stdout)["better.trec"]["vs_baseline"]
    assert vs["test"] == "randomisation" and vs["permutations"] == 2000 and vs["seed"] == 3
    assert vs["measures"]["nDCG@10"]["pvalue"] == pytest.approx(1 / 2001)
    assert vs["measures"]["nDCG@10"]["low"] > 0 and vs["bootstrap"] is None


def test_without_baseline_the_output_is_unchanged(runs):
    plain = invoke("eval", runs["base"], runs["better"], runs["qrels"])
    assert plain.exit_code == 0
    assert "Δ" not in plain.output and "†" not in plain.output
    assert _cells(plain.output.splitlines()[0]) == ["system", "nDCG@10", "RR@10", "R@100",
                                                     "AP@100", "queries"]  # fmt: skip
    data = json.loads(invoke("eval", runs["base"], runs["qrels"], "--json").stdout)
    assert "vs_baseline" not in data["base.trec"]


def test_runs_of_one_file_name_are_named_by_their_paths(runs, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for name in ("base", "better"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "run.trec").write_bytes(runs[name].read_bytes())
    args = ["better/run.trec", "base/run.trec", runs["qrels"], "-m", "RR@10", "--json"]
    data = json.loads(invoke("eval", *args, "--baseline", "base/run.trec").stdout)
    assert set(data) == {"better/run.trec", "base/run.trec"}  # not one run in place of both
    assert data["better/run.trec"]["vs_baseline"]["measures"]["RR@10"]["significant"]
    twice = invoke("eval", "base/run.trec", "./base/run.trec", runs["qrels"])
    assert twice.exit_code == 2 and "the run base/run.trec is given twice" in twice.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--baseline", "nope.trec"], "--baseline 'nope.trec' is not one of the runs"),
        (["--baseline", "base.trec", "--test", "wilcoxon"], "--test must be one of t, rand"),
        (
            ["--baseline", "base.trec", "--test", "bootstrap", "--bootstrap", "0"],
            "--bootstrap must be >= 1",
        ),
        (["--baseline", "base.trec", "--alpha", "2"], "--alpha must be in (0, 1)"),
        (["--baseline", "base.trec", "--permutations", "0"], "--permutations must be >= 1"),
    ],
)
def test_baseline_errors_are_one_line(runs, extra, message):
    result = invoke("eval", runs["base"], runs["better"], runs["qrels"], *extra)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_baseline_alone_has_nothing_to_be_compared_with(runs):
    result = invoke("eval", runs["base"], runs["qrels"], "--baseline", "base.trec")
    assert result.exit_code == 2, result.output
    assert (
        "--baseline 'base.trec' is the only run: give the runs to compare with it" in result.output
    )


def test_a_judging_store_given_as_qrels_or_as_a_run_is_named_in_one_line(runs, tmp_path):
    from dotcat.judging import JudgmentStore

    store = JudgmentStore(tmp_path / "index.judgments.sqlite", create=True)
    store.close()
    result = invoke("eval", runs["base"], store.path)
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"dotcat: error: {store.path}: is a judging store (SQLite), not qrels: export it with "
        f"`dotcat judge qrels INDEX QRELS --judgments {store.path}`, then give QRELS"
    )
    result = invoke("eval", store.path, runs["base"], runs["qrels"])  # given as a run
    assert result.exit_code == 2, result.output
    assert result.output.strip() == (
        f"dotcat: error: {store.path}: an SQLite database (a judging store, a doc store), not a "
        "text file"
    )


@st.composite
def judged_runs(draw) -> tuple[dict, dict]:
    """Qrels of 2-25 queries over six documents graded 0-2, and a baseline and two systems:
    each query ranked in the ideal order or at random, each system as often as it draws (from
    never to always), so that some systems differ significantly and some do not."""
    n = draw(st.integers(2, 25))
    qrels = {f"q{q}": {f"d{d}": draw(st.integers(0, 2)) for d in range(6)} for q in range(n)}
    runs = {}
    for name in ("base", "one", "two"):
        quality = draw(st.integers(0, 10))
        run = {}
        for qid, grades in qrels.items():
            if draw(st.integers(0, 9)) < quality:
                order = sorted(grades, key=lambda d: -grades[d])
            else:
                order = [f"d{d}" for d in draw(st.permutations(range(6)))]
            run[qid] = [(doc, 10.0 - rank) for rank, doc in enumerate(order)]
        runs[name] = run
    return qrels, runs


@pytest.mark.parametrize("test", ["t", "randomisation", "bootstrap"])
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=judged_runs(), alpha=st.sampled_from(["0.05", "0.3"]))
def test_no_interval_excludes_0_without_the_mark_nor_the_reverse(test, case, alpha):
    qrels, runs = case
    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder)
        (root / "qrels.txt").write_text(
            "".join(f"{q} 0 {d} {g}\n" for q, docs in qrels.items() for d, g in docs.items())
        )
        for name, run in runs.items():
            write_run(run, root / f"{name}.trec", tag=name)
        result = invoke(
            "eval", *(root / f"{name}.trec" for name in runs), root / "qrels.txt",
            "--baseline", "base.trec", "--test", test, "--alpha", alpha, "-m", "nDCG@10",
            "-m", "RR@10",
            *{"randomisation": ["--permutations", "499"], "bootstrap": ["--bootstrap", "499"]}.get(
                test, []),
        )  # fmt: skip
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    header = _cells(lines[0])
    marked = {}
    for line in lines[2:5]:
        cells = _cells(line)
        for measure, cell in zip(header[1:3], cells[1:3], strict=True):
            marked[cells[0], measure] = cell.endswith("†")
    shown = [m for m in map(LINE.match, lines) if m]
    assert len(shown) == 4, result.output
    for verdict in shown:
        excludes = _number(verdict["low"]) > 0 or _number(verdict["high"]) < 0
        significant = verdict["decision"] != "not significant"
        assert excludes == significant == marked[verdict["system"], verdict["measure"]], (
            result.output
        )
    assert not marked["base.trec (baseline)", "nDCG@10"]
