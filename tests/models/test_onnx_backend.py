"""The int8 path: ONNX export, quantisation, ONNX Runtime inference, caching, staleness.

Tolerances: the fp32 export must reproduce PyTorch (max |difference| of hidden states
<= 1e-4); int8 is judged as a user judges it, by rank agreement with fp32 (Spearman of
similarities / logits >= 0.95 on a tiny random model, whose weights have no trained structure
to protect; the real models' figures are in eval/benchmarks/results/precision.md).
"""

from __future__ import annotations

import json
import logging
import os
import re

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr
from tests.models.ranking_texts import DOCS
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.errors import DotcatError
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models import onnx_backend as ob
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig
from dotcat.models.export_files import EXPORT_RECORD
from dotcat.models.resolve import weights_fingerprint
from dotcat.models.runtime import is_int8

QUERIES = ["which animals were domesticated from wolves", "how do cells make ATP", "insulin"]


@pytest.fixture()
def bert_copy(tiny_bert_dir, tmp_path):
    """A writable copy of the tiny BERT (exports beside the weights write into it)."""
    import shutil

    return shutil.copytree(tiny_bert_dir, tmp_path / "bert")


@pytest.mark.kernels
def test_the_fp32_export_reproduces_pytorch(bert_copy, tmp_path):
    from transformers import AutoModel, AutoTokenizer

    fingerprint = weights_fingerprint(bert_copy)
    path = ob.export(bert_copy, "encoder", "fp32", tmp_path / "out", fingerprint)
    assert path.name == "model.onnx"
    runner = ob.OnnxRunner(path)
    assert runner.input_names == ["input_ids", "attention_mask", "token_type_ids"]
    assert [o.name for o in runner.session.get_outputs()] == ["last_hidden_state"]
    tokens = AutoTokenizer.from_pretrained(bert_copy)(DOCS, padding=True, return_tensors="np")
    hidden = runner(dict(tokens))
    model = AutoModel.from_pretrained(bert_copy).eval()
    with torch.inference_mode():
        expected = model(**{k: torch.from_numpy(v) for k, v in tokens.items()})[0].numpy()
    assert hidden.shape == expected.shape  # batch and sequence are dynamic
    assert np.abs(hidden - expected).max() <= 1e-4


def _similarities(encoder: BiEncoder) -> np.ndarray:
    return encoder.encode_queries(QUERIES) @ encoder.encode_documents(DOCS).T


@pytest.mark.kernels
@pytest.mark.parametrize("backend", ["onnxruntime", "openvino"])
def test_int8_encoder_ranks_like_fp32(tiny_bert_dir, backend):
    if backend == "openvino":
        pytest.importorskip("openvino")
    fp32 = BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32"))
    config = EncoderConfig(
        model=str(tiny_bert_dir), device="cpu", precision="int8", backend=backend
    )
    int8 = BiEncoder.load(config)
    assert int8.precision == "int8" and int8.manifest_entry()["precision"] == "int8"
    assert int8.backend == backend == int8.manifest_entry()["backend"]
    assert fp32.precision == "fp32" and fp32.onnx is None  # fp32 stays PyTorch, as before
    a, b = _similarities(fp32), _similarities(int8)
    assert not np.array_equal(a, b)  # int8 really ran
    assert b.dtype == np.float32
    for row_a, row_b in zip(a, b, strict=True):
        assert spearmanr(row_a, row_b).statistic >= 0.95
    # One query's vector does not depend on its batch, on the int8 path too.
    alone = int8.encode_queries(QUERIES[:1])
    np.testing.assert_allclose(alone[0], int8.encode_queries(QUERIES)[0], atol=1e-6)


@pytest.mark.kernels
def test_int8_cross_encoder_ranks_like_fp32(tiny_cat_dir):
    def scores(precision: str) -> np.ndarray:
        config = CrossEncoderConfig(model=str(tiny_cat_dir), device="cpu", precision=precision)
        return CrossEncoder.load(config).score_query("insulin glucose in blood", DOCS)

    a, b = scores("fp32"), scores("int8")
    assert np.ptp(a) > 0.1 and not np.array_equal(a, b)
    assert spearmanr(a, b).statistic >= 0.95
    assert np.argmax(a) == np.argmax(b)


