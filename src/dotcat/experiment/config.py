"""The experiment file of ``dotcat experiment``: a TOML schema, validated field by field.

Every problem is one line naming the file and the field, e.g.
``experiment.toml: systems[2].depth: must be an integer >= 1, got 0`` or
``experiment.toml: systems[0]: unknown field 'modle' (did you mean 'model'?)``. The schema is
a set of pydantic models in strict mode (TOML has real types: ``depth = "10"`` is an error,
not a 10) that forbid unknown fields; :func:`check_paths` then checks the files the
experiment names (dataset, models, indexes) before anything heavy is imported.

Relative paths are taken from the current directory, as on the command line. A dataset's
``path`` may be a dataset name (``beir/nfcorpus``, ``irds:vaswani``:
:mod:`dotcat.data.catalog`), fetched into dotcat's cache on first use.

Several collections: ``[[datasets]]`` tables instead of ``[dataset]``, each with its ``path``,
``split`` and a short ``name`` (default: the path's last part), and every system runs on
every one of them (:func:`dotcat.experiment.runner.run_datasets`)::

    [[datasets]]
    name = "scifact"
    path = "data/scifact"

    [[datasets]]
    name = "nfcorpus"
    path = "beir/nfcorpus"

An example (``eval/experiments/scifact.toml`` has a complete one)::

    output = "runs/experiments/scifact"
    baseline = "BM25"
    measures = ["nDCG@10", "R@100"]

    [dataset]
    path = "data/scifact"
    split = "test"

    [[systems]]
    name = "BM25"
    first_stage = "bm25"

    [[systems]]
    name = "hybrid + BERT_CAT"
    first_stage = "hybrid"
    index = "indexes/scifact-dot"
    rerank = "runs/cat"
    depth = 100
"""

from __future__ import annotations

import difflib
import sys
import typing
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pydantic_core import PydanticCustomError

from dotcat import options
from dotcat.data import find_corpus_file, find_qrels_file, find_queries_file
from dotcat.data.catalog import resolve_data_path
from dotcat.errors import DotcatError, SettingError
from dotcat.evaluation.metrics import DEFAULT_MEASURES, parse_measures
from dotcat.index.manifest import Manifest
from dotcat.index.passages import PassageConfig
from dotcat.models.resolve import check_model
from dotcat.search.config import PRF_SIDES, PipelineConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: A system names its first stage (no ``auto``: the report says what each system ran).
FIRST_STAGES = tuple(stage for stage in options.FIRST_STAGES if stage != "auto")
# Settings of the index a `model` builds.
_ENCODER_FIELDS = ("pooling", "similarity", "max_length", "faiss")
# How the index a `model` builds splits long documents (with `passages`, the default).
_PASSAGE_FIELDS = ("passage_window", "passage_stride", "sentence_aware")
# How a first stage over an index with passages ranks documents.
_AGGREGATION_FIELDS = ("aggregation", "aggregate_top")
# Feedback settings, by the side they rewrite.
_RM3_FIELDS = ("fb_docs", "fb_terms", "original_query_weight")
_ROCCHIO_FIELDS = ("rocchio_docs", "rocchio_alpha", "rocchio_beta")


def _one_of(choices: tuple[str, ...]) -> str:
    """A description naming every choice: ``one of 'a', 'b', 'c'``."""
    return "one of " + ", ".join(repr(c) for c in choices)


def _field_error(field: str, message: str) -> PydanticCustomError:
    """A cross-field error reported as ``<system>.<field>: <message>``."""
    return PydanticCustomError("dotcat_field", message, {"field": field})


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class DatasetConfig(_Strict):
    """The topics and judgements every system is run on and evaluated with."""

    path: str = Field(
        description="a BEIR directory (corpus.jsonl, queries.jsonl, qrels/<split>.tsv) or a "
        "dataset name (beir/NAME, irds:ID)"
    )
    split: str = Field("test", min_length=1, description="the name of a qrels split")
    name: str | None = Field(
        None,
        min_length=1,
        description="a short name for the report (default: the path's last part)",
    )

    @property
    def label(self) -> str:
        """The dataset's name in reports: ``name``, else the last part of ``path``
        (``runs/collections/pydoc`` -> ``pydoc``, ``beir/nfcorpus`` -> ``nfcorpus``), an
        ir_datasets id whole (``irds:beir/nfcorpus/dev`` -> ``beir/nfcorpus/dev``)."""
        if self.name is not None:
            return self.name
        if self.path.startswith("irds:"):
            return self.path.removeprefix("irds:")
        return self.path.rstrip("/").rsplit("/", 1)[-1] or self.path


