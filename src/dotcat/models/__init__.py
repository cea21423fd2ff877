"""Models: BERT_DOT bi-encoder, pooling, and where model weights come from.

Names are imported on first use (PEP 562), so ``dotcat.models.resolve`` and
``dotcat.models.st_config`` (which read model directories) do not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "BiEncoder": "dotcat.models.bi_encoder",
    "EncoderConfig": "dotcat.models.config",
    "CrossEncoderConfig": "dotcat.models.config",
    "cls_pooling": "dotcat.models.pooling",
    "mean_pooling": "dotcat.models.pooling",
    "DEFAULT_MODEL": "dotcat.models.resolve",
    "resolve_model": "dotcat.models.resolve",
    "weights_fingerprint": "dotcat.models.resolve",
    "runtime": "dotcat.models.runtime",
    "bi_encoder": "dotcat.models.bi_encoder",
}

__all__ = sorted(k for k in _EXPORTS if k not in ("runtime", "bi_encoder"))


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'dotcat.models' has no attribute {name!r}")
    imported = importlib.import_module(module)
    return imported if module.endswith(name) else getattr(imported, name)
