"""The real default model (slow): dotcat's vectors against sentence-transformers' own."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import numpy as np
import pytest

from dotcat.models import BiEncoder, EncoderConfig

SCIFACT = Path(__file__).resolve().parents[2] / "data" / "scifact" / "corpus.jsonl.gz"
OFFICIAL_SHA = "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db"


def _scifact_texts(n: int) -> list[str]:
    """The first n SciFact documents as title + " " + text, plus a few query-like lines."""
    texts = []
    with gzip.open(SCIFACT, "rt", encoding="utf-8") as f:
        for line in f:
            if len(texts) >= n:
                break
            doc = json.loads(line)
            texts.append(f"{doc['title']} {doc['text']}".strip())
    return texts + ["0-dimensional biomaterials show inductive properties.", "ALDH1 expression"]


@pytest.fixture(scope="module")
def default_encoder() -> BiEncoder:
    # fp32 pinned: the reference the other paths are compared with (auto may be int8 or bf16).
    return BiEncoder.load(EncoderConfig(model="default", device="cpu", precision="fp32"))


@pytest.mark.slow
def test_default_model_settings_and_fingerprint(default_encoder, default_model_dir):
    entry = default_encoder.manifest_entry()
    assert entry["path"] == str(default_model_dir.resolve())
    assert (entry["pooling"], entry["similarity"], entry["max_length"], entry["dim"]) == (
        "mean",
        "cos",
        256,
        384,
    )
    assert entry["fingerprint"] == OFFICIAL_SHA and entry["normalize"] is True


@pytest.mark.slow
def test_vectors_agree_with_sentence_transformers(default_encoder, default_model_dir):
    from sentence_transformers import SentenceTransformer

    texts = _scifact_texts(18)
    ours = default_encoder.encode_documents(texts)
    theirs = SentenceTransformer(str(default_model_dir), device="cpu").encode(
        texts, batch_size=32, convert_to_numpy=True
    )
    cos = (ours * theirs).sum(axis=1) / np.linalg.norm(theirs, axis=1)
    assert cos.mean() >= 0.999 and cos.min() >= 0.999
    np.testing.assert_allclose(np.linalg.norm(ours, axis=1), 1.0, atol=1e-5)


@pytest.mark.kernels
@pytest.mark.slow
def test_bf16_autocast_agrees_with_fp32_on_the_real_model(default_encoder):
    """The bf16 path that CPUs with native bf16 take by default (emulated, slow, here)."""
    texts = _scifact_texts(6)
    bf16 = BiEncoder.load(EncoderConfig(model="default", device="cpu", precision="bf16"))
    cos = (bf16.encode(texts) * default_encoder.encode(texts)).sum(axis=1)
    assert cos.mean() >= 0.999


@pytest.mark.kernels
@pytest.mark.slow
def test_int8_on_the_real_model_ranks_like_fp32(default_encoder):
    """The int8 path that CPUs with VNNI take by default (ONNX Runtime; AVX2 kernels elsewhere).

    Tolerances from eval/benchmarks/results/precision.md (600 SciFact documents: mean cosine 0.995,
    min 0.992 with VNNI; 0.994 / 0.987 for the 7-bit AVX2 export), with margin.
    """
    from scipy.stats import spearmanr

    texts = _scifact_texts(18)
    int8 = BiEncoder.load(EncoderConfig(model="default", device="cpu", precision="int8"))
    a, b = default_encoder.encode_documents(texts), int8.encode_documents(texts)
    cos = (a * b).sum(axis=1)
    assert cos.mean() >= 0.99 and cos.min() >= 0.98
    queries = ["0-dimensional biomaterials show inductive properties.", "ALDH1 expression"]
    for qa, qb in zip(
        default_encoder.encode_queries(queries), int8.encode_queries(queries), strict=True
    ):
        assert spearmanr(a @ qa, b @ qb).statistic >= 0.95
