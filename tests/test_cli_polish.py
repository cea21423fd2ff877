"""The command line as a newcomer meets it: global flags anywhere, a version, help that reads
right, runs to stdout, tables that fit, labelled scores, line mode that says how to stop, and
no library noise (issue 41's friction points, issue 44's slow or silent ones)."""

from __future__ import annotations

import gzip
import json
import os
import pty
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import typer
from tests.timing import within
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import read_run

runner = CliRunner()
_DOTCAT = "import sys; from dotcat.cli import app; sys.exit(app())"
N_DOCS = 130


def invoke(*args, **kwargs):
    return runner.invoke(app, [str(a) for a in args], **kwargs)


def _dotcat(*args, **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, **kwargs.pop("env", {})}
    env.pop("DOTCAT_QUIET", None)
    return subprocess.run(
        [sys.executable, "-c", _DOTCAT, *map(str, args)],
        capture_output=True, text=True, timeout=300, env=env, **kwargs,
    )  # fmt: skip


@pytest.fixture(scope="module")
def ws(tmp_path_factory, tiny_bert_dir) -> dict[str, Path]:
    """A BEIR dir of 130 documents with long titles (every one holds "words"), its hybrid
    index (dense cosine + BM25), a folder of Markdown files and a CSV corpus."""
    root = tmp_path_factory.mktemp("polish")
    data = root / "beir"
    (data / "qrels").mkdir(parents=True)
    with gzip.open(data / "corpus.jsonl.gz", "wt") as f:
        for i in range(N_DOCS):
            title = f"A rather long title number {i} about words " + "and more words " * 6
            text = f"document {i} holds words " + "filler text " * (i % 30 + 5)
            f.write(json.dumps({"_id": f"d{i}", "title": title, "text": text}) + "\n")
    (data / "queries.jsonl").write_text(
        "".join(
            json.dumps({"_id": f"q{i}", "text": f"words of document {i}"}) + "\n" for i in range(3)
        )  # fmt: skip
    )
    (data / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\n" + "".join(f"q{i}\td{i}\t1\n" for i in range(3))
    )
    index = root / "idx"
    done = invoke("-q", "index", data, index, "--model", tiny_bert_dir, "--similarity", "cos",
                  "--pooling", "mean", "--precision", "fp32")  # fmt: skip
    assert done.exit_code == 0, done.output
    notes = root / "notes"
    notes.mkdir()
    (notes / "cats.md").write_text("# Cats\n\nCats purr and chase words.\n")
    (notes / "dogs.md").write_text("# Dogs\n\nDogs bark at the postman.\n")
    (root / "docs.csv").write_text("key,body\nc1,words about cats\nc2,dogs bark\n")
    return {"root": root, "data": data, "index": index, "notes": notes, "csv": root / "docs.csv"}


def test_global_flags_are_accepted_after_the_command(ws):
    for flag in ("-q", "-v", "--quiet"):
        result = invoke("search", ws["index"], "words", "-k", "2", flag)
        assert result.exit_code == 0, result.output
    result = invoke("search", ws["index"], "--", "-q")  # after --, a query like any other
    assert result.exit_code == 0 and "no such option" not in result.output.lower()


def test_version_is_the_packages_semantic_version():
    import dotcat

    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout == f"dotcat {dotcat.__version__}\n"
    assert re.fullmatch(r"\d+\.\d+\.\d+(?:[-+.][0-9A-Za-z.-]+)?", dotcat.__version__)


def _all_commands():
    root = typer.main.get_command(app)
    for name, command in root.commands.items():
        sub = getattr(command, "commands", None)
        yield from ([name, s] for s in sub) if sub else [[name]]


