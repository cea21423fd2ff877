"""Training tests share one setting: one intra-op thread."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models gain nothing from threads, and on a busy machine OpenMP workers that wait
    for a descheduled sibling make every op slow (seen: 40x); one thread keeps tests quick."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
