"""Read a model's own sentence-transformers settings (pooling, similarity, length, prompts).

A sentence-transformers directory lists its modules in ``modules.json``: a Transformer, a
Pooling (``1_Pooling/config.json``), optionally a Normalize (vectors L2-normalised, so cosine).
``sentence_bert_config.json`` may give ``max_seq_length`` (sentence-transformers < 6; version 6
stores it as the tokenizer's ``model_max_length``), ``config_sentence_transformers.json`` the
similarity function and the query/document prompts. Modules are recognised by class name
through an explicit table; a module dotcat cannot reproduce (Dense, max pooling, ...) is an
error rather than silently different vectors.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotcat.errors import DotcatError

logger = logging.getLogger(__name__)

#: sentence-transformers module class name -> its role in a BERT_DOT encoder.
MODULE_ROLES: dict[str, str] = {
    "Transformer": "transformer",
    "Pooling": "pooling",
    "Normalize": "normalize",
}
#: Pooling modes (old boolean keys and new names) -> dotcat pooling; others are unsupported.
_POOLING_MODES: dict[str, str] = {
    "cls": "cls",
    "mean": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_mean_tokens": "mean",
}
_SIMILARITIES = {"cosine": "cos", "dot": "dot"}
#: Prompt names sentence-transformers' encode_document tries, in order.
_DOCUMENT_PROMPTS = ("document", "passage", "corpus")


_TOLD: set[Path] = set()  # models warned about (once a process)


@dataclass(frozen=True)
class StSettings:
    """What a model directory says about itself; None where it says nothing."""

    transformer_dir: Path
    pooling: str | None = None
    similarity: str | None = None
    max_length: int | None = None
    lowercase: bool = False
    pooling_error: str | None = None  # the model's pooling cannot be reproduced (and why)
    query_prompt: str | None = None
    document_prompt: str | None = None
    default_prompt: str = ""  # ``default_prompt_name``'s prompt: what ``encode`` puts first

    def pooling_and_similarity(
        self, pooling: str | None, similarity: str | None
    ) -> tuple[str, str]:
        """The pooling and similarity asked for (checked by ``EncoderConfig.validate``), else
        the model's sentence-transformers files' (only those dotcat supports are read), else
        ``cls`` and ``dot`` (DPR's)."""
        pooling = pooling or self.pooling
        if pooling is None:
            if self.pooling_error:
                raise DotcatError(f"{self.pooling_error}; pass an explicit pooling (cls or mean)")
            pooling = "cls"
            if self.transformer_dir not in _TOLD:  # sentence-transformers would take mean, cos
                _TOLD.add(self.transformer_dir)
                logger.warning("%s has no sentence-transformers pooling: CLS pooling and dot "
                               "product are used, as DPR's (give --pooling mean --similarity cos "
                               "for sentence-transformers' choice)",
                               self.transformer_dir)  # fmt: skip
        told = similarity or self.similarity or not self.pooling or self.transformer_dir in _TOLD
        if not told:  # sentence-transformers would take cosine
            _TOLD.add(self.transformer_dir)
            logger.warning("%s names no similarity function: dot product is used (give "
                           "--similarity cos for cosine)", self.transformer_dir)  # fmt: skip
        return pooling, similarity or self.similarity or "dot"


def or_prompt(prefix: str | None, prompt: str | None) -> str:
    """A prefix given in the config (``""``: none), else the model's recorded prompt."""
    return (prompt or "") if prefix is None else prefix


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as e:
        raise DotcatError(f"{path}: unreadable sentence-transformers config: {e}") from e


def read_st_settings(model_dir: Path) -> StSettings:
    """Read the sentence-transformers files of ``model_dir`` (a plain HF dir gives defaults).

    Raises:
        DotcatError: a config file is malformed, or lists a module or pooling mode that a
            BERT_DOT encoder with cls/mean pooling cannot reproduce.
    """
    modules = _read_json(model_dir / "modules.json")
    if modules is None:
        return StSettings(transformer_dir=model_dir)
    if not isinstance(modules, list):
        raise DotcatError(f"{model_dir / 'modules.json'}: expected a list of modules")
    roles: dict[str, str] = {}
    unsupported = []
    for module in sorted(modules, key=lambda m: m.get("idx", 0)):
        class_name = str(module.get("type", "")).rsplit(".", 1)[-1]
        role = MODULE_ROLES.get(class_name)
        if role is None or role in roles:
            unsupported.append(str(module.get("type")))
            continue
        roles[role] = str(module.get("path", ""))
    if unsupported or "transformer" not in roles:
        raise DotcatError(
            f"{model_dir}: sentence-transformers modules {unsupported or ['(no Transformer)']} "
            "are not supported; dotcat encodes with Transformer + Pooling (cls|mean) "
            "[+ Normalize]"
        )
    transformer_dir = model_dir / roles["transformer"] if roles["transformer"] else model_dir

    pooling = pooling_error = None
    if "pooling" in roles:
        pooling, pooling_error = _pooling_mode(model_dir / roles["pooling"] / "config.json")

    st_config = _read_json(model_dir / "config_sentence_transformers.json") or {}
    similarity = None
    if "normalize" in roles:
        similarity = "cos"
    elif st_config.get("similarity_fn_name") is not None:
        name = str(st_config["similarity_fn_name"])
        similarity = _SIMILARITIES.get(name)
        if similarity is None:
            raise DotcatError(
                f"{model_dir}: similarity {name!r} is not supported (dotcat: cosine or dot)"
            )

    sbert = _read_json(transformer_dir / "sentence_bert_config.json") or {}
    max_length = sbert.get("max_seq_length")
    if max_length is None:
        tokenizer_config = _read_json(transformer_dir / "tokenizer_config.json") or {}
        max_length = tokenizer_config.get("model_max_length")
        if not isinstance(max_length, int) or max_length > 100_000:
            max_length = None  # HF writes a huge sentinel when a tokenizer has no limit
    prompts = st_config.get("prompts") or {}
    document_prompt = next((prompts[k] for k in _DOCUMENT_PROMPTS if k in prompts), None)
    settings = StSettings(
        transformer_dir=transformer_dir,
        pooling=pooling,
        pooling_error=pooling_error,
        similarity=similarity,
        max_length=int(max_length) if max_length is not None else None,
        lowercase=bool(sbert.get("do_lower_case", False)),
        query_prompt=prompts.get("query"),
        document_prompt=document_prompt,
        default_prompt=prompts.get(st_config.get("default_prompt_name")) or "",
    )
    logger.debug("sentence-transformers settings of %s: %s", model_dir, settings)
    return settings


def _pooling_mode(path: Path) -> tuple[str | None, str | None]:
    """(pooling, None) for cls/mean; (None, why) for a pooling dotcat cannot reproduce."""
    config = _read_json(path)
    if not isinstance(config, dict):
        raise DotcatError(f"{path}: missing or malformed pooling config")
    if "pooling_mode" in config:
        modes = config["pooling_mode"]
        modes = [modes] if isinstance(modes, str) else list(modes)
    else:
        modes = [k for k, v in config.items() if k.startswith("pooling_mode_") and v is True]
    if len(modes) != 1 or modes[0] not in _POOLING_MODES:
        return None, f"{path}: pooling {modes} is not supported (dotcat: cls or mean)"
    if config.get("include_prompt") is False:
        return None, f"{path}: include_prompt=false (prompt left out of pooling) is not supported"
    return _POOLING_MODES[modes[0]], None


#: The file of dotcat's record in a cross-encoder directory (pair length, base, dev weight).
CAT_RECORD = "dotcat_cross_encoder.json"


def read_cat_record(model_dir: Path) -> dict[str, Any]:
    """``dotcat_cross_encoder.json`` of a cross-encoder directory ({} where there is none).

    Raises:
        DotcatError: the file exists but is not a JSON object.
    """
    path = Path(model_dir) / CAT_RECORD
    record = _read_json(path)
    if record is None:
        return {}
    if not isinstance(record, dict):
        raise DotcatError(f"{path}: expected a JSON object")
    return record


def interpolation_source(model_dir: Path) -> str:
    """Where its record's weight came from (0 chosen by nothing: ``--no-check``, no dev split)."""
    record = read_cat_record(model_dir)
    if (record.get("heldout_check") or {}).get("shown_better") is False:
        return "held-out check showed no gain"
    chosen = "interpolation_dev_scores" in record
    return "dev-chosen" if chosen else "recorded without a dev choice or held-out check"


def recorded_interpolation(record: dict[str, Any], path: Path) -> float | None:
    """The dev-chosen interpolation weight a cross-encoder record holds, if any."""
    value = record.get("interpolation_alpha")
    if value is None:
        return None
    try:
        alpha = float(value)
    except (TypeError, ValueError):
        raise DotcatError(
            f"{path / CAT_RECORD}: interpolation_alpha {value!r} is not a number"
        ) from None
    if not 0.0 <= alpha <= 1.0:
        raise DotcatError(f"{path / CAT_RECORD}: interpolation_alpha {alpha} is outside [0, 1]")
    return alpha
