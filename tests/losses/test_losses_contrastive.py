"""InfoNCE: hand-computed values, temperature, dot vs cos, false-negative mask, shapes."""

from __future__ import annotations

import math

import pytest
import torch

from dotcat.losses import (
    ContrastiveLoss,
    contrastive_logits,
    contrastive_loss,
    false_negative_mask,
    similarity_matrix,
)

Q = [[1.0, 0.0, 1.0], [0.5, -1.0, 0.0]]
P = [[1.0, 0.5, 0.5], [0.0, -1.0, 0.5]]
N = [[[0.0, 1.0, 1.0], [1.0, 1.0, -1.0]], [[0.5, 0.5, 0.0], [-1.0, 0.0, 0.0]]]


def _dot(a, b):
    return sum(x * y for x, y in zip(a, b, strict=True))


def _cos(a, b):
    return _dot(a, b) / math.sqrt(_dot(a, a) * _dot(b, b))


def _hand_infonce(q, p, n, tau, sim, removed=()):
    """Loop version: candidates of query i = every positive, then every query's negatives."""
    f = _cos if sim == "cos" else _dot
    candidates = list(p) + [neg for negs in n for neg in negs]
    losses = []
    for i, qi in enumerate(q):
        pos = math.exp(f(qi, p[i]) / tau)
        others = sum(
            math.exp(f(qi, c) / tau)
            for j, c in enumerate(candidates)
            if j != i and (i, j) not in removed
        )
        losses.append(-math.log(pos / (pos + others)))
    return sum(losses) / len(losses)


def _t(x):
    return torch.tensor(x, dtype=torch.float64)


@pytest.mark.parametrize("sim", ["cos", "dot"])
@pytest.mark.parametrize("tau", [0.05, 1.0])
def test_hand_values_with_hard_negatives(sim, tau):
    expected = _hand_infonce(Q, P, N, tau, sim)
    got = contrastive_loss(_t(Q), _t(P), _t(N), temperature=tau, similarity=sim)
    assert got.item() == pytest.approx(expected, rel=1e-9)


def test_hand_value_in_batch_only_and_single_negative():
    expected = _hand_infonce(Q, P, [[], []], 0.5, "cos")
    assert contrastive_loss(_t(Q), _t(P), temperature=0.5).item() == pytest.approx(expected)
    # [B, d] negatives mean one negative per query
    one = [[negs[0]] for negs in N]
    expected = _hand_infonce(Q, P, one, 0.5, "cos")
    got = contrastive_loss(_t(Q), _t(P), _t(N)[:, 0], temperature=0.5)
    assert got.item() == pytest.approx(expected)


def test_other_queries_hard_negatives_are_candidates():
    # Query 0's loss must change when only query 1's hard negatives change.
    q, p, n = _t(Q), _t(P), _t(N)
    logits, targets = contrastive_logits(q, p, n)
    assert logits.shape == (2, 2 + 2 * 2)
    assert targets.tolist() == [0, 1]
    n2 = n.clone()
    n2[1] = torch.tensor([1.0, 0.0, 1.0])  # identical to query 0: a very hard negative for it
    l1 = torch.nn.functional.cross_entropy(*contrastive_logits(q, p, n), reduction="none")
    l2 = torch.nn.functional.cross_entropy(*contrastive_logits(q, p, n2), reduction="none")
    assert l2[0] > l1[0] + 1.0
    # column layout: P + j*n + k is negative k of example j
    expected = torch.tensor(_cos(Q[0], N[1][1]) / 0.05, dtype=torch.float64)
    assert torch.allclose(logits[0, 2 + 1 * 2 + 1], expected)


def test_temperature():
    q, p, n = _t(Q), _t(P), _t(N)
    # tau divides the similarity: dot at tau equals dot at 1 on q / tau
    a = contrastive_loss(q, p, n, temperature=0.2, similarity="dot")
    b = contrastive_loss(q / 0.2, p, n, temperature=1.0, similarity="dot")
    assert torch.allclose(a, b)
    # every positive is ranked first here (cos): a lower tau sharpens the softmax
    q2 = p + 0.01
    losses = [contrastive_loss(q2, p, n, temperature=t).item() for t in (1.0, 0.1, 0.01)]
    assert losses[0] > losses[1] > losses[2]
    # a very high tau flattens it: loss -> log(number of candidates)
    flat = contrastive_loss(q, p, n, temperature=1e6).item()
    assert flat == pytest.approx(math.log(6), rel=1e-5)
    with pytest.raises(ValueError, match="temperature"):
        contrastive_loss(q, p, n, temperature=0.0)


