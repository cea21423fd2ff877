"""The choices and defaults every front door shares, and how a settings dataclass checks itself.

One source of truth: the library modules that act on a setting (:mod:`dotcat.models.runtime`
for precisions, :mod:`dotcat.search.pipeline` for first stages and fusions, ...) and the
command line that offers it import the tuples and defaults below; nothing repeats them.

A settings dataclass (``EncoderConfig``, ``PipelineConfig``, ``DotConfig``, ...) declares each
field with :func:`setting`: its default, its help text (``metadata["help"]``, which the command
line shows) and, for a closed list, its choices (``metadata["choices"]``, which
:meth:`Settings.validate` checks). Its other checks are ``(ok, setting, message)`` triples
returned by ``checks()``; the first that fails is raised as a
:class:`~dotcat.errors.SettingError` naming the field, which the command line renames to its
option (``max_length`` -> ``--max-length``). This module imports nothing heavy, so a command
checks every value before torch loads.
"""

from __future__ import annotations

import dataclasses
import os
import re
import types
import typing
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from dotcat.errors import SettingError

# -- choices ---------------------------------------------------------------------------------

#: Model precisions: ``auto``, the autocast dtypes, and int8 (ONNX Runtime or OpenVINO, CPU).
PRECISIONS = ("auto", "fp32", "bf16", "fp16", "int8")
#: The int8 runtimes; ``auto`` picks per model kind (:data:`dotcat.models.runtime.INT8_BY_DEFAULT`).
INT8_BACKENDS = ("auto", "onnxruntime", "openvino")
#: BERT_DOT pooling (:mod:`dotcat.models.pooling`) and similarity.
POOLINGS = ("cls", "mean")
SIMILARITIES = ("dot", "cos")
#: Hybrid fusions (:mod:`dotcat.search.fusion`); the first stages are a registry
#: (:mod:`dotcat.search.stages`), which other packages extend.
FUSIONS = ("auto", "rrf", "linear")
#: How a document is ranked from its passages' scores (:mod:`dotcat.search.aggregation`),
#: and the default: ``auto`` (``lead`` where mid-length documents were split one by one, else
#: MaxP), summing the best 2 under ``sum``.
AGGREGATIONS = ("auto", "maxp", "firstp", "lead", "sum")
AGGREGATION = AGGREGATIONS[0]
AGGREGATE_TOP = 2
#: ``lead``'s margin, in standard deviations of the query's scores (chosen on dev queries:
#: eval/studies/length_bias).
LEAD_MARGIN = 1.0
#: Pseudo-relevance feedback (:mod:`dotcat.search.feedback`): RM3 on the BM25 side, Rocchio on
#: the dense side, ``both`` (each side its own, before a hybrid fuses them), or none.
PRF_METHODS = ("none", "rm3", "rocchio", "both")
#: ``dotcat merge``: IVF lists on disk.
ON_DISK = ("auto", "yes", "no")
#: ``dotcat export``: precisions, linear layers left in fp32 under int8, int8 kernel variants.
EXPORT_PRECISIONS = ("int8", "fp32")
KEEP_FP32 = ("auto", "none", "ffn_output", "first_ffns", "smoothed")
INT8_VARIANTS = ("avx512_vnni", "avx2")
#: Paired significance tests, each with its interval (:mod:`dotcat.evaluation.significance`).
SIGNIFICANCE_TESTS = ("t", "randomisation", "bootstrap")

# -- defaults ----------------------------------------------------------------------------------

#: Results per query shown for one query (a table, JSON, an HTTP answer).
SHOWN_K = 10
#: Results per query written into a run: what the default measures need (R@100, AP@100).
RUN_K = 100
#: First-stage results a cross-encoder re-ranks, everywhere (search, serve, rerank, calibrate).
RERANK_DEPTH = 100
#: Candidates each first stage contributes before a hybrid fusion (at least k).
FUSION_DEPTH = 100
#: A linear fusion's dense weight where none was chosen (1 - it goes to BM25): equal trust.
FUSION_WEIGHT = 0.5
#: ... and where the encoder does not read the corpus's script (``preflight.unread_script``):
#: the weight dev chose on Japanese and Chinese manual pages, whose test nDCG@10 it lifts from
#: 0.4937 to 0.6259 and 0.6569 to 0.7345 (Russian, read a little: 0.6684 to 0.6656;
#: eval/studies/bm25_words/stages.md).
UNREAD_FUSION_WEIGHT = 0.3
#: Pseudo-relevance feedback's defaults: RM3 as Anserini and Pyserini run it (10 feedback
#: documents, 10 terms, original query weight 0.5); Rocchio on query vectors as Li et al. (2022)
#: run it over the top 3 documents (alpha 1, beta 0.5; Pyserini's dense PRF defaults too).
PRF = "none"
RM3_FB_DOCS = 10
RM3_FB_TERMS = 10
RM3_ORIGINAL_WEIGHT = 0.5
ROCCHIO_DOCS = 3
ROCCHIO_ALPHA = 1.0
ROCCHIO_BETA = 0.5
#: The longest query text accepted (characters): far beyond any encoder's window (a 512-token
#: window holds about 2,000 characters of English); longer is a pasted document, refused.
MAX_QUERY_CHARS = 10_000

