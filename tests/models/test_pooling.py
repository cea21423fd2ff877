"""Pooling maths against hand-computed values and sentence-transformers' Pooling as a peer."""

from __future__ import annotations

import pytest
import torch

from dotcat.models import cls_pooling, mean_pooling
from dotcat.models.pooling import l2_normalize, pool

HIDDEN = torch.tensor(
    [
        [[1.0, 2.0], [3.0, 4.0], [100.0, -100.0]],  # last position is padding
        [[-1.0, 0.0], [5.0, 1.0], [0.0, 8.0]],  # no padding
    ]
)
MASK = torch.tensor([[1, 1, 0], [1, 1, 1]])


def test_cls_pooling_takes_position_zero():
    assert torch.equal(cls_pooling(HIDDEN, MASK), torch.tensor([[1.0, 2.0], [-1.0, 0.0]]))


def test_mean_pooling_ignores_padding():
    # row 0: (1+3)/2, (2+4)/2; row 1: (-1+5+0)/3, (0+1+8)/3
    expected = torch.tensor([[2.0, 3.0], [4.0 / 3.0, 3.0]])
    torch.testing.assert_close(mean_pooling(HIDDEN, MASK), expected)


def test_mean_pooling_padding_values_do_not_matter():
    changed = HIDDEN.clone()
    changed[0, 2] = torch.tensor([-7e5, 3e5])
    torch.testing.assert_close(mean_pooling(changed, MASK), mean_pooling(HIDDEN, MASK))


def test_mean_pooling_all_padding_row_is_zero_not_nan():
    out = mean_pooling(HIDDEN, torch.zeros_like(MASK))
    assert torch.equal(out, torch.zeros(2, 2))


def test_mean_pooling_matches_sentence_transformers_pooling():
    from sentence_transformers.sentence_transformer.modules import Pooling

    torch.manual_seed(0)
    hidden = torch.randn(4, 7, 16)
    mask = torch.tensor([[1] * 7, [1] * 3 + [0] * 4, [1] * 5 + [0] * 2, [1] + [0] * 6])
    for mode, ours in (("mean", mean_pooling), ("cls", cls_pooling)):
        peer = Pooling(16, pooling_mode=mode)
        out = peer({"token_embeddings": hidden, "attention_mask": mask})
        torch.testing.assert_close(ours(hidden, mask), out["sentence_embedding"])


def test_pool_by_name_and_unknown_name():
    torch.testing.assert_close(pool("mean", HIDDEN, MASK), mean_pooling(HIDDEN, MASK))
    with pytest.raises(ValueError, match="unknown pooling 'max'"):
        pool("max", HIDDEN, MASK)


def test_l2_normalize_rows_have_unit_norm_and_zero_stays_zero():
    x = torch.tensor([[3.0, 4.0], [0.0, 0.0]])
    torch.testing.assert_close(l2_normalize(x), torch.tensor([[0.6, 0.8], [0.0, 0.0]]))