def test_help_shows_no_bool_metavar_and_keeps_brackets():
    for command in _all_commands():
        result = invoke(*command, "--help", env={"COLUMNS": "100"})
        assert result.exit_code == 0, (command, result.output)
        assert "<bool>" not in result.output, command
    index_help = invoke("index", "--help", env={"COLUMNS": "200"}).output
    assert re.search(r"pip\s+install\s+'dotcat\[ray\]'", index_help)
    assert re.search(r"fp16\s+\(GPUs\s+only\)", index_help)  # the precision fp16 is documented


def test_output_dash_writes_the_run_to_stdout(ws):
    result = invoke("search", ws["index"], "--queries", ws["data"], "--output", "-", "-k", "3")
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in result.stdout.splitlines()]
    assert len(rows) == 9 and all(len(r) == 6 and r[1] == "Q0" for r in rows), result.stdout
    assert "wrote standard output" in result.stderr
    assert not (Path.cwd() / "-").exists()
    result = invoke("bm25", ws["data"], "--queries", ws["data"], "--output", "-", "-k", "2")
    assert result.exit_code == 0 and len(result.stdout.splitlines()) == 6, result.output


def test_a_run_file_holds_what_the_default_measures_need(ws, tmp_path):
    """No -k: 10 results on screen, 100 into a run (R@100 needs 100), search and bm25 alike."""
    for command in (
        ["search", ws["index"], "--queries", ws["data"]],
        ["search", ws["index"], "--queries", ws["data"], "--first-stage", "dense"],
        ["bm25", ws["data"], "--queries", ws["data"]],
    ):
        out = tmp_path / "run.trec"
        result = invoke("-q", *command, "--output", out)
        assert result.exit_code == 0, result.output
        assert {len(docs) for docs in read_run(out).values()} == {100}, command
    shown = invoke("search", ws["index"], "words", "--json")
    assert len(json.loads(shown.stdout)) == 10


def test_eval_warns_in_one_line_when_a_run_is_shallower_than_a_cutoff(ws, tmp_path):
    out = tmp_path / "short.trec"
    assert invoke("-q", "bm25", ws["data"], "--queries", ws["data"], "--output", out,
                  "-k", "10").exit_code == 0  # fmt: skip
    result = invoke("eval", out, ws["data"])
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, result.stderr
    assert "at most 10 results per query" in warnings[0] and "R@100" in warnings[0]
    deep = tmp_path / "deep.trec"
    invoke("-q", "bm25", ws["data"], "--queries", ws["data"], "--output", deep)
    assert "WARNING" not in invoke("eval", deep, ws["data"]).stderr


@pytest.mark.parametrize(
    ("options", "kind"),
    [
        ([], "fused"),  # no dev queries: linear 0.5
        (["--fusion", "rrf"], "rrf"),
        (["--first-stage", "dense"], "cosine"),
        (["--first-stage", "bm25"], "bm25"),
        (["--fusion", "linear"], "fused"),
    ],
)
def test_every_score_says_its_kind(ws, options, kind):
    hits = json.loads(invoke("search", ws["index"], "words", "--json", *options).stdout)
    assert {h["score_kind"] for h in hits} == {kind}
    table = invoke("search", ws["index"], "words", *options).stdout.splitlines()
    assert table[0].split()[:3] == ["rank", kind, "score"]


def test_the_python_hit_says_its_kind(ws):
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    pipeline = SearchPipeline(ws["index"], PipelineConfig(device="cpu", precision="fp32"))
    assert {h.score_kind for h in pipeline.search("words", 3)} == {"fused"}
    assert pipeline.search("words", 3, first_stage="dense")[0].score_kind == "cosine"


def test_the_table_fits_the_terminal(ws):
    for columns in (80, 120):
        result = invoke("search", ws["index"], "words", env={"COLUMNS": str(columns)})
        lines = result.stdout.splitlines()
        assert len(lines) == 21 and max(len(line) for line in lines) <= columns, lines


def test_line_mode_heads_each_answer_with_its_query(ws):
    result = invoke("search", ws["index"], input="words\n\ndocument 3\n")
    assert result.exit_code == 0, result.output
    headings = [line for line in result.stdout.splitlines() if line.startswith("query: ")]
    assert headings == ["query: words", "query: document 3"]