@pytest.mark.kernels
def test_first_use_exports_into_the_cache_once(bert_copy, monkeypatch):
    BiEncoder.load(
        EncoderConfig(model=str(bert_copy), device="cpu", precision="int8", backend="onnxruntime")
    )
    home = ob.cache_home(weights_fingerprint(bert_copy))
    name = ob.export_name("int8")
    assert (home / name).is_file() and (home / "model.onnx").is_file()
    assert not (bert_copy / "onnx").exists()  # the user's model directory is not written
    record = json.loads((home / EXPORT_RECORD).read_text())[name]
    assert record["weights_sha256"] == weights_fingerprint(bert_copy)
    assert record["precision"] == "int8" and record["per_channel"] is True

    def no_export(*args, **kwargs):
        raise AssertionError("exported again")

    monkeypatch.setattr(ob, "export", no_export)
    encoder = BiEncoder.load(
        EncoderConfig(model=str(bert_copy), device="cpu", precision="int8", backend="onnxruntime")
    )
    assert encoder.onnx.path == home / name


@pytest.mark.kernels
def test_an_explicit_export_beside_the_weights_is_used(bert_copy, monkeypatch):
    result = CliRunner().invoke(app, ["export", str(bert_copy)])  # auto: ONNX for an encoder
    assert result.exit_code == 0, result.output
    name = ob.export_name("int8")
    assert (bert_copy / "onnx" / name).is_file()
    assert f"exported encoder {bert_copy} at int8" in result.output
    monkeypatch.setattr(ob, "export", lambda *a, **k: pytest.fail("exported again"))
    encoder = BiEncoder.load(
        EncoderConfig(model=str(bert_copy), device="cpu", precision="int8", backend="onnxruntime")
    )
    assert encoder.onnx.path == bert_copy / "onnx" / name


@pytest.mark.kernels
def test_a_stale_export_is_never_used(bert_copy, caplog):
    runner = CliRunner()
    assert runner.invoke(app, ["export", str(bert_copy), "--backend", "onnxruntime"]).exit_code == 0
    name = ob.export_name("int8")
    # New weights under the same directory: the recorded fingerprint no longer matches.
    from transformers import AutoModel

    model = AutoModel.from_pretrained(bert_copy)
    with torch.no_grad():
        model.encoder.layer[0].output.dense.weight.mul_(1.5)
    model.save_pretrained(bert_copy)
    with caplog.at_level(logging.WARNING, logger="dotcat.models.export_files"):
        encoder = BiEncoder.load(
            EncoderConfig(
                model=str(bert_copy), device="cpu", precision="int8", backend="onnxruntime"
            )
        )
    assert "stale" in caplog.text
    fingerprint = weights_fingerprint(bert_copy)
    assert encoder.onnx.path == ob.cache_home(fingerprint) / name
    record = json.loads((encoder.onnx.path.parent / EXPORT_RECORD).read_text())[name]
    assert record["weights_sha256"] == fingerprint
    # And the new export computes with the new weights.
    fp32 = BiEncoder.load(EncoderConfig(model=str(bert_copy), device="cpu", precision="fp32"))
    for row_a, row_b in zip(_similarities(fp32), _similarities(encoder), strict=True):
        assert spearmanr(row_a, row_b).statistic >= 0.95


@pytest.mark.kernels
def test_another_recipe_is_another_export(bert_copy, tmp_path):
    fingerprint = weights_fingerprint(bert_copy)
    home = tmp_path / "exports"
    plain = ob.export(bert_copy, "encoder", "int8", home, fingerprint)
    plain_bytes = plain.read_bytes()
    kept = ob.export(bert_copy, "encoder", "int8", home, fingerprint, keep_fp32="ffn_output")
    assert kept == plain and kept.read_bytes() != plain_bytes
    record = json.loads((home / EXPORT_RECORD).read_text())[plain.name]
    assert record["keep_fp32"] == "ffn_output"
    import onnx

    nodes = {n.name: n.op_type for n in onnx.load(str(kept)).graph.node}
    ffn_out = [n for n in nodes if "/output/dense/MatMul" in n and "attention" not in n]
    assert ffn_out and all(nodes[n] == "MatMul" for n in ffn_out)  # left in fp32
    assert any(op in ("MatMulInteger", "DynamicQuantizeLinear") for op in nodes.values())


