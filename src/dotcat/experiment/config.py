"""The experiment file of ``dotcat experiment``: a TOML schema, validated field by field.

Every problem is one line naming the file and the field, e.g. ``experiment.toml: systems[2].depth:
must be an integer >= 1, got 0`` or ``experiment.toml: systems[0]: unknown field 'modle' (did you
mean 'model'?)``. The schema is a set of pydantic models in strict mode (TOML has real types:
``depth = "10"`` is an error, not a 10) that forbid unknown fields; :func:`check_paths` then checks
the files the experiment names (dataset, models, indexes) before anything heavy is imported.

Relative paths are taken from the current directory, as on the command line. A dataset's
``path`` may be a dataset name (``beir/nfcorpus``, ``irds:vaswani``:
:mod:`dotcat.data.catalog`), fetched into dotcat's cache on first use.

Several collections: ``[[datasets]]`` tables instead of ``[dataset]``, each with its ``path``,
``split`` and a short ``name`` (default: the path's last part); every system runs on every one
of them (:func:`dotcat.experiment.runner.run_experiment`). A whole example: docs/benchmarks.md
("A benchmark in one command") and ``eval/experiments/scifact.toml``.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
import tomllib
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator
from pydantic_core import PydanticCustomError

from dotcat import options
from dotcat.data import find_corpus_file, find_qrels_file, find_queries_file
from dotcat.data.catalog import resolve_data_path
from dotcat.data.sources import open_source
from dotcat.errors import DotcatError, SettingError, did_you_mean
from dotcat.evaluation.metrics import DEFAULT_MEASURES, parse_measures
from dotcat.experiment.fields import expects, pydantic_fields
from dotcat.index.config import BM25Config, IndexConfig
from dotcat.index.manifest import Manifest
from dotcat.index.passages import PassageConfig
from dotcat.models.config import EncoderConfig
from dotcat.models.resolve import check_model
from dotcat.search.config import PRF_SIDES, RM3_SETTINGS, ROCCHIO_SETTINGS, PipelineConfig
from dotcat.search.stages import entry, first_stage_choices

#: What a system takes, and from which settings: every setting of the query pipeline but
#: those an experiment sets for all systems (device, precision) or that a system names
#: otherwise (``model``: the bi-encoder that builds its index); the index's vectors, FAISS
#: structure and passages, under names saying which part they set; BM25's parameters.
_PIPELINE_FIELDS = tuple(
    f.name for f in dataclasses.fields(PipelineConfig)
    if f.name not in ("model", "device", "precision", "first_stage")
)  # fmt: skip
_ENCODER_FIELDS = EncoderConfig.VECTOR_SETTINGS
_INDEX_NAMES = {"faiss_spec": "faiss"}
_PASSAGE_NAMES = {
    "enabled": "passages",
    "window": "passage_window",
    "stride": "passage_stride",
    "sentence_aware": "sentence_aware",
}
_BM25_FIELDS = ("k1", "b")
#: A system's name of each setting of these classes (``faiss`` -> ``IndexConfig.faiss_spec``).
_OWN_NAMES = {**_INDEX_NAMES, **_PASSAGE_NAMES}


def _one_of(choices: tuple[str, ...]) -> str:
    """A description naming every choice: ``one of 'a', 'b', 'c'``."""
    return "one of " + ", ".join(repr(c) for c in choices)


def slug(name: str) -> str:
    """A file name for a system name: letters, digits, ``.``, ``_`` and ``-``."""
    text = re.sub(r"[^A-Za-z0-9._-]+", "-", name).strip("-.")
    return text or "system"


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
    queries: str | None = Field(
        None,
        min_length=1,
        description="a queries file, with `qrels`: `path` is then the corpus (a dotcat index, "
        "a corpus file or a folder of files)",
    )
    qrels: str | None = Field(None, min_length=1, description="a qrels file, with `queries`")

    @model_validator(mode="after")
    def _own_files(self) -> DatasetConfig:
        if (self.queries is None) != (self.qrels is None):
            missing = "qrels" if self.qrels is None else "queries"
            raise _field_error(missing, "give `queries` and `qrels` together")
        return self

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


class _System(_Strict):
    """One system: a first stage (BM25, dense, hybrid or a registered one), optionally
    re-ranked by BERT_CAT; every other field is a setting of the pipeline or of the index its
    ``model`` builds (:data:`_PIPELINE_FIELDS`), with that setting's default and checks."""

    name: str = Field(min_length=1, description="a non-empty name")
    first_stage: str = Field(description="a first stage (no 'auto': the report says what ran)")
    model: str | None = Field(
        None, description="a BERT_DOT model (directory or hub name) to build an index with"
    )
    index: str | None = Field(None, description="an index directory written by `dotcat index`")

    @property
    def feedback(self) -> dict[str, Any]:
        """The feedback settings this system runs (none: an empty dict)."""
        sides = PRF_SIDES[self.prf]
        out: dict[str, Any] = {"prf": self.prf} if sides else {}
        if "bm25" in sides:
            out |= {name: getattr(self, name) for name in RM3_SETTINGS}
        if "dense" in sides:
            out |= {name: getattr(self, name) for name in ROCCHIO_SETTINGS}
        return out

    def pipeline_config(self, device: str = "auto", precision: str = "auto") -> PipelineConfig:
        """The query pipeline this system runs."""
        values = {name: getattr(self, name) for name in _PIPELINE_FIELDS}
        return PipelineConfig(first_stage=self.first_stage, device=device, precision=precision,
                              **values)  # fmt: skip

    def encoder_config(self, device: str = "auto", precision: str = "auto") -> EncoderConfig:
        """The bi-encoder that builds this system's index (from ``model``)."""
        values = {name: getattr(self, name) for name in _ENCODER_FIELDS}
        return EncoderConfig(model=self.model, device=device, precision=precision, **values)

    def passage_config(self) -> PassageConfig:
        """How the index this system builds splits long documents."""
        return PassageConfig(**{name: getattr(self, own) for name, own in _PASSAGE_NAMES.items()})

    def bm25_config(self) -> BM25Config:
        """BM25 over the dataset (a ``bm25`` system without an index)."""
        return BM25Config(**{name: getattr(self, name) for name in _BM25_FIELDS})

    def _applies(self) -> list[tuple[set[str], bool, str]]:
        """Settings that only apply to some systems: (fields, whether they apply here, why
        not); the rules between pipeline settings are the pipeline's own."""
        built, indexed = self.model is not None, self.model is not None or self.index is not None
        passage = set(_PASSAGE_NAMES.values())
        return [
            ({*_ENCODER_FIELDS, "faiss", *passage}, built,
             "applies only when `model` builds an index"),
            ({"aggregation", "aggregate_top", "filter"}, indexed,
             "applies only to a system with an index (`model` or `index`)"),
            (set(_BM25_FIELDS), self.first_stage == "bm25" and self.index is None,
             "applies only to first_stage 'bm25' over the dataset (no `index`)"),
            ({"fusion", "fusion_weight", "fusion_depth"}, fuses(self.first_stage),
             "applies only to a first stage that fuses dense and BM25 (e.g. 'hybrid')"),
        ]  # fmt: skip

    @model_validator(mode="after")
    def _consistent(self) -> _System:
        """Settings that only apply to some systems are refused elsewhere, not ignored."""
        stages = first_stage_choices()[1:]  # no auto: the report says what each system ran
        if self.first_stage not in stages:
            raise _field_error(
                "first_stage", f"must be {_one_of(stages)}, got {self.first_stage!r}"
            )
        if self.first_stage != "bm25" and (self.model is None) == (self.index is None):
            raise _field_error(
                "model", f"first_stage '{self.first_stage}' needs either `model` or `index`"
            )
        if self.first_stage == "bm25" and self.model is not None:
            raise _field_error("model", "first_stage 'bm25' takes no `model` (BM25 is lexical)")
        for fields, applies, why in self._applies():
            if not applies and (given := sorted(self.model_fields_set & fields)):
                raise _field_error(given[0], why)
        return self

    @model_validator(mode="after")
    def _settings_valid(self) -> _System:
        """The pipeline's and the index's own checks of what they will be given, and their
        rules between settings for the fields this system sets."""
        given = set(self.model_fields_set)
        own = {v: k for k, v in _OWN_NAMES.items()}
        try:
            pipeline = self.pipeline_config()
            pipeline.check_applies(given)
            if self.model is not None:
                self.encoder_config()
                passages = self.passage_config()
                passages.check_applies({own.get(n, n) for n in given})
            if self.first_stage == "bm25" and self.index is None:
                self.bm25_config()
        except SettingError as e:
            name = _OWN_NAMES.get(e.setting, e.setting)
            message = re.sub(rf"(?<![\w-]){e.setting}(?![\w-])", name, str(e), count=1)
            raise _field_error(name, message) from None
        return self