# -- help texts shared by several settings -----------------------------------------------------

PRECISION_HELP = (
    "auto (int8 on CPUs with VNNI, else bf16 where the CPU has native bf16 or on a GPU, else "
    "fp32), fp32, bf16, fp16 (GPUs only), or int8 (CPU only, exported on first use); "
    "DOTCAT_NATIVE_BF16=on|off overrides the detection."
)
INT8_BACKEND_HELP = (
    "The re-ranker's int8 runtime: auto (onnxruntime on AVX2-only CPUs, else openvino where "
    "installed), openvino or onnxruntime."
)
DEVICE_HELP = "auto (a GPU when one is visible, else the CPU), cpu, cuda or cuda:N."
K_HELP = (
    f"Results per query (default: {SHOWN_K} shown, {RUN_K} written to a run file, what R@100 "
    "needs)."
)
AGGREGATION_HELP = (
    "How a document is scored from its passages: maxp (its best passage), firstp (its first "
    "passage only, as truncation), lead (its first, or a later one less "
    f"{LEAD_MARGIN:g} standard deviation of the query's scores, whichever is higher), sum "
    "(its best --aggregate-top passages summed); auto: lead on an index built with "
    "--split-over under 16, else maxp."
)
DEPTH_HELP = (
    "With a cross-encoder: how many first-stage results it re-ranks (fewer: faster answers)."
)


# -- declaring and checking settings -----------------------------------------------------------


def setting(
    default: Any = dataclasses.MISSING,
    *,
    help: str,
    choices: Sequence[Any] | Callable[[], Sequence[Any]] | None = None,
    **cli: Any,
) -> Any:
    """A dataclass field with its help text and, for a closed list, its choices (or a function
    that lists them, for a list others can extend: the first stages).

    The command line's option is generated from the field (:mod:`dotcat.cli.params`); ``cli``
    says where it differs from the field: ``flags`` (its names, e.g. ``("--grad-accum",)``),
    ``cli=False`` (not offered), ``cli_type`` and ``cli_default`` (the shell's spelling, e.g.
    ``str`` and ``"auto"`` for a number whose None means "decide"), ``parse`` (``(name, value)
    -> setting``), ``parts`` (a pair's two options) with ``part_help``, ``metavar``,
    ``envvar`` (an environment variable that sets it), ``argument=True`` (a positional
    argument, in field order: ``DATA OUT_DIR``).
    """
    unknown = set(cli) - _CLI_KEYS
    if unknown:
        raise TypeError(f"setting(): unknown keys {sorted(unknown)}")
    metadata = {"help": help, **cli}
    if choices is not None:
        metadata["choices"] = choices if callable(choices) else tuple(choices)
    return dataclasses.field(default=default, metadata=metadata)


_CLI_KEYS = {
    "flags", "cli", "cli_type", "cli_default", "parse", "parts", "part_help", "metavar", "envvar",
    "argument",
}  # fmt: skip


def auto_float(name: str, value: Any) -> float | None:
    """``auto`` (the shell's word for None: "decide") -> None, else a number."""
    if value is None or value == "auto":
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        raise SettingError(name, f"{name}: expected 'auto' or a number, got {value!r}") from None


def zero_is_none(name: str, value: Any) -> Any:
    """``0`` (the shell's word for "off") -> None."""
    return value or None


def negative_is_none(name: str, value: Any) -> Any:
    """A negative number (the shell's word for "the model's own") -> None."""
    return None if value is not None and value < 0 else value