def test_a_cross_encoders_avx2_export_is_smoothed_with_its_embeddings_in_fp32(
    tiny_cat_dir, bert_copy, tmp_path
):
    """The re-ranker's 7-bit recipe that keeps the bar (eval/studies/rerank_avx2_layers): its
    LayerNorm outputs smoothed (:mod:`dotcat.models.smoothquant`), every linear layer int8, the
    embedding tables unquantised. Other exports (an encoder's, a VNNI one) are neither, unless
    asked; ``first_ffns`` keeps layers 0-2's FFNs in fp32 instead."""
    import onnx

    def export(model, kind, variant, **how):
        home = tmp_path / f"{kind}-{variant}-{len(how)}"
        path = ob.export(model, kind, "int8", home, weights_fingerprint(model), variant=variant,
                         **how)  # fmt: skip
        graph = onnx.load(str(path)).graph
        record = json.loads((home / EXPORT_RECORD).read_text())[path.name]
        ops = {n.name: n.op_type for n in graph.node}
        ffns = [n for n in ops if re.search(r"layer\.[0-2]/(intermediate|output)/dense/MatMul", n)]
        tables = {t.name for t in graph.initializer if re.search(r"_embeddings\.weight$", t.name)}
        assert ffns and any(op == "MatMulInteger" for op in ops.values())
        smooth = sum(n.startswith("Smooth_") for n in ops)
        return record["keep_fp32"], all(ops[n] == "MatMul" for n in ffns), len(tables), smooth

    assert export(tiny_cat_dir, "cross-encoder", "avx2") == ("smoothed", False, 3, 4)
    assert export(tiny_cat_dir, "cross-encoder", "avx512_vnni") == ("none", False, 0, 0)
    assert export(bert_copy, "encoder", "avx2") == ("none", False, 0, 0)
    wanted = export(tiny_cat_dir, "cross-encoder", "avx2", keep_fp32="first_ffns")
    assert wanted == ("first_ffns", True, 3, 0)


def test_the_avx2_variant_uses_7_bit_weights(bert_copy, tmp_path):
    import onnx
    from onnx import numpy_helper

    fingerprint = weights_fingerprint(bert_copy)
    path = ob.export(bert_copy, "encoder", "int8", tmp_path, fingerprint, variant="avx2")
    assert path.name == "model_qint8_avx2.onnx"
    weights = [
        numpy_helper.to_array(t)
        for t in onnx.load(str(path)).graph.initializer
        if t.data_type == onnx.TensorProto.INT8 and t.dims and len(t.dims) == 2
    ]
    assert weights and max(int(np.abs(w).max()) for w in weights) <= 64  # reduce_range


@pytest.mark.kernels
def test_a_failed_export_leaves_no_file(bert_copy, tmp_path, monkeypatch):
    def broken(weights_dir, kind, out):
        out.write_bytes(b"half a model")
        raise RuntimeError("disk full")

    monkeypatch.setattr(ob, "_export_fp32", broken)
    with pytest.raises(RuntimeError, match="disk full"):
        ob.export(bert_copy, "encoder", "int8", tmp_path / "out", "f" * 64)
    assert sorted(os.listdir(tmp_path / "out")) == []


