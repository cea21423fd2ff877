"""Pointwise binary cross-entropy for BERT_CAT, as in the course notes (monoBERT).

With ``p = sigmoid(s)`` for a pair's logit ``s`` and label ``y`` (1 relevant, 0 not)::

    L = -(1/N) sum_i [ y_i log p_i + (1 - y_i) log(1 - p_i) ]

(Nogueira & Cho 2019, "Passage Re-ranking with BERT", arXiv:1901.04085). Computed from the
logits (log-sum-exp form) so that confident scores do not overflow.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def bce_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean binary cross-entropy of ``sigmoid(logits)`` against 0/1 ``labels`` (same shape).

    Raises:
        ValueError: shapes differ, or there is nothing to average.
    """
    if logits.shape != labels.shape:
        raise ValueError(f"logits {tuple(logits.shape)} and labels {tuple(labels.shape)} differ")
    if logits.numel() == 0:
        raise ValueError("bce_loss of an empty batch")
    with torch.autocast(device_type=logits.device.type, enabled=False):
        return F.binary_cross_entropy_with_logits(logits.float(), labels.float())


def group_labels(n_groups: int, group_size: int, device: torch.device | None = None) -> Tensor:
    """``[n_groups, group_size]`` labels of groups laid out positive first: 1, 0, 0, ..."""
    labels = torch.zeros(n_groups, group_size, device=device)
    labels[:, 0] = 1.0
    return labels