class SystemConfig(_Strict):
    """One system: a first stage (BM25, dense or hybrid), optionally re-ranked by BERT_CAT."""

    name: str = Field(min_length=1, description="a non-empty name")
    first_stage: Literal[FIRST_STAGES] = Field(description=_one_of(FIRST_STAGES))
    model: str | None = Field(
        None, description="a BERT_DOT model (directory or hub name) to build an index with"
    )
    index: str | None = Field(None, description="an index directory written by `dotcat index`")
    pooling: Literal[options.POOLINGS] | None = Field(None, description=_one_of(options.POOLINGS))
    similarity: Literal[options.SIMILARITIES] | None = Field(
        None, description=_one_of(options.SIMILARITIES)
    )
    max_length: int | None = Field(None, ge=2, description="an integer >= 2 (tokens)")
    faiss: str = Field("Flat", min_length=1, description="a FAISS factory string")
    passages: bool | None = Field(
        None,
        description="true or false (split documents longer than the window into passages; "
        "default: when most documents are more than twice the window)",
    )
    passage_window: int | None = Field(None, ge=8, description="an integer >= 8 (tokens)")
    passage_stride: int | None = Field(None, ge=0, description="an integer >= 0 (tokens)")
    sentence_aware: bool = Field(True, description="true or false")
    aggregation: Literal[options.AGGREGATIONS] = Field(
        "maxp", description=_one_of(options.AGGREGATIONS)
    )
    aggregate_top: int = Field(2, ge=1, description="an integer >= 1")
    fusion: Literal[options.FUSIONS] = Field("auto", description=_one_of(options.FUSIONS))
    fusion_weight: float | None = Field(None, ge=0, le=1, description="a number in [0, 1]")
    k1: float = Field(0.9, ge=0, description="a number >= 0")
    b: float = Field(0.4, ge=0, le=1, description="a number in [0, 1]")
    rerank: str | None = Field(None, description="a BERT_CAT cross-encoder (directory)")
    depth: int = Field(options.RERANK_DEPTH, ge=1, description="an integer >= 1")
    interpolate: Literal["auto"] | float = Field("auto", description="'auto' or a number in [0, 1]")
    batch_size: int = Field(32, ge=1, description="an integer >= 1")
    prf: Literal[options.PRF_METHODS] = Field(options.PRF, description=_one_of(options.PRF_METHODS))
    fb_docs: int = Field(options.RM3_FB_DOCS, ge=1, description="an integer >= 1")
    fb_terms: int = Field(options.RM3_FB_TERMS, ge=1, description="an integer >= 1")
    original_query_weight: float = Field(
        options.RM3_ORIGINAL_WEIGHT, ge=0, le=1, description="a number in [0, 1]"
    )
    rocchio_docs: int = Field(options.ROCCHIO_DOCS, ge=1, description="an integer >= 1")
    rocchio_alpha: float = Field(options.ROCCHIO_ALPHA, description="a number")
    rocchio_beta: float = Field(options.ROCCHIO_BETA, description="a number")

    @property
    def feedback(self) -> dict[str, Any]:
        """The feedback settings this system runs (none: an empty dict)."""
        sides = PRF_SIDES[self.prf]
        out: dict[str, Any] = {"prf": self.prf} if sides else {}
        if "bm25" in sides and (self.first_stage != "dense"):
            out |= {name: getattr(self, name) for name in _RM3_FIELDS}
        if "dense" in sides and (self.first_stage != "bm25"):
            out |= {name: getattr(self, name) for name in _ROCCHIO_FIELDS}
        return out

    def _applies(self) -> list[tuple[set[str], bool, str]]:
        """Settings that only apply to some systems: (fields, whether they apply here, why
        not)."""
        built, indexed = self.model is not None, self.model is not None or self.index is not None
        with_rm3_or_rocchio = {*_RM3_FIELDS, *_ROCCHIO_FIELDS}
        return [
            ({*_ENCODER_FIELDS, "passages"}, built, "applies only when `model` builds an index"),
            (set(_PASSAGE_FIELDS), built, "applies only when `model` builds an index"),
            (
                set(_PASSAGE_FIELDS),
                self.passages is not False,
                "does not apply with `passages = false`",
            ),
            (
                set(_AGGREGATION_FIELDS),
                indexed,
                "applies only to a system with an index (`model` or `index`)",
            ),
            (
                {"k1", "b"},
                self.first_stage == "bm25" and self.index is None,
                "applies only to first_stage 'bm25' over the dataset (no `index`)",
            ),
            (
                {"fusion", "fusion_weight"},
                self.first_stage == "hybrid",
                "applies only to first_stage 'hybrid'",
            ),
            (
                with_rm3_or_rocchio - set(self.feedback),
                False,
                f"does not apply with prf '{self.prf}' on this system",
            ),
            ({"depth", "interpolate", "batch_size"}, self.rerank is not None,
             "applies only with `rerank`"),
        ]  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> SystemConfig:
        """Settings that only apply to some systems are refused elsewhere, not ignored."""
        if self.first_stage in ("dense", "hybrid") and (self.model is None) == (self.index is None):
            raise _field_error(
                "model", f"first_stage '{self.first_stage}' needs either `model` or `index`"
            )
        if self.first_stage == "bm25" and self.model is not None:
            raise _field_error("model", "first_stage 'bm25' takes no `model` (BM25 is lexical)")
        for fields, applies, why in self._applies():
            for name in sorted(self.model_fields_set & fields):
                if not applies:
                    raise _field_error(name, why)
        if isinstance(self.interpolate, float) and not 0 <= self.interpolate <= 1:
            raise _field_error(
                "interpolate", f"must be 'auto' or a number in [0, 1], got {self.interpolate}"
            )
        return self

    @model_validator(mode="after")
    def _settings_valid(self) -> SystemConfig:
        """The index's and the query pipeline's own checks of what they will be given."""
        try:
            if self.passages is not False and self.model is not None:
                PassageConfig(window=self.passage_window, stride=self.passage_stride)
        except SettingError as e:
            raise _field_error(f"passage_{e.setting}", str(e)) from None
        try:
            PipelineConfig(
                first_stage=self.first_stage,
                fusion=self.fusion,
                fusion_weight=self.fusion_weight,
                aggregation=self.aggregation,
                aggregate_top=self.aggregate_top,
                **{k: getattr(self, k) for k in ("prf", *_RM3_FIELDS, *_ROCCHIO_FIELDS)},
            )
        except SettingError as e:
            raise _field_error(e.setting, str(e)) from None
        return self


