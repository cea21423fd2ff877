"""The two-stage CLI on a tiny model and corpus: train cat, rerank, search --rerank."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import read_run
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def workspace(tmp_path_factory, tiny_bert_dir):
    """A tiny BEIR dir, its dense index, a BM25 run and a cross-encoder trained by the CLI."""
    from tests.training.toy import make_training_beir

    root = tmp_path_factory.mktemp("cli_rerank")
    data = make_training_beir(root / "beir")  # 16 judged queries in qrels/train.tsv
    model = root / "cat"
    result = invoke(
        "-q", "train", "cat", data, model, "--base", tiny_bert_dir, "--first-stage", "bm25",
        "--depth", "5", "--n-negatives", "2", "--epochs", "2", "--batch-size", "4",
        "--max-length", "32", "--dev-fraction", "0.25", "--dev-depth", "4",
        "--teacher-weight", "0.3", "--teacher-temperature", "0.2", "--no-check",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "trained cross-encoder written to" in result.output
    index = root / "idx"
    result = invoke(
        "-q", "index", data, index, "--model", tiny_bert_dir, "--pooling", "mean",
        "--similarity", "cos", "--precision", "fp32",  # searched at fp32 below
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    bm25 = root / "bm25.trec"
    assert (
        invoke(
            "-q", "bm25", data, "--queries", data, "--split", "train", "--output", bm25, "-k", "6"
        ).exit_code
        == 0
    )
    return {"data": data, "model": model, "index": index, "bm25": bm25, "root": root}


def _cat(model) -> CrossEncoder:
    return CrossEncoder.load(CrossEncoderConfig(model=str(model), device="cpu", precision="fp32"))


def test_train_cat_writes_a_cross_encoder_with_its_record(workspace):
    record = json.loads((workspace["model"] / "dotcat_training.json").read_text())
    assert record["kind"] == "cat" and record["status"] == "finished"
    assert record["hyperparameters"]["first_stages"] == ["bm25"]
    assert record["hyperparameters"]["teacher_weight"] == 0.3
    assert record["hyperparameters"]["teacher_temperature"] == 0.2
    assert _cat(workspace["model"]).trained_head


def test_rerank_run_reorders_the_head_by_cross_encoder_scores(workspace):
    out = workspace["root"] / "reranked.trec"
    result = invoke(
        "-q", "rerank", workspace["bm25"], workspace["data"], workspace["model"],
        "--output", out, "--depth", "3", "--split", "train", "--precision", "fp32",
        "--interpolate", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "re-ranked 16 queries (48 pairs)" in result.output
    first, second = read_run(workspace["bm25"]), read_run(out)
    assert set(second) == set(first)
    from dotcat.data import load_corpus, load_queries
    from dotcat.search.reranker import corpus_texts

    queries = load_queries(workspace["data"])
    texts = corpus_texts(load_corpus(workspace["data"]), {d for r in first.values() for d in r})
    cat = _cat(workspace["model"])
    for qid, docs in first.items():
        head = [d for d, _ in sorted(docs.items(), key=lambda x: (-x[1], x[0]))][:3]
        want = cat.score([queries[qid]] * 3, [texts[d] for d in head])
        got = sorted(second[qid].items(), key=lambda x: -x[1])
        assert [d for d, _ in got[:3]] == [head[i] for i in np.argsort(-want, kind="stable")]
        np.testing.assert_allclose(sorted(want, reverse=True), [s for _, s in got[:3]], atol=1e-5)
        assert {d for d, _ in got[3:]} == set(docs) - set(head)  # the tail stays below
    result = invoke("eval", out, workspace["data"], "--split", "train")
    assert result.exit_code == 0 and "nDCG@10" in result.output


@pytest.mark.parametrize("backend", ["openvino", "onnxruntime"])
def test_rerank_backend_picks_the_int8_runtime(workspace, backend):
    pytest.importorskip(backend)
    out = workspace["root"] / f"int8-{backend}.trec"
    result = invoke(
        "-q", "rerank", workspace["bm25"], workspace["data"], workspace["model"],
        "--output", out, "--depth", "3", "--split", "train", "--precision", "int8",
        "--rerank-backend", backend, "--interpolate", "1",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    from dotcat.data import load_corpus, load_queries
    from dotcat.search.reranker import corpus_texts

    config = CrossEncoderConfig(model=str(workspace["model"]), precision="int8", backend=backend)
    cat = CrossEncoder.load(config)
    assert cat.backend == backend
    first, second = read_run(workspace["bm25"]), read_run(out)
    queries = load_queries(workspace["data"])
    texts = corpus_texts(load_corpus(workspace["data"]), {d for r in first.values() for d in r})
    for qid, docs in first.items():
        head = [d for d, _ in sorted(docs.items(), key=lambda x: (-x[1], x[0]))][:3]
        want = cat.score([queries[qid]] * 3, [texts[d] for d in head])
        np.testing.assert_allclose([second[qid][d] for d in head], want, atol=1e-5)
    bad = runner.invoke(app, ["rerank", str(workspace["bm25"]), str(workspace["data"]),
                              str(workspace["model"]), "--output", "x.trec",
                              "--rerank-backend", "tensorrt"])  # fmt: skip
    assert bad.exit_code == 2 and "--rerank-backend must be one of" in bad.output


def test_rerank_interpolate_auto_and_bad_values(workspace):
    out = workspace["root"] / "mixed.trec"
    args = ["rerank", workspace["bm25"], workspace["data"], workspace["model"], "--output", out]
    args += ["--split", "train"]
    assert invoke("-q", *args, "--interpolate", "auto").exit_code == 0
    assert invoke("-q", *args, "--interpolate", "0.5").exit_code == 0
    result = runner.invoke(app, [str(a) for a in args] + ["--interpolate", "2"])
    assert result.exit_code == 2 and "--interpolate must be in [0, 1]" in result.output
    # Weight 0 keeps the first stage's order and says the model did not run; a run query
    # that is not of the split is left out with a word.
    lines = Path(workspace["bm25"]).read_text().splitlines()
    extra = workspace["root"] / "extra.trec"
    extra.write_text("\n".join([*lines, "nosuchq Q0 " + lines[0].split()[2] + " 1 9.0 x"]) + "\n")
    args[1] = extra
    result = invoke(*args, "--interpolate", "0")
    assert "kept the first stage's order of 16 queries (the model not run" in result.output
    assert "1 of its 17 queries are not of split 'train'" in result.output, result.output
    assert read_run(out) == read_run(workspace["bm25"])


def test_rerank_follows_the_dev_chosen_weight_by_default(workspace):
    """No --interpolate: the weight `train cat` recorded, exactly as if it were given."""
    recorded = json.loads((workspace["model"] / "dotcat_cross_encoder.json").read_text())
    alpha = recorded["interpolation_alpha"]
    args = ["-q", "rerank", workspace["bm25"], workspace["data"], workspace["model"]]
    args += ["--split", "train", "--precision", "fp32"]
    default, given = workspace["root"] / "default.trec", workspace["root"] / "given.trec"
    result = invoke(*args, "--output", default)
    assert result.exit_code == 0 and f"interpolation {alpha:g} dev-chosen" in result.output
    assert invoke(*args, "--output", given, "--interpolate", str(alpha)).exit_code == 0
    assert read_run(default) == read_run(given)


def test_rerank_does_not_call_an_unchosen_weight_dev_chosen(workspace, tmp_path):
    """train cat --no-check under 100 queries without a dev split records weight 0, chosen by
    nothing: rerank says so, not "dev-chosen"."""
    import shutil

    model = tmp_path / "cat"
    shutil.copytree(workspace["model"], model)
    record = json.loads((model / "dotcat_cross_encoder.json").read_text())
    unchosen = {k: v for k, v in record.items() if not k.startswith("interpolation_")}
    (model / "dotcat_cross_encoder.json").write_text(
        json.dumps(unchosen | {"interpolation_alpha": 0})
    )
    args = ["rerank", workspace["bm25"], workspace["data"], model, "--split", "train"]
    result = invoke(*args, "--output", tmp_path / "out.trec")
    assert result.exit_code == 0, result.output
    assert "interpolation 0 recorded without a dev choice or held-out check" in result.output


def test_rerank_refuses_a_model_without_a_trained_head(workspace, tiny_bert_dir):
    args = ["rerank", workspace["bm25"], workspace["data"], tiny_bert_dir, "--output", "x.trec"]
    args += ["--split", "train"]
    result = runner.invoke(app, [str(a) for a in args])
    assert result.exit_code == 2 and "not a cross-encoder" in result.output


def test_rerank_accepts_a_sentence_transformers_cross_encoder(workspace, tiny_bert_dir):
    from sentence_transformers import CrossEncoder as STCrossEncoder

    st_dir = workspace["root"] / "st_ce"
    STCrossEncoder(str(tiny_bert_dir), num_labels=1, max_length=48).save(str(st_dir))
    out = workspace["root"] / "st.trec"
    result = invoke(
        "-q", "rerank", workspace["bm25"], workspace["data"], st_dir, "--output", out,
        "--depth", "2", "--split", "train",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "interpolation 1 plain" in result.output  # no dotcat record: the plain logit
    assert len(read_run(out)) == 16


def test_search_with_rerank_one_query_and_batch(workspace):
    result = invoke(
        "-q", "search", workspace["index"], "insulin glucose",
        "--rerank", workspace["model"], "--depth", "4", "-k", "3", "--json", "--full-text",
        "--precision", "fp32", "--interpolate", "1", "--first-stage", "dense",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    hits = json.loads(result.stdout)
    assert [h["rank"] for h in hits] == [1, 2, 3]
    scores = [h["score"] for h in hits]
    assert scores == sorted(scores, reverse=True)
    cat = _cat(workspace["model"])
    top = cat.score_query(
        "insulin glucose",
        [f"{h['title']} {h['text']}" for h in hits],
    )
    np.testing.assert_allclose(top, scores, atol=1e-5)

    out = workspace["root"] / "search_rerank.trec"
    result = invoke(
        "-q", "search", workspace["index"], "--queries", workspace["data"], "--output", out,
        "--split", "train", "--rerank", workspace["model"], "--depth", "4", "-k", "5",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert "re-ranked top 4" in result.output
    run = read_run(out)
    assert len(run) == 16 and all(len(docs) == 5 for docs in run.values())


def test_a_dev_weight_over_another_corpus_advises_calibration(
    workspace, tiny_bert_dir, tiny_beir_dir, tmp_path, caplog
):
    """The recorded dev weight is the training corpus's: over another corpus's index the
    pipeline says so (and how to choose one there), over the training corpus it does not."""
    import logging

    from dotcat.index import build_index
    from dotcat.models import EncoderConfig
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    other = tmp_path / "other"
    encoder = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    build_index(tiny_beir_dir, other, encoder, show_progress=False)

    def advice(index, advise=True, **settings) -> list[str]:
        caplog.clear()
        config = PipelineConfig(rerank=str(workspace["model"]), device="cpu", precision="fp32")
        with caplog.at_level(logging.WARNING, logger="dotcat.search.pipeline"):
            SearchPipeline(index, dataclasses.replace(config, **settings), advise=advise)
        return [r.getMessage() for r in caplog.records if "dotcat calibrate" in r.getMessage()]

    assert advice(workspace["index"]) == []
    (message,) = advice(other)
    assert "trained on another corpus" in message and f"dotcat calibrate {other}" in message
    assert advice(other, interpolate=0.5) == []  # a weight given: nothing to advise
    assert advice(other, advise=False) == []  # `dotcat calibrate` itself: no hint
