"""Pooling: from a transformer's token vectors to one vector per text.

BERT_DOT (the DPR-style bi-encoder; Karpukhin et al. 2020) scores a query q and a document d by

    s(q, d) = f_sim(BERT(q)[CLS], BERT(d)[CLS])

with f_sim the dot product or the cosine: the text's vector is the last hidden state at the
[CLS] position (:func:`cls_pooling`). Sentence-BERT (Reimers & Gurevych 2019) instead averages
the last hidden states over the text's real tokens (:func:`mean_pooling`), as all-MiniLM-L6-v2
was trained to.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor


def cls_pooling(hidden: Tensor, mask: Tensor) -> Tensor:
    """The vector at the first position: ``e = H[:, 0]``.

    Args:
        hidden: last hidden states, shape ``(batch, seq_len, dim)``; sequences right-padded,
            so position 0 holds [CLS].
        mask: attention mask ``(batch, seq_len)``, 1 for real tokens (unused: [CLS] is never
            padding; kept for a uniform signature).

    Returns:
        ``(batch, dim)``: ``BERT(x)[CLS]``.
    """
    del mask
    return hidden[:, 0]


def mean_pooling(hidden: Tensor, mask: Tensor) -> Tensor:
    """Mean of the token vectors over non-padding positions (SBERT, Reimers & Gurevych 2019).

    ``e_b = sum_t m_bt * H_bt / max(sum_t m_bt, 1e-9)``, with ``m`` the attention mask, so
    padding never moves the mean (the clamp only guards an all-padding row).

    Args:
        hidden: last hidden states ``(batch, seq_len, dim)``.
        mask: attention mask ``(batch, seq_len)``, 1 for real tokens and 0 for padding.

    Returns:
        ``(batch, dim)`` in the dtype of ``hidden``.
    """
    weights = mask.to(hidden.dtype).unsqueeze(-1)
    summed = (hidden * weights).sum(dim=1)
    counts = weights.sum(dim=1).clamp(min=1e-9)
    return summed / counts


#: Pooling name -> function (an explicit registry; ``EncoderConfig.pooling`` picks one).
POOLINGS: dict[str, Callable[[Tensor, Tensor], Tensor]] = {"cls": cls_pooling, "mean": mean_pooling}


def pool(name: str, hidden: Tensor, mask: Tensor) -> Tensor:
    """Apply the pooling called ``name`` (``"cls"`` or ``"mean"``)."""
    try:
        fn = POOLINGS[name]
    except KeyError:
        raise ValueError(f"unknown pooling {name!r}; known: {', '.join(POOLINGS)}") from None
    return fn(hidden, mask)


def l2_normalize(x: Tensor, eps: float = 1e-12) -> Tensor:
    """``x / max(||x||_2, eps)`` row-wise, so that dot product equals cosine similarity."""
    return torch.nn.functional.normalize(x, p=2.0, dim=-1, eps=eps)
