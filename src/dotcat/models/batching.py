"""Length-sorted, token-budget batches: the one batching helper of both encoders.

Texts (or query-document pairs) are sorted by padded width, longest first, and cut into
batches of at most ``batch_size`` items and ``max_tokens`` padded tokens, so little compute is
spent on padding and a batch's activations stay in cache on a CPU.

Padding to a fixed multiple makes results independent of what a text is batched with. A
row's output depends on its own padded width (the shapes the kernels see round differently,
which bf16 turns into ranking changes between near-tied documents) but not on the other rows
of its batch. With ``multiple > 1`` each text is padded to ``ceil(length / multiple) *
multiple`` whatever its neighbours, and a batch holds one width only: a query is answered the
same alone, in a queries file, or micro-batched by the server with strangers.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np


def padded_widths(lengths: np.ndarray, multiple: int, cap: int) -> np.ndarray:
    """Each length rounded up to ``multiple`` (1: unchanged), never beyond ``cap`` (but never
    below the length itself)."""
    lengths = np.asarray(lengths, dtype=np.int64)
    if multiple <= 1:
        return lengths
    rounded = -(-lengths // multiple) * multiple
    return np.maximum(lengths, np.minimum(rounded, cap))


def batch_slices(
    sorted_widths: np.ndarray, batch_size: int, max_tokens: int = 0, fixed_width: bool = False
) -> Iterator[slice]:
    """Slices of a longest-first order: <= ``batch_size`` items, <= ``max_tokens`` padded
    tokens (0: no cap); with ``fixed_width``, a new batch wherever the width changes."""
    start, n = 0, len(sorted_widths)
    while start < n:
        size = batch_size
        if max_tokens > 0:
            size = max(1, min(batch_size, max_tokens // int(sorted_widths[start])))
        stop = min(n, start + size)
        if fixed_width:
            same = np.flatnonzero(sorted_widths[start:stop] != sorted_widths[start])
            if same.size:
                stop = start + int(same[0])
        yield slice(start, stop)
        start = stop
