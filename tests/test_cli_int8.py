"""The int8 path from the command line: an int8 index, searched, served, and the refusals."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.errors import DotcatError
from dotcat.index.manifest import Manifest, check_encoder
from dotcat.models import runtime

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
    return json.loads(result.stdout[result.stdout.index("[") :])  # stderr may hold a warning


@pytest.mark.kernels
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


@pytest.mark.kernels
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


@pytest.mark.kernels
def test_float_queries_meet_int8_documents_but_int8_queries_not_float_ones(
    tiny_beir_dir, tiny_bert_dir, tmp_path
):
    query = "Dogs Dogs were domesticated from wolves long ago."  # d2's indexed text
    backends = ("onnxruntime", "openvino") if runtime.openvino_installed() else ("onnxruntime",)
    for backend in backends:
        out = tmp_path / backend
        _index(tiny_beir_dir, tiny_bert_dir, out, "int8", "--int8-backend", backend)
        int8 = _top(out, query)
        for precision in ("fp32", "bf16"):  # an int8 index searched at another precision
            hits = _top(out, query, "--precision", precision)
            assert hits[0]["doc_id"] == "d2" == int8[0]["doc_id"]
            # int8 documents against float queries: the text still meets itself, to within
            # what int8 moves a vector (a random tiny BERT: cosine >= 0.98 with fp32's).
            assert 0.98 < hits[0]["score"] <= 1.0 + 1e-5
    _index(tiny_beir_dir, tiny_bert_dir, tmp_path / "fp32", "fp32")
    refused = invoke("search", tmp_path / "fp32", "cats", "--precision", "int8")
    assert refused.exit_code != 0
    assert (
        "encoded at fp32; int8 queries" in refused.output and "--precision fp32" in refused.output
    )
    # bf16 queries on an fp32 index are allowed (cosine >= 0.9999 between the two).
    assert invoke("search", tmp_path / "fp32", "cats", "--precision", "bf16").exit_code == 0


@pytest.mark.kernels
def test_the_index_records_the_queries_precision_auto_chose_and_searches_follow_it(
    tiny_beir_dir, tiny_bert_dir, tmp_path, monkeypatch
):
    """A CPU kind whose ``auto`` runs documents at int8 and queries at bf16: the index records
    both, prints them, and a search (``auto``) runs its queries at bf16; an index from before
    the queries were recorded is searched at its documents' precision."""
    from dotcat.search.dense import DenseRetriever

    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, "on")
    monkeypatch.setitem(runtime.AUTO_ENCODER, "vnni+bf16", ("int8", "bf16"))
    out = tmp_path / "mixed"
    result = invoke("index", tiny_beir_dir, out, "--model", tiny_bert_dir, "--pooling", "mean",
                    "--similarity", "cos")  # fmt: skip
    assert result.exit_code == 0, result.output
    manifest = json.loads((out / "manifest.json").read_text())
    backend = manifest["encoder"]["backend"]
    assert manifest["encoder"]["precision"] == "int8"
    assert manifest["encoder"]["queries"] == {"precision": "bf16", "backend": "torch"}
    line = f"precision: documents int8 ({backend}), queries bf16; auto on this CPU (vnni+bf16)"
    assert line in result.output
    assert DenseRetriever(out).encoder.precision == "bf16"
    assert _top(out, "Dogs Dogs were domesticated from wolves long ago.")[0]["doc_id"] == "d2"
    # Added documents are encoded as the index's documents were, not as its queries.
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"_id": "d7", "title": "Owls", "text": "Owls hunt at night."}) + "\n")
    assert invoke("-q", "add", out, new).exit_code == 0
    assert _top(out, "Owls Owls hunt at night.")[0]["doc_id"] == "d7"
    # An older manifest has no "queries": auto searches at the documents' precision.
    old = json.loads((out / "manifest.json").read_text())
    del old["encoder"]["queries"]
    (out / "manifest.json").write_text(json.dumps(old))
    assert DenseRetriever(out).encoder.precision == "int8"


def test_a_bad_precision_is_one_line(tiny_beir_dir, tiny_bert_dir, tmp_path):
    result = invoke(
        "index", tiny_beir_dir, tmp_path / "x", "--model", tiny_bert_dir, "--precision", "int4"
    )
    assert result.exit_code != 0
    assert "--precision must be one of auto, fp32, bf16, fp16, int8" in result.output


@pytest.mark.kernels
def test_added_documents_follow_the_index_precision(tiny_beir_dir, tiny_bert_dir, tmp_path):
    _index(tiny_beir_dir, tiny_bert_dir, tmp_path / "int8", "int8")
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"_id": "d7", "title": "Owls", "text": "Owls hunt at night."}) + "\n")
    added = invoke("-q", "add", tmp_path / "int8", new)  # auto: int8, as the index
    assert added.exit_code == 0, added.output
    assert _top(tmp_path / "int8", "Owls Owls hunt at night.")[0]["doc_id"] == "d7"
    refused = invoke("-q", "add", tmp_path / "int8", new, "--precision", "fp32", "--upsert")
    assert refused.exit_code != 0 and "encoded at int8" in refused.output
    assert f"error: {tmp_path / 'int8'}: " in refused.output  # the index, not its build folder
