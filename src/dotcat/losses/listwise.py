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


def soft_lce_loss(logits: Tensor, teacher: Tensor, weight: float, temperature: float) -> Tensor:
    """LCE against a target mixed from the label and a teacher's distribution over the group.

    The target of group ``g`` is ``(1 - w) * onehot(0) + w * softmax(t_g / tau)`` with ``t``
    the teacher's scores of the same documents, and the loss is the cross-entropy
    ``-sum_j target_j log softmax(s)_j``: LCE when ``w = 0``; with ``w > 0`` the order the
    teacher sees among the negatives is learned too (knowledge distillation, Hinton et al.
    2015, "Distilling the Knowledge in a Neural Network", with the label kept).

    Args:
        logits: ``[groups, 1 + n]`` student logits, the positive in column 0.
        teacher: ``[groups, 1 + n]`` teacher scores on any scale (``temperature`` sets it).
        weight: ``w`` in [0, 1].
        temperature: ``tau`` > 0.
    """
    if teacher.shape != logits.shape:
        raise ValueError(
            f"teacher scores {tuple(teacher.shape)} do not match {tuple(logits.shape)}"
        )
    if not 0.0 <= weight <= 1.0 or temperature <= 0:
        raise ValueError(f"need 0 <= weight <= 1 and temperature > 0, got {weight}, {temperature}")
    with torch.autocast(device_type=logits.device.type, enabled=False):
        target = weight * F.softmax(teacher.float() / temperature, dim=1)
        target[:, 0] += 1.0 - weight
        return -(target * F.log_softmax(logits.float(), dim=1)).sum(dim=1).mean()
