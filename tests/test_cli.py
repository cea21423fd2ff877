"""The CLI end to end on a tiny model and corpus: index, search, batch search, bm25, eval."""

from __future__ import annotations

import gzip
import json

import pytest
from typer.testing import CliRunner

from dotcat.cli import app

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture()
def tiny_index(tiny_beir_dir, tiny_bert_dir, tmp_path):
    out = tmp_path / "idx"
    result = invoke(
        "-q",
        "index",
        tiny_beir_dir,
        out,
        "--model",
        tiny_bert_dir,
        "--pooling",
        "mean",
        "--similarity",
        "cos",
    )
    assert result.exit_code == 0, result.output
    assert "indexed 6 documents" in result.output
    return out


def test_search_one_query_table_and_json(tiny_index, tiny_docs):
    result = invoke(
        "search", tiny_index, "Cats are small domesticated carnivorous mammals.", "-k", "3"
    )
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split()[:4] == ["rank", "fused", "score", "doc"]  # hybrid: linear 0.5
    assert len([line for line in lines if line.strip().startswith(("1 ", "2 ", "3 "))]) == 3

    result = invoke(
        "search",
        tiny_index,
        "Cats Cats are small domesticated carnivorous mammals.",
        "-k",
        "2",
        "--json",
    )
    hits = json.loads(result.stdout)
    assert [h["rank"] for h in hits] == [1, 2]
    assert {"doc_id", "score", "title", "snippet", "highlights", "fields"} <= set(hits[0])
    assert "text" not in hits[0]  # the whole text only with --full-text
    assert {h["score_kind"] for h in hits} == {"fused"}
    assert hits[0]["score"] >= hits[1]["score"]


def test_batch_search_bm25_and_eval(tiny_index, tiny_beir_dir, tmp_path):
    dense_run = tmp_path / "dense.trec"
    result = invoke(
        "-q",
        "search",
        tiny_index,
        "--queries",
        tiny_beir_dir,
        "--split",
        "test",
        "--output",
        dense_run,
        "-k",
        "5",
    )
    assert result.exit_code == 0, result.output
    rows = [line.split() for line in dense_run.read_text().splitlines()]
    assert {r[0] for r in rows} == {"q1", "q2", "q3"}
    assert all(len(r) == 6 and r[1] == "Q0" for r in rows)
    assert [int(r[3]) for r in rows if r[0] == "q1"] == [1, 2, 3, 4, 5]

    bm25_run = tmp_path / "bm25.trec"
    result = invoke(
        "-q", "bm25", tiny_beir_dir, "--queries", tiny_beir_dir, "--output", bm25_run, "-k", "5"
    )
    assert result.exit_code == 0, result.output
    first = {
        r.split()[0]: r.split()[2] for r in bm25_run.read_text().splitlines() if r.split()[3] == "1"
    }
    assert first["q1"] == "d2" and first["q3"] == "d6"  # lexical overlap makes these easy

    result = invoke("eval", bm25_run, dense_run, tiny_beir_dir, "--split", "test")
    assert result.exit_code == 0, result.output
    assert (
        "nDCG@10" in result.output
        and "bm25.trec" in result.output
        and "dense.trec" in result.output
    )

    result = invoke("eval", bm25_run, tiny_beir_dir, "-m", "RR@10", "--json")
    report = json.loads(result.stdout)["bm25.trec"]
    assert 0.0 < report["aggregate"]["RR@10"] <= 1.0


def test_index_refuses_another_encoder(tiny_index, tiny_bert_dir, tmp_path):
    from transformers import AutoModel

    other = tmp_path / "other_model"
    model = AutoModel.from_pretrained(tiny_bert_dir)
    for p in model.parameters():
        p.data.add_(0.01)
    model.save_pretrained(other)
    for f in tiny_bert_dir.iterdir():
        if f.name.startswith(("tokenizer", "vocab", "special")):
            (other / f.name).write_bytes(f.read_bytes())
    result = runner.invoke(app, ["search", str(tiny_index), "cats", "--model", str(other)])
    assert result.exit_code == 2
    assert "refusing to search" in result.output and str(other) in result.output


def test_a_model_folder_moved_after_indexing_is_named_with_the_way_out(
    tiny_beir_dir, tiny_bert_dir, tmp_path
):
    import shutil

    model = shutil.copytree(tiny_bert_dir, tmp_path / "mine")
    assert invoke("-q", "index", tiny_beir_dir, tmp_path / "idx", "--model", model).exit_code == 0
    model.rename(tmp_path / "moved")
    result = runner.invoke(app, ["search", str(tmp_path / "idx"), "cats"])
    assert result.exit_code == 2
    assert f"the index's model {model} is gone" in result.output and "--model DIR" in result.output
    result = invoke("search", tmp_path / "idx", "cats", "--model", tmp_path / "moved")
    assert result.exit_code == 0 and "gone" not in result.output


