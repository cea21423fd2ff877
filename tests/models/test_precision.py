"""Precision on every CPU: the native-bf16 switch, and the bf16 path against fp32.

These run on every machine: bf16 is forced where the CPU only emulates it (slow, correct).
The comparisons use bf16 tolerances (vectors: mean cosine >= 0.999; scores: rank agreement);
every other numeric test pins fp32.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import spearmanr

from dotcat.errors import DotcatError
from dotcat.models import BiEncoder, EncoderConfig, runtime
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)

TEXTS = [
    "Cats are small domesticated carnivorous mammals.",
    "Dogs were domesticated from wolves long ago, probably more than fifteen thousand years.",
    "ATP",
    "Plants turn light into chemical energy in their chloroplasts through photosynthesis.",
    "Insulin regulates blood glucose.",
    "insulin and glucose in blood",
    "Vaccines train the immune system against viruses and bacteria.",
    "bone calcium density",
    "glucose insulin study " * 6,
    "cells make ATP in mitochondria",
]


# -- the switch ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "native"), [("on", True), ("1", True), ("off", False), ("0", False)]
)
def test_native_bf16_env_overrides_the_detection(monkeypatch, value, native):
    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, value)
    assert runtime.cpu_has_native_bf16() is native
    expected = torch.bfloat16 if native else None
    assert runtime.resolve_precision("auto", torch.device("cpu")) is expected
    # Explicit choices are not affected by the switch.
    assert runtime.resolve_precision("fp32", torch.device("cpu")) is None
    assert runtime.resolve_precision("bf16", torch.device("cpu")) is torch.bfloat16


def test_unset_or_auto_env_means_detection(monkeypatch):
    monkeypatch.delenv(runtime.NATIVE_BF16_ENV, raising=False)
    detected = runtime.detect_native_bf16()
    assert runtime.cpu_has_native_bf16() is detected
    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, "auto")
    assert runtime.cpu_has_native_bf16() is detected


def test_a_bad_env_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, "maybe")
    with pytest.raises(DotcatError, match="DOTCAT_NATIVE_BF16='maybe': expected auto, on or off"):
        runtime.cpu_has_native_bf16()


def test_auto_follows_the_switch_and_records_it(tiny_bert_dir, tiny_cat_dir, monkeypatch):
    # on: a Zen 4-class CPU (native bf16, VNNI): int8 where INT8_BY_DEFAULT's runtime is
    # installed, the rest under bf16 autocast; off: an AVX2-only CPU, documents int8 on ONNX
    # Runtime with fp32 queries, the cross-encoder int8 on ONNX Runtime (its AVX2 export).
    for value, encoder_name, dtype in (("on", "int8", torch.bfloat16), ("off", "int8", None)):
        monkeypatch.setenv(runtime.NATIVE_BF16_ENV, value)
        enc = BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), device="cpu"))
        entry = enc.manifest_entry()
        assert enc.precision == encoder_name == entry["precision"]
        assert (enc.onnx is not None) is (encoder_name == "int8")
        if value == "off":
            assert entry["backend"] == "onnxruntime"
            assert entry["queries"] == {"precision": "fp32", "backend": "torch"}
        # A new head is for training: never int8, whatever the table says.
        ce = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu"))
        assert ce.autocast_dtype is dtype and ce.onnx is None
        trained = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_cat_dir), device="cpu"))
        int8 = any(map(runtime.backend_installed, runtime.INT8_BY_DEFAULT["cross-encoder"]))
        expected = ("int8" if int8 else "bf16") if value == "on" else "int8"
        assert trained.precision == expected
        assert value == "on" or trained.backend == "onnxruntime"


def test_auto_chooses_per_cpu_kind_and_per_side(monkeypatch):
    """AUTO_ENCODER is read for this CPU's kind, for documents and queries apart; an int8
    choice whose runtime is missing falls back to the autocast rule, on both sides."""
    cpu = torch.device("cpu")
    for value, kind in (("on", "vnni+bf16"), ("off", "avx2")):
        monkeypatch.setenv(runtime.NATIVE_BF16_ENV, value)
        assert runtime.cpu_kind() == kind
    monkeypatch.delenv(runtime.NATIVE_BF16_ENV)
    monkeypatch.setattr(runtime, "cpu_has_vnni", lambda: False)
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    for flags, kind in ((frozenset({"avx2", "fma", "sse4_2"}), "avx2"), (frozenset(), "other")):
        monkeypatch.setattr(runtime, "cpu_flags", lambda flags=flags: flags)
        assert runtime.cpu_kind() == kind
        assert runtime.auto_precision("encoder", cpu) == ("int8" if kind == "avx2" else "fp32")
        assert runtime.auto_precision("encoder", cpu, "queries") == "fp32"
        assert runtime.int8_backend("encoder") == (
            "onnxruntime" if kind == "avx2" else runtime.int8_backend("cross-encoder")
        )
    monkeypatch.setattr(runtime, "cpu_has_vnni", lambda: True)
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: False)
    assert runtime.cpu_kind() == "vnni"
    monkeypatch.setattr(runtime, "cpu_has_native_bf16", lambda: True)
    monkeypatch.setitem(runtime.AUTO_ENCODER, "vnni+bf16", ("int8", "bf16"))
    monkeypatch.setattr(runtime, "openvino_installed", lambda: True)
    assert runtime.auto_precision("encoder", cpu) == "int8"
    assert runtime.auto_precision("encoder", cpu, "queries") == "bf16"
    assert runtime.describe_precision("auto", cpu) == (
        "encoder int8, queries bf16, cross-encoder int8"
    )
    monkeypatch.setattr(runtime, "openvino_installed", lambda: False)
    assert runtime.auto_precision("encoder", cpu) == "bf16"
    assert runtime.describe_precision("auto", cpu) == "encoder bf16, cross-encoder bf16"
    assert runtime.auto_precision("encoder", torch.device("cuda")) == "auto"


# -- bf16 against fp32 ----------------------------------------------------------------------


@pytest.mark.parametrize(("pooling", "similarity"), [("mean", "cos"), ("cls", "dot")])
def test_bf16_vectors_agree_with_fp32(tiny_bert_dir, pooling, similarity):
    def encode(precision: str) -> tuple[BiEncoder, np.ndarray]:
        config = EncoderConfig(
            model=str(tiny_bert_dir),
            device="cpu",
            pooling=pooling,
            similarity=similarity,
            precision=precision,
        )
        encoder = BiEncoder.load(config)
        return encoder, encoder.encode(TEXTS)

    fp32, a = encode("fp32")
    bf16, b = encode("bf16")
    assert fp32.autocast_dtype is None and bf16.autocast_dtype is torch.bfloat16
    assert b.dtype == np.float32  # pooling and outputs stay fp32
    assert not np.array_equal(a, b)  # bf16 really ran
    cosine = (a * b).sum(axis=1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1))
    assert cosine.mean() >= 0.999


def test_bf16_scores_rank_like_fp32(tiny_cat_dir):
    def scores(precision: str) -> np.ndarray:
        config = CrossEncoderConfig(model=str(tiny_cat_dir), device="cpu", precision=precision)
        return CrossEncoder.load(config).score(["insulin glucose"] * len(TEXTS), TEXTS)

    a, b = scores("fp32"), scores("bf16")
    assert np.ptp(a) > 0.1  # a ranking worth agreeing on
    assert not np.array_equal(a, b)
    assert spearmanr(a, b).statistic >= 0.99
    assert list(np.argsort(-a)[:3]) == list(np.argsort(-b)[:3])


def test_linear_weights_stored_in_bf16_give_exactly_what_autocast_gave(tiny_bert_dir):
    # Autocast casts fp32 linear weights to bf16 on every call; stored in bf16 once, the
    # outputs must be bit-identical (same rounding), and other layers stay fp32.
    from transformers import AutoModel

    from dotcat.models.runtime import store_linear_weights

    model = AutoModel.from_pretrained(tiny_bert_dir).eval()
    ids = torch.tensor([[101, 7592, 2088, 1996, 4937, 102], [101, 2129, 2079, 4442, 102, 0]])
    mask = (ids != 0).long()

    def forward():
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(input_ids=ids, attention_mask=mask).last_hidden_state.float()

    before = forward()
    assert store_linear_weights(model, None) == 0  # fp32: nothing to do
    changed = store_linear_weights(model, torch.bfloat16)
    assert changed > 0 and store_linear_weights(model, torch.bfloat16) == 0  # once
    assert torch.equal(forward(), before)
    linears = [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    assert all(m.weight.dtype == torch.bfloat16 for m in linears)
    assert model.embeddings.LayerNorm.weight.dtype == torch.float32


def test_a_bf16_encoder_stores_its_linear_weights_in_bf16_and_encodes_the_same(tiny_bert_dir):
    texts = ["insulin and glucose", "a neuron fires", "x"]
    encoder = BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), precision="bf16"))
    dense = next(m for m in encoder.model.modules() if isinstance(m, torch.nn.Linear))
    assert dense.weight.dtype == torch.bfloat16
    fp32 = BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), precision="fp32"))
    assert next(fp32.model.parameters()).dtype == torch.float32
    # Same vectors as autocast over fp32 weights (the fp32 encoder's model run in bf16).
    fp32.autocast_dtype = torch.bfloat16
    np.testing.assert_array_equal(encoder.encode(texts), fp32.encode(texts))
