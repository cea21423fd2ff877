"""Models: BERT_DOT bi-encoder, pooling, and where model weights come from."""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "BiEncoder": "dotcat.models.bi_encoder",
    "CrossEncoder": "dotcat.models.cross_encoder",
    "EncoderConfig": "dotcat.models.config",
    "CrossEncoderConfig": "dotcat.models.config",
    "cls_pooling": "dotcat.models.pooling",
    "mean_pooling": "dotcat.models.pooling",
    "DEFAULT_MODEL": "dotcat.models.resolve",
    "resolve_model": "dotcat.models.resolve",
    "weights_fingerprint": "dotcat.models.resolve",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
