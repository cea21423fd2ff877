"""The query encoder without PyTorch (:mod:`dotcat.models.exported_encoder`): BiEncoder's
token ids and vectors from an export of the same weights, and when a search gets one.

Tolerance: fp32 vectors of ONNX Runtime and PyTorch agree to 1e-5 per component (the acceptance
of issue 66: ids equal, scores within 1e-5); int8 runs the runner BiEncoder runs, on the same
feeds, so its vectors are BiEncoder's to float rounding (1e-6).
"""

from __future__ import annotations

import shutil
import sys

import numpy as np
import pytest
from tests.models.ranking_texts import DOCS

from dotcat.index.encoder import load_query_encoder
from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.exported_encoder import ExportedEncoder, try_load

QUERIES = ["which animals were domesticated from wolves", "how do cells make ATP", "insulin"]
LONG = "blood glucose regulation in mammals " * 200  # far past any window


def _config(model, **settings) -> EncoderConfig:
    defaults = dict(model=str(model), device="cpu", pooling="mean", similarity="cos",
                    max_length=64, precision="fp32")  # fmt: skip
    return EncoderConfig(**{**defaults, **settings})


@pytest.mark.kernels
@pytest.mark.parametrize("pooling,similarity", [("mean", "cos"), ("cls", "dot")])
def test_fp32_vectors_are_pytorchs(tiny_bert_dir, pooling, similarity):
    config = _config(tiny_bert_dir, pooling=pooling, similarity=similarity)
    exported, torch_encoder = ExportedEncoder.load(config), BiEncoder.load(config)
    assert exported.backend == "onnxruntime" and exported.precision == "fp32"
    graph, weights = exported.runner.path, exported.runner.path.with_suffix(".onnx_data")
    assert weights.stat().st_size > 10 * graph.stat().st_size  # mapped, not parsed (startup)
    for encode in ("encode_queries", "encode_documents"):
        texts = [*QUERIES, *DOCS, LONG]
        got = getattr(exported, encode)(texts)
        want = getattr(torch_encoder, encode)(texts)
        assert got.shape == want.shape == (len(texts), torch_encoder.dim)
        assert np.abs(got - want).max() <= 1e-5
    one = exported.encode_queries(QUERIES[0])
    assert one.shape == (torch_encoder.dim,)
    assert np.abs(one - exported.encode_queries(QUERIES)[0]).max() <= 1e-6  # batch-independent


@pytest.mark.kernels
def test_a_distilbert_without_token_types_or_hidden_size_is_exported(tiny_bert_dir, tmp_path):
    from transformers import AutoTokenizer, DistilBertConfig, DistilBertModel

    tokenizer = AutoTokenizer.from_pretrained(tiny_bert_dir)
    config = DistilBertConfig(
        vocab_size=tokenizer.vocab_size, dim=32, n_layers=2, n_heads=2, hidden_dim=64
    )  # fmt: skip (its config names no hidden_size)
    DistilBertModel(config).eval().save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    exported, torch_encoder = (
        ExportedEncoder.load(_config(tmp_path)),
        BiEncoder.load(_config(tmp_path)),
    )
    assert exported.dim == torch_encoder.dim == 32
    got, want = exported.encode_documents(DOCS), torch_encoder.encode_documents(DOCS)
    assert np.abs(got - want).max() <= 1e-5


@pytest.mark.kernels
def test_token_ids_and_counts_are_transformers(tiny_bert_dir):
    config = _config(tiny_bert_dir, max_length=16)
    exported, torch_encoder = ExportedEncoder.load(config), BiEncoder.load(config)
    texts = [*QUERIES, *DOCS, LONG, ""]
    got = [x.tolist() for x in exported._tokenize(texts)]
    assert got == [x.tolist() for x in torch_encoder._tokenize(texts)]
    assert max(map(len, got)) == 16 and got[-1] == [101, 102]  # [CLS] [SEP] of an empty text
    for text in (*QUERIES, LONG):
        assert exported.query_tokens(text) == torch_encoder.query_tokens(text)


@pytest.mark.kernels
def test_int8_vectors_are_the_int8_bi_encoders(tiny_bert_dir):
    config = _config(tiny_bert_dir, precision="int8", backend="onnxruntime")
    exported, torch_encoder = ExportedEncoder.load(config), BiEncoder.load(config)
    assert (exported.precision, exported.backend) == ("int8", "onnxruntime")
    assert exported.runner.path == torch_encoder.onnx.path  # one export
    texts = [*QUERIES, *DOCS]
    got, want = exported.encode_queries(texts), torch_encoder.encode_queries(texts)
    assert np.abs(got - want).max() <= 1e-6


@pytest.mark.kernels
def test_manifest_entry_is_the_bi_encoders_with_its_runtime(tiny_bert_dir):
    config = _config(tiny_bert_dir)
    entry, expected = ExportedEncoder.load(config).manifest_entry(), BiEncoder.load(config)
    expected = expected.manifest_entry()
    assert entry == {**expected, "backend": "onnxruntime",
                     "queries": {"precision": "fp32", "backend": "onnxruntime"}}  # fmt: skip


@pytest.mark.kernels
def test_a_search_gets_it_where_it_gives_the_vectors(tiny_bert_dir, tmp_path):
    assert isinstance(load_query_encoder(_config(tiny_bert_dir)), ExportedEncoder)
    for settings, why in [
        (dict(precision="bf16"), "precision bf16"),
        (dict(fast=False), "fast=False"),
        (dict(max_length=None), "no max_length"),
    ]:
        encoder, reason = try_load(_config(tiny_bert_dir, **settings))
        assert encoder is None and why in reason
        assert isinstance(load_query_encoder(_config(tiny_bert_dir, **settings)), BiEncoder)
    slow_only = shutil.copytree(tiny_bert_dir, tmp_path / "slow")
    (slow_only / "tokenizer.json").unlink()  # a model with only its vocab.txt
    encoder, reason = try_load(_config(slow_only))
    assert encoder is None and "tokenizer.json" in reason


@pytest.mark.kernels
def test_an_export_that_cannot_be_made_falls_back_to_pytorch(tiny_bert_dir, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    cache.write_text("a file where the cache folder should be")
    monkeypatch.setenv("DOTCAT_CACHE", str(cache))
    encoder, reason = try_load(_config(tiny_bert_dir))
    assert encoder is None and "no export to run" in reason
    assert isinstance(load_query_encoder(_config(tiny_bert_dir)), BiEncoder)


@pytest.mark.kernels
def test_loading_it_imports_no_pytorch(tiny_bert_dir):
    import subprocess

    ExportedEncoder.load(_config(tiny_bert_dir))  # the export, made here once (PyTorch)
    code = (
        "import sys\n"
        "from dotcat.index.encoder import load_query_encoder\n"
        "from dotcat.models import EncoderConfig\n"
        f"e = load_query_encoder(EncoderConfig(model={str(tiny_bert_dir)!r}, device='cpu', "
        "pooling='mean', similarity='cos', max_length=64, precision='fp32'))\n"
        "e.encode_queries(['a query'])\n"
        "assert type(e).__name__ == 'ExportedEncoder', type(e)\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