def int_or_word(name: str, value: Any) -> int | str:
    """A whole number where the text is one (``1600``), else the word (``auto``)."""
    text = str(value).strip()
    return int(text) if text.lstrip("-").isdigit() else text


#: One check of a setting: ``(ok, setting, message)``; the message names the setting.
Check = tuple[bool, str, str]


def at_least(name: str, value: float | None, minimum: float) -> Check:
    """``value >= minimum`` (None passes: "decide for me")."""
    return (value is None or value >= minimum, name, f"{name} must be >= {minimum}, got {value}")


def within(name: str, value: float | None, low: float, high: float, *, open_high=False) -> Check:
    """``low <= value <= high`` (``< high`` with ``open_high``); None passes; NaN fails."""
    ok = value is None or (low <= value < high if open_high else low <= value <= high)
    bracket = ")" if open_high else "]"
    return (ok, name, f"{name} must be in [{low:g}, {high:g}{bracket}, got {value}")


def one_of(name: str, value: Any, choices: Sequence[Any], where: str = "") -> Check:
    """``value in choices``; ``where`` says whose list it is (``for dot``)."""
    listed = ", ".join(map(str, choices))
    suffix = f" (for {where})" if where else ""
    return (value in choices, name, f"{name} must be one of {listed}{suffix}, got {value!r}")


def first_failure(checks: Iterable[Check]) -> None:
    """Raise :class:`SettingError` for the first check that failed."""
    for ok, name, message in checks:
        if not ok:
            raise SettingError(name, message)


def _listed(choices: Any) -> tuple | None:
    """A field's choices: the tuple, or what its function lists now."""
    return tuple(choices()) if callable(choices) else choices


class Settings:
    """Mixin of a settings dataclass: :meth:`validate` checks every field's choices, then the
    class's own :meth:`checks`, then that no setting changed from its default where it does
    not apply (:meth:`applies`), and raises the first failure as a :class:`SettingError`.

    Its repr names only the fields set away from their defaults (``PipelineConfig(rerank=
    'my-cat')``), as scikit-learn prints estimators; ``dataclasses.asdict`` gives them all,
    :meth:`to_json` the changed ones (what a run's fingerprint is made of).
    """

    def __repr__(self) -> str:
        changed = [f"{name}={value!r}" for name, value in self._changed().items()]
        return f"{type(self).__name__}({', '.join(changed)})"

    def _changed(self) -> dict[str, Any]:
        """The fields set away from their defaults (and those without a default: their
        :func:`default_of` is ``dataclasses.MISSING``, which no value equals)."""
        out = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value != default_of(type(self), f.name):
                out[f.name] = value
        return out

    def checks(self) -> list[Check]:
        return []

    def applies(self) -> list[Applies]:
        """Settings that only apply to some values of others: ``(fields, applies here, why
        not)``; a field set where it does not apply is refused, never silently ignored."""
        return []

    def check_applies(self, given: Iterable[str]) -> None:
        """Refuse any of ``given`` (field names) where it does not apply."""
        given = set(given)
        for fields, ok, why in self.applies():
            for name in sorted(given & set(fields)):
                if not ok:
                    raise SettingError(name, f"{name} {why}", others=self._named_in(why))

    def _named_in(self, text: str) -> list[str]:
        """This class's fields that ``text`` names as whole words (``prf`` in "applies only
        with prf rocchio"), so a front door spells them its own way (``--prf``)."""
        return [
            f.name
            for f in dataclasses.fields(self)
            if re.search(rf"(?<![\w.-]){re.escape(f.name)}(?![\w-])", text)
        ]

    def validate(self) -> None:
        """Raise :class:`~dotcat.errors.SettingError` for the first value that cannot work."""
        for f in dataclasses.fields(self):  # a field declared with choices (None passes)
            choices, value = _listed(f.metadata.get("choices")), getattr(self, f.name)
            if choices is not None and value is not None:
                first_failure([one_of(f.name, value, choices)])
        first_failure(self.checks())
        self.check_applies(self._changed())

    def to_json(self) -> dict[str, Any]:
        """The fields set away from their defaults, JSON-ready (nested settings likewise):
        what a cached run or index depends on, unchanged when a new setting is added at its
        default."""
        return {name: _jsonable(value) for name, value in sorted(self._changed().items())}


#: What :meth:`Settings.applies` lists: ``(fields, applies here, why not)``.
Applies = tuple[Iterable[str], bool, str]


