"""dotcat.training.loop: settings every recipe shares (the runs: tests/training/recipes)."""

from __future__ import annotations

import torch

from dotcat.models.runtime import cpu_has_native_bf16
from dotcat.training.recipe import resolve_bf16


def test_bf16_auto_follows_the_hardware():
    assert resolve_bf16("auto", torch.device("cpu")) is cpu_has_native_bf16()
    assert resolve_bf16("off", torch.device("cpu")) is False
    assert resolve_bf16("on", torch.device("cpu")) is True
