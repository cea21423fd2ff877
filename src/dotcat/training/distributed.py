"""Data-parallel BERT_DOT training with PyTorch DDP, in-batch negatives spanning all processes.

Launch the ordinary command under ``torchrun``; :func:`dotcat.training.train_bi_encoder` sees
``WORLD_SIZE > 1`` and sets everything up itself::

    torchrun --nproc_per_node 2 $(which dotcat) train dot data/scifact runs/scifact-dot
    # several machines: on each, with its own --node_rank
    torchrun --nnodes 2 --node_rank 0 --master_addr HOST --master_port 29500 \\
        --nproc_per_node 4 $(which dotcat) train dot DATA OUT_DIR

(CPU processes use the gloo backend; GPU processes use nccl, one GPU each, ``LOCAL_RANK``.)

How a step works with ``W`` processes and a global batch of ``B`` examples:

1. Every process draws the *same* global batch (the batch sampler is seeded, not sharded) and
   embeds only its slice of it: ``B // W`` examples, the first ``B % W`` processes one more
   (:func:`shard_sizes`).
2. The positives and hard negatives are gathered from all processes *with their gradients*
   (:func:`gather_with_grad`, ``torch.distributed.nn.functional.all_gather``), so each query
   is scored against the whole global batch, as in a single process with batch ``B``. Gathering
   only detached copies would drop the gradient that flows from rank ``r``'s queries into rank
   ``s``'s documents.
3. Process ``r`` computes InfoNCE for its ``b_r`` queries; query ``i``'s positive is row
   ``offset_r + i`` of the gathered positives (``offset_r = b_0 + ... + b_{r-1}``, the
   ``offset`` argument of :func:`dotcat.losses.contrastive_loss`).
4. The backward of the all-gather sums, for each process's embeddings, the gradients coming
   from every process's loss; then DDP *averages* the parameter gradients over the ``W``
   processes. The global-batch loss is ``L = (1/B) sum_i L_i``, so process ``r``'s loss is
   scaled to ``(W / B) sum_{i in r} L_i = mean_r * b_r * W / B``: averaged over processes that
   is exactly ``L``, and the averaged gradient is exactly ``dL/dtheta`` (:func:`scale_to_global`;
   tested against a single process on the whole batch).

Only rank 0 writes files and shows progress bars; the others wait at barriers.

References:
    Li et al. (2020), "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
    VLDB (DDP). Karpukhin et al. (2020), "Dense Passage Retrieval", EMNLP (in-batch negatives
    shared across GPUs). Gao et al. (2021), GradCache (the same gathering over cached
    embeddings).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch
import torch.distributed as dist
from torch import Tensor

from dotcat.errors import DotcatError
from dotcat.losses import contrastive_loss, triplet_loss

logger = logging.getLogger(__name__)

DEFAULT_TIMEOUT = dt.timedelta(hours=3)  # rank 0 mines negatives and evaluates while others wait


@dataclass
class DistributedContext:
    """This process's place in the job (``world_size == 1``: a single, ordinary process).

    Attributes:
        rank: global rank (0 writes files).
        world_size: number of processes.
        local_rank: rank on this machine (picks the GPU).
        device: where this process's model lives.
        owns_group: the process group was created by :func:`init_distributed` (and is
            destroyed by :meth:`close`).
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    owns_group: bool = False

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def barrier(self) -> None:
        """Wait for every process (no-op in a single process)."""
        if not self.enabled:
            return
        if dist.get_backend() == "nccl":
            dist.barrier(device_ids=[self.device.index or 0])
        else:
            dist.barrier()

    def sizes(self, global_size: int) -> list[int]:
        """Every process's share of a global batch of ``global_size`` examples."""
        return shard_sizes(global_size, self.world_size)

    def local_slice(self, global_size: int) -> slice:
        """The rows of a global batch that this process embeds."""
        sizes = self.sizes(global_size)
        start = sum(sizes[: self.rank])
        return slice(start, start + sizes[self.rank])

    def close(self) -> None:
        """Destroy the process group if this context created it."""
        if self.owns_group and dist.is_initialized():
            dist.destroy_process_group()
            self.owns_group = False


def shard_sizes(global_size: int, world_size: int) -> list[int]:
    """Split ``global_size`` examples over ``world_size`` processes as evenly as possible.

    The first ``global_size % world_size`` processes get one more (as ``numpy.array_split``).
    """
    if world_size < 1 or global_size < 0:
        raise ValueError(f"cannot split {global_size} examples over {world_size} processes")
    base, extra = divmod(global_size, world_size)
    return [base + (r < extra) for r in range(world_size)]


def _device(device: str, local_rank: int) -> torch.device:
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda":
        if not torch.cuda.is_available():
            raise DotcatError("device 'cuda' asked for, but no CUDA GPU is available")
        return torch.device("cuda", local_rank % torch.cuda.device_count())
    return torch.device(device)


def init_distributed(
    device: str = "auto", timeout: dt.timedelta = DEFAULT_TIMEOUT
) -> DistributedContext:
    """Set up this process from torchrun's environment (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``).

    Without ``WORLD_SIZE`` (or with 1) it is a single process on ``device`` (``auto``: CUDA
    when available). Otherwise the default process group is created from the ``env://``
    variables (``MASTER_ADDR``, ``MASTER_PORT``), with the gloo backend on CPU and nccl on CUDA,
    unless one already exists (then it is used as is, and not destroyed by
    :meth:`DistributedContext.close`).

    Raises:
        DotcatError: ``WORLD_SIZE > 1`` without ``RANK``, or ``cuda`` without a GPU.
    """
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size <= 1 and not dist.is_initialized():
        return DistributedContext(device=_device(device, 0))
    if "RANK" not in os.environ and not dist.is_initialized():
        raise DotcatError("WORLD_SIZE is set but RANK is not: launch with torchrun")
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    torch_device = _device(device, local_rank)
    if torch_device.type == "cuda":
        torch.cuda.set_device(torch_device)
    owns = False
    if not dist.is_initialized():
        backend = "nccl" if torch_device.type == "cuda" else "gloo"
        dist.init_process_group(backend=backend, timeout=timeout)
        owns = True
    ctx = DistributedContext(
        rank=dist.get_rank(),
        world_size=dist.get_world_size(),
        local_rank=local_rank,
        device=torch_device,
        owns_group=owns,
    )
    logger.info(
        "distributed: rank %d of %d (local rank %d) on %s, backend %s",
        ctx.rank,
        ctx.world_size,
        ctx.local_rank,
        ctx.device,
        dist.get_backend(),
    )
    return ctx


def gather_with_grad(x: Tensor, sizes: Sequence[int]) -> Tensor:
    """Concatenate every process's ``x`` along dim 0, keeping the autograd graph.

    ``sizes[r]`` is process ``r``'s number of rows (``x.shape[0] == sizes[rank]``); uneven
    shares are padded for the collective and cut again. The backward pass sums, for each
    process's rows, the gradients from all processes' losses (the adjoint of the gather).
    With a single process (``len(sizes) == 1``) it returns ``x``.
    """
    if len(sizes) == 1:
        return x
    from torch.distributed.nn.functional import all_gather

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
        sizes: every process's share of the global batch (:func:`shard_sizes`).
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