@pytest.mark.kernels
def test_a_damaged_export_is_made_again(bert_copy, caplog):
    fingerprint = weights_fingerprint(bert_copy)
    int8 = ob.find_or_export(bert_copy, "encoder", "int8", fingerprint)
    data = int8.with_name("model.onnx_data")
    feeds = {"input_ids": np.array([[101, 2054, 2003, 102]]), "attention_mask": np.ones((1, 4))}
    before = ob.OnnxRunner(int8)(feeds)
    with open(int8, "r+b") as f:  # same size, part zeroed: seen by its sha256 only
        f.seek(int8.stat().st_size // 2)
        f.write(bytes(4096))
    os.truncate(data, data.stat().st_size // 2)  # the fp32 weights the int8 file is made from
    with caplog.at_level(logging.WARNING, logger="dotcat.models.export_files"):
        assert ob.find_or_export(bert_copy, "encoder", "int8", fingerprint) == int8
    assert "model_qint8" in caplog.text and "is damaged" in caplog.text
    assert "model.onnx is damaged" in caplog.text
    np.testing.assert_allclose(ob.OnnxRunner(int8)(feeds), before, atol=1e-5)
    fp32 = ob.find_or_export(bert_copy, "encoder", "fp32", fingerprint)  # made again, current
    assert ob.OnnxRunner(fp32, per_text=False)(feeds).shape[:2] == (1, 4)
    # A record written before the files' sha256 were kept trusts the files there.
    record = int8.parent / EXPORT_RECORD
    entries = json.loads(record.read_text())
    record.write_text(json.dumps({k: {**v, "sha256": None} for k, v in entries.items()}))
    caplog.clear()
    assert ob.find_or_export(bert_copy, "encoder", "int8", fingerprint) == int8
    assert "damaged" not in caplog.text
    record.write_text(json.dumps(entries))  # (the cache is the session's: left as found)
    int8.write_bytes(b"not a model")
    with pytest.raises(DotcatError, match=f"{int8}: ONNX Runtime cannot load it .*; remove "):
        ob.OnnxRunner(int8)


def test_every_export_file_is_readable_as_the_umask_allows(bert_copy, tmp_path):
    umask = os.umask(0o022)
    try:
        ob.export(bert_copy, "encoder", "fp32", tmp_path / "home", weights_fingerprint(bert_copy))
    finally:
        os.umask(umask)
    modes = {p.name: oct(p.stat().st_mode & 0o777) for p in (tmp_path / "home").iterdir()}
    assert modes == dict.fromkeys(["model.onnx", "model.onnx_data", EXPORT_RECORD], "0o644")


@pytest.mark.kernels
def test_cross_encoder_export_and_refusals(tiny_cat_dir, tiny_bert_dir, tmp_path):
    import shutil

    cat = shutil.copytree(tiny_cat_dir, tmp_path / "cat")
    result = CliRunner().invoke(app, ["export", str(cat), "--precision", "fp32"])
    assert result.exit_code == 0 and "exported cross-encoder" in result.output
    runner = ob.OnnxRunner(cat / "onnx" / "model.onnx")
    assert [o.name for o in runner.session.get_outputs()] == ["logits"]
    # A re-ranker needs a trained head; int8 runs on CPU only.
    with pytest.raises(DotcatError, match="not a cross-encoder"):
        CrossEncoder.load(
            CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="int8")
        )
    with pytest.raises(DotcatError, match="runs on CPU only"):
        is_int8("int8", torch.device("cuda"))
    bad = CliRunner().invoke(app, ["export", str(cat), "--precision", "int4"])
    assert bad.exit_code != 0 and "--precision must be one of int8, fp32" in bad.output
    # Which units stay fp32 is a choice of ONNX Runtime's int8 export alone.
    for how in (["--precision", "fp32"], ["--backend", "openvino"]):
        unused = CliRunner().invoke(app, ["export", str(cat), "--keep-fp32", "first_ffns", *how])
        assert unused.exit_code != 0 and "--keep-fp32 first_ffns: ONNX Runtime's int8 only" in (
            unused.output
        )
    two = shutil.copytree(tiny_cat_dir, tmp_path / "two", ignore=shutil.ignore_patterns("onnx"))
    config = json.loads((two / "config.json").read_text())  # 2 labels, as transformers saves it
    del config["id2label"], config["label2id"]
    (two / "config.json").write_text(json.dumps(config))
    refused = CliRunner().invoke(app, ["export", str(two), "--precision", "fp32"])
    assert refused.exit_code != 0 and "classifier with several labels" in refused.output


def test_sentence_transformers_loads_the_exports(bert_copy, tiny_cat_dir, tmp_path):
    # sentence-transformers' ONNX backend needs Optimum (optimum-onnx pins transformers < 4.58,
    # so it cannot be installed beside transformers 5): checked where it is installed.
    pytest.importorskip("optimum.onnxruntime")
    from sentence_transformers import SentenceTransformer

    assert CliRunner().invoke(app, ["export", str(bert_copy), "--precision", "fp32"]).exit_code == 0
    # A plain Hugging Face directory: sentence-transformers mean-pools, unnormalised.
    config = EncoderConfig(model=str(bert_copy), precision="fp32", pooling="mean", similarity="dot")
    ours = BiEncoder.load(config).encode_documents(DOCS)
    st = SentenceTransformer(str(bert_copy), backend="onnx", device="cpu")
    np.testing.assert_allclose(st.encode(DOCS), ours, atol=1e-4)
