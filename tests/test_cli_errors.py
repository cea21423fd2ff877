"""Errors before work: every bad argument is one line, exit status 2, before torch is imported.

The refused commands run in one child process (a fresh interpreter, so "torch was never
imported" can be checked after each of them) through typer's test runner. Each runs twice, the
second time timed: its imports paid, an argument error is a fraction of a second of work.
"""

from __future__ import annotations

import gzip
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from tests.timing import within

from dotcat.data import write_run
from dotcat.index import build_index
from dotcat.models import EncoderConfig
from dotcat.options import gpu_may_be_visible

_RUNNER = textwrap.dedent(
    """
    import json, sys, time
    from typer.testing import CliRunner
    from dotcat.cli import app

    results = []
    for args in json.loads(sys.argv[1]):
        result = CliRunner().invoke(app, args)
        start = time.process_time()  # work, not wall time: CI runs other tests beside this
        CliRunner().invoke(app, args)  # timed again: the first run paid its imports
        results.append({
            "args": args,
            "code": result.exit_code,
            "output": result.output,
            "exception": repr(result.exception) if result.exception else None,
            "torch": "torch" in sys.modules,
            "seconds": time.process_time() - start,
        })
    print(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def ws(tmp_path_factory, tiny_bert_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("cli_errors")
    corpus = root / "corpus.jsonl.gz"
    with gzip.open(corpus, "wt", encoding="utf-8") as f:
        for i in range(40):
            f.write(json.dumps({"_id": f"d{i}", "title": f"title {i}", "text": f"text {i}"}) + "\n")
    queries = root / "queries.tsv"
    queries.write_text("q1\tsome words\nq2\tmore words\n")
    index = root / "index"
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(corpus, index, config, show_progress=False)
    run = root / "first.trec"
    write_run({"q1": [("d1", 2.0), ("d2", 1.0)]}, run)
    not_a_model = root / "notes"
    not_a_model.mkdir()
    (not_a_model / "README.md").write_text("not a model")
    a_file = root / "a_file"
    a_file.write_text("x")
    a_dir = root / "a_dir"
    a_dir.mkdir()
    docs = root / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\nsome words")
    resumable = root / "resumable"
    _leave_an_interrupted_build(corpus, resumable, chunk_size=8)
    return {
        "resumable": resumable,
        "docs": docs,
        "root": root,
        "corpus": corpus,
        "queries": queries,
        "index": index,
        "run": run,
        "model": tiny_bert_dir,
        "not_a_model": not_a_model,
        "a_file": a_file,
        "a_dir": a_dir,
    }


def _leave_an_interrupted_build(corpus: Path, index_dir: Path, chunk_size: int) -> None:
    """The build folder a killed ``dotcat index --chunk-size N`` leaves: its recorded plan."""
    from dotcat.data import CorpusStats, load_corpus
    from dotcat.index.chunks import write_plan
    from dotcat.index.config import IndexConfig
    from dotcat.index.layout import build_path
    from dotcat.index.preflight import corpus_entry, settings_plan

    stats = CorpusStats()
    n = len(load_corpus(corpus, stats=stats))
    config = IndexConfig(chunk_size=chunk_size, bm25=True)
    building = build_path(index_dir)
    building.mkdir(parents=True)
    write_plan(building, {**settings_plan(corpus_entry(corpus, stats, None), n, config)})


def _cases(ws: dict[str, Path]) -> list[tuple[list[str], str]]:
    c, q, i, m = ws["corpus"], ws["queries"], ws["index"], ws["model"]
    no_gpu = "asked for, but no CUDA GPU is visible on this machine"
    out = ws["root"] / "new_index"
    under_file = ws["a_file"] / "run.trec"
    distill = ["train", "distill", c, ws["root"] / "m", "--student", m, "--teacher", "bm25"]
    return [
        (["index", ws["root"] / "missing.jsonl", out], "missing.jsonl"),
        # (An index built from c itself is brought up to date: tests/index/test_sync.py.)
        (["index", ws["docs"], i, "--model", m], "an index exists there; pass --overwrite"),
        (["index", c, out, "--model", m, "--faiss", "bogus"], "invalid FAISS spec 'bogus'"),
        (["index", c, out, "--model", m, "--faiss", "PQ7"], "multiple of the number of subq"),
        (
            ["index", c, out, "--model", m, "--faiss", "PQ8"],
            "PQ8x8 (2^8 = 256 centroids per sub-vector) needs at least 256 training vectors, "
            "the corpus has 40",
        ),
        (
            ["index", c, out, "--model", m, "--faiss", "IVF64,Flat"],
            "IVF64 (one centroid per list) needs at least 64 training vectors",
        ),
        (["index", c, out, "--model", m, "--max-length", "0"], "--max-length must be >= 2, got 0"),
        (["index", c, out, "--model", ws["not_a_model"]], "not a model directory (no config.json"),
        (["index", c, ws["a_file"] / "sub" / "idx", "--model", m], "is a file, not a directory"),
        (
            ["index", c, out, "--model", m, "--text-field", "body"],
            "missing field (expected 'body'); the record has fields _id, title, text",
        ),
        (["index", c, out, "--model", m, "--include", "*.md"], "--include selects files in a"),
        (["index", ws["docs"], out, "--model", m, "--include", "*.pdf"], "no file to read matches"),
        (["index", ws["a_dir"], out, "--model", m], "no file to index here"),
        (
            ["add", i, ws["docs"], "--exclude", "*.md"],
            "no file to read matches --include [] --exclude ['*.md']; they leave out 1 .md",
        ),
        (["add", i, ws["root"] / "nope"], "no such file or directory"),
        (["search", i, "   "], "the query is empty"),
        (["search", i, ""], "the query is empty"),
        (["search", i, "\u200b \u2060"], "the query is empty"),  # zero-width characters only
        (["search", i, "heart\udce9"], "the query's byte 0xE9 at character 6 is not UTF-8"),
        (["search", i, "w", "--filter", 'a = "\udce9"'], "column 6 at '\ufffd': byte 0xE9"),
        (["search", i, "words", "-k", "0"], "-k must be >= 1, got 0"),
        (["search", i, "words", "-k", "-1"], "-k must be >= 1, got -1"),
        (["search", i, "words", "--depth", "0", "--rerank", m], "--depth must be >= 1, got 0"),
        (["search", i, "words", "--precision", "int4"], "--precision must be one of"),
        (["search", ws["root"] / "nope", "words"], "no such index directory"),
        (["search", i, "--queries", q, "--output", ws["a_dir"]], "is a directory"),
        (["search", i, "--queries", q, "--tag", "my tag"], "--tag 'my tag': a run tag is one"),
        (["search", i, "--queries", q, "--json"], "--json shows one query's hits"),
        (["search", i, "w", "--first-stage", "bm25", "--fusion-depth", "9"], "--fusion-depth appl"),
        (["bm25", c, "--queries", q, "--output", "-", "--tag", ""], "--tag '': a run tag is"),
        (["rerank", ws["run"], c, m, "--output", "-", "--tag", " "], "--tag ' ': a run tag is"),
        (["search", i, "--queries", q, "--output", under_file], "is a file, not a directory"),
        (["search", i, "words", "--rerank", ws["not_a_model"]], "not a model directory"),
        (["calibrate", i, "--rerank", m, "--queries", "0"], "--queries must be >= 1, got 0"),
        (["calibrate", ws["root"] / "nope", "--rerank", m], "no such index directory"),
        (["calibrate", i, "--rerank", ws["not_a_model"]], "not a model directory"),
        (["bm25", c, "--queries", q, "--output", ws["a_dir"]], "is a directory"),
        (["bm25", c, "--queries", q, "--output", under_file], "is a file, not a directory"),
        (["bm25", c, "--queries", q, "--output", ws["root"] / "b.trec", "-k", "0"], "-k must be"),
        (["rerank", ws["run"], c, m, "--output", ws["a_dir"]], "is a directory"),
        (["rerank", ws["run"], c, ws["not_a_model"], "--output", ws["root"] / "r"], "not a model"),
        (["rerank", ws["run"], c, m, "--output", ws["root"] / "r", "--depth", "0"], "--depth"),
        (["train", "dot", ws["root"] / "no-data", ws["root"] / "m"], "no-data"),
        (["train", "cat", ws["root"] / "no-data", ws["root"] / "m"], "no-data"),
        (["train", "dot", c, ws["a_file"], "--base", m], "exists and is not a directory"),
        (["train", "cat", c, ws["root"] / "m", "--base", ws["not_a_model"]], "not a model"),
        (
            ["train", "cat", c, ws["root"] / "m", "--base", m, "--pretrain-queries", "-1"],
            "--pretrain-queries must be >= 0, got -1",
        ),
        (
            ["train", "cat", c, ws["root"] / "m", "--base", m, "--pretrain-queries", "many"],
            "--pretrain-queries must be 'auto' or a number >= 0, got 'many'",
        ),
        (["train", "dot", c, ws["root"] / "m", "--base", m, "--epochs", "0"], "--epochs must"),
        # The configs' own checks, made before torch loads too.
        (
            ["train", "dot", c, ws["root"] / "m", "--base", m, "--loss", "hinge"],
            "--loss must be one of contrastive, triplet (for dot), got 'hinge'",
        ),
        (["train", "cat", c, ws["root"] / "m", "--base", m, "--bf16", "yes"], "bf16 must be"),
        (
            [*distill, "--loss", "mse"],
            "--loss must be one of margin-mse, kl (for distill), got 'mse'",
        ),
        (["adapt", c, ws["root"] / "m", "--model", m, "--prefer", "words"], "prefer must be"),
        # Refused before the corpus, the index or any model loads (issue 44).
        (["search", i, "words", "--model", ws["root"] / "gone"], "gone"),
        (["index", c, out, "--model", m, "--pooling", "max"], "--pooling must be one of cls"),
        (["index", c, out, "--model", m, "--device", "cuda"], no_gpu),
        (["search", i, "words", "--device", "cuda:0"], no_gpu),
        (["train", "dot", c, ws["root"] / "m", "--base", m, "--device", "cuda"], no_gpu),
        (
            ["index", c, ws["resumable"], "--model", m, "--chunk-size", "16"],
            "an interrupted build of this path (in .resumable.building) was made with other "
            "settings (chunk_size: 8 -> 16)",
        ),
        (["serve", i, "--port", "70000"], "--port must be in [1, 65535], got 70000"),
        (["search", i, "words", "--fusion-weight", "0.3"], "--fusion-weight is the linear fus"),
        (
            ["search", i, "words", "--fusion", "linear", "--fusion-weight", "1.5"],
            "--fusion-weight must be in [0, 1], got 1.5",
        ),
        (["search", i, "w " * 50_000], "the query is 100,000 characters long; at most 10,000"),
        (["search", i, "words", "--rerank", m], "is not a cross-encoder (no sequence-class"),
        (
            ["index", c, out, "--model", m, "--precision", "fp16", "--device", "cpu"],
            "--precision fp16 runs on GPUs only",
        ),
        (["search", "--server", "http://127.0.0.1:9", "words", "--rerank", m], "--rerank: a s"),
        (
            ["index", c, out, "--model", m, "--faiss", "IVF64,Flat"],
            "the corpus has 40; use Flat (40 vectors are too few for IVF lists of 39 or more)",
        ),
        (["bm25", ws["a_dir"], "--queries", q, "--output", ws["root"] / "b.trec"], "no file"),
        (["eval", ws["run"], q, "--alpha", "1"], "--alpha must be in (0, 1), got 1.0"),
    ]


def test_bad_arguments_fail_fast_in_one_line_without_importing_torch(ws):
    if gpu_may_be_visible():
        pytest.skip("a GPU is visible: --device cuda is fine here")
    cases = _cases(ws)
    args = [[str(a) for a in argv] for argv, _ in cases]
    done = subprocess.run(
        [sys.executable, "-c", _RUNNER, json.dumps(args)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    results = json.loads(done.stdout)
    for (_, expected), result in zip(cases, results, strict=True):
        errors = [line for line in result["output"].splitlines() if line.startswith("dotcat:")]
        assert result["code"] == 2, result
        assert len(errors) == 1 and expected in errors[0], result
        assert "Traceback" not in result["output"], result
        assert not result["torch"], f"torch imported before refusing {result['args']}"
    slowest = max(results, key=lambda r: r["seconds"])  # CPU time, the imports paid
    assert slowest["seconds"] < within(0.5), slowest
    beside = sorted(p.name for p in ws["root"].iterdir())
    assert not [name for name in beside if name.endswith(".lock")], beside


def test_an_unwritable_folder_is_refused_before_searching(ws, tmp_path):
    """Root writes anywhere, except where the immutable flag says no."""
    locked = tmp_path / "locked"
    locked.mkdir()
    if shutil.which("chattr") is None:
        pytest.skip("no chattr")
    if subprocess.run(["chattr", "+i", str(locked)], capture_output=True).returncode != 0:
        pytest.skip("this filesystem has no immutable flag")
    try:
        done = subprocess.run(
            [
                sys.executable,
                "-c",
                _RUNNER,
                json.dumps(
                    [
                        [
                            "search",
                            str(ws["index"]),
                            "--queries",
                            str(ws["queries"]),
                            "--output",
                            str(locked / "run.trec"),
                        ]
                    ]
                ),
            ],  # fmt: skip
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        subprocess.run(["chattr", "-i", str(locked)], check=True)
    (result,) = json.loads(done.stdout)
    assert result["code"] == 2 and "cannot write in" in result["output"], result
    assert not result["torch"]
