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

from dotcat.exports import lazy_exports

_EXPORTS = {
    "GradCache": "dotcat.losses.cached",
    "RandContext": "dotcat.losses.cached",
    "grad_cache_backward": "dotcat.losses.cached",
    "split_batch": "dotcat.losses.cached",
    "DEFAULT_TEMPERATURE": "dotcat.losses.contrastive",
    "SIMILARITIES": "dotcat.losses.contrastive",
    "ContrastiveLoss": "dotcat.losses.contrastive",
    "contrastive_logits": "dotcat.losses.contrastive",
    "contrastive_loss": "dotcat.losses.contrastive",
    "false_negative_mask": "dotcat.losses.contrastive",
    "similarity_matrix": "dotcat.losses.contrastive",
    "listwise_kl_loss": "dotcat.losses.distill",
    "margin_mse_loss": "dotcat.losses.distill",
    "ddp_contrastive_loss": "dotcat.losses.gathered",
    "ddp_triplet_loss": "dotcat.losses.gathered",
    "gather_with_grad": "dotcat.losses.gathered",
    "scale_to_global": "dotcat.losses.gathered",
    "lce_loss": "dotcat.losses.listwise",
    "soft_lce_loss": "dotcat.losses.listwise",
    "bce_loss": "dotcat.losses.pointwise",
    "group_labels": "dotcat.losses.pointwise",
    "DEFAULT_TEMPERATURES": "dotcat.losses.registry",
    "LOSSES": "dotcat.losses.registry",
    "LossConfig": "dotcat.losses.registry",
    "pick_loss": "dotcat.losses.registry",
    "DEFAULT_MARGIN": "dotcat.losses.triplet",
    "TripletLoss": "dotcat.losses.triplet",
    "triplet_loss": "dotcat.losses.triplet",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
