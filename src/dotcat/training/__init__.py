"""Training BERT_DOT and BERT_CAT: settings, data, recipes, the one loop.

- :mod:`.config`: the settings of a run (:class:`DotConfig`, :class:`CatConfig`,
  :class:`DistillConfig` over :class:`TrainConfig`; :class:`AdaptConfig`), checked without
  torch; re-exported here, so ``from dotcat.training import DotConfig`` stays light.
- :mod:`.run`: :func:`~dotcat.training.run.train`, the one entry point: a config in, the
  trained model's directory out.
- :mod:`.recipes`: what each model trains on and how (``dot``, ``cat``, ``distill``), run by
  the loop of :mod:`.loop` (checkpoints in :mod:`.checkpoint`, processes in
  :mod:`.ddp`).
- :mod:`.data`: examples from qrels, mined negatives, batches, first-stage pools, cached
  teacher scores.
- :mod:`.model`: :class:`~dotcat.training.model.TrainableBiEncoder`.
- :mod:`.adapt`: ``dotcat adapt``, a BERT_DOT adapted to a corpus without labels, planned with
  this machine's rates (:mod:`.rates`).
"""

from dotcat.training.config import AdaptConfig, CatConfig, DistillConfig, DotConfig, TrainConfig

__all__ = ["AdaptConfig", "CatConfig", "DistillConfig", "DotConfig", "TrainConfig"]
