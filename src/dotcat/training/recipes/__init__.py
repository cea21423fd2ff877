"""Training recipes run by the one loop (:func:`dotcat.training.loop.train`).

- :mod:`.dot`: BERT_DOT on qrels, contrastive or triplet (``dotcat train dot``).
- :mod:`.cat`: BERT_CAT on qrels, LCE or BCE over first-stage negatives (``dotcat train cat``),
  after an optional label-free pre-training step (:mod:`.cat_pretrain`).
- :mod:`.distill`: BERT_DOT taught by a BERT_CAT, Margin-MSE or KL (``dotcat train distill``).

Each recipe holds its batch step and its dev evaluation, and tells
:func:`dotcat.training.run.train` the process context it trains in (``context``) and what
comes before its loop (``first_steps``).
"""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "CatRecipe": "dotcat.training.recipes.cat",
    "DistillRecipe": "dotcat.training.recipes.distill",
    "DotRecipe": "dotcat.training.recipes.dot",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