def test_bad_corpus_line_is_one_clear_error(tiny_bert_dir, tmp_path):
    corpus = tmp_path / "bad.jsonl.gz"
    with gzip.open(corpus, "wt") as f:
        f.write('{"_id": "a", "text": "fine"}\n{"_id": "b", "text": broken}\n')
    result = runner.invoke(
        app, ["index", str(corpus), str(tmp_path / "idx"), "--model", str(tiny_bert_dir)]
    )
    assert result.exit_code == 2
    assert "bad.jsonl.gz:2" in result.output and "Traceback" not in result.output
    assert not (tmp_path / "idx").exists()


def test_search_argument_errors(tiny_index):
    result = runner.invoke(app, ["search", str(tiny_index), "--output", "r.trec"])
    assert result.exit_code == 2 and "give --queries too" in result.output
    result = runner.invoke(app, ["search", str(tiny_index), "q", "--full-text"])
    assert result.exit_code == 2 and "--full-text goes with --json" in result.output
    result = runner.invoke(app, ["search", str(tiny_index), "q", "--queries", "x", "--output", "r"])
    assert result.exit_code == 2 and "not both" in result.output
    result = runner.invoke(app, ["search"])
    assert result.exit_code == 2 and "give an INDEX" in result.output


def test_search_with_feedback(tiny_index, tiny_beir_dir, tmp_path):
    from dotcat.search.pipeline import SearchPipeline

    query = "Cats are small domesticated carnivorous mammals."
    options = ["--first-stage", "bm25", "--prf", "rm3", "--fb-docs", "2", "--fb-terms", "3"]
    result = invoke("search", tiny_index, query, "-k", "3", "--json", *options)
    assert result.exit_code == 0, result.output
    pipeline = SearchPipeline(tiny_index, first_stage="bm25", prf="rm3", fb_docs=2, fb_terms=3)
    expected = pipeline.search(query, 3)
    assert [(h["doc_id"], h["score"]) for h in json.loads(result.stdout)] == [
        (h.doc_id, pytest.approx(h.score)) for h in expected
    ]
    run = tmp_path / "rocchio.trec"
    result = invoke("-q", "search", tiny_index, "--queries", tiny_beir_dir, "--output", run,
                    "--prf", "rocchio", "--rocchio-docs", "2", "--device", "cpu")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert run.is_file()
    result = runner.invoke(app, ["search", str(tiny_index), "q", "--first-stage", "dense",
                                 "--prf", "rm3"])  # fmt: skip
    assert result.exit_code == 2
    assert "--prf" in result.output and "rewrites the bm25 side" in result.output
    assert "Traceback" not in result.output


def test_train_dot_then_index_with_the_trained_model(tiny_beir_dir, tiny_bert_dir, tmp_path):
    import shutil

    shutil.copy(tiny_beir_dir / "qrels" / "test.tsv", tiny_beir_dir / "qrels" / "train.tsv")
    out = tmp_path / "trained"
    result = invoke(
        "-q", "train", "dot", tiny_beir_dir, out, "--base", tiny_bert_dir, "--epochs", "1",
        "--batch-size", "2", "--negatives", "none", "--max-length", "32",
        "--dev-fraction", "0.3", "--no-check",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert (out / "modules.json").is_file() and (out / "dotcat_training.json").is_file()
    result = invoke("-q", "index", tiny_beir_dir, tmp_path / "idx", "--model", out)
    assert result.exit_code == 0, result.output
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    assert manifest["encoder"]["path"] == str(out.resolve())
    # Too few dev queries to tell fusions apart: the prior is kept, and the command says why.
    assert (manifest["fusion"]["method"], manifest["fusion"]["weight"]) == ("linear", 0.5)
    assert manifest["fusion"]["dev"]["tied"] == []
    assert "why (paired one-standard-error rule): only" in result.output
    assert "kept the prior default linear 0.5" in result.output


def test_train_stopped_by_steps_says_so_not_that_a_model_was_written(
    tiny_beir_dir, tiny_bert_dir, tmp_path
):
    import shutil

    shutil.copy(tiny_beir_dir / "qrels" / "test.tsv", tiny_beir_dir / "qrels" / "train.tsv")
    out = tmp_path / "stopped"
    result = invoke(
        "train", "dot", tiny_beir_dir, out, "--base", tiny_bert_dir, "--epochs", "1",
        "--batch-size", "2", "--negatives", "none", "--max-length", "32", "--no-check",
        "--stop-after-steps", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "training:" not in result.output  # not a terminal: no bar in a seconds-long run
    assert "no model in" in result.output and "--resume continues" in result.output
    assert "written to" not in result.output and not (out / "modules.json").exists()


def test_train_dot_bad_option_is_one_line(tiny_beir_dir, tmp_path):
    result = runner.invoke(
        app, ["train", "dot", str(tiny_beir_dir), str(tmp_path / "o"), "--loss", "hinge"]
    )
    assert result.exit_code == 2 and "loss must be one of" in result.output
