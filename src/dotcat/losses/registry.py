"""The losses each recipe picks from by name: a new loss is one file in :mod:`dotcat.losses`
and one line here (and its name in :mod:`dotcat.training.config`'s choices).

Every entry of a recipe has that recipe's signature:

- ``dot``: ``fn(query, positive, negatives, sizes, rank, loss, mask)`` on this process's
  embeddings (``[b, d]``, ``[b, d]``, ``[b, n, d]`` or None), every process's share of the
  global batch, a :class:`LossConfig` and the false-negative mask; the multi-process forms of
  :mod:`dotcat.losses.gathered`, which reduce to the plain losses in one process.
- ``cat``: ``fn(logits)`` over ``[groups, 1 + n]`` logits, the positive first.
- ``distill``: ``fn(student, teacher, temperature)`` over ``[b, 1 + n]`` scores, the positive first.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from torch import Tensor

from dotcat.errors import DotcatError
from dotcat.losses.distill import listwise_kl_loss, margin_mse_loss
from dotcat.losses.gathered import ddp_contrastive_loss, ddp_triplet_loss
from dotcat.losses.listwise import lce_loss
from dotcat.losses.pointwise import bce_loss, group_labels

#: The contrastive temperature per similarity when none is given: 0.05 for cosines (DPR-style
#: training of normalised embeddings, e.g. SimCSE, E5), 1 for inner products (DPR trains its
#: dot-product bi-encoder with no temperature at all).
DEFAULT_TEMPERATURES = {"cos": 0.05, "dot": 1.0}


@dataclass(frozen=True)
class LossConfig:
    """A BERT_DOT loss: ``contrastive`` (``temperature``, on the model's similarity) or
    ``triplet`` (``margin``, always on cosines: the notes define it so, and a margin in
    unbounded inner-product units would mean nothing)."""

    name: str = "contrastive"
    similarity: str = "cos"
    temperature: float = 0.05
    margin: float = 0.1

    @classmethod
    def for_model(
        cls, name: str, similarity: str, temperature: float | None, margin: float
    ) -> LossConfig:
        """The loss for a model of this similarity; ``temperature`` None: the default for it."""
        if temperature is None:
            temperature = DEFAULT_TEMPERATURES[similarity]
        return cls(name, similarity, temperature, margin)


def _contrastive(q: Tensor, pos: Tensor, negs: Any, sizes: Any, rank: int, loss: Any, mask: Any):
    """InfoNCE over in-batch and hard negatives (DPR;
    :func:`dotcat.losses.contrastive.contrastive_loss`)."""
    t = loss.temperature
    return ddp_contrastive_loss(
        q, pos, negs, sizes, rank, temperature=t, similarity=loss.similarity, mask=mask
    )


def _triplet(q: Tensor, pos: Tensor, negs: Any, sizes: Any, rank: int, loss: Any, mask: Any):
    """``max(margin - cos(q, d+) + cos(q, d-), 0)``, on cosines whatever the index searches by
    (the notes define it so; :func:`dotcat.losses.triplet.triplet_loss`)."""
    return ddp_triplet_loss(q, pos, negs, sizes, rank, margin=loss.margin, similarity="cos")


def _bce(logits: Tensor) -> Tensor:
    """Pointwise binary cross-entropy, the positive labelled 1 (monoBERT)."""
    return bce_loss(logits, group_labels(logits.shape[0], logits.shape[1], logits.device))


def _margin_mse(student: Tensor, teacher: Tensor, temperature: float) -> Tensor:
    return margin_mse_loss(student, teacher)


#: Each recipe's losses by name (``dot``: contrastive, triplet; ``cat``: lce, bce; ...).
LOSSES: dict[str, dict[str, Callable[..., Tensor]]] = {
    "dot": {"contrastive": _contrastive, "triplet": _triplet},
    "cat": {"lce": lce_loss, "bce": _bce},
    "distill": {"margin-mse": _margin_mse, "kl": listwise_kl_loss},
}


def pick_loss(recipe: str, name: str) -> Callable[..., Tensor]:
    """The loss ``name`` of ``recipe``; a :class:`DotcatError` lists the choices otherwise."""
    choices = LOSSES[recipe]
    if name not in choices:
        raise DotcatError(f"loss must be one of {tuple(choices)} for {recipe}, got {name!r}")
    return choices[name]
