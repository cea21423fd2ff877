"""Training BERT_DOT and BERT_CAT: settings, data, recipes, the one loop.

- :mod:`.config`: the settings of a run (:class:`DotConfig`, :class:`CatConfig`,
  :class:`DistillConfig` over :class:`TrainConfig`; :class:`AdaptConfig`), checked without torch.
- :mod:`.run`: :func:`~dotcat.training.run.train`, the one entry point: a config in, the
  trained model's directory out.
- :mod:`.recipes`: what each model trains on and how (``dot``, ``cat``, ``distill``), run by the
  loop of :mod:`.loop` (checkpoints in :mod:`.checkpoint`, processes in :mod:`.ddp`).
- :mod:`.data`: examples from qrels, mined negatives, batches, first-stage pools, cached
  teacher scores.
- :mod:`.model`: :class:`~dotcat.training.model.TrainableBiEncoder`.
- :mod:`.adapt`: ``dotcat adapt``, a BERT_DOT adapted to a corpus without labels, planned with
  this machine's rates (:mod:`.rates`).
"""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "AdaptConfig": "dotcat.training.config",
    "CatConfig": "dotcat.training.config",
    "DistillConfig": "dotcat.training.config",
    "DotConfig": "dotcat.training.config",
    "TrainConfig": "dotcat.training.config",
    "train": "dotcat.training.run",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
