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

import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:  # PyTorch is imported where batches run on it (not by the exported encoders)
    import torch

#: Padded tokens per forward pass on CPU (see :mod:`dotcat.models.bi_encoder` and the
#: benchmark): a batch's activations then stay in cache.
CPU_MAX_BATCH_TOKENS = 2048
#: Texts per forward pass of a bi-encoder when none is asked for: on CPU the token budget above
#: decides and 32 is a ceiling; a GPU left with 32 short texts per pass waits on kernel launches
#: (and bf16 autocast's casts), so it gets 256, under a token budget that keeps a 512-token model's
#: batch at 128 texts (3.0x the documents/s of 32 on an H100 with all-MiniLM-L6-v2 under bf16,
#: in one run).
CPU_BATCH_SIZE = 32
GPU_BATCH_SIZE = 256
GPU_MAX_BATCH_TOKENS = 65_536
#: Texts (or pairs) tokenized, sorted and run together; bounds the token lists held in memory.
WINDOW = 16_384
#: Queries are padded to a multiple of this many tokens and batched by width, so a query's
#: vector does not depend on the queries it is batched with (see the module docstring).
QUERY_PAD_MULTIPLE = 8
#: Most automatic CPU workers; beyond, each worker gets several intra-op threads (measured on
#: 2 cores only; many Python threads would contend for the GIL between ops).
MAX_AUTO_WORKERS = 8


def default_batch(device: torch.device) -> tuple[int, int]:
    """``(texts, padded tokens)`` per forward pass on ``device`` when the caller sets neither
    (tokens 0: no cap)."""
    if device.type == "cpu":
        return CPU_BATCH_SIZE, CPU_MAX_BATCH_TOKENS
    return GPU_BATCH_SIZE, GPU_MAX_BATCH_TOKENS


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


def length_sorted_batches(
    lengths: np.ndarray, batch_size: int, max_tokens: int = 0, pad_multiple: int = 1, cap: int = 0
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each text's padded width and the batches (index arrays, longest first) to encode it in:
    :func:`padded_widths` then :func:`batch_slices` over the length-sorted order (one width
    per batch when ``pad_multiple > 1``)."""
    widths = padded_widths(lengths, pad_multiple, cap or int(np.max(lengths, initial=1)))
    order = np.argsort(-widths, kind="stable")
    slices = batch_slices(widths[order], batch_size, max_tokens, fixed_width=pad_multiple > 1)
    return widths, [order[rows] for rows in slices]


def pad_ids(seqs: Sequence[Sequence[int]], width: int, pad_id: int) -> tuple[np.ndarray, ...]:
    """The collator of token-id sequences: right-padded ``(input_ids, attention_mask)`` int64
    arrays of ``width`` columns."""
    input_ids = np.full((len(seqs), width), pad_id, dtype=np.int64)
    mask = np.zeros((len(seqs), width), dtype=np.int64)
    for row, seq in enumerate(seqs):
        input_ids[row, : len(seq)] = seq
        mask[row, : len(seq)] = 1
    return input_ids, mask


def cpu_workers(device: torch.device, fast: bool, configured: int | None) -> int:
    """How many batches to encode at once: 1 on a GPU or off the fast path; else the
    configured count, or one per PyTorch thread up to :data:`MAX_AUTO_WORKERS`."""
    if device.type != "cpu" or not fast:
        return 1  # a GPU runs one batch at a time
    if configured is not None:
        return max(1, configured)
    import torch

    return min(torch.get_num_threads(), MAX_AUTO_WORKERS)


def run_jobs(jobs: list[np.ndarray], run: Any, workers: int, threads: int | None = None) -> None:
    """``run(job)`` for every job: inline, or pulled from a shared queue by ``workers`` threads.

    Each worker thread gives itself ``threads // workers`` intra-op threads (PyTorch's thread
    count is per thread under OpenMP) and enters ``inference_mode`` (also per thread). The
    first error stops the other workers and is raised here. Inline, ``threads`` (if given)
    is the intra-op thread count for these jobs, the caller's restored afterwards.
    """
    import torch

    if workers <= 1 or len(jobs) <= 1:
        _run_inline(jobs, run, threads)
        return
    total_threads = torch.get_num_threads()
    per_worker = max(1, total_threads // workers)
    pending = iter(jobs)
    lock = threading.Lock()
    stop = threading.Event()

    def work() -> None:
        torch.set_num_threads(per_worker)
        with torch.inference_mode():
            while not stop.is_set():
                with lock:
                    job = next(pending, None)
                if job is None:
                    return
                try:
                    run(job)
                except BaseException:
                    stop.set()
                    raise

    try:
        with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dotcat-encode") as pool:
            futures = [pool.submit(work) for _ in range(min(workers, len(jobs)))]
            try:
                for future in futures:
                    future.result()
            except BaseException:  # includes KeyboardInterrupt: let the workers stop early
                stop.set()
                raise
    finally:
        # The caller's count again, in case a worker's setting reached a process-wide pool.
        torch.set_num_threads(total_threads)


def _run_inline(jobs: list[np.ndarray], run: Any, threads: int | None) -> None:
    """:func:`run_jobs` in the calling thread, on ``threads`` intra-op threads (if given)."""
    import torch

    before = torch.get_num_threads()
    if threads is not None and threads != before:
        torch.set_num_threads(threads)
    try:
        with torch.inference_mode():
            for job in jobs:
                run(job)
    finally:
        if threads is not None and threads != before:
            torch.set_num_threads(before)