#: A system's schema: :class:`_System` and every setting it takes, derived.
SystemConfig = create_model(
    "SystemConfig",
    __base__=_System,
    __doc__=_System.__doc__,
    __module__=__name__,
    **pydantic_fields(PipelineConfig, _PIPELINE_FIELDS),
    **pydantic_fields(EncoderConfig, _ENCODER_FIELDS),
    **pydantic_fields(IndexConfig, _INDEX_NAMES, rename=_INDEX_NAMES),
    **pydantic_fields(PassageConfig, _PASSAGE_NAMES, rename=_PASSAGE_NAMES),
    **pydantic_fields(BM25Config, _BM25_FIELDS),
)


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
    bootstrap: int = Field(10_000, ge=1, description="an integer >= 1 (test bootstrap)")
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
        both = "give either a [dataset] table or [[datasets]] tables (several collections)"
        none = "missing; expected a [dataset] table with `path` and `split`, or [[datasets]] tables"
        if (self.dataset is None) == (self.datasets is None):
            raise _field_error("dataset", both if self.dataset is not None else none)
        labels = [d.label for d in self.dataset_list]
        for i, label in enumerate(labels):  # (their runs go to runs/SLUG)
            if slug(label) in map(slug, labels[:i]):
                raise _field_error(
                    f"datasets[{i}].name",
                    f"{label!r} names another dataset too (its run folder: runs/{slug(label)}); "
                    "give each a distinct `name`",
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
                f"{self.baseline!r} is not a system name" + did_you_mean(self.baseline, names),
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
        raise DotcatError("\n".join(f"{source}: {line}" for line in _error_lines(e))) from None


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
            message = f"{parent}: unknown field {name!r}{did_you_mean(name, known)}"
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
    return next((m for a in typing.get_args(annotation) if (m := _nested_model(a))), None)


def _description(fields: list[str | int]) -> str | None:
    names = [p for p in fields if isinstance(p, str)]
    info = _model_at(names[:-1]).model_fields.get(names[-1]) if names else None
    return (expects(info) or info.description) if info is not None else None


def _format_loc(fields: list[str | int]) -> str:
    text = ""
    for part in fields:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


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
    labels = [d.label for d in config.dataset_list]
    if only is not None and only not in labels:
        raise DotcatError(f"--only {only!r}: the experiment's datasets are {', '.join(labels)}")
    for i, dataset in enumerate(config.dataset_list):
        if only is None or dataset.label == only:
            where = "dataset" if config.dataset is not None else f"datasets[{i}]"
            _checked(source, _check_dataset, dataset, where)
    for i, system in enumerate(config.systems):
        where = f"{source}: systems[{i}]"
        for field, value in (("model", system.model), ("rerank", system.rerank)):
            if value is not None:
                _checked(f"{where}.{field}", check_model, value, cross_encoder=field == "rerank")
        if system.index is not None:
            _checked(f"{where}.index", _check_index, Path(system.index), system.first_stage)


def _checked(where: str, check: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
    """``check(*args, **kwargs)``, its :class:`DotcatError` prefixed with ``where: ``."""
    try:
        return check(*args, **kwargs)
    except DotcatError as e:
        raise DotcatError(f"{where}: {e}") from None


def _check_dataset(dataset: DatasetConfig, where: str) -> None:
    """A dataset's corpus, queries and split (a name is fetched into the cache first); with
    its own ``queries`` and ``qrels`` files, those and the corpus they go with."""
    if dataset.queries is not None:
        _checked(f"{where}.path", open_source, dataset.path)
        _checked(f"{where}.queries", find_queries_file, dataset.queries)
        _checked(f"{where}.qrels", find_qrels_file, dataset.qrels)
        return
    data = _checked(f"{where}.path", resolve_data_path, dataset.path)
    if not data.is_dir():
        raise DotcatError(f"{where}.path: {data}: no such directory")
    _checked(f"{where}.path", find_corpus_file, data)
    _checked(f"{where}.path", find_queries_file, data)
    _checked(f"{where}.split", find_qrels_file, data, dataset.split)


def fuses(first_stage: str) -> bool:
    """Whether a registered first stage fuses dense and BM25 (it reads both sides)."""
    stages = first_stage_choices()[1:]
    return first_stage in stages and {"dense", "bm25"} <= set(entry(first_stage).sides)


def _check_index(index_dir: Path, first_stage: str) -> None:
    manifest = Manifest.read(index_dir)
    if "bm25" in entry(first_stage).sides and not manifest.bm25:
        raise DotcatError(
            f"{index_dir} has no BM25 index, which first_stage '{first_stage}' needs "
            "(build it with `dotcat index ... --bm25`)"
        )
