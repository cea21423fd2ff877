"""TREC runs: round trip, format checks, atomic writing."""

from __future__ import annotations

import math

import numpy as np
import pytest

from dotcat.data import read_run, write_run
from dotcat.errors import DataFormatError

RUN = {
    "q1": [("d2", 3.25), ("d1", 1.0 / 3.0), ("d9", -0.5)],
    "q2": [("d3", np.float32(0.1)), ("d4", np.float32(0.1))],  # a tie, numpy scores
    "q3": [],
}


@pytest.mark.parametrize("name", ["run.trec", "run.trec.gz"])
def test_round_trip(tmp_path, name):
    path = tmp_path / "sub" / name
    write_run(RUN, path, tag="mine")
    back = read_run(path)
    assert back == {
        "q1": {"d2": 3.25, "d1": 1.0 / 3.0, "d9": -0.5},  # scores exact: no ties invented
        # The tie is written a single-precision step apart (trec_eval reads scores so): every
        # evaluator ranks d3 first as given
        # (trec_eval would put d4, the larger id, first, were they tied).
        "q2": {"d3": float(np.float32(0.1)), "d4": float(np.nextafter(np.float32(0.1), -1))},
    }
    # What read_run gives ({doc: score}, as ir-measures takes runs) is written as it ranks
    # (it was read as a list of pairs: 'd2' as the document 'd' scored '2')
    write_run(back, path.with_name("again"), tag="mine")
    assert read_run(path.with_name("again")) == back
    if not name.endswith(".gz"):
        lines = path.read_text().splitlines()
        assert lines[0] == "q1 Q0 d2 1 3.25 mine"
        assert [line.split()[3] for line in lines] == ["1", "2", "3", "1", "2"]


def test_readable_by_ir_measures(tmp_path):
    import ir_measures

    path = tmp_path / "run.txt"
    write_run(RUN, path)
    scored = {(r.query_id, r.doc_id): r.score for r in ir_measures.read_trec_run(str(path))}
    assert scored[("q1", "d1")] == pytest.approx(1.0 / 3.0)


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = tmp_path / "run.txt"
    write_run({"q0": [("d0", 1.0)]}, path)
    old = path.read_text()

    class Boom:
        def __float__(self):
            raise RuntimeError("simulated crash mid-write")

    big = {f"q{i}": [(f"d{j}", float(-j)) for j in range(100)] for i in range(200)}
    big["q_last"] = [("d1", Boom())]  # fails after 20,000 lines were written
    with pytest.raises(RuntimeError, match="simulated crash"):
        write_run(big, path)
    assert path.read_text() == old
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run.txt"], "temp file removed"


def test_atomic_write_survives_failed_rename(tmp_path, monkeypatch):
    path = tmp_path / "run.txt"
    write_run({"q0": [("d0", 1.0)]}, path)
    old = path.read_text()

    def failing_replace(src, dst):
        raise OSError("disk vanished")

    monkeypatch.setattr("dotcat.data.runs.os.replace", failing_replace)
    with pytest.raises(OSError, match="disk vanished"):
        write_run({"q1": [("d1", 2.0)]}, path)
    assert path.read_text() == old
    assert [p.name for p in tmp_path.iterdir()] == ["run.txt"]


@pytest.mark.parametrize(
    ("run", "tag", "message"),
    [
        ({"q1": [("d1", 1.0), ("d2", 2.0)]}, "t", "not in descending score order at rank 2"),
        ({"q1": [("d1", 1.0), ("d1", 0.5)]}, "t", "listed twice"),
        ({"q1": [("d 1", 1.0)]}, "t", "without whitespace"),
        ({"q1": [("d1", math.nan)]}, "t", "not finite"),
        ({"q1": [("d1", 1.0)]}, "my tag", "run tag"),
    ],
)
def test_write_run_refuses_bad_rankings(tmp_path, run, tag, message):
    with pytest.raises(ValueError, match=message):
        write_run(run, tmp_path / "run.txt", tag=tag)
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        (
            "q1 Q0 d1 1 1.5 t\nq1 Q0 d2 2 1.0\n",
            2,
            "expected 6 fields (qid Q0 docid rank score tag)",
        ),
        ("q1 Q0 d1 first 1.5 t\n", 1, "rank: expected an integer, found 'first'"),
        ("q1 Q0 d1 1 high t\n", 1, "score: expected a finite number, found 'high'"),
        ("q1 Q0 d1 1 nan t\n", 1, "score: expected a finite number"),
        ("q1 Q0 d1 1 2 t\nq1 Q0 d1 2 1 t\n", 2, "document 'd1' appears twice for query 'q1'"),
    ],
)
def test_bad_runs(write, assert_error, gz, content, line, problem):
    path = write(f"run.txt{gz}", content)
    with pytest.raises(DataFormatError) as e:
        read_run(path)
    assert_error(e, path, line, problem)
