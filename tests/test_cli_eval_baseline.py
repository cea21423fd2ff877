"""`dotcat eval RUN... QRELS --baseline RUN`: differences, p-values, marks, JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import stats
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
    header = _cells(lines[0])
    assert header == ["system", "RR@10", "Δ", "p", "W/T/L", "nDCG@10", "Δ", "p", "W/T/L",
                      "queries"]  # fmt: skip
    rows = {_cells(line)[0]: _cells(line) for line in lines[2:5]}
    assert rows["base.trec (baseline)"][2:5] == ["", "", ""]
    better, similar = rows["better.trec"], rows["similar.trec"]
    assert better[1].endswith("†") and better[2].startswith("+")
    assert better[4] == "25/0/5"  # rank 1 on 25 queries, rank 8 (below any baseline) on 5
    assert not similar[1].endswith("†")
    note = next(line for line in lines if line.startswith("†"))
    assert "Holm-Bonferroni" in note and "paired t-test" in note and "base.trec" in note


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
    raw = [stats.ttest_rel(values[n], values["base"]).pvalue for n in ("better", "similar")]
    corrected = holm_bonferroni(raw)
    for name, p, p_holm in zip(("better", "similar"), raw, corrected, strict=True):
        vs = data[f"{name}.trec"]["vs_baseline"]
        assert vs["baseline"] == "base.trec" and vs["test"] == "t"
        assert vs["correction"] == "holm-bonferroni" and vs["alpha"] == 0.05
        c = vs["measures"]["RR@10"]
        assert c["pvalue"] == pytest.approx(p, rel=1e-12)
        assert c["pvalue_holm"] == pytest.approx(p_holm, rel=1e-12)
        assert c["significant"] == (p_holm < 0.05)
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


def test_without_baseline_the_output_is_unchanged(runs):
    plain = invoke("eval", runs["base"], runs["better"], runs["qrels"])
    assert plain.exit_code == 0
    assert "Δ" not in plain.output and "†" not in plain.output
    assert _cells(plain.output.splitlines()[0]) == ["system", "nDCG@10", "RR@10", "R@100",
                                                     "AP@100", "queries"]  # fmt: skip
    data = json.loads(invoke("eval", runs["base"], runs["qrels"], "--json").stdout)
    assert "vs_baseline" not in data["base.trec"]


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--baseline", "nope.trec"], "--baseline 'nope.trec' is not one of the runs"),
        (["--baseline", "base.trec", "--test", "wilcoxon"], "--test must be one of t, rand"),
        (["--baseline", "base.trec", "--alpha", "2"], "--alpha must be in (0, 1)"),
        (["--baseline", "base.trec", "--permutations", "0"], "--permutations must be >= 1"),
    ],
)
def test_baseline_errors_are_one_line(runs, extra, message):
    result = invoke("eval", runs["base"], runs["better"], runs["qrels"], *extra)
    assert result.exit_code == 2
    assert message in result.output
    assert len(result.output.strip().splitlines()) == 1
