"""dotcat.losses.registry: each recipe's losses by name, and a BERT_DOT loss's settings."""

from __future__ import annotations

import pytest
import torch

from dotcat.errors import DotcatError
from dotcat.losses import LOSSES, LossConfig, bce_loss, group_labels, pick_loss


def test_the_default_temperature_follows_the_similarity():
    assert LossConfig.for_model("contrastive", "cos", None, 0.1).temperature == 0.05
    assert LossConfig.for_model("contrastive", "dot", None, 0.1).temperature == 1.0
    assert LossConfig.for_model("contrastive", "dot", 0.2, 0.1).temperature == 0.2  # given


def test_pick_loss_names_the_choices_of_the_recipe():
    assert pick_loss("cat", "lce") is LOSSES["cat"]["lce"]
    with pytest.raises(DotcatError, match=r"one of \('lce', 'bce'\) for cat, got 'hinge'"):
        pick_loss("cat", "hinge")


def test_the_bce_entry_labels_the_positive_of_each_group():
    logits = torch.tensor([[2.0, -1.0, 0.5], [0.0, 1.0, -2.0]])
    expected = bce_loss(logits, group_labels(2, 3))
    torch.testing.assert_close(pick_loss("cat", "bce")(logits), expected)
