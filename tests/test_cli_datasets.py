"""``dotcat datasets`` end to end against a local HTTP server (127.0.0.1): get a dataset
(checksum verified, BEIR layout written), index it with a tiny BERT, search and evaluate it,
by its folder and by its name; each bad archive fails in one line and writes nothing."""

from __future__ import annotations

import json

import pytest
from tests.data.archive_server import ArchiveServer, Served, beir_files, make_zip, md5
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import read_run
from dotcat.data.catalog import CATALOG_ENV, RECORD_NAME, URL_ENV

runner = CliRunner()
GOOD = make_zip(beir_files())


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture()
def served(tmp_path, monkeypatch):
    """beir/tiny (good), beir/gone (404), beir/wrong (another md5), beir/cut (truncated)."""
    server = ArchiveServer()
    server.files = {
        "/tiny.zip": Served(GOOD),
        "/wrong.zip": Served(make_zip(beir_files(), top="other")),
        "/cut.zip": Served(GOOD[:700]),
    }
    names = {"tiny": "tiny.zip", "gone": "gone.zip", "wrong": "wrong.zip", "cut": "cut.zip"}
    catalog = {f"beir/{n}": {"file": f, "md5": md5(GOOD)} for n, f in names.items()}
    (tmp_path / "catalog.json").write_text(json.dumps(catalog))
    monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "catalog.json"))
    monkeypatch.setenv(URL_ENV, server.url)
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # a proxy of the machine must not take it
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path / "cache"))
    monkeypatch.chdir(tmp_path)
    yield server
    server.close()


def test_get_index_search_and_evaluate(served, tmp_path, tiny_bert_dir):
    result = invoke("-q", "datasets", "get", "beir/tiny", "tiny")
    assert result.exit_code == 0, result.output
    assert f"md5 {md5(GOOD)} (verified: the published one)" in result.stdout
    assert "qrels splits dev, test" in result.stdout
    assert json.loads((tmp_path / "tiny" / RECORD_NAME).read_text())["md5"] == md5(GOOD)

    model = ["--model", tiny_bert_dir, "--pooling", "mean", "--similarity", "cos"]
    assert invoke("-q", "index", "tiny", "idx", *model).exit_code == 0
    result = invoke("-q", "search", "idx", "--queries", "tiny", "--output", "run.trec", "-k", 5)
    assert result.exit_code == 0, result.output
    assert sorted(read_run(tmp_path / "run.trec")) == ["q1", "q2", "q3"]  # the test split
    result = invoke("eval", "run.trec", "tiny", "-m", "nDCG@10")
    assert result.exit_code == 0, result.output
    assert "| run.trec" in result.stdout and "nDCG@10" in result.stdout

    # The name works wherever the folder does: fetched once into the cache, then found there.
    result = invoke("-q", "search", "idx", "--queries", "beir/tiny", "--output", "by_name.trec",
                    "-k", 5)  # fmt: skip
    assert result.exit_code == 0, result.output
    assert read_run(tmp_path / "by_name.trec") == read_run(tmp_path / "run.trec")
    assert invoke("-q", "index", "beir/tiny", "idx2", *model).exit_code == 0
    result = invoke("-q", "bm25", "beir/tiny", "--queries", "beir/tiny", "--output", "bm25.trec")
    assert result.exit_code == 0, result.output
    result = invoke("eval", "bm25.trec", "by_name.trec", "beir/tiny", "--baseline", "bm25.trec")
    assert result.exit_code == 0, result.output
    assert "| bm25.trec (baseline)" in result.stdout
    assert [path for path, _ in served.requests] == ["/tiny.zip", "/tiny.zip"]  # get, cache

    result = invoke("datasets", "list")
    assert result.exit_code == 0
    row = next(line for line in result.stdout.splitlines() if "| beir/tiny " in line)
    assert md5(GOOD) in row and str(tmp_path / "cache") in row


@pytest.mark.parametrize(
    ("name", "problem"),
    [
        ("beir/gone", "HTTP 404"),
        ("beir/wrong", "expected " + md5(GOOD) + " (the published checksum)"),
        ("beir/cut", "expected " + md5(GOOD) + " (the published checksum)"),
        ("beir/tinny", "did you mean beir/tiny?"),
    ],
)
def test_bad_archives_fail_in_one_line(served, tmp_path, name, problem):
    result = runner.invoke(app, ["-q", "datasets", "get", name, "out"])
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("dotcat: error: ") and problem in lines[0]
    assert "Traceback" not in result.output and not (tmp_path / "out").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name != "cache") == ["catalog.json"]


@pytest.mark.parametrize(
    ("held", "kind"),
    [([{"beir/tiny": {"file": "tiny.zip"}}], "a list"), ("beir/tiny", "a string"), (None, "null")],
)
def test_a_catalogue_that_is_no_json_object_is_one_line_not_ignored(
    tmp_path, monkeypatch, held, kind
):
    """A list of entries was read as no entry at all, without a word (issue 64)."""
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps(held))
    monkeypatch.setenv(CATALOG_ENV, str(path))
    result = invoke("datasets", "list")
    assert result.exit_code == 2 and "Traceback" not in result.output
    expected = f"{path} ({CATALOG_ENV}): holds {kind}, expected an object of entries"
    assert expected in result.output, result.output
    assert len(result.output.strip().splitlines()) == 1


@pytest.mark.parametrize(
    "spec",
    [{"file": "t.zip", "subsets": 5}, {"file": "t.zip", "subsets": "cqa"},
     {"file": "t.zip", "md5": 123}, {"file": "t.zip", "description": ["x"]}],
)  # fmt: skip
def test_an_entry_with_a_field_of_another_type_is_one_line(tmp_path, monkeypatch, spec):
    """A number for its subsets was a TypeError's traceback; a string, one subset per letter."""
    path = tmp_path / "catalog.json"
    path.write_text(json.dumps({"mine": spec}))
    monkeypatch.setenv(CATALOG_ENV, str(path))
    result = invoke("datasets", "list")
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert f"{path} ({CATALOG_ENV}): mine: md5 and description are text" in result.output
