"""The teacher-score cache: scores kept on disk, resumed after a crash, tied to one teacher."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.training.data.teacher import (
    TEACHER_SCORES_FILE,
    TeacherMismatchError,
    load_teacher_scores,
    score_pairs,
    scores_file,
    teacher_header,
)

QUERIES = {"q1": "cats and dogs", "q2": "how do cells make energy", "q3": "blood sugar"}
DOCS = {
    "d1": "cats are small mammals",
    "d2": "dogs were domesticated from wolves",
    "d3": "cells make energy in mitochondria",
    "d4": "insulin regulates blood sugar",
}
PAIRS = [("q1", "d1"), ("q1", "d2"), ("q1", "d3"), ("q2", "d3"), ("q2", "d4"), ("q3", "d4")]
HEADER = teacher_header("tiny-teacher", "abc123", "torch", 64)


def _word_score(query: str, doc: str) -> float:
    """Shared words plus a length term with many decimals (rounding shows)."""
    return len(set(query.split()) & set(doc.split())) + len(doc) / 7


class Scorer:
    """A deterministic ``score_fn`` that records what it was asked."""

    def __init__(self, fail_on_call: int | None = None) -> None:
        self.calls = 0
        self.pairs: list[tuple[str, str]] = []
        self.fail_on_call = fail_on_call

    def __call__(self, queries: list[str], docs: list[str]) -> np.ndarray:
        self.calls += 1
        if self.calls == self.fail_on_call:
            raise RuntimeError("killed")
        self.pairs.extend(zip(queries, docs, strict=True))
        return np.array([_word_score(q, d) for q, d in zip(queries, docs, strict=True)])


def _score(tmp_path, scorer, pairs=PAIRS, header=HEADER, chunk_size=2):
    return score_pairs(
        tmp_path, header, pairs, QUERIES, DOCS, scorer, chunk_size=chunk_size, show_progress=False
    )


def _expected(qid: str, doc_id: str) -> float:
    return _word_score(QUERIES[qid], DOCS[doc_id])


def test_scores_equal_the_function_and_the_file_reads_back(tmp_path):
    cache = _score(tmp_path, Scorer())
    assert len(cache) == len(PAIRS)
    for q, d in PAIRS:
        assert cache.get(q, d) == pytest.approx(_expected(q, d), abs=1e-6)
        assert (q, d) in cache
    assert cache.get("q3", "d1") is None and ("q3", "d1") not in cache
    assert cache.scores("q1", ["d3", "d1"]) == [cache.get("q1", "d3"), cache.get("q1", "d1")]

    lines = (tmp_path / TEACHER_SCORES_FILE).read_text().splitlines()
    assert json.loads(lines[0]) == HEADER
    q, d, score = json.loads(lines[1])
    assert score == round(_expected(q, d), 6)
    again = load_teacher_scores(tmp_path, HEADER)
    assert {p: again.get(*p) for p in PAIRS} == {p: cache.get(*p) for p in PAIRS}
    assert scores_file(tmp_path / TEACHER_SCORES_FILE) == tmp_path / TEACHER_SCORES_FILE


def test_second_call_scores_nothing_new(tmp_path):
    _score(tmp_path, Scorer())
    scorer = Scorer()
    cache = _score(tmp_path, scorer)
    assert scorer.calls == 0 and len(cache) == len(PAIRS)
    # one more pair: only it is scored, and the file keeps the rest
    cache = _score(tmp_path, scorer, pairs=[*PAIRS, ("q3", "d1")])
    assert scorer.pairs == [(QUERIES["q3"], DOCS["d1"])]
    assert len(load_teacher_scores(tmp_path, HEADER)) == len(PAIRS) + 1


def test_duplicate_pairs_are_scored_once(tmp_path):
    scorer = Scorer()
    cache = _score(tmp_path, scorer, pairs=PAIRS + PAIRS[::-1], chunk_size=100)
    assert scorer.calls == 1 and len(scorer.pairs) == len(PAIRS) == len(cache)
    assert len((tmp_path / TEACHER_SCORES_FILE).read_text().splitlines()) == 1 + len(PAIRS)


def test_resumes_after_a_line_cut_by_a_crash(tmp_path, caplog):
    _score(tmp_path, Scorer())
    file = tmp_path / TEACHER_SCORES_FILE
    data = file.read_bytes()
    file.write_bytes(data[: len(data) - 9])  # the last line, cut mid-way
    lost = tuple(json.loads(data.decode().splitlines()[-1])[:2])
    n_lines = len(data.decode().splitlines())

    with caplog.at_level(logging.WARNING, logger="dotcat.training.data.teacher"):
        assert len(load_teacher_scores(tmp_path, HEADER)) == len(PAIRS) - 1
    assert f"{file}:{n_lines}" in caplog.text

    scorer = Scorer()
    cache = _score(tmp_path, scorer)
    assert scorer.pairs == [(QUERIES[lost[0]], DOCS[lost[1]])]
    assert cache.get(*lost) == pytest.approx(_expected(*lost), abs=1e-6)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="dotcat.training.data.teacher"):
        assert len(load_teacher_scores(tmp_path, HEADER)) == len(PAIRS)
    assert caplog.text == ""  # the cut line was replaced, not left in the middle


def test_a_whole_last_line_without_its_newline_is_kept(tmp_path):
    _score(tmp_path, Scorer())
    file = tmp_path / TEACHER_SCORES_FILE
    file.write_bytes(file.read_bytes().rstrip(b"\n"))
    assert len(load_teacher_scores(tmp_path, HEADER)) == len(PAIRS)
    scorer = Scorer()
    _score(tmp_path, scorer, pairs=[*PAIRS, ("q3", "d1")])
    assert len(scorer.pairs) == 1
    assert len(load_teacher_scores(tmp_path, HEADER)) == len(PAIRS) + 1


def test_an_interrupted_run_keeps_its_finished_chunks(tmp_path):
    with pytest.raises(RuntimeError, match="killed"):
        _score(tmp_path, Scorer(fail_on_call=2))
    assert len(load_teacher_scores(tmp_path, HEADER)) == 2  # the first chunk
    scorer = Scorer()
    _score(tmp_path, scorer)
    assert len(scorer.pairs) == len(PAIRS) - 2


@pytest.mark.parametrize("field, value", [("fingerprint", "other"), ("max_length", 128)])
def test_another_teacher_is_refused(tmp_path, field, value):
    _score(tmp_path, Scorer())
    with pytest.raises(TeacherMismatchError, match=field) as info:
        load_teacher_scores(tmp_path, {**HEADER, field: value})
    assert isinstance(info.value, DotcatError) and info.value.field == field
    assert str(tmp_path / TEACHER_SCORES_FILE) in str(info.value)
    with pytest.raises(DotcatError, match=field):
        _score(tmp_path, Scorer(), header={**HEADER, field: value})


def test_teacher_name_and_backend_do_not_invalidate(tmp_path):
    _score(tmp_path, Scorer())
    header = {**HEADER, "teacher": "/elsewhere/tiny-teacher", "backend": "onnxruntime"}
    assert len(load_teacher_scores(tmp_path, header)) == len(PAIRS)


def test_a_corrupt_middle_line_is_an_error(tmp_path):
    _score(tmp_path, Scorer())
    file = tmp_path / TEACHER_SCORES_FILE
    lines = file.read_text().splitlines(keepends=True)
    lines[2] = '["q1", "d2", 0.5\n'
    file.write_text("".join(lines))
    with pytest.raises(DotcatError, match=r":3: invalid JSON"):
        load_teacher_scores(tmp_path, HEADER)
    lines[2] = '["q1", 2, 0.5]\n'  # parses, but is not a record
    file.write_text("".join(lines))
    with pytest.raises(DotcatError, match=r":3: expected \[qid, doc_id, finite score\]"):
        load_teacher_scores(tmp_path, HEADER)


def test_a_foreign_file_is_an_error(tmp_path):
    file = tmp_path / TEACHER_SCORES_FILE
    file.write_text('{"format": "dotcat-negatives"}\n')
    with pytest.raises(DotcatError, match=":1: not a 'dotcat-teacher-scores' header"):
        _score(tmp_path, Scorer())
    with pytest.raises(DotcatError, match="no such teacher scores file"):
        load_teacher_scores(tmp_path / "absent", HEADER)


def test_missing_pair_and_missing_text_name_them(tmp_path):
    cache = _score(tmp_path, Scorer())
    with pytest.raises(KeyError, match=r"'q2'.*'d1'"):
        cache.scores("q2", ["d3", "d1"])
    with pytest.raises(KeyError, match="'q9'"):
        _score(tmp_path, Scorer(), pairs=[("q9", "d1")])
    with pytest.raises(KeyError, match="'d9'"):
        _score(tmp_path, Scorer(), pairs=[("q1", "d9")])


def test_a_bad_score_fn_is_refused(tmp_path):
    with pytest.raises(DotcatError, match="1 scores for 2 pairs"):
        _score(tmp_path, lambda q, d: np.zeros(1))
    with pytest.raises(DotcatError, match="'q1', 'd2'"):
        _score(tmp_path, lambda q, d: np.array([0.0, np.nan]))


def test_progress_bar_starts_at_the_cached_count(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("DOTCAT_PROGRESS", "1")  # (stderr is captured: no terminal)
    _score(tmp_path, Scorer(), pairs=PAIRS[:4])
    score_pairs(tmp_path, HEADER, PAIRS, QUERIES, DOCS, Scorer(), chunk_size=2)
    err = capsys.readouterr().err
    assert "teacher scores" in err and "4/6" in err and "6/6" in err


def test_real_cross_encoder_scores_are_cached(tmp_path, tiny_cat_dir):
    from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

    teacher = CrossEncoder.load(
        CrossEncoderConfig(model=str(tiny_cat_dir), precision="fp32", device="cpu")
    )
    header = teacher_header(teacher.name, teacher.fingerprint, teacher.backend, teacher.max_length)
    cache = score_pairs(
        tmp_path, header, PAIRS, QUERIES, DOCS, teacher.score, chunk_size=4, show_progress=False
    )
    direct = teacher.score([QUERIES[q] for q, _ in PAIRS], [DOCS[d] for _, d in PAIRS])
    cached = np.array([cache.get(q, d) for q, d in PAIRS])
    np.testing.assert_allclose(cached, direct, atol=1e-5, rtol=0)
    assert np.ptp(direct) > 1e-3  # the scores differ, so the comparison means something
    assert json.loads((tmp_path / TEACHER_SCORES_FILE).read_text().splitlines()[0]) == header
