"""Triplet (margin) loss on cosine similarity, as in the course notes (SBERT section).

For an anchor ``s`` (the query), a similar ``s+`` and a dissimilar ``s-``::

    L = max(gamma - cos(f(s), f(s+)) + cos(f(s), f(s-)), 0),     gamma > 0

averaged over the triplets of the batch (Schroff et al. 2015; Reimers and Gurevych 2019).
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dotcat.losses.contrastive import Similarity, check_settings, scored

logger = logging.getLogger(__name__)

DEFAULT_MARGIN = 0.1


def _pairwise(a: Tensor, b: Tensor, similarity: Similarity) -> Tensor:
    """``f(a[..., :], b[..., :])`` along the last axis (broadcasting), in float32."""
    with torch.autocast(device_type=a.device.type, enabled=False):
        return (scored(a, similarity) * scored(b, similarity)).sum(dim=-1)


def triplet_loss(
    query: Tensor,
    positive: Tensor,
    negative: Tensor,
    *,
    margin: float = DEFAULT_MARGIN,
    similarity: Similarity = "cos",
) -> Tensor:
    """Margin loss ``mean(max(gamma - f(q, d+) + f(q, d-), 0))`` over all triplets of the batch.

    A triplet stops contributing once its negative scores at least ``gamma`` below its positive;
    until then the gradient pushes ``f(q, d+)`` up and ``f(q, d-)`` down by the same amount.
    Unlike :func:`~dotcat.losses.contrastive.contrastive_loss` there are no in-batch negatives:
    each query sees only its own negatives.

    Args:
        query: ``[B, d]`` anchor (query) embeddings.
        positive: ``[B, d]`` embeddings of each query's relevant document.
        negative: ``[B, d]`` (one negative per query) or ``[B, n, d]`` (``n`` per query). With
            ``n`` negatives every ``(q_i, d+_i, d-_ik)`` is a triplet and the loss is the mean
            over all ``B * n`` of them (so each query weighs the same, whatever ``n``).
        margin: ``gamma`` > 0, in cosine units. The default 0.1 is FaceNet's ``alpha = 0.2``
            carried over to cosines: for unit vectors ``||a - b||^2 = 2 - 2 cos(a, b)``, so a
            squared-distance margin of 0.2 is a cosine margin of 0.1. It is small next to the
            [-1, 1] range of cosines, leaving room to separate many negatives; the course notes
            leave ``gamma`` open. (sentence-transformers' ``TripletLoss`` defaults to euclidean
            distance with margin 5, which is a different scale.)
        similarity: ``"cos"`` (default; the formula of the notes) or ``"dot"``, for models that
            are searched by inner product (the margin is then in inner-product units).

    Returns:
        The mean hinge over the triplets (a scalar tensor).

    References:
        - Schroff, Kalenichenko, Philbin (2015), "FaceNet: A Unified Embedding for Face
          Recognition and Clustering", CVPR, arXiv:1503.03832.
        - Reimers and Gurevych (2019), "Sentence-BERT", EMNLP, arXiv:1908.10084.
        - The course notes (../shared/seeds/), "Bert and SBert": the triplet loss with cosine.

    Example::

        q, p, n = torch.randn(4, 8), torch.randn(4, 8), torch.randn(4, 3, 8)
        loss = triplet_loss(q, p, n, margin=0.1)
    """
    check_settings(similarity, margin=margin)
    if query.ndim != 2 or positive.shape != query.shape:
        raise ValueError(
            f"query and positive must both be [batch, dim], got {tuple(query.shape)} and "
            f"{tuple(positive.shape)}"
        )
    if negative.ndim == 2:
        negative = negative.unsqueeze(1)
    batch, dim = query.shape
    if negative.ndim != 3 or negative.shape[0] != batch or negative.shape[2] != dim:
        raise ValueError(
            f"negative must be [{batch}, {dim}] or [{batch}, n, {dim}], got {tuple(negative.shape)}"
        )
    if negative.shape[1] == 0:
        raise ValueError("triplet_loss needs at least one negative per query")
    pos = _pairwise(query, positive, similarity)  # [B]
    neg = _pairwise(query.unsqueeze(1), negative, similarity)  # [B, n]
    return F.relu(margin - pos.unsqueeze(1) + neg).mean()


class TripletLoss(nn.Module):
    """Triplet margin loss on cosine similarity (see :func:`triplet_loss`).

    Embeddings in, scalar out; no model inside.

    Args:
        margin: ``gamma`` > 0 (default 0.1, FaceNet's 0.2 on squared distance between unit vectors).
        similarity: ``"cos"`` (default) or ``"dot"``.

    Inputs:
        ``forward(query [B, d], positive [B, d], negative [B, d] | [B, n, d])``.

    Relations:
        Same loss and gradients as sentence-transformers'
        ``TripletLoss(model, distance_metric=TripletDistanceMetric.COSINE, triplet_margin=margin)``
        on the same embeddings (its cosine distance is ``1 - cos``, so
        ``relu(d(q, d+) - d(q, d-) + gamma)`` is exactly the formula above; tested).

    References:
        Schroff et al. (2015) arXiv:1503.03832; Reimers and Gurevych (2019) arXiv:1908.10084.
    """

    def __init__(self, margin: float = DEFAULT_MARGIN, similarity: Similarity = "cos") -> None:
        super().__init__()
        check_settings(similarity, margin=margin)
        self.margin = float(margin)
        self.similarity: Similarity = similarity

    def forward(self, query: Tensor, positive: Tensor, negative: Tensor) -> Tensor:
        return triplet_loss(
            query, positive, negative, margin=self.margin, similarity=self.similarity
        )

    def extra_repr(self) -> str:
        return f"margin={self.margin}, similarity={self.similarity!r}"
