"""Localized contrastive estimation (LCE): a softmax over one positive and its negatives.

For a query with logits ``s_0`` (its relevant document) and ``s_1 .. s_n`` (n hard negatives
from the first stage the re-ranker sits behind)::

    L = -(1/B) sum_groups log( exp(s_0) / sum_{j=0..n} exp(s_j) )

(Gao, Dai & Callan 2021, "Rethink Training of BERT Rerankers in Multi-Stage Retrieval
Pipeline", ECIR, arXiv:2101.08751). Unlike pointwise BCE the scores of one query are trained
against each other, which is what a ranking needs.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def lce_loss(logits: Tensor) -> Tensor:
    """Mean softmax cross-entropy of ``[groups, 1 + n]`` logits, the positive in column 0.

    Raises:
        ValueError: not a 2-d tensor with at least one negative per group.
    """
    if logits.ndim != 2 or logits.shape[1] < 2 or logits.shape[0] == 0:
        raise ValueError(f"lce_loss needs [groups, 1 + n >= 2] logits, got {tuple(logits.shape)}")
    target = torch.zeros(logits.shape[0], dtype=torch.long, device=logits.device)
    with torch.autocast(device_type=logits.device.type, enabled=False):
        return F.cross_entropy(logits.float(), target)