def test_dot_vs_cos():
    q, p, n = _t(Q), _t(P), _t(N)
    # cos ignores vector length, dot does not
    scaled = contrastive_loss(3 * q, 2 * p, 5 * n, similarity="cos")
    assert torch.allclose(scaled, contrastive_loss(q, p, n, similarity="cos"))
    assert not torch.allclose(
        contrastive_loss(3 * q, p, n, similarity="dot"), contrastive_loss(q, p, n, similarity="dot")
    )
    # on unit vectors they agree
    unit = [torch.nn.functional.normalize(x, dim=-1) for x in (q, p, n)]
    assert torch.allclose(
        contrastive_loss(*unit, similarity="dot"), contrastive_loss(q, p, n, similarity="cos")
    )
    assert torch.allclose(similarity_matrix(q, p, "dot"), q @ p.T)
    with pytest.raises(ValueError, match="similarity"):
        contrastive_loss(q, p, n, similarity="l2")


def test_false_negative_mask():
    q, p, n = _t(Q), _t(P), _t(N)
    mask = torch.zeros(2, 6, dtype=torch.bool)
    mask[0, 1] = True  # query 0 also relevant to example 1's positive
    mask[1, 2] = True  # query 1 relevant to example 0's first hard negative
    expected = _hand_infonce(Q, P, N, 0.05, "cos", removed={(0, 1), (1, 2)})
    got = contrastive_loss(q, p, n, mask=mask)
    assert got.item() == pytest.approx(expected, rel=1e-9)
    assert got < contrastive_loss(q, p, n)
    # a masked candidate gets no gradient
    n_leaf = n.clone().requires_grad_()
    contrastive_loss(q, p, n_leaf, mask=torch.ones(2, 6, dtype=torch.bool).fill_diagonal_(False))
    assert n_leaf.grad is None or torch.count_nonzero(n_leaf.grad) == 0
    bad = torch.zeros(2, 6, dtype=torch.bool)
    bad[1, 1] = True
    with pytest.raises(ValueError, match="own positive"):
        contrastive_loss(q, p, n, mask=bad)
    with pytest.raises(ValueError, match="mask"):
        contrastive_loss(q, p, n, mask=torch.zeros(2, 5, dtype=torch.bool))


def test_false_negative_mask_from_ids():
    mask = false_negative_mask(
        relevant=[{"a", "b"}, {"b"}],
        positive_ids=["a", "b"],
        negative_ids=[["x", "b"], ["y", "z"]],
    )
    assert mask.tolist() == [
        [False, True, False, True, False, False],
        [False, False, False, True, False, False],
    ]
    with pytest.raises(ValueError):
        false_negative_mask([{"a"}], ["a", "b"], [["x"], ["y", "z"]])


def test_offset_splits_the_batch_like_processes():
    g = torch.Generator().manual_seed(0)
    q, p, n = (torch.randn(*s, generator=g) for s in ((4, 5), (4, 5), (4, 2, 5)))
    full = contrastive_loss(q, p, n)
    halves = [contrastive_loss(q[r : r + 2], p, n, offset=r) for r in (0, 2)]
    assert torch.allclose(full, sum(halves) / 2)
    with pytest.raises(ValueError, match="fit"):
        contrastive_loss(q[:2], p, n, offset=3)


def test_shapes_are_checked():
    q, p = torch.randn(2, 3), torch.randn(2, 3)
    with pytest.raises(ValueError, match="dim"):
        contrastive_loss(q, torch.randn(2, 4))
    with pytest.raises(ValueError, match="negatives"):
        contrastive_loss(q, p, torch.randn(3, 1, 3))
    # n = 0 hard negatives is the same as none
    assert torch.allclose(contrastive_loss(q, p, torch.randn(2, 0, 3)), contrastive_loss(q, p))


def test_module_matches_function_and_bf16_autocast():
    g = torch.Generator().manual_seed(1)
    q, p, n = (torch.randn(*s, generator=g) for s in ((3, 8), (3, 8), (3, 2, 8)))
    module = ContrastiveLoss(temperature=0.1, similarity="dot")
    assert "temperature=0.1" in repr(module)
    assert torch.equal(
        module(q, p, n), contrastive_loss(q, p, n, temperature=0.1, similarity="dot")
    )
    # bf16 embeddings: scores are formed in float32, so only the inputs' rounding remains
    ref = contrastive_loss(q.bfloat16().float(), p.bfloat16().float(), n.bfloat16().float())
    with torch.autocast("cpu", dtype=torch.bfloat16):
        low = contrastive_loss(q.bfloat16(), p.bfloat16(), n.bfloat16())
    assert low.dtype == torch.float32
    assert torch.allclose(low, ref, atol=1e-5)
