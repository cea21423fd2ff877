"""Triplet loss: hand-computed values, several negatives, margin, shapes."""

from __future__ import annotations

import math

import pytest
import torch

from dotcat.losses import TripletLoss, triplet_loss

Q = [[1.0, 0.0, 1.0], [0.5, -1.0, 0.0]]
P = [[1.0, 0.5, 0.5], [0.0, -1.0, 0.5]]
N = [[[0.0, 1.0, 1.0], [1.0, 0.2, 0.9]], [[0.5, -1.0, 0.1], [-1.0, 0.0, 0.0]]]


def _cos(a, b):
    dot = sum(x * y for x, y in zip(a, b, strict=True))
    return dot / math.sqrt(sum(x * x for x in a) * sum(y * y for y in b))


def _hand_triplet(q, p, n, gamma):
    hinges = []
    for qi, pi, negs in zip(q, p, n, strict=True):
        for ni in negs:
            hinges.append(max(gamma - _cos(qi, pi) + _cos(qi, ni), 0.0))
    return sum(hinges) / len(hinges)


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


@pytest.mark.parametrize("gamma", [0.1, 0.5])
def test_hand_values(gamma):
    one = [[negs[0]] for negs in N]
    assert triplet_loss(_t(Q), _t(P), _t(N)[:, 0], margin=gamma).item() == pytest.approx(
        _hand_triplet(Q, P, one, gamma), rel=1e-9
    )
    assert triplet_loss(_t(Q), _t(P), _t(N), margin=gamma).item() == pytest.approx(
        _hand_triplet(Q, P, N, gamma), rel=1e-9
    )


def test_hinge_is_active_only_inside_the_margin():
    q, p, n = _t(Q), _t(P), _t(N)
    cos = torch.nn.functional.cosine_similarity
    gaps = cos(q.unsqueeze(1), p.unsqueeze(1), dim=-1) - cos(q.unsqueeze(1), n, dim=-1)
    assert (gaps > 0.5).any() and (gaps < 0.5).any()  # the fixture has both kinds of triplets
    n_leaf = n.clone().requires_grad_()
    triplet_loss(q, p, n_leaf, margin=0.5).backward()
    has_grad = n_leaf.grad.abs().sum(-1) > 0
    assert torch.equal(has_grad, gaps < 0.5)
    # far apart: no loss at all
    assert triplet_loss(q, q, -q, margin=0.1).item() == 0.0
    # identical positive and negative: loss is exactly the margin
    assert triplet_loss(q, p, p, margin=0.3).item() == pytest.approx(0.3)


def test_dot_similarity_and_module():
    q, p, n = _t(Q), _t(P), _t(N)
    expected = torch.relu(0.2 - (q * p).sum(-1, keepdim=True) + (q.unsqueeze(1) * n).sum(-1))
    got = triplet_loss(q, p, n, margin=0.2, similarity="dot")
    assert torch.allclose(got, expected.mean())
    module = TripletLoss(margin=0.2, similarity="dot")
    assert torch.equal(module(q, p, n), got)
    assert "margin=0.2" in repr(module)


def test_errors():
    q = torch.randn(2, 3)
    with pytest.raises(ValueError, match="margin"):
        triplet_loss(q, q, q, margin=0.0)
    with pytest.raises(ValueError, match="negative"):
        triplet_loss(q, q, torch.randn(3, 3))
    with pytest.raises(ValueError, match="at least one"):
        triplet_loss(q, q, torch.randn(2, 0, 3))
    with pytest.raises(ValueError, match="similarity"):
        TripletLoss(similarity="l2")
