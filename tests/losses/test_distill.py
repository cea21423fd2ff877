"""Distillation losses: Margin-MSE (Hofstätter et al. 2020) and listwise KL."""

from __future__ import annotations

import math
import re

import pytest
import torch
import torch.nn.functional as F

from dotcat.losses.distill import listwise_kl_loss, margin_mse_loss

ATOL = 1e-6


def _random(shape, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g) * scale


# -- margin_mse_loss --------------------------------------------------------------------------


def test_margin_mse_hand_computed():
    student = torch.tensor([[3.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    teacher = torch.tensor([[2.0, 1.0, 1.0], [1.0, 0.0, 2.0]])
    # student margins [2, 3], [0, 0]; teacher margins [1, 1], [1, -1]
    # squared differences 1, 4, 1, 1 -> mean over the B * N = 4 pairs
    assert margin_mse_loss(student, teacher).item() == pytest.approx(7 / 4, abs=ATOL)
    assert margin_mse_loss(student[:1], teacher[:1]).item() == pytest.approx(5 / 2, abs=ATOL)


def test_margin_mse_zero_when_margins_match():
    teacher = _random((4, 5), seed=0)
    student = teacher + _random((4, 1), seed=1)  # same margins, another offset per row
    assert margin_mse_loss(student, teacher).item() == pytest.approx(0.0, abs=1e-5)


@pytest.mark.parametrize("side", ["student", "teacher"])
def test_margin_mse_invariant_to_row_shifts(side):
    student, teacher = _random((3, 4), seed=2), _random((3, 4), seed=3)
    shift = _random((3, 1), seed=4, scale=10.0)
    before = margin_mse_loss(student, teacher)
    after = (
        margin_mse_loss(student + shift, teacher)
        if side == "student"
        else margin_mse_loss(student, teacher + shift)
    )
    assert before.item() > 0.1
    assert torch.allclose(before, after, atol=1e-4, rtol=0)


def test_margin_mse_gradient_reaches_the_student_only():
    student = _random((2, 3), seed=5).requires_grad_()
    teacher = _random((2, 3), seed=6).requires_grad_()
    margin_mse_loss(student, teacher).backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert teacher.grad is None
    # each row's gradient sums to zero: a shift of the row changes nothing
    assert torch.allclose(student.grad.sum(dim=1), torch.zeros(2), atol=1e-6)


# -- listwise_kl_loss -------------------------------------------------------------------------


def test_kl_hand_computed():
    # teacher softmax [3/4, 1/4], student softmax [1/2, 1/2]
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[math.log(3.0), 0.0]])
    expected = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    assert listwise_kl_loss(student, teacher).item() == pytest.approx(expected, abs=ATOL)
    # a second row with nothing to learn halves the batch mean
    both = listwise_kl_loss(torch.cat([student, teacher]), torch.cat([teacher, teacher]))
    assert both.item() == pytest.approx(expected / 2, abs=ATOL)


def test_kl_zero_for_identical_and_shifted_scores():
    teacher = _random((4, 6), seed=7)
    assert listwise_kl_loss(teacher.clone(), teacher).item() == pytest.approx(0.0, abs=1e-6)
    shifted = teacher + _random((4, 1), seed=8, scale=20.0)
    assert listwise_kl_loss(shifted, teacher).item() == pytest.approx(0.0, abs=1e-5)
    assert listwise_kl_loss(_random((4, 6), seed=9), teacher).item() > 0.01


def test_kl_temperature():
    # dividing by T = 2 undoes the doubled teacher: the same value as the hand-computed case
    student = torch.tensor([[0.0, 0.0]])
    teacher = torch.tensor([[2 * math.log(3.0), 0.0]])
    expected = 0.75 * math.log(1.5) + 0.25 * math.log(0.5)
    got = listwise_kl_loss(student, teacher, temperature=2.0)
    assert got.item() == pytest.approx(expected, abs=ATOL)


@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_kl_equals_torch_kl_div(temperature):
    student, teacher = _random((5, 4), seed=10), _random((5, 4), seed=11)
    expected = F.kl_div(
        F.log_softmax(student / temperature, dim=1),
        F.softmax(teacher / temperature, dim=1),
        reduction="batchmean",
    )
    got = listwise_kl_loss(student, teacher, temperature=temperature)
    assert torch.allclose(got, expected, atol=1e-5, rtol=0)


def test_kl_softens_with_temperature():
    student, teacher = _random((5, 4), seed=12), _random((5, 4), seed=13)
    values = [listwise_kl_loss(student, teacher, temperature=t).item() for t in (1.0, 4.0, 16.0)]
    assert values[0] > values[1] > values[2] > 0


def test_kl_gradient_reaches_the_student_only():
    student = _random((2, 3), seed=14).requires_grad_()
    teacher = _random((2, 3), seed=15).requires_grad_()
    listwise_kl_loss(student, teacher, temperature=2.0).backward()
    assert student.grad is not None and student.grad.abs().sum() > 0
    assert teacher.grad is None


# -- shapes -------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", [margin_mse_loss, listwise_kl_loss])
@pytest.mark.parametrize(
    "student_shape, teacher_shape",
    [((2, 3), (2, 4)), ((2, 3), (3, 3)), ((6,), (6,)), ((2, 3, 1), (2, 3, 1)), ((2, 1), (2, 1))],
)
def test_bad_shapes_raise(loss, student_shape, teacher_shape):
    with pytest.raises(ValueError, match=re.escape(str(tuple(student_shape)))):
        loss(torch.zeros(student_shape), torch.zeros(teacher_shape))


def test_empty_batch_raises():
    with pytest.raises(ValueError, match=r"\(0, 3\)"):
        margin_mse_loss(torch.zeros(0, 3), torch.zeros(0, 3))


@pytest.mark.parametrize("temperature", [0.0, -1.0, float("nan")])
def test_kl_bad_temperature_raises(temperature):
    with pytest.raises(ValueError, match="temperature"):
        listwise_kl_loss(torch.zeros(1, 2), torch.zeros(1, 2), temperature=temperature)