def test_line_mode_on_a_terminal_says_how_to_quit_and_an_empty_line_quits(ws):
    primary, secondary = pty.openpty()
    env = {**os.environ, "DOTCAT_QUIET": "1"}
    process = subprocess.Popen(
        [sys.executable, "-c", _DOTCAT, "search", str(ws["index"])],
        stdin=secondary, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    os.close(secondary)
    try:
        os.write(primary, b"words\n\n")
        out, err = process.communicate(timeout=120)
    finally:
        os.close(primary)
    assert process.returncode == 0, err
    assert "Ctrl-D or an empty line quits" in err and "query> " in err
    assert out.splitlines()[0] == "query: words"


def test_verbose_output_has_no_faiss_loader_noise(ws):
    done = _dotcat("-v", "search", ws["index"], "words", "--first-stage", "dense")
    assert done.returncode == 0, done.stderr
    assert "Could not load library" not in done.stderr and "faiss.loader" not in done.stderr
    assert "INFO dotcat" in done.stderr  # -v still logs dotcat's own progress


def test_a_bi_encoder_as_re_ranker_is_refused_without_transformers_noise(ws, tiny_bert_dir):
    done = _dotcat("search", ws["index"], "words", "--rerank", tiny_bert_dir)
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        line for line in done.stderr.splitlines() if line.startswith("dotcat: error:")
    ]
    assert len(done.stderr.splitlines()) == 1 and "is not a cross-encoder" in done.stderr
    assert "\x1b[" not in done.stderr + done.stdout  # no coloured load report


def test_a_query_cut_to_the_encoders_window_says_so_once(ws):
    query = " ".join(f"word{i}" for i in range(600))
    result = invoke("search", ws["index"], query, "--first-stage", "dense", "-k", "2")
    assert result.exit_code == 0, result.output
    warnings = [line for line in result.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1 and "the encoder reads its first 512" in warnings[0], warnings
    result = invoke("search", ws["index"], query, "--first-stage", "bm25", "-k", "2")
    assert "reads its first" not in result.stderr  # BM25 reads every word


def test_search_server_with_rerank_is_one_line_before_any_connection():
    started = time.perf_counter()
    result = invoke("search", "--server", "http://127.0.0.1:9", "words", "--rerank", "m")
    assert result.exit_code == 2 and time.perf_counter() - started < within(2)
    assert result.output.count("\n") == 1 and "the cross-encoder it was started with" in (
        result.output
    )


def test_bm25_reads_the_corpus_sources_index_reads(ws, tmp_path):
    queries = tmp_path / "q.tsv"
    queries.write_text("q1\tcats\n")
    out = tmp_path / "folder.trec"
    result = invoke("-q", "bm25", ws["notes"], "--queries", queries, "--output", out,
                    "--include", "*.md")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert next(iter(read_run(out)["q1"])) == "cats.md"
    out = tmp_path / "csv.trec"
    result = invoke("-q", "bm25", ws["csv"], "--queries", queries, "--output", out,
                    "--id-field", "key", "--text-field", "body")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert list(read_run(out)["q1"]) == ["c1"]


def test_no_lock_file_stays_beside_an_index(ws, tmp_path, tiny_bert_dir):
    index = tmp_path / "idx"
    assert invoke("-q", "index", ws["data"], index, "--model", tiny_bert_dir).exit_code == 0
    assert invoke("-q", "index", ws["data"], index, "--model", tiny_bert_dir).exit_code == 0
    assert invoke("-q", "index", ws["data"], index, "--no-bm25").exit_code == 2  # (refused)
    assert invoke("-q", "add", index, ws["notes"]).exit_code == 0
    assert invoke("-q", "delete", index, "cats.md").exit_code == 0
    assert invoke("-q", "delete", index, "cats.md").exit_code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["idx"]