class ExperimentConfig(_Strict):
    """A whole experiment: a dataset, systems, measures, a baseline, where the report goes."""

    name: str | None = Field(None, description="a title for the report")
    output: str = Field(min_length=1, description="the report folder")
    cache: str | None = Field(
        None, description="a folder for built indexes and runs (default: <output>/cache)"
    )
    baseline: str = Field(min_length=1, description="the name of one of the systems")
    measures: list[str] = Field(
        list(DEFAULT_MEASURES), min_length=1, description="a list of ir-measures names"
    )
    k: int = Field(options.RUN_K, ge=1, description="an integer >= 1 (results per query)")
    test: Literal[options.SIGNIFICANCE_TESTS] = Field(
        "t", description=_one_of(options.SIGNIFICANCE_TESTS)
    )
    permutations: int = Field(10_000, ge=1, description="an integer >= 1")
    seed: int = Field(0, description="an integer")
    alpha: float = Field(0.05, gt=0, lt=1, description="a number in (0, 1)")
    precision: Literal[options.PRECISIONS] = Field("auto", description=_one_of(options.PRECISIONS))
    device: str = Field("auto", min_length=1, description="'auto', 'cpu' or 'cuda'")
    dataset: DatasetConfig | None = Field(
        None, description="a [dataset] table with `path` and `split`"
    )
    datasets: list[DatasetConfig] | None = Field(
        None, min_length=1, description="[[datasets]] tables, each with `path`, `split`, `name`"
    )
    systems: list[SystemConfig] = Field(min_length=1, description="one or more [[systems]] tables")

    @property
    def dataset_list(self) -> list[DatasetConfig]:
        """The datasets every system runs on: the [dataset] table, or the [[datasets]] ones."""
        return [self.dataset] if self.dataset is not None else list(self.datasets or ())

    @model_validator(mode="after")
    def _datasets(self) -> ExperimentConfig:
        if (self.dataset is None) == (self.datasets is None):
            raise _field_error(
                "dataset",
                "give either a [dataset] table or [[datasets]] tables (several collections)"
                if self.dataset is not None
                else "missing; expected a [dataset] table with `path` and `split`, or "
                "[[datasets]] tables",
            )
        labels = [d.label for d in self.dataset_list]
        for i, label in enumerate(labels):
            if label in labels[:i]:
                raise _field_error(
                    f"datasets[{i}].name",
                    f"{label!r} names another dataset too; give each a distinct `name`",
                )
        return self

    @model_validator(mode="after")
    def _names(self) -> ExperimentConfig:
        names = [s.name for s in self.systems]
        for i, name in enumerate(names):
            if name in names[:i]:
                raise _field_error(f"systems[{i}].name", f"{name!r} is used by another system")
        if self.baseline not in names:
            raise _field_error(
                "baseline",
                f"{self.baseline!r} is not a system name" + _did_you_mean(self.baseline, names),
            )
        for i, measure in enumerate(self.measures):
            try:
                parse_measures(measure)
            except DotcatError as e:
                raise _field_error(f"measures[{i}]", str(e)) from None
        return self


