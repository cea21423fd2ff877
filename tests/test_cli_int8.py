"""The int8 path from the command line: an int8 index, searched, served, and the refusals."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.errors import DotcatError
from dotcat.index.manifest import Manifest, check_encoder

runner = CliRunner()


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def _index(beir, model, out, precision, *extra):
    result = invoke(
        "-q",
        "index",
        beir,
        out,
        "--model",
        model,
        "--pooling",
        "mean",
        "--similarity",
        "cos",
        "--precision",
        precision,
        *extra,
    )
    assert result.exit_code == 0, result.output
    return json.loads((out / "manifest.json").read_text())


def _top(index, query, *extra):
    result = invoke("search", index, query, "-k", "3", "--json", "--first-stage", "dense", *extra)
    assert result.exit_code == 0, result.output
    return json.loads(result.output[result.output.index("[") :])


def test_an_int8_index_records_int8_and_is_searched_at_int8(tiny_beir_dir, tiny_bert_dir, tmp_path):
    manifest = _index(tiny_beir_dir, tiny_bert_dir, tmp_path / "int8", "int8")
    assert manifest["encoder"]["precision"] == "int8"
    query = "Dogs Dogs were domesticated from wolves long ago."  # d2's indexed text
    hits = _top(tmp_path / "int8", query)  # auto follows the index: int8 queries
    assert hits[0]["doc_id"] == "d2"
    # The same text indexed and searched at int8 meets itself (one text per call: a vector
    # does not depend on its batch), as closely as at fp32.
    assert abs(hits[0]["score"] - 1.0) < 1e-5
    assert _top(tmp_path / "int8", query, "--precision", "int8") == hits


def test_queries_follow_the_int8_runtime_the_index_records(tiny_beir_dir, tiny_bert_dir, tmp_path):
    pytest.importorskip("openvino")
    query = "Dogs Dogs were domesticated from wolves long ago."  # d2's indexed text
    for backend in ("openvino", "onnxruntime"):
        out = tmp_path / backend
        manifest = _index(tiny_beir_dir, tiny_bert_dir, out, "int8", "--int8-backend", backend)
        assert manifest["encoder"]["backend"] == backend
        hits = _top(out, query)  # auto: the index's runtime, so d2 meets its own vector
        assert hits[0]["doc_id"] == "d2" and abs(hits[0]["score"] - 1.0) < 1e-5
    # An index from before OpenVINO encoded documents records no runtime: ONNX Runtime's.
    path = tmp_path / "onnxruntime" / "manifest.json"
    old = json.loads(path.read_text())
    del old["encoder"]["backend"]
    path.write_text(json.dumps(old))
    hits = _top(tmp_path / "onnxruntime", query)
    assert hits[0]["doc_id"] == "d2" and abs(hits[0]["score"] - 1.0) < 1e-5
    # Vectors of one int8 runtime are not searched with the other's.

    manifest = Manifest.read(tmp_path / "openvino")
    entry = {**manifest.encoder, "backend": "onnxruntime"}
    with pytest.raises(DotcatError, match="made by openvino, the query encoder runs int8 on"):
        check_encoder(manifest, entry, tmp_path / "openvino")
    check_encoder(manifest, manifest.encoder, tmp_path / "openvino")  # the same runtime meets


def test_int8_and_fp32_vectors_do_not_meet(tiny_beir_dir, tiny_bert_dir, tmp_path):
    _index(tiny_beir_dir, tiny_bert_dir, tmp_path / "int8", "int8")
    refused = invoke("search", tmp_path / "int8", "cats", "--precision", "fp32")
    assert refused.exit_code != 0
    assert "encoded at int8" in refused.output and "--precision int8" in refused.output
    _index(tiny_beir_dir, tiny_bert_dir, tmp_path / "fp32", "fp32")
    refused = invoke("search", tmp_path / "fp32", "cats", "--precision", "int8")
    assert refused.exit_code != 0 and "encoded at fp32" in refused.output
    # bf16 queries on an fp32 index are allowed (cosine >= 0.9999 between the two).
    assert invoke("search", tmp_path / "fp32", "cats", "--precision", "bf16").exit_code == 0


def test_a_bad_precision_is_one_line(tiny_beir_dir, tiny_bert_dir, tmp_path):
    result = invoke(
        "index", tiny_beir_dir, tmp_path / "x", "--model", tiny_bert_dir, "--precision", "int4"
    )
    assert result.exit_code != 0
    assert "--precision must be one of auto, fp32, bf16, fp16, int8" in result.output


def test_added_documents_follow_the_index_precision(tiny_beir_dir, tiny_bert_dir, tmp_path):
    _index(tiny_beir_dir, tiny_bert_dir, tmp_path / "int8", "int8")
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"_id": "d7", "title": "Owls", "text": "Owls hunt at night."}) + "\n")
    added = invoke("-q", "add", tmp_path / "int8", new)  # auto: int8, as the index
    assert added.exit_code == 0, added.output
    assert _top(tmp_path / "int8", "Owls Owls hunt at night.")[0]["doc_id"] == "d7"
    refused = invoke("-q", "add", tmp_path / "int8", new, "--precision", "fp32", "--upsert")
    assert refused.exit_code != 0 and "encoded at int8" in refused.output
