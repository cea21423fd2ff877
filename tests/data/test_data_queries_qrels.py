"""load_queries and load_qrels: formats, BEIR split filtering, bad input."""

from __future__ import annotations

import json
import logging

import pytest

from dotcat.data import available_splits, load_qrels, load_queries
from dotcat.errors import DataFormatError

# ---------------------------------------------------------------- queries


def test_beir_queries_all_and_by_split(tiny_beir_dir, write):
    assert list(load_queries(tiny_beir_dir)) == ["q1", "q2", "q3"]
    # q3 judged only in "dev", q4 not judged at all.
    with open(tiny_beir_dir / "queries.jsonl", "a", encoding="utf-8") as f:
        f.write(json.dumps({"_id": "q4", "text": "unjudged"}) + "\n")
    (tiny_beir_dir / "qrels" / "test.tsv").write_text(
        "query-id\tcorpus-id\tscore\nq1\td2\t1\nq2\td4\t1\n"
    )
    write("dev.tsv.gz", "query-id\tcorpus-id\tscore\nq3\td6\t1\n").rename(
        tiny_beir_dir / "qrels" / "dev.tsv.gz"
    )
    assert load_queries(tiny_beir_dir, split="test") == {
        "q1": "which animals were domesticated from wolves",
        "q2": "how do cells make ATP",
    }
    assert list(load_queries(tiny_beir_dir, split="dev")) == ["q3"]
    assert len(load_queries(tiny_beir_dir)) == 4


def test_split_missing_lists_available(tiny_beir_dir, assert_error):
    with pytest.raises(DataFormatError) as e:
        load_queries(tiny_beir_dir, split="dev")
    assert_error(e, tiny_beir_dir, None, "no qrels for split 'dev'", "available splits: test")


def test_judged_query_without_text_is_reported(tiny_beir_dir, caplog):
    with open(tiny_beir_dir / "qrels" / "test.tsv", "a") as f:
        f.write("q9\td1\t1\n")
    with caplog.at_level(logging.WARNING, logger="dotcat.data"):
        assert list(load_queries(tiny_beir_dir, split="test")) == ["q1", "q2", "q3"]
    assert "1 queries judged in split 'test' have no text (e.g. 'q9')" in caplog.text


def test_queries_file_formats(write, gz, caplog):
    tsv = write(f"q.tsv{gz}", "qid\tquery\n1\tfirst query\n2\tsecond\n")
    assert load_queries(tsv) == {"1": "first query", "2": "second"}
    js = write(f"q.jsonl{gz}", json.dumps({"id": 1, "query": "x"}) + "\n\n")
    assert load_queries(js, split="test") == {"1": "x"}  # split ignored for a file
    assert load_queries(js, split="dev") == {"1": "x"}  # and said, where not the default
    warned = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warned == [f"split 'dev' ignored: {js} is a queries file: all its queries are read"]
    beir = js.parent / "beir"  # a BEIR folder without qrels/: its queries, not "no split"
    beir.mkdir()
    (beir / "queries.jsonl").write_text('{"_id": "1", "text": "x"}\n', encoding="utf-8")
    assert load_queries(beir, split="test") == load_queries(beir, split="dev") == {"1": "x"}
    assert f"split 'dev' ignored: {beir} has no qrels/: all its queries are read" in caplog.text


@pytest.mark.parametrize(
    ("name", "content", "line", "problem"),
    [
        ("q.jsonl", '{"_id": "a", "text": "x"}\n{"_id": "a"  "text": "y"}\n', 2, "malformed JSON"),
        ("q.jsonl", '{"_id": "a", "text": "x"}\n{"text": "y"}\n', 2, "missing id"),
        ("q.jsonl", '{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', 2, "duplicate query"),
        ("q.jsonl", '{"_id": "a", "text": " "}\n', 1, "query 'a' has an empty text"),
        ("q.tsv", "a\tx\nb\ty\tz\n", 2, "expected 2 tab-separated columns (id, text), found 3"),
        ("q.jsonl.gz", b'{"_id": "a", "text": "\xff"}\n', 1, "invalid UTF-8"),
    ],
)
def test_bad_queries(write, assert_error, name, content, line, problem):
    path = write(name, content)
    with pytest.raises(DataFormatError) as e:
        load_queries(path)
    assert_error(e, path, line, problem)


# ---------------------------------------------------------------- qrels


def test_beir_qrels(tiny_beir_dir):
    assert load_qrels(tiny_beir_dir) == {"q1": {"d2": 1}, "q2": {"d4": 1}, "q3": {"d6": 1}}
    assert load_qrels(tiny_beir_dir / "qrels" / "test.tsv") == load_qrels(tiny_beir_dir)
    assert available_splits(tiny_beir_dir) == ["test"]


def test_trec_qrels_and_grades(write, gz):
    path = write(f"qrels.txt{gz}", "q1 0 d1 2\nq1 0 d2 0\n\nq2\t0\td1\t-1\n")
    assert load_qrels(path) == {"q1": {"d1": 2, "d2": 0}, "q2": {"d1": -1}}


def test_headerless_beir_qrels(write):
    assert load_qrels(write("q.tsv", "q1\td1\t1\n")) == {"q1": {"d1": 1}}


def test_trec_qrels_with_a_header(write):
    assert load_qrels(write("q.tsv", "qid\titer\tdocid\trel\nq1\t0\td1\t1\n")) == {"q1": {"d1": 1}}


@pytest.mark.parametrize(
    ("content", "line", "problem"),
    [
        ("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\n", 3, "expected 3 fields"),
        ("q1 0 d1 1\nq1 d2 1\n", 2, "expected 4 fields (qid, iteration, docid, relevance)"),
        ("q1\td1\n", 1, "expected 3 fields (query-id, corpus-id, score) or 4"),
        ("qid\tdoc\tscore\nq1\td1\t0.5\n", 2, "relevance: expected an integer, found '0.5'"),
        ("q1\td1\thigh\n", 1, "relevance: expected an integer, found 'high'"),
        ("q1\td1\t1\nq2\td1\t1\nq1\td1\t0\n", 3, "judged twice (first at line 1)"),
    ],
)
def test_bad_qrels(write, assert_error, gz, content, line, problem):
    path = write(f"qrels.tsv{gz}", content)
    with pytest.raises(DataFormatError) as e:
        load_qrels(path)
    assert_error(e, path, line, problem)
