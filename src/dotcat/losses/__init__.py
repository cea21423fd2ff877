"""Training losses for dotcat's encoders: embeddings in, a scalar out, no model inside.

- :func:`contrastive_loss` / :class:`ContrastiveLoss`: InfoNCE with in-batch and hard negatives
  and a temperature, cosine or dot product (van den Oord et al. 2018; Karpukhin et al. 2020).
- :func:`triplet_loss` / :class:`TripletLoss`: ``max(gamma - cos(q, d+) + cos(q, d-), 0)``
  (Schroff et al. 2015; the course notes).
- :func:`bce_loss`: pointwise binary cross-entropy of BERT_CAT (monoBERT, the course notes).
- :func:`lce_loss`: localized contrastive estimation, a softmax over a positive and its hard
  negatives for BERT_CAT (Gao, Dai & Callan 2021); :func:`soft_lce_loss` with a teacher's
  distribution mixed into its target.
- :func:`margin_mse_loss` (Hofstätter et al. 2020) and :func:`listwise_kl_loss`: a BERT_CAT
  teacher's scores distilled into BERT_DOT.
- :func:`grad_cache_backward` / :class:`GradCache`: the same losses over large batches in small
  memory (Gao et al. 2021).
- :mod:`.gathered`: the same losses over a batch split across processes (DDP), gathered
  with their gradients: :func:`ddp_contrastive_loss`, :func:`ddp_triplet_loss`.
- :mod:`.registry`: each recipe's losses by name (:data:`LOSSES`, :func:`pick_loss`) and
  :class:`LossConfig`, a BERT_DOT loss's settings.
"""

from dotcat.losses.cached import GradCache, RandContext, grad_cache_backward, split_batch
from dotcat.losses.contrastive import (
    DEFAULT_TEMPERATURE,
    SIMILARITIES,
    ContrastiveLoss,
    contrastive_logits,
    contrastive_loss,
    false_negative_mask,
    similarity_matrix,
)
from dotcat.losses.distill import listwise_kl_loss, margin_mse_loss
from dotcat.losses.gathered import (
    ddp_contrastive_loss,
    ddp_triplet_loss,
    gather_with_grad,
    scale_to_global,
)
from dotcat.losses.listwise import lce_loss, soft_lce_loss
from dotcat.losses.pointwise import bce_loss, group_labels
from dotcat.losses.registry import DEFAULT_TEMPERATURES, LOSSES, LossConfig, pick_loss
from dotcat.losses.triplet import DEFAULT_MARGIN, TripletLoss, triplet_loss

__all__ = [
    "DEFAULT_MARGIN",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_TEMPERATURES",
    "LOSSES",
    "SIMILARITIES",
    "ContrastiveLoss",
    "GradCache",
    "LossConfig",
    "RandContext",
    "TripletLoss",
    "bce_loss",
    "contrastive_logits",
    "contrastive_loss",
    "ddp_contrastive_loss",
    "ddp_triplet_loss",
    "false_negative_mask",
    "gather_with_grad",
    "grad_cache_backward",
    "group_labels",
    "lce_loss",
    "listwise_kl_loss",
    "margin_mse_loss",
    "pick_loss",
    "scale_to_global",
    "similarity_matrix",
    "soft_lce_loss",
    "split_batch",
    "triplet_loss",
]