def load_config(path: str | Path) -> ExperimentConfig:
    """Read and validate an experiment file.

    Raises:
        DotcatError: an unreadable file, invalid TOML, or a field that breaks the schema:
            one line per problem, ``<file>: <field>: <problem>``.
    """
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DotcatError(f"{path}: no such file") from None
    except (OSError, UnicodeDecodeError) as e:
        raise DotcatError(f"{path}: cannot read ({e})") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise DotcatError(f"{path}: invalid TOML: {e}") from None
    return parse_config(data, str(path))


def parse_config(data: dict[str, Any], source: str = "experiment") -> ExperimentConfig:
    """Validate an already parsed experiment (a dict as TOML gives it); see :func:`load_config`."""
    try:
        return ExperimentConfig.model_validate(data)
    except ValidationError as e:
        lines = _error_lines(e)
        raise DotcatError("\n".join(f"{source}: {line}" for line in lines)) from None


def _error_lines(error: ValidationError) -> list[str]:
    """One line per field in error (a union's alternatives collapse into one); an unknown
    field first, and no "missing" line for the field it is a misspelling of (``pth``: the
    line names ``path``)."""
    seen: dict[str, str] = {}
    misspelt: set[str] = set()
    for item in error.errors():
        fields = _field_path(item["loc"])
        where = _format_loc(fields)
        kind = item["type"]
        if kind == "extra_forbidden":
            name = str(fields[-1])
            parent = _format_loc(fields[:-1]) or "top level"
            known = list(_model_at(fields[:-1]).model_fields)
            message = f"{parent}: unknown field {name!r}{_did_you_mean(name, known)}"
            seen.setdefault(f"{where}:extra", message)
            close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
            misspelt.update(_format_loc([*fields[:-1], c]) for c in close)
            continue
        if kind == "dotcat_field":
            field = item["ctx"]["field"]
            where = f"{where}.{field}" if where else field
            seen.setdefault(where, f"{where}: {item['msg']}")
            continue
        description = _description(fields)
        if kind == "missing":
            message = f"missing; expected {description}" if description else "missing"
        else:
            expected = f"must be {description}" if description else item["msg"]
            message = f"{expected}, got {item['input']!r}"
        seen.setdefault(where, f"{where or 'top level'}: {message}")
    extras = [line for key, line in seen.items() if key.endswith(":extra")]
    return extras + [
        line
        for key, line in seen.items()
        if not key.endswith(":extra") and not (key in misspelt and "missing" in line)
    ]


