"""Peer check: dotcat's losses against sentence-transformers' on the same embeddings.

Same loss value and same gradients w.r.t. every embedding, to 1e-5. sentence-transformers'
losses hold a model, but both expose ``compute_loss_from_embeddings``, which is called directly
(``model=None``: the model is only used by their ``forward``).
"""

from __future__ import annotations

import pytest
import torch

from dotcat.losses import contrastive_loss, triplet_loss

st_losses = pytest.importorskip("sentence_transformers.sentence_transformer.losses")
st_util = pytest.importorskip("sentence_transformers.util")

ATOL = 1e-5


def _embeddings(b, n, d, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, d, generator=g).requires_grad_()
    # positives and hard negatives both near their query, so the losses and hinges are not all 0
    p = (q.detach() + 1.5 * torch.randn(b, d, generator=g)).requires_grad_()
    negs = (q.detach().unsqueeze(1) + 1.5 * torch.randn(b, n, d, generator=g)).requires_grad_()
    return q, p, negs


def _loss_and_grads(fn, tensors):
    for t in tensors:
        t.grad = None
    loss = fn()
    loss.backward()
    return loss.detach(), [torch.zeros_like(t) if t.grad is None else t.grad for t in tensors]


def _assert_same(ours, theirs):
    (l1, g1), (l2, g2) = ours, theirs
    assert torch.allclose(l1, l2, atol=ATOL, rtol=0), (l1, l2)
    for a, b in zip(g1, g2, strict=True):
        assert torch.allclose(a, b, atol=ATOL, rtol=0), (a - b).abs().max()


@pytest.mark.parametrize(
    ("n", "tau", "sim"),
    [(0, 0.05, "cos"), (1, 0.05, "cos"), (3, 0.05, "cos"), (2, 0.1, "cos"), (2, 1.0, "dot")],
)
def test_contrastive_matches_multiple_negatives_ranking_loss(n, tau, sim):
    q, p, negs = _embeddings(b=6, n=n, d=16, seed=n)
    st_sim = st_util.cos_sim if sim == "cos" else st_util.dot_score
    mnrl = st_losses.MultipleNegativesRankingLoss(None, scale=1.0 / tau, similarity_fct=st_sim)
    # MNRL's columns: the anchors, the positives, then one [B, d] column per negative slot;
    # it scores anchors against cat(positives, negatives_1, ..., negatives_n), i.e. the same
    # candidate set as ours in another column order (a softmax does not depend on it).
    columns = [q, p] + [negs[:, k] for k in range(n)]
    ours = _loss_and_grads(
        lambda: contrastive_loss(q, p, negs, temperature=tau, similarity=sim), (q, p, negs)
    )
    theirs = _loss_and_grads(lambda: mnrl.compute_loss_from_embeddings(columns, None), (q, p, negs))
    _assert_same(ours, theirs)
    assert ours[0] > 0.1  # not a degenerate comparison of two zeros


@pytest.mark.parametrize(("n", "margin"), [(1, 0.1), (1, 0.5), (4, 0.1), (4, 0.3)])
def test_triplet_matches_triplet_loss_with_cosine_distance(n, margin):
    q, p, negs = _embeddings(b=6, n=n, d=16, seed=10 + n)
    # TripletDistanceMetric.COSINE is 1 - cos, so relu(d(q,p) - d(q,n) + margin) is our formula.
    st_triplet = st_losses.TripletLoss(
        None, distance_metric=st_losses.TripletDistanceMetric.COSINE, triplet_margin=margin
    )

    def theirs_fn():
        # their loss takes one negative per anchor: one row per (query, negative) triplet
        anchors = q.unsqueeze(1).expand(-1, n, -1).reshape(-1, q.shape[1])
        positives = p.unsqueeze(1).expand(-1, n, -1).reshape(-1, p.shape[1])
        return st_triplet.compute_loss_from_embeddings(
            [anchors, positives, negs.reshape(-1, negs.shape[2])], None
        )

    ours = _loss_and_grads(lambda: triplet_loss(q, p, negs, margin=margin), (q, p, negs))
    theirs = _loss_and_grads(theirs_fn, (q, p, negs))
    _assert_same(ours, theirs)
    assert ours[0] > 0.01
    if n == 1:  # the [B, d] form too
        two_d = _loss_and_grads(lambda: triplet_loss(q, p, negs[:, 0], margin=margin), (q, p, negs))
        _assert_same(two_d, theirs)