def int8_runtime_applies(name: str, precision: str) -> Applies:
    """An int8 runtime setting (``name``) applies where int8 may run: never silently ignored."""
    return ((name,), precision in ("auto", "int8"), "applies only with precision int8 or auto")


def _jsonable(value: Any) -> Any:
    if isinstance(value, Settings):
        return value.to_json()
    if isinstance(value, tuple | list):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in sorted(value.items())}
    return str(value) if isinstance(value, Path) else value


def is_union(hint: Any) -> bool:
    """Whether a type hint is a union (``int | None``, ``Optional[int]``)."""
    return typing.get_origin(hint) in (typing.Union, types.UnionType)


def is_settings(hint: Any) -> bool:
    """Whether a type is a settings dataclass (a nested settings field)."""
    return isinstance(hint, type) and issubclass(hint, Settings) and dataclasses.is_dataclass(hint)


def choices_of(cls: type, name: str) -> tuple | None:
    """The choices of a settings field, or None for an open value."""
    return _listed(_field(cls, name).metadata.get("choices"))


def default_of(cls: type, name: str) -> Any:
    """The default of a settings field (its factory's value for a mutable default)."""
    f = _field(cls, name)
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def _field(cls: type, name: str) -> dataclasses.Field:
    for f in dataclasses.fields(cls):
        if f.name == name:
            return f
    raise AttributeError(f"{cls.__name__} has no setting {name!r}")


# -- devices -----------------------------------------------------------------------------------

#: Device nodes a GPU that PyTorch calls ``cuda`` shows up as: NVIDIA's driver, ROCm (AMD),
#: WSL's GPU paravirtualisation.
_GPU_NODES = ("/dev/nvidia0", "/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def gpu_may_be_visible() -> bool:
    """Whether a CUDA (or ROCm) GPU may be visible to this process, judged without torch.

    False only when it surely is not: ``CUDA_VISIBLE_DEVICES`` hides every GPU, or no GPU
    driver's device node exists (:data:`_GPU_NODES`). True is confirmed (or not) by PyTorch
    when a model loads (:func:`dotcat.models.runtime.resolve_device`).
    """
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and visible.strip() in ("", "-1"):
        return False
    return any(Path(node).exists() for node in _GPU_NODES)


def device_checks(name: str, device: str) -> list[Check]:
    """``auto``, ``cpu``, ``cuda`` or ``cuda:N``, and a GPU where one is asked for."""
    kind, _, number = device.partition(":")
    known = device in ("auto", "cpu", "cuda") or (kind == "cuda" and number.isdigit())
    return [
        (known, name, f"{name} must be auto, cpu, cuda or cuda:N, got {device!r}"),
        (
            kind != "cuda" or gpu_may_be_visible(),
            name,
            f"{name} {device!r} asked for, but no CUDA GPU is visible on this machine",
        ),
    ]


def precision_checks(name: str, precision: str, device: str) -> list[Check]:
    """fp16 runs on GPUs only (PyTorch's CPU fp16 is emulated: slower than fp32, no gain);
    int8 on CPUs only (ONNX Runtime's and OpenVINO's CPU kernels)."""
    on_cpu = device == "cpu" or (device == "auto" and not gpu_may_be_visible())
    on_gpu = device.startswith("cuda")
    return [
        (
            not (precision == "fp16" and on_cpu),
            name,
            f"{name} fp16 runs on GPUs only, and this runs on the CPU; use bf16 or fp32",
        ),
        (
            not (precision == "int8" and on_gpu),
            name,
            f"{name} int8 runs on the CPU only; use --device cpu, or bf16/fp16 on a GPU",
        ),
    ]


def not_utf8(text: str) -> tuple[int, str] | None:
    """``(character from 1, what to say)`` of the first byte of ``text`` not UTF-8 (Python
    keeps a command line's or a pipe's as a lone surrogate, which no encoder reads)."""
    at = next((i for i, c in enumerate(text) if "\ud800" <= c <= "\udfff"), None)
    if at is None:
        return None
    code = ord(text[at])  # U+DC80-U+DCFF: a byte kept; other surrogates: Python-made text
    said = f"byte 0x{code & 0xFF:02X}" if code >= 0xDC80 else f"lone surrogate U+{code:04X}"
    return at + 1, f"{said} at character {at + 1} is not UTF-8; use UTF-8 text"
