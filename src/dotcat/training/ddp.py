"""Data-parallel training with PyTorch DDP: this process's place in a ``torchrun`` job.

Launch the ordinary command under ``torchrun``; :func:`dotcat.training.run.train` sees
``WORLD_SIZE > 1`` (the ``dot`` and ``distill`` recipes) and sets everything up itself::

    torchrun --nproc_per_node 2 $(which dotcat) train dot data/scifact runs/scifact-dot
    # several machines: on each, with its own --node_rank
    torchrun --nnodes 2 --node_rank 0 --master_addr HOST --master_port 29500 \\
        --nproc_per_node 4 $(which dotcat) train dot DATA OUT_DIR

(CPU processes use the gloo backend; GPU processes use nccl, one GPU each, ``LOCAL_RANK``.)
Every process draws the same global batch and embeds its share of it (:func:`shard_sizes`);
the losses gather the other processes' embeddings with their gradients
(:mod:`dotcat.losses.gathered`). Only rank 0 writes files and shows progress bars; the
others wait at barriers (:meth:`DistributedContext.barrier`).

References:
    Li et al. (2020), "PyTorch Distributed: Experiences on Accelerating Data Parallel Training",
    VLDB (DDP).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from dataclasses import dataclass, field

import torch
import torch.distributed as dist

from dotcat.errors import DotcatError

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
        ctx.rank, ctx.world_size, ctx.local_rank, ctx.device, dist.get_backend(),
    )  # fmt: skip
    return ctx
