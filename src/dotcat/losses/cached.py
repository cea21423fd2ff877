"""GradCache: a large-batch contrastive step in the memory of one small chunk.

With in-batch negatives the loss of one example depends on every embedding of the batch, so
the batch cannot simply be split into gradient-accumulation steps. GradCache (Gao et al. 2021)
splits the *encoder* work instead, in three steps:

1. embed every chunk of inputs with ``torch.no_grad`` (no activations kept), recording the RNG
   state before each chunk;
2. compute the loss on the detached embeddings (which require grad) and back-propagate it as far
   as the embeddings: ``g = dL/de``, one ``[d]`` vector per input;
3. re-embed each chunk *with* grad, replaying its recorded RNG state so dropout draws the same
   masks, and back-propagate ``g``: ``torch.autograd.backward(e_chunk, g_chunk)``.

By the chain rule, ``dL/dtheta = sum_i (de_i/dtheta)^T dL/de_i``, so step 3 accumulates exactly
the parameter gradients of the full-batch loss, while only one chunk's activations are alive at
a time. The price is a second forward pass (about +20 to 30% compute).

Nothing here knows about models: ``encode`` is any callable from a chunk of inputs to an
embedding tensor, and the loss any callable from embeddings to a scalar.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

logger = logging.getLogger(__name__)

Encode = Callable[[Any], Tensor]


def _accelerator_devices(inputs: Any) -> tuple[str | None, list[int]]:
    """The accelerator type and the device indices whose RNG a forward over ``inputs`` may use."""
    if hasattr(torch, "accelerator"):  # torch >= 2.6
        acc = torch.accelerator.current_accelerator()
        device_type = acc.type if acc is not None else None
    else:
        device_type = "cuda" if torch.cuda.is_available() else None
    if device_type is None:
        return None, []
    module = torch.get_device_module(device_type)
    found: set[int] = set()

    def walk(x: Any) -> None:
        if isinstance(x, Tensor):
            if x.device.type == device_type:
                found.add(x.device.index or 0)
        elif isinstance(x, Mapping):
            for v in x.values():
                walk(v)
        elif isinstance(x, (list, tuple)):
            for v in x:
                walk(v)

    walk(inputs)
    # Inputs may be strings tokenized inside `encode`: then the model's device is the current one,
    # which is initialised as soon as a model lives there.
    is_initialized = getattr(module, "is_initialized", None)
    current_device = getattr(module, "current_device", None)
    if is_initialized is not None and current_device is not None and is_initialized():
        found.add(current_device())
    return device_type, sorted(found)


class RandContext:
    """Record the RNG states now; ``with ctx:`` replays them, then restores the outer states.

    Covers the CPU generator and, on a machine with an accelerator (CUDA, ...), the generators of
    the devices the inputs live on plus the current device. The same idea as
    ``torch.utils.checkpoint`` (``preserve_rng_state``) and GradCache's ``RandContext``.
    """

    def __init__(self, *inputs: Any) -> None:
        self.cpu_state = torch.get_rng_state()
        self.device_type, self.devices = _accelerator_devices(inputs)
        self.device_states = []
        if self.device_type is not None:
            module = torch.get_device_module(self.device_type)
            self.device_states = [module.get_rng_state(d) for d in self.devices]
        self._fork: contextlib.AbstractContextManager | None = None

    def __enter__(self) -> None:
        self._fork = torch.random.fork_rng(
            devices=self.devices, device_type=self.device_type or "cpu"
        )
        self._fork.__enter__()
        torch.set_rng_state(self.cpu_state)
        if self.device_type is not None:
            module = torch.get_device_module(self.device_type)
            for device, state in zip(self.devices, self.device_states, strict=True):
                module.set_rng_state(state, device)

    def __exit__(self, *exc: object) -> None:
        assert self._fork is not None
        self._fork.__exit__(*exc)
        self._fork = None


def split_batch(inputs: Any, chunk_size: int) -> list[Any]:
    """Cut a batch into chunks of at most ``chunk_size`` examples along the first axis.

    ``inputs`` is a tensor, a sequence (e.g. a list of strings), or a mapping of tensors such as
    a tokenizer's output (``input_ids``, ``attention_mask``, ...), which is cut key by key into
    plain dicts.
    """
    if chunk_size < 1:
        raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
    if isinstance(inputs, Mapping):
        sizes = {len(v) for v in inputs.values()}
        if len(sizes) != 1:
            raise ValueError(f"mapping values have different batch sizes: {sorted(sizes)}")
        (n,) = sizes
        return [
            {k: v[i : i + chunk_size] for k, v in inputs.items()} for i in range(0, n, chunk_size)
        ]
    return [inputs[i : i + chunk_size] for i in range(0, len(inputs), chunk_size)]


def grad_cache_backward(
    encode: Encode | Sequence[Encode],
    chunks: Sequence[Sequence[Any]],
    loss_fn: Callable[..., Tensor],
    *,
    no_sync: Callable[[], contextlib.AbstractContextManager] | None = None,
) -> Tensor:
    """Compute ``loss_fn`` over a large batch chunk by chunk and accumulate its gradients.

    Leaves in every parameter's ``.grad`` the same gradient as ``loss_fn(*full_embeddings)
    .backward()`` would (to float rounding), holding only one chunk's activations at a time.
    Call ``optimizer.step()`` afterwards as usual; do *not* call ``backward`` on the result.

    Args:
        encode: callable mapping one chunk of inputs to its ``[chunk, d]`` embeddings, with
            autograd (e.g. ``lambda batch: model(**batch)`` plus pooling). One callable for all
            groups, or one per group (e.g. separate query and document encoders).
        chunks: one list of input chunks per group, e.g. ``[query_chunks, positive_chunks,
            negative_chunks]`` (see :func:`split_batch`). Group ``g``'s embeddings are the
            concatenation of its chunks' embeddings, in order.
        loss_fn: called as ``loss_fn(*group_embeddings)`` with one tensor per group, returns a
            scalar; e.g. ``lambda q, p, n: contrastive_loss(q, p, n.view(len(q), -1, q.shape[1]))``
            when the negatives were flattened to ``B * n`` inputs. Parameters of ``loss_fn``
            itself (e.g. a learned temperature) receive their gradients in step 2. To average
            over gradient-accumulation steps, divide inside ``loss_fn``.
        no_sync: optional context-manager factory (e.g. ``ddp_model.no_sync``) entered around
            every chunk's backward except the last, so DDP all-reduces the gradients once.

    Returns:
        The loss value, detached.

    Notes:
        Dropout is replayed exactly: the RNG state recorded before each chunk's first forward is
        restored for its second (:class:`RandContext`), so the recomputed embeddings equal the
        cached ones and the cached gradients belong to them. Run the call inside the caller's
        autocast context if mixed precision is wanted; both passes then use it.

    References:
        Gao, Zhang, Han, Callan (2021), "Scaling Deep Contrastive Learning Batch Size under Memory
        Limited Setup", RepL4NLP, arXiv:2101.06983 (GradCache).
    """
    if not chunks or any(len(group) == 0 for group in chunks):
        raise ValueError("every input group needs at least one chunk")
    encoders = [encode] * len(chunks) if callable(encode) else list(encode)
    if len(encoders) != len(chunks):
        raise ValueError(f"{len(encoders)} encode functions for {len(chunks)} input groups")

    # Step 1: embed without a graph, recording the RNG state each chunk starts from.
    states: list[list[RandContext]] = []
    cached: list[list[Tensor]] = []
    with torch.no_grad():
        for enc, group in zip(encoders, chunks, strict=True):
            states.append([])
            cached.append([])
            for chunk in group:
                states[-1].append(RandContext(chunk))
                cached[-1].append(enc(chunk).detach())

    # Step 2: the loss on leaf copies of the embeddings; their .grad is dL/de.
    reps = [torch.cat(group, dim=0).requires_grad_() for group in cached]
    with torch.enable_grad():
        loss = loss_fn(*reps)
        if loss.ndim != 0:
            raise ValueError(f"loss_fn must return a scalar, got shape {tuple(loss.shape)}")
        loss.backward()

    _replay(encoders, chunks, states, cached, reps, no_sync)
    return loss.detach()


def _replay(
    encoders: Sequence[Encode],
    chunks: Sequence[Sequence[Any]],
    states: list[list[RandContext]],
    cached: list[list[Tensor]],
    reps: list[Tensor],
    no_sync: Callable[[], contextlib.AbstractContextManager] | None,
) -> None:
    """GradCache's step 3: embed each chunk again with grad, under the RNG state of its first
    pass, and push its slice of ``dL/de`` (``reps[g].grad``) through the encoder."""
    jobs = [
        (g, c)
        for g, group in enumerate(cached)
        if reps[g].grad is not None
        for c in range(len(group))
    ]
    if len(jobs) < sum(len(group) for group in cached):
        logger.debug("some input groups do not reach the loss; they get no gradient")
    offsets = [[0] for _ in cached]
    for g, group in enumerate(cached):
        for emb in group:
            offsets[g].append(offsets[g][-1] + emb.shape[0])
    with torch.enable_grad():
        for j, (g, c) in enumerate(jobs):
            grad = reps[g].grad[offsets[g][c] : offsets[g][c + 1]]
            last = j == len(jobs) - 1
            sync = contextlib.nullcontext() if (no_sync is None or last) else no_sync()
            with sync, states[g][c]:
                emb = encoders[g](chunks[g][c])
                if emb.shape != cached[g][c].shape:
                    raise RuntimeError(
                        f"re-embedding chunk {c} of group {g} gave shape {tuple(emb.shape)}, "
                        f"the first pass gave {tuple(cached[g][c].shape)}"
                    )
                torch.autograd.backward(emb, grad.to(emb.dtype))


class GradCache:
    """A reusable GradCache step: an encode function, a loss and a chunk size.

    ``GradCache(encode, loss_fn, chunk_size=32)(queries, positives, negatives)`` splits each
    group of inputs with :func:`split_batch` and runs :func:`grad_cache_backward`.

    Args:
        encode: as in :func:`grad_cache_backward` (one callable or one per group).
        loss_fn: as in :func:`grad_cache_backward`.
        chunk_size: examples per forward pass; bounds the activation memory.
    """

    def __init__(
        self,
        encode: Encode | Sequence[Encode],
        loss_fn: Callable[..., Tensor],
        chunk_size: int = 32,
    ) -> None:
        if chunk_size < 1:
            raise ValueError(f"chunk_size must be >= 1, got {chunk_size}")
        self.encode = encode
        self.loss_fn = loss_fn
        self.chunk_size = chunk_size

    def __call__(
        self, *groups: Any, no_sync: Callable[[], contextlib.AbstractContextManager] | None = None
    ) -> Tensor:
        chunks = [split_batch(group, self.chunk_size) for group in groups]
        return grad_cache_backward(self.encode, chunks, self.loss_fn, no_sync=no_sync)