def _field_path(loc: tuple) -> list[str | int]:
    """The loc as field names and list indexes, without a union's member tags."""
    out: list[str | int] = []
    model: type[BaseModel] | None = ExperimentConfig
    for part in loc:
        if isinstance(part, int):
            out.append(part)
        elif model is not None and part in model.model_fields:
            out.append(part)
            model = _nested_model(model.model_fields[part].annotation)
        else:  # an unknown field's name (kept), or a union member's tag (dropped)
            if model is not None:
                out.append(part)
            break
    return out


def _model_at(fields: list[str | int]) -> type[BaseModel]:
    model: type[BaseModel] = ExperimentConfig
    for part in fields:
        if isinstance(part, str):
            model = _nested_model(model.model_fields[part].annotation) or model
    return model


def _nested_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    for arg in typing.get_args(annotation):
        found = _nested_model(arg)
        if found is not None:
            return found
    return None


def _description(fields: list[str | int]) -> str | None:
    names = [p for p in fields if isinstance(p, str)]
    model: type[BaseModel] | None = ExperimentConfig
    info = None
    for name in names:
        if model is None or name not in model.model_fields:
            return None
        info = model.model_fields[name]
        model = _nested_model(info.annotation)
    return info.description if info is not None else None


def _format_loc(fields: list[str | int]) -> str:
    text = ""
    for part in fields:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def _did_you_mean(name: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


# -- the files an experiment names -----------------------------------------------------------


def check_paths(
    config: ExperimentConfig, source: str = "experiment", only: str | None = None
) -> None:
    """Check the datasets, models and indexes the experiment names, without loading them
    (``only``: of the datasets, that one; a dataset name is fetched into the cache).

    Raises:
        DotcatError: ``<file>: <field>: <problem>`` for the first one that is missing or
            unusable (a dataset without the split, a directory that is not a model, an index
            without the BM25 side a first stage needs).
    """

    def fail(where: str, error: Exception) -> None:
        raise DotcatError(f"{source}: {where}: {error}") from None

    labels = [d.label for d in config.dataset_list]
    if only is not None and only not in labels:
        raise DotcatError(f"--only {only!r}: the experiment's datasets are {', '.join(labels)}")
    for i, dataset in enumerate(config.dataset_list):
        if only is not None and dataset.label != only:
            continue
        where = "dataset" if config.dataset is not None else f"datasets[{i}]"
        try:
            _check_dataset(dataset, where)
        except DotcatError as e:
            raise DotcatError(f"{source}: {e}") from None
    for i, system in enumerate(config.systems):
        for field in ("model", "rerank"):
            value = getattr(system, field)
            if value is not None:
                try:
                    check_model(value, cross_encoder=field == "rerank")
                except DotcatError as e:
                    fail(f"systems[{i}].{field}", e)
        if system.index is not None:
            try:
                _check_index(Path(system.index), system.first_stage)
            except DotcatError as e:
                fail(f"systems[{i}].index", e)


def _check_dataset(dataset: DatasetConfig, where: str) -> None:
    """A dataset's corpus, queries and split (a name is fetched into the cache first)."""
    try:
        data = resolve_data_path(dataset.path)
    except DotcatError as e:
        raise DotcatError(f"{where}.path: {e}") from None
    if not data.is_dir():
        raise DotcatError(f"{where}.path: {data}: no such directory")
    for field, check in (
        ("path", lambda: find_corpus_file(data)),
        ("path", lambda: find_queries_file(data)),
        ("split", lambda: find_qrels_file(data, dataset.split)),
    ):
        try:
            check()
        except DotcatError as e:
            raise DotcatError(f"{where}.{field}: {e}") from None


def _check_index(index_dir: Path, first_stage: str) -> None:
    manifest = Manifest.read(index_dir)
    if first_stage in ("bm25", "hybrid") and not manifest.bm25:
        raise DotcatError(
            f"{index_dir} has no BM25 index, which first_stage '{first_stage}' needs "
            "(build it with `dotcat index ... --bm25`)"
        )
