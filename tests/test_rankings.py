"""The suite's ranking comparison: ties within the tolerance pass, real differences fail."""

from __future__ import annotations

import pytest
from tests.rankings import assert_same_ranking

pytestmark = pytest.mark.kernels  # its results can depend on the CPU (Makefile: test-kernels)


def test_tied_documents_may_swap_and_trade_places_at_the_cut():
    a = [("d1", 3.0), ("d2", 2.00001), ("d3", 2.0), ("d4", 1.0), ("d5", 0.99999)]
    b = [("d1", 3.0), ("d3", 2.00001), ("d2", 2.0), ("d4", 1.0), ("d6", 0.99999)]
    assert_same_ranking(a, b, atol=1e-4)


@pytest.mark.parametrize(
    "b",
    [
        [("d2", 3.0), ("d1", 2.0), ("d3", 1.0)],  # a swap of documents 1.0 apart
        [("d1", 3.0), ("d2", 2.0), ("d4", 1.5)],  # another document, clear of the cut
        [("d1", 3.0), ("d2", 2.01), ("d3", 1.0)],  # a score off by more than the tolerance
        [("d1", 3.0), ("d2", 2.0)],  # a hit missing
    ],
)
def test_real_differences_fail(b):
    a = [("d1", 3.0), ("d2", 2.0), ("d3", 1.0)]
    with pytest.raises(AssertionError):
        assert_same_ranking(a, b, atol=1e-4)
