"""BERT_CAT losses: pointwise BCE (monoBERT) and listwise LCE (Gao et al. 2021)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from dotcat.losses import bce_loss, group_labels, lce_loss

ATOL = 1e-6


def _random(shape, seed, scale=3.0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(shape, generator=g) * scale).requires_grad_()


# -- bce_loss --------------------------------------------------------------------------------


def test_bce_hand_computed():
    logits = torch.tensor([2.0, -1.0])
    labels = torch.tensor([1.0, 0.0])
    # -log sigmoid(2) and -log(1 - sigmoid(-1)) = log(1 + e^-2), log(1 + e^-1)
    expected = (math.log1p(math.exp(-2.0)) + math.log1p(math.exp(-1.0))) / 2
    assert bce_loss(logits, labels).item() == pytest.approx(expected, abs=ATOL)
    # the wrong labels cost more: log(1 + e^2), log(1 + e^1)
    wrong = (math.log1p(math.exp(2.0)) + math.log1p(math.exp(1.0))) / 2
    assert bce_loss(logits, 1 - labels).item() == pytest.approx(wrong, abs=ATOL)


def test_bce_equals_torch_bce_on_sigmoid():
    logits = _random((4, 5), seed=0).detach()
    labels = group_labels(4, 5)
    expected = torch.nn.BCELoss()(torch.sigmoid(logits), labels)
    assert torch.allclose(bce_loss(logits, labels), expected, atol=1e-5, rtol=0)


def test_bce_gradient_is_sigmoid_minus_label_over_n():
    logits = _random((3, 4), seed=1)
    labels = group_labels(3, 4)
    bce_loss(logits, labels).backward()
    expected = (torch.sigmoid(logits.detach()) - labels) / logits.numel()
    assert torch.allclose(logits.grad, expected, atol=ATOL, rtol=0)


def test_bce_does_not_overflow_on_confident_logits():
    # right and confident: ~0; wrong and confident: ~|logit| (BCELoss on sigmoid clamps at 100)
    right = bce_loss(torch.tensor([200.0, -200.0]), torch.tensor([1.0, 0.0]))
    wrong = bce_loss(torch.tensor([200.0, -200.0]), torch.tensor([0.0, 1.0]))
    assert right.item() == pytest.approx(0.0, abs=1e-6)
    assert wrong.item() == pytest.approx(200.0, rel=1e-6)


def test_bce_accepts_integer_labels_and_low_precision_logits():
    logits = torch.tensor([0.5, -0.25, 1.5], dtype=torch.bfloat16)
    labels = torch.tensor([1, 0, 0])
    loss = bce_loss(logits, labels)
    assert loss.dtype == torch.float32
    ref = bce_loss(logits.float(), labels.float())
    assert loss.item() == pytest.approx(ref.item(), abs=ATOL)


@pytest.mark.parametrize(
    ("logits", "labels"),
    [
        (torch.zeros(3), torch.zeros(4)),
        (torch.zeros(2, 3), torch.zeros(6)),
        (torch.zeros(3, 1), torch.zeros(3)),
    ],
)
def test_bce_rejects_shape_mismatch(logits, labels):
    with pytest.raises(ValueError, match="differ"):
        bce_loss(logits, labels)


def test_bce_rejects_an_empty_batch():
    with pytest.raises(ValueError, match="empty"):
        bce_loss(torch.zeros(0), torch.zeros(0))


# -- group_labels ----------------------------------------------------------------------------


def test_group_labels_layout():
    labels = group_labels(3, 4)
    assert labels.shape == (3, 4)
    assert labels.dtype == torch.float32
    assert labels.tolist() == [[1.0, 0.0, 0.0, 0.0]] * 3
    assert group_labels(2, 1).tolist() == [[1.0], [1.0]]
    assert group_labels(1, 3, device=torch.device("cpu")).device.type == "cpu"


# -- lce_loss --------------------------------------------------------------------------------


def test_lce_hand_computed():
    logits = torch.tensor([[3.0, 1.0, 0.0], [0.0, 2.0, 0.0]])
    first = -math.log(math.exp(3) / (math.exp(3) + math.exp(1) + 1))
    second = -math.log(1 / (1 + math.exp(2) + 1))
    assert lce_loss(logits).item() == pytest.approx((first + second) / 2, abs=ATOL)
    # all scores equal: log(group size)
    assert lce_loss(torch.zeros(5, 8)).item() == pytest.approx(math.log(8), abs=ATOL)


def test_lce_equals_negative_log_softmax_of_the_positive():
    logits = _random((6, 5), seed=2).detach()
    x = logits.double().numpy()
    log_softmax = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    assert lce_loss(logits).item() == pytest.approx(-log_softmax[:, 0].mean(), abs=1e-5)
    target = torch.zeros(6, dtype=torch.long)
    expected = torch.nn.functional.cross_entropy(logits, target)
    assert torch.allclose(lce_loss(logits), expected, atol=ATOL, rtol=0)


def test_lce_gradient_is_softmax_minus_onehot_over_groups():
    logits = _random((4, 3), seed=3)
    lce_loss(logits).backward()
    onehot = group_labels(4, 3)
    expected = (torch.softmax(logits.detach(), dim=1) - onehot) / 4
    assert torch.allclose(logits.grad, expected, atol=ATOL, rtol=0)


def test_lce_depends_only_on_scores_within_each_group():
    logits = _random((3, 4), seed=4).detach()
    base = lce_loss(logits)
    # a constant per group (the query's own bias) changes nothing
    shifted = logits + torch.tensor([[10.0], [-3.0], [0.5]])
    assert torch.allclose(lce_loss(shifted), base, atol=1e-5, rtol=0)
    # nor does the order of the negatives
    assert torch.allclose(lce_loss(logits[:, [0, 3, 1, 2]]), base, atol=1e-5, rtol=0)
    # but which column is the positive does
    assert not torch.allclose(lce_loss(logits[:, [1, 0, 2, 3]]), base, atol=1e-3)


def test_lce_low_precision_logits_give_a_float32_loss():
    logits = torch.tensor([[1.0, 0.5, -0.5]], dtype=torch.bfloat16)
    loss = lce_loss(logits)
    assert loss.dtype == torch.float32
    assert loss.item() == pytest.approx(lce_loss(logits.float()).item(), abs=ATOL)


@pytest.mark.parametrize("shape", [(4,), (4, 1), (0, 3), (2, 3, 4)])
def test_lce_rejects_bad_shapes(shape):
    with pytest.raises(ValueError, match="lce_loss needs"):
        lce_loss(torch.zeros(shape))


def test_lce_equals_sentence_transformers_multiple_negatives_ranking(tiny_bert_dir):
    """ST's cross-encoder MNRL without activation and scale is a softmax over the positive.

    Its ``calculate_loss`` takes the logits, one tensor per candidate column, positive first;
    the model is only needed to construct the loss, never called.
    """
    st_ce = pytest.importorskip("sentence_transformers.cross_encoder")
    model = st_ce.CrossEncoder(str(tiny_bert_dir), num_labels=1, device="cpu")
    peer = st_ce.losses.MultipleNegativesRankingLoss(model, activation_fn=None, scale=1.0)

    ours = _random((5, 4), seed=5)
    theirs = ours.detach().clone().requires_grad_()
    loss = lce_loss(ours)
    peer_loss = peer.calculate_loss(list(theirs.T), batch_size=5)
    assert torch.allclose(loss, peer_loss, atol=1e-5, rtol=0), (loss, peer_loss)
    loss.backward()
    peer_loss.backward()
    assert torch.allclose(ours.grad, theirs.grad, atol=ATOL, rtol=0)


# -- soft_lce_loss ---------------------------------------------------------------------------


def test_soft_lce_is_lce_without_teacher_and_hand_computed_with_one():
    from dotcat.losses import soft_lce_loss

    logits = _random((3, 4), seed=5).detach()
    teacher = _random((3, 4), seed=6).detach()
    assert soft_lce_loss(logits, teacher, 0.0, 0.1).item() == pytest.approx(
        lce_loss(logits).item(), abs=1e-6
    )
    w, tau = 0.4, 0.5
    target = w * torch.softmax(teacher / tau, dim=1)
    target[:, 0] += 1 - w
    expected = -(target * torch.log_softmax(logits, dim=1)).sum(1).mean()
    assert soft_lce_loss(logits, teacher, w, tau).item() == pytest.approx(expected.item(), abs=1e-6)
    # the whole teacher (w = 1) is minimised by the student that copies its distribution
    copy = soft_lce_loss(teacher / tau, teacher, 1.0, tau)
    assert copy.item() < soft_lce_loss(logits, teacher, 1.0, tau).item()
    with pytest.raises(ValueError, match="do not match"):
        soft_lce_loss(logits, teacher[:, :3], w, tau)
    with pytest.raises(ValueError, match="weight"):
        soft_lce_loss(logits, teacher, 1.5, tau)
