"""dotcat.models.batching, and what it buys: answers that do not depend on the batch."""

from __future__ import annotations

import numpy as np
import pytest

from dotcat.models import BiEncoder, EncoderConfig
from dotcat.models.batching import batch_slices, padded_widths
from dotcat.models.cross_encoder import CrossEncoder, CrossEncoderConfig

QUERIES = [
    "ATP",
    "how do cells make ATP",
    "which animals were domesticated from wolves long ago",
    "hormone controlling blood sugar",
    "vaccines",
    "statins reduce cardiovascular risk in older people without diabetes or heart disease",
    "insulin",
]


def test_batches_respect_size_and_token_budget():
    widths = np.array([60, 50, 30, 30, 30, 30, 10, 10, 5])
    batches = [(s.start, s.stop) for s in batch_slices(widths, batch_size=3, max_tokens=100)]
    assert batches == [(0, 1), (1, 3), (3, 6), (6, 9)]
    assert all(widths[a] * (b - a) <= 100 for a, b in batches)
    fixed = [(s.start, s.stop) for s in batch_slices(widths, batch_size=4, fixed_width=True)]
    assert fixed == [(0, 1), (1, 2), (2, 6), (6, 8), (8, 9)]  # one width per batch


def test_padded_widths_round_up_within_the_cap():
    lengths = np.array([1, 8, 9, 250, 256])
    assert padded_widths(lengths, 1, 256).tolist() == [1, 8, 9, 250, 256]
    assert padded_widths(lengths, 8, 256).tolist() == [8, 8, 16, 256, 256]
    assert padded_widths(np.array([300]), 32, 256).tolist() == [300]  # never below the length


@pytest.mark.kernels
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_query_vector_is_the_same_alone_or_in_any_batch(tiny_bert_dir, precision):
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision=precision)
    encoder = BiEncoder.load(config)
    alone = np.stack([encoder.encode_queries([q])[0] for q in QUERIES])
    together = encoder.encode_queries(QUERIES)
    reversed_ = encoder.encode_queries(QUERIES[::-1])[::-1]
    assert np.array_equal(alone, together) and np.array_equal(alone, reversed_)  # bit for bit


@pytest.mark.kernels
@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_pair_logit_is_the_same_alone_or_in_any_batch(tiny_cat_dir, precision):
    config = CrossEncoderConfig(model=str(tiny_cat_dir), device="cpu", precision=precision)
    ce = CrossEncoder.load(config)
    docs = [q + " " + "words " * (i * 7) for i, q in enumerate(QUERIES)]
    alone = np.array([ce.score(["insulin glucose"], [d])[0] for d in docs])
    together = ce.score(["insulin glucose"] * len(docs), docs)
    mixed = ce.score(["insulin glucose", "vaccines"] * len(docs), [d for d in docs for _ in (0, 1)])
    # Each pair keeps its padded width whatever the batch; a lone pair may still take another
    # GEMM kernel than a batch (the 7th digit in fp32), never another ranking.
    for other in (together, mixed[::2]):
        np.testing.assert_allclose(other, alone, rtol=0, atol=1e-6)
        assert list(np.argsort(-other)) == list(np.argsort(-alone))
