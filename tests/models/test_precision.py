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
    detected = runtime._detect_native_bf16()
    assert runtime.cpu_has_native_bf16() is detected
    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, "auto")
    assert runtime.cpu_has_native_bf16() is detected


def test_a_bad_env_value_is_a_clear_error(monkeypatch):
    monkeypatch.setenv(runtime.NATIVE_BF16_ENV, "maybe")
    with pytest.raises(DotcatError, match="DOTCAT_NATIVE_BF16='maybe': expected auto, on or off"):
        runtime.cpu_has_native_bf16()


def test_auto_encoder_follows_the_switch_and_records_it(tiny_bert_dir, monkeypatch):
    for value, dtype, name in (("on", torch.bfloat16, "bf16"), ("off", None, "fp32")):
        monkeypatch.setenv(runtime.NATIVE_BF16_ENV, value)
        enc = BiEncoder.load(EncoderConfig(model=str(tiny_bert_dir), device="cpu"))
        assert enc.autocast_dtype is dtype
        assert enc.manifest_entry()["precision"] == name
        ce = CrossEncoder.load(CrossEncoderConfig(model=str(tiny_bert_dir), device="cpu"))
        assert ce.autocast_dtype is dtype


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
