"""Losses over a batch split across processes: each process embeds its share, the loss is the
whole batch's.

How a step works with ``W`` processes and a global batch of ``B`` examples:

1. Every process draws the *same* global batch and embeds only its slice of it, ``b_r``
   examples (``sizes[r]``; :func:`dotcat.training.ddp.shard_sizes`).
2. The positives and hard negatives are gathered from all processes *with their gradients*
   (:func:`gather_with_grad`, ``torch.distributed.nn.functional.all_gather``), so each query
   is scored against the whole global batch, as in a single process with batch ``B``. Gathering
   only detached copies would drop the gradient that flows from rank ``r``'s queries into rank
   ``s``'s documents.
3. Process ``r`` computes InfoNCE for its ``b_r`` queries; query ``i``'s positive is row
   ``offset_r + i`` of the gathered positives (``offset_r = b_0 + ... + b_{r-1}``, the
   ``offset`` argument of :func:`dotcat.losses.contrastive.contrastive_loss`).
4. The backward of the all-gather sums, for each process's embeddings, the gradients coming
   from every process's loss; then DDP *averages* the parameter gradients over the ``W``
   processes. The global-batch loss is ``L = (1/B) sum_i L_i``, so process ``r``'s loss is
   scaled to ``(W / B) sum_{i in r} L_i = mean_r * b_r * W / B``: averaged over processes that
   is exactly ``L``, and the averaged gradient is exactly ``dL/dtheta`` (:func:`scale_to_global`;
   tested against a single process on the whole batch).

With one process (``len(sizes) == 1``) every function here is the plain loss.

References:
    Li et al. (2020), "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
    VLDB (DDP). Karpukhin et al. (2020), "Dense Passage Retrieval", EMNLP (in-batch negatives
    shared across GPUs). Gao et al. (2021), GradCache (the same gathering over cached
    embeddings).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.distributed as dist
from torch import Tensor
from torch.distributed.nn.functional import all_gather

from dotcat.losses.contrastive import contrastive_loss
from dotcat.losses.triplet import triplet_loss


def gather_with_grad(x: Tensor, sizes: Sequence[int]) -> Tensor:
    """Concatenate every process's ``x`` along dim 0, keeping the autograd graph.

    ``sizes[r]`` is process ``r``'s number of rows (``x.shape[0] == sizes[rank]``); uneven
    shares are padded for the collective and cut again. The backward pass sums, for each
    process's rows, the gradients from all processes' losses (the adjoint of the gather).
    With a single process (``len(sizes) == 1``) it returns ``x``.
    """
    if len(sizes) == 1:
        return x
    rank = dist.get_rank()
    if x.shape[0] != sizes[rank]:
        raise ValueError(f"rank {rank} has {x.shape[0]} rows, expected {sizes[rank]}")
    longest = max(sizes)
    if x.shape[0] < longest:
        x = torch.cat([x, x.new_zeros(longest - x.shape[0], *x.shape[1:])])
    parts = all_gather(x)
    return torch.cat([part[:n] for part, n in zip(parts, sizes, strict=True)])


def scale_to_global(local_mean: Tensor, sizes: Sequence[int], rank: int) -> Tensor:
    """``local_mean * b_r * W / B``: the local loss whose average over processes is the global mean.

    DDP averages gradients over the ``W`` processes; the loss of the global batch of
    ``B = sum(sizes)`` examples is ``(1/B) sum_i L_i``. With even shares the factor is 1.
    """
    total = sum(sizes)
    return local_mean * (sizes[rank] * len(sizes) / total)


def ddp_contrastive_loss(
    query: Tensor,
    positive: Tensor,
    negatives: Tensor | None,
    sizes: Sequence[int],
    rank: int,
    *,
    temperature: float,
    similarity: str,
    mask: Tensor | None = None,
) -> Tensor:
    """InfoNCE of this process's queries against the positives and negatives of all processes.

    Args:
        query, positive: ``[b, d]`` this process's embeddings (``b = sizes[rank]``).
        negatives: ``[b, n, d]`` this process's hard negatives, or ``None``.
        sizes: every process's share of the global batch.
        rank: this process's rank.
        mask: ``[b, B + B*n]`` rows of the global batch's false-negative mask for this
            process's queries (columns: all positives, then all negatives, in global order).

    Returns:
        The loss scaled by :func:`scale_to_global`: its average over processes is the
        global-batch loss, and DDP's averaged gradient is that loss's gradient.
    """
    all_positives = gather_with_grad(positive, sizes)
    all_negatives = None
    if negatives is not None and negatives.shape[1] > 0:
        all_negatives = gather_with_grad(negatives, sizes)
    local = contrastive_loss(
        query,
        all_positives,
        all_negatives,
        temperature=temperature,
        similarity=similarity,
        mask=mask,
        offset=sum(sizes[:rank]),
    )
    return scale_to_global(local, sizes, rank)


def ddp_triplet_loss(
    query: Tensor,
    positive: Tensor,
    negatives: Tensor,
    sizes: Sequence[int],
    rank: int,
    *,
    margin: float,
    similarity: str,
) -> Tensor:
    """The triplet loss of this process's examples, scaled like :func:`ddp_contrastive_loss`.

    Triplets use no in-batch negatives, so nothing is gathered; the scaling alone makes DDP's
    averaged gradient the gradient of the mean over the global batch.
    """
    local = triplet_loss(query, positive, negatives, margin=margin, similarity=similarity)
    return scale_to_global(local, sizes, rank)
