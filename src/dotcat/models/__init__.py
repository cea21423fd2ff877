"""Models: BERT_DOT bi-encoder, pooling, and where model weights come from."""

from dotcat.models.bi_encoder import BiEncoder, EncoderConfig
from dotcat.models.pooling import cls_pooling, mean_pooling
from dotcat.models.resolve import DEFAULT_MODEL, resolve_model, weights_fingerprint

__all__ = [
    "DEFAULT_MODEL",
    "BiEncoder",
    "EncoderConfig",
    "cls_pooling",
    "mean_pooling",
    "resolve_model",
    "weights_fingerprint",
]
