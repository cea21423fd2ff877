"""Loading a Hugging Face model for dotcat's encoders and trainers: one place for the
attention choice, the refusal of unsafe pickles, one-line errors and length limits."""

from __future__ import annotations

import logging
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError

from dotcat.errors import DotcatError, first_line
from dotcat.models.runtime import quiet_transformers
from dotcat.progress import quiet_logger

logger = logging.getLogger(__name__)


def load_hf_model(auto_model: Any, model_dir: Path, **kwargs: Any) -> torch.nn.Module:
    """AutoModel with SDPA attention where the architecture has it (the eager one is slower).

    transformers' own load report (a table of the weights the checkpoint lacks or has beyond
    the model, which a new classification head always prints) is silenced; one line says
    instead what was initialised at random (:func:`_report`).

    Raises:
        DotcatError: one line naming the directory: unloadable weights, or a PyTorch pickle
            holding more than tensors (refused by torch's ``weights_only`` loader: loading it
            could run arbitrary code).
    """
    kwargs["output_loading_info"] = True
    try:
        with (
            quiet_transformers(),
            quiet_logger("transformers"),  # its load report: _report's line instead
            warnings.catch_warnings(),
        ):
            # torch warns about the pickle protocol of old .bin files before refusing them.
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            try:
                model, info = auto_model.from_pretrained(
                    model_dir, attn_implementation="sdpa", **kwargs
                )
            except (ValueError, ImportError) as e:
                logger.debug("no SDPA attention for %s (%s); using the default", model_dir, e)
                model, info = auto_model.from_pretrained(model_dir, **kwargs)
    except pickle.UnpicklingError:
        raise DotcatError(
            f"{model_dir}: refused pytorch_model.bin: it holds Python objects, not only tensors, "
            "and loading it could run arbitrary code; use a copy with model.safetensors"
        ) from None
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:  # e.g. truncated
        raise DotcatError(f"{model_dir}: cannot load the model weights ({first_line(e)})") from None
    _report(model_dir, info)
    return model


def _report(model_dir: Path, info: dict[str, Any]) -> None:
    """One line for the weights the checkpoint lacked, which transformers initialised at
    random: a new classification head (a bi-encoder loaded to train a cross-encoder), or other
    weights (the model is not the checkpoint's). Weights beyond the model are dropped, as meant
    (a cross-encoder's head, read as an encoder)."""
    missing = sorted(info.get("missing_keys") or ())
    if all(key.startswith(("classifier.", "score.")) for key in missing) and missing:
        logger.warning(
            "%s has no classification head: a new one is initialised at random (%s); "
            "`dotcat train cat` trains it", model_dir, ", ".join(missing),
        )  # fmt: skip
    elif missing:
        logger.warning(
            "%s: %d weights are not in the checkpoint and were initialised at random (%s)",
            model_dir, len(missing), ", ".join(missing[:5]) + (", ..." if missing[5:] else ""),
        )  # fmt: skip


def check_max_length(max_length: int | None, minimum: int) -> None:
    """Refuse a max length below ``minimum`` (0 is an error, not "the model's default")."""
    if max_length is not None and max_length < minimum:
        raise DotcatError(f"max_length must be >= {minimum} tokens, got {max_length}")


def max_positions(model_config: Any) -> int:
    """Longest input the model's position embeddings allow (RoBERTa-style offsets removed)."""
    positions = getattr(model_config, "max_position_embeddings", None) or 512
    if getattr(model_config, "model_type", "") in ("roberta", "xlm-roberta", "camembert"):
        positions -= 2  # positions start after the padding index
    return int(positions)


def within_positions(max_length: int, shortest: int, model_config: Any) -> int:
    """``max_length``, refused outside ``shortest`` .. the model's :func:`max_positions`."""
    positions = max_positions(model_config)
    if not shortest <= max_length <= positions:
        raise DotcatError(
            f"max_length {max_length} is outside {shortest}..{positions} (the model's positions)"
        )
    return int(max_length)
