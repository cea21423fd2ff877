"""Contrastive (InfoNCE) loss with in-batch and hard negatives, for BERT_DOT training.

For a query ``q`` with its relevant document ``d+`` and a set of negatives ``d-_k``::

    L = -log  exp(f(q, d+) / tau) / ( exp(f(q, d+) / tau) + sum_k exp(f(q, d-_k) / tau) )

which is the cross-entropy of a softmax over the candidates with the positive as the target
(the course notes, "Representation learning"; van den Oord et al. 2018; Karpukhin et al. 2020).
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from dotcat import options

logger = logging.getLogger(__name__)

Similarity = Literal["cos", "dot"]
SIMILARITIES: tuple[str, ...] = options.SIMILARITIES

DEFAULT_TEMPERATURE = 0.05


def check_settings(similarity: str, **positive: float) -> None:
    """Raise ``ValueError`` unless each ``positive`` setting (e.g. ``temperature``) is > 0 and
    ``similarity`` is one of :data:`SIMILARITIES`."""
    for name, value in positive.items():
        if not value > 0:
            raise ValueError(f"{name} must be > 0, got {value}")
    if similarity not in SIMILARITIES:
        raise ValueError(f"similarity must be one of {SIMILARITIES}, got {similarity!r}")


def scored(x: Tensor, similarity: Similarity) -> Tensor:
    """``x`` as scores are formed from it: float32, L2-normalised for ``"cos"`` (inside a
    disabled autocast, so the product of two of them is float32 too)."""
    # Scores are formed in float32 even under bf16/fp16 autocast: at tau = 0.05 a bf16 cosine's
    # rounding error (about 4e-3) would become about 0.08 in the logits. The cast is cheap (a few
    # B x d matrices) and gradients still flow back to the low-precision embeddings.
    x = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
    return F.normalize(x, p=2, dim=-1) if similarity == "cos" else x


def similarity_matrix(a: Tensor, b: Tensor, similarity: Similarity = "cos") -> Tensor:
    """All-pairs similarity ``f(a_i, b_j)`` of ``a [m, d]`` and ``b [k, d]``, an ``[m, k]`` matrix.

    ``"dot"`` is the inner product (DPR, BERT_DOT); ``"cos"`` is the inner product of the
    L2-normalised vectors (as ``sentence_transformers.util.cos_sim``). Computed in float32.
    """
    check_settings(similarity)
    with torch.autocast(device_type=a.device.type, enabled=False):
        return scored(a, similarity) @ scored(b, similarity).T


def _check_shapes(
    query: Tensor, positive: Tensor, negatives: Tensor | None, offset: int
) -> Tensor | None:
    if query.ndim != 2 or positive.ndim != 2:
        raise ValueError(
            f"query and positive must be [batch, dim], got {tuple(query.shape)} and "
            f"{tuple(positive.shape)}"
        )
    batch, dim = query.shape
    if positive.shape[1] != dim:
        raise ValueError(f"positive has dim {positive.shape[1]}, query has dim {dim}")
    if offset < 0 or offset + batch > positive.shape[0]:
        raise ValueError(
            f"queries [offset={offset}, offset+{batch}) do not fit in {positive.shape[0]} positives"
        )
    if negatives is None:
        return None
    if negatives.ndim == 2:  # one negative per query
        negatives = negatives.unsqueeze(1)
    if negatives.ndim != 3 or negatives.shape[0] != positive.shape[0] or negatives.shape[2] != dim:
        raise ValueError(
            f"negatives must be [{positive.shape[0]}, n, {dim}] (or [{positive.shape[0]}, {dim}]), "
            f"got {tuple(negatives.shape)}"
        )
    return negatives


def contrastive_logits(
    query: Tensor,
    positive: Tensor,
    negatives: Tensor | None = None,
    *,
    temperature: float = DEFAULT_TEMPERATURE,
    similarity: Similarity = "cos",
    mask: Tensor | None = None,
    offset: int = 0,
) -> tuple[Tensor, Tensor]:
    """The ``[B, P + P*n]`` logits and the ``[B]`` targets of :func:`contrastive_loss`.

    Column layout (``P`` positives, ``n`` negatives per positive): columns ``0..P-1`` are the
    positives in batch order, column ``P + j*n + k`` is negative ``k`` of example ``j``
    (``negatives.reshape(P*n, d)``). Query ``i``'s target is column ``offset + i``.
    Masked candidates (``mask`` True) get logit ``-inf``.
    """
    check_settings(similarity, temperature=temperature)
    negatives = _check_shapes(query, positive, negatives, offset)
    candidates = positive
    if negatives is not None and negatives.shape[1] > 0:
        candidates = torch.cat([positive, negatives.reshape(-1, negatives.shape[-1])], dim=0)
    logits = similarity_matrix(query, candidates, similarity) / temperature
    targets = torch.arange(offset, offset + query.shape[0], device=query.device)
    if mask is not None:
        if mask.dtype != torch.bool or tuple(mask.shape) != tuple(logits.shape):
            raise ValueError(
                f"mask must be a bool tensor of shape {tuple(logits.shape)} "
                f"(queries x candidates), got {mask.dtype} {tuple(mask.shape)}"
            )
        mask = mask.to(logits.device)
        rows = torch.arange(query.shape[0], device=logits.device)
        if mask[rows, targets].any():
            raise ValueError("mask removes a query's own positive (its target column)")
        logits = logits.masked_fill(mask, float("-inf"))
    return logits, targets


def contrastive_loss(
    query: Tensor, positive: Tensor, negatives: Tensor | None = None, **options: Any
) -> Tensor:
    """InfoNCE with in-batch negatives and hard negatives; mean over the queries.

    For query ``i`` of the batch, with ``s(q, d) = f_sim(q, d) / tau``::

        L_i = -log  exp(s(q_i, d+_i)) / sum_{c in C} exp(s(q_i, c))

    where the candidates ``C`` are *all* positives of the batch (every other query's positive is
    an in-batch negative) and *all* hard negatives of the batch (every other query's hard
    negatives included), i.e. ``logits = q @ cat(positives, negatives.reshape(B*n, d)).T / tau``
    and ``L = cross_entropy(logits, arange(B))``. This is the loss of DPR (in-batch plus BM25
    negatives) and of sentence-transformers' ``MultipleNegativesRankingLoss`` (which orders the
    negative columns differently; the softmax does not depend on column order).

    The keywords (``options``: ``temperature``, ``similarity``, ``mask``, ``offset``) go to
    :func:`contrastive_logits`.

    Args:
        query: ``[B, d]`` query embeddings.
        positive: ``[B, d]`` embeddings of each query's relevant document (``[P, d]`` with
            ``offset``, see below).
        negatives: ``[B, n, d]`` hard-negative embeddings (``n`` per query, ``n`` may be 0), or
            ``[B, d]`` for one per query, or ``None`` for in-batch negatives only.
        temperature: ``tau`` dividing the similarities; must be > 0. The default 0.05 is the
            usual value for cosine similarity (E5 and bge train with 0.01 to 0.05;
            ``MultipleNegativesRankingLoss``'s default ``scale=20`` is ``tau = 0.05``): cosines
            lie in [-1, 1], so without a small ``tau`` the softmax is nearly flat and the
            gradients are weak. With ``similarity="dot"`` on unnormalised vectors, DPR uses no
            temperature at all (``tau = 1``); choose it to match the embeddings' scale.
        similarity: ``"cos"`` (default) or ``"dot"``; must match the similarity the index will
            search with.
        mask: optional ``[B, P + P*n]`` bool matrix, True where a candidate must be *removed*
            from query ``i``'s softmax: the false negatives, i.e. documents known to be relevant
            to query ``i`` other than its target (two queries of a batch sharing a relevant
            document, a mined "negative" that is in fact judged relevant). Those logits become
            ``-inf``. Column layout as in :func:`contrastive_logits`; build it from document ids
            with :func:`false_negative_mask`. Masking a query's own target raises ``ValueError``.
        offset: for cross-process batches (DDP): the queries are this process's share and
            ``positive`` / ``negatives`` were gathered from all processes, so query ``i``'s
            positive is ``positive[offset + i]`` (``offset = rank * B``; ``P = world * B``).
            With a single process ``P == B`` and ``offset = 0``. The mean over this process's
            queries, averaged over processes, is the full-batch loss (tested).

    Returns:
        The mean of ``L_i`` over the ``B`` queries (a scalar tensor).

    References:
        - van den Oord, Li, Vinyals (2018), "Representation Learning with Contrastive Predictive
          Coding" (InfoNCE), arXiv:1807.03748.
        - Karpukhin et al. (2020), "Dense Passage Retrieval for Open-Domain Question Answering"
          (in-batch negatives plus hard negatives), EMNLP, arXiv:2004.04906.
        - The course notes (../shared/seeds/), "Representation learning".

    Example::

        q, p = torch.randn(4, 8), torch.randn(4, 8)
        n = torch.randn(4, 2, 8)
        loss = contrastive_loss(q, p, n, temperature=0.05)
    """
    return F.cross_entropy(*contrastive_logits(query, positive, negatives, **options))


def false_negative_mask(
    relevant: Sequence[Collection[str]],
    positive_ids: Sequence[str],
    negative_ids: Sequence[Sequence[str]] | None = None,
    *,
    offset: int = 0,
) -> Tensor:
    """Bool mask for :func:`contrastive_loss` from document ids.

    Args:
        relevant: for each query of the batch, the ids of all documents judged relevant to it.
        positive_ids: the id of each example's positive, in batch order (``P`` ids).
        negative_ids: the ids of each example's hard negatives (``P`` lists of ``n`` ids).
        offset: as in :func:`contrastive_loss`.

    Returns:
        ``[B, P + P*n]`` bool tensor, True where the candidate is relevant to query ``i`` but is
        not its target ``offset + i``.
    """
    columns = list(positive_ids)
    if negative_ids is not None:
        sizes = {len(ids) for ids in negative_ids}
        if len(negative_ids) != len(positive_ids) or len(sizes) > 1:
            raise ValueError("negative_ids must hold the same number of ids for every positive")
        columns += [doc_id for ids in negative_ids for doc_id in ids]
    mask = torch.zeros(len(relevant), len(columns), dtype=torch.bool)
    for i, rel in enumerate(relevant):
        for j, doc_id in enumerate(columns):
            if j != offset + i and doc_id in rel:
                mask[i, j] = True
    return mask


class ContrastiveLoss(nn.Module):
    """InfoNCE over in-batch and hard negatives with a temperature (see :func:`contrastive_loss`).

    Embeddings in, scalar out; no model inside, so the same module serves plain training,
    GradCache (:mod:`dotcat.losses.cached`) and DDP with gathered embeddings.

    Args:
        temperature: ``tau`` dividing the similarities (default 0.05, i.e. scale 20).
        similarity: ``"cos"`` (default) or ``"dot"``.

    Inputs:
        ``forward(query [B, d], positive [B, d], negatives [B, n, d] | [B, d] | None = None,
        mask [B, B + B*n] bool | None = None, offset=0)``.

    Relations:
        Same loss and gradients as sentence-transformers'
        ``MultipleNegativesRankingLoss(model, scale=1 / temperature, similarity_fct=cos_sim)``
        on the same embeddings (tested). For large batches in small memory, pass it to
        :func:`~dotcat.losses.cached.grad_cache_backward` (GradCache).

    References:
        van den Oord et al. (2018) arXiv:1807.03748; Karpukhin et al. (2020) arXiv:2004.04906.
    """

    def __init__(
        self, temperature: float = DEFAULT_TEMPERATURE, similarity: Similarity = "cos"
    ) -> None:
        super().__init__()
        check_settings(similarity, temperature=temperature)
        self.temperature = float(temperature)
        self.similarity: Similarity = similarity

    def forward(
        self,
        query: Tensor,
        positive: Tensor,
        negatives: Tensor | None = None,
        mask: Tensor | None = None,
        offset: int = 0,
    ) -> Tensor:
        return contrastive_loss(
            query,
            positive,
            negatives,
            temperature=self.temperature,
            similarity=self.similarity,
            mask=mask,
            offset=offset,
        )

    def extra_repr(self) -> str:
        return f"temperature={self.temperature}, similarity={self.similarity!r}"
