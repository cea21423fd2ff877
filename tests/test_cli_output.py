"""Output a person can read: bars that advance, -q that silences, no library noise, no repeats.

The commands run as child processes with stderr going to a pipe, as in a log file or CI: bars
are drawn there only when asked (``--progress`` / ``DOTCAT_PROGRESS=1``), which these tests do
unless they test that.
"""

from __future__ import annotations

import gzip
import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dotcat.models import BiEncoder, EncoderConfig
from dotcat.progress import progress_bar, progress_enabled

_DOTCAT = "import sys; from dotcat.cli import app; sys.exit(app())"


def _dotcat(*args, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    import os

    env = {k: v for k, v in os.environ.items() if k != "DOTCAT_QUIET"}
    env.update({"DOTCAT_PROGRESS": "1", **(env_extra or {})})
    return subprocess.run(
        [sys.executable, "-c", _DOTCAT, *map(str, args)],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )


def _bar_lines(stderr: str) -> list[str]:
    """Every rendered state of every bar ('\\r' and '\\n' both end one)."""
    return [line.strip() for line in re.split(r"[\r\n]", stderr) if "%|" in line or "/s]" in line]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("out") / "corpus.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as f:
        for i in range(300):
            f.write(json.dumps({"_id": f"d{i}", "title": f"t{i}", "text": "words " * (i % 40)}))
            f.write("\n")
    return path


def test_index_output_has_our_bars_once_and_no_library_noise(corpus, tiny_bert_dir, tmp_path):
    done = _dotcat("index", corpus, tmp_path / "idx", "--model", tiny_bert_dir, "--passages")
    assert done.returncode == 0, done.stderr
    assert "Generating train split" not in done.stderr  # HF datasets' own bar
    bars = _bar_lines(done.stderr)
    finished = [line for line in bars if "100%" in line]
    for what in ("splitting documents", "encoding passages", "adding to FAISS"):
        assert sum(line.startswith(what) for line in finished) == 1, (what, bars)
    assert re.search(r"indexed 300 documents as \d+ passages of \d+ tokens into", done.stdout)


def test_quiet_silences_every_bar(corpus, tiny_bert_dir, tmp_path):
    done = _dotcat(
        "-q",
        "index",
        corpus,
        tmp_path / "idx",
        "--model",
        tiny_bert_dir,
        "--pooling",
        "cls",
        "--similarity",
        "dot",
    )  # (asked: no word on them)
    assert done.returncode == 0, done.stderr
    assert _bar_lines(done.stderr) == []
    # What remains is the corpus's one warning (8 title-only documents), said once.
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "8 document(s) have no text" in lines[0], lines


def test_bm25_prints_no_debug_lines_and_no_foreign_bars(corpus, tmp_path):
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\twords\n")
    done = _dotcat("bm25", corpus, "--queries", queries, "--output", tmp_path / "r.trec")
    assert done.returncode == 0, done.stderr
    assert "DEBUG" not in done.stderr and "BM25S" not in done.stderr
    quiet = _dotcat("-q", "bm25", corpus, "--queries", queries, "--output", tmp_path / "r.trec")
    assert quiet.returncode == 0 and _bar_lines(quiet.stderr) == []
    assert len(quiet.stderr.strip().splitlines()) == 1  # the title-only warning, once


class _Recorder:
    def __init__(self) -> None:
        self.updates: list[int] = []

    def update(self, n: int = 1) -> None:
        self.updates.append(n)


def test_encoding_advances_a_callers_bar_batch_by_batch(tiny_bert_dir):
    encoder = BiEncoder.load(
        EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32", batch_size=4)
    )
    texts = [f"text number {i} " * (i % 7 + 1) for i in range(30)]
    bar = _Recorder()
    vectors = encoder.encode(texts, progress=bar)
    assert len(bar.updates) >= 30 // 4 and sum(bar.updates) == 30  # per batch, not per call
    np.testing.assert_allclose(vectors, encoder.encode(texts), rtol=0, atol=1e-6)


def test_no_bar_is_drawn_where_stderr_is_not_a_terminal_unless_asked(
    corpus, tiny_bert_dir, tmp_path
):
    args = ("index", corpus, tmp_path / "idx", "--model", tiny_bert_dir, "--no-bm25")
    plain = _dotcat(*args, env_extra={"DOTCAT_PROGRESS": "0"})
    assert plain.returncode == 0, plain.stderr
    assert _bar_lines(plain.stderr) == [], plain.stderr
    asked = _dotcat("--progress", *args, "--overwrite", env_extra={"DOTCAT_PROGRESS": "0"})
    assert asked.returncode == 0, asked.stderr
    assert any(line.startswith("encoding documents") for line in _bar_lines(asked.stderr))
    quiet = _dotcat(*args, "--overwrite", env_extra={"DOTCAT_QUIET": "1"})  # as -q, for good
    assert quiet.returncode == 0 and _bar_lines(quiet.stderr) == [], quiet.stderr


def test_a_log_file_gets_each_state_once(tmp_path, monkeypatch):
    """tqdm re-prints the final state when a bar closes; in a file that is a duplicate."""
    monkeypatch.setenv("DOTCAT_PROGRESS", "1")  # (a file, not a terminal: drawn when asked)
    log = tmp_path / "log.txt"
    with open(log, "w") as f, progress_bar(total=3, desc="work", unit="x", file=f) as bar:
        for _ in range(3):
            bar.update()
    lines = _bar_lines(log.read_text())
    assert sum("3/3" in line for line in lines) == 1, lines


@pytest.mark.parametrize("word", ["false", "Off", "no", "0", ""])
def test_false_or_off_in_the_environment_is_off(tmp_path, monkeypatch, word):
    """``DOTCAT_QUIET=false`` silenced every bar, ``DOTCAT_PROGRESS=off`` drew them in logs."""
    monkeypatch.setenv("DOTCAT_QUIET", word)
    monkeypatch.setenv("DOTCAT_PROGRESS", word)
    assert progress_enabled()
    log = tmp_path / "log.txt"
    with open(log, "w") as f, progress_bar(total=3, desc="work", unit="x", file=f) as bar:
        bar.update(3)
    assert _bar_lines(log.read_text()) == []
    monkeypatch.setenv("DOTCAT_QUIET", "yes")
    assert not progress_enabled()


def test_a_log_gets_a_line_a_minute_of_long_work_and_none_of_short(tmp_path, monkeypatch):
    """`train dot` wrote nothing for 10 minutes where stderr was no terminal (issue 64); a
    fake clock drives tqdm (50 s of short work, then 10 minutes of steps)."""
    import tqdm.std

    monkeypatch.delenv("DOTCAT_PROGRESS", raising=False)  # not asked
    now = [1_000.0]
    monkeypatch.setattr(tqdm.std, "time", lambda: now[0])
    log = tmp_path / "log.txt"
    with open(log, "w") as f:
        with progress_bar(total=100, desc="short", unit="step", file=f) as bar:
            for _ in range(100):
                now[0] += 0.5
                bar.update()
        with progress_bar(total=600, desc="training", unit="step", file=f) as bar:
            for _ in range(600):
                now[0] += 1.0
                bar.update()
    lines = _bar_lines(log.read_text())
    assert not any(line.startswith("short") for line in lines), lines
    training = [line for line in lines if line.startswith("training")]
    assert 9 <= len(training) <= 11 and "600/600" in training[-1], training
    assert "60/600" in training[0]  # the first after a minute


def test_a_table_cuts_text_without_spaces_inside_it(capsys):
    from dotcat.cli.output import print_hits
    from dotcat.search.hits import Hit
    from dotcat.serve.snippet import columns

    cjk = "東京の天気は晴れです。" * 30  # no space: one "word" longer than any line
    nfd, family = "e\u0301" * 200, "\U0001f468\u200d\U0001f469\u200d\U0001f467" * 60
    hits = [Hit(1, "東京.txt", 0.5, cjk, cjk, "cos"), Hit(2, "a.txt", 0.4, nfd, family, "cos")]
    print_hits(hits, False, width=80)
    lines = capsys.readouterr().out.splitlines()[1:]
    assert "東京の天気は晴れです。東京" in lines[0] and "東京の天気" in lines[1]  # cut inside
    assert all(line.endswith("...") and 70 < columns(line) <= 80 for line in lines), lines
    at = [columns(lines[0][: lines[0].index("東京の")]), columns(lines[2][: lines[2].index("e")])]
    assert at[0] == at[1]  # the text column starts at one column whatever the id's width
    assert lines[2].endswith("\u0301...") and lines[3].endswith("\U0001f467...")  # whole marks
