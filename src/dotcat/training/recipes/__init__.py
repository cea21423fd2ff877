"""Training recipes run by the one loop (:func:`dotcat.training.loop.train`).

- :mod:`.dot`: BERT_DOT on qrels, contrastive or triplet (``dotcat train dot``).
- :mod:`.cat`: BERT_CAT on qrels, LCE or BCE over first-stage negatives (``dotcat train cat``).
- :mod:`.distill`: BERT_DOT taught by a BERT_CAT, Margin-MSE or KL (``dotcat train distill``).
"""
