"""Distillation losses: a student's scores trained toward a teacher's (BERT_CAT -> BERT_DOT).

Both take ``[B, 1 + N]`` scores of the same documents, the positive in column 0 and N
negatives after it: ``s`` from the student (e.g. a bi-encoder's dot products), ``t`` from the
teacher (e.g. a cross-encoder's logits). The teacher is a constant (its scores are detached).

Margin-MSE (Hofstätter et al. 2020, "Improving Efficient Neural Ranking Models with
Cross-Architecture Knowledge Distillation", arXiv:2010.02666) matches score *margins*, so
student and teacher may score on different scales and offsets::

    L = 1/(B N) sum_{b, j >= 1} ( (s_b0 - s_bj) - (t_b0 - t_bj) )^2

Listwise KL matches the teacher's whole distribution over each group (Hinton et al. 2015,
"Distilling the Knowledge in a Neural Network"; as in RocketQAv2, Ren et al. 2021,
arXiv:2110.07367), with a temperature ``T``::

    L = 1/B sum_b KL( softmax(t_b / T) || softmax(s_b / T) )
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor


def _check_groups(name: str, student: Tensor, teacher: Tensor) -> None:
    """Raise ValueError unless both are ``[B >= 1, 1 + N >= 2]`` of one shape."""
    if (
        student.shape != teacher.shape
        or student.ndim != 2
        or student.shape[0] < 1
        or student.shape[1] < 2
    ):
        raise ValueError(
            f"{name} needs student and teacher scores of one shape [B >= 1, 1 + N >= 2], got "
            f"{tuple(student.shape)} and {tuple(teacher.shape)}"
        )


def margin_mse_loss(student: Tensor, teacher: Tensor) -> Tensor:
    """Mean squared difference of the ``B * N`` (positive - negative) margins.

    Zero when every student margin equals the teacher's; adding a constant to one row of
    either side changes nothing (only differences within a row count).

    Args:
        student: ``[B, 1 + N]`` student scores, the positive in column 0.
        teacher: ``[B, 1 + N]`` teacher scores of the same documents (detached).

    Raises:
        ValueError: shapes differ, are not 2-d, or have no negative column.
    """
    _check_groups("margin_mse_loss", student, teacher)
    with torch.autocast(device_type=student.device.type, enabled=False):
        s, t = student.float(), teacher.detach().float()
        return F.mse_loss(s[:, :1] - s[:, 1:], t[:, :1] - t[:, 1:])


def listwise_kl_loss(student: Tensor, teacher: Tensor, temperature: float = 1.0) -> Tensor:
    """``KL(softmax(t / T) || softmax(s / T))`` per row, averaged over the ``B`` rows.

    Computed from ``log_softmax`` of both sides (no overflow, no ``log 0``). Zero when each
    student row equals the teacher's up to a constant. No ``T^2`` factor is applied (Hinton et
    al. scale by it to keep gradients comparable across temperatures; multiply if wanted).

    Args:
        student: ``[B, 1 + N]`` student scores.
        teacher: ``[B, 1 + N]`` teacher scores of the same documents (detached).
        temperature: ``T`` > 0; larger softens both distributions.

    Raises:
        ValueError: shapes differ, are not 2-d or have one column; ``temperature <= 0``.
    """
    _check_groups("listwise_kl_loss", student, teacher)
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    with torch.autocast(device_type=student.device.type, enabled=False):
        log_p_student = F.log_softmax(student.float() / temperature, dim=1)
        log_p_teacher = F.log_softmax(teacher.detach().float() / temperature, dim=1)
        return F.kl_div(log_p_student, log_p_teacher, reduction="batchmean", log_target=True)
