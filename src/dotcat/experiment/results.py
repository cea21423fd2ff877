"""What an experiment produced: the environment, the dataset, each system's outcome, and the
whole result that the report (:mod:`dotcat.experiment.report`) is written from."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dotcat.data import load_corpus
from dotcat.evaluation import EvalReport
from dotcat.evaluation.significance import Comparison
from dotcat.experiment.artifacts import StageRecord
from dotcat.experiment.config import ExperimentConfig, SystemConfig


@dataclass
class Environment:
    """Where the models run: the resolved device and precision, and the machine."""

    device: str
    precision: str
    machine: dict[str, Any]


@dataclass
class Dataset:
    """The experiment's topics, judgements and file fingerprints; the corpus on demand.

    ``path`` is the local directory (a dataset name resolved into the cache); ``name`` the
    label it has in reports and ``given`` what the experiment file wrote.
    """

    path: Path
    split: str
    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    fingerprint: dict[str, str]
    _corpus: Any = None
    name: str = ""
    given: str = ""

    def corpus(self):
        """The corpus as an Arrow dataset (:func:`dotcat.data.corpus.load_corpus`), loaded once."""
        if self._corpus is None:
            self._corpus = load_corpus(self.path)
        return self._corpus


@dataclass
class SystemOutcome:
    """One system's stages, its final run (in the cache) and this invocation's time on it."""

    name: str
    config: SystemConfig
    stages: list[StageRecord]
    run_file: Path
    seconds: float
    dataset: str = ""

    @property
    def reused(self) -> bool:
        return all(stage.reused for stage in self.stages)


@dataclass
class ExperimentResult:
    """What :func:`run_experiment` produced; the report folder holds the same in files."""

    config: ExperimentConfig
    environment: Environment
    dataset: Dataset
    outcomes: list[SystemOutcome]
    reports: dict[str, EvalReport]
    comparisons: dict[str, dict[str, Comparison]]
    recall: dict[str, dict[int, float]]
    run_files: dict[str, Path]
    output: Path
    seconds: float
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def computed(self) -> list[StageRecord]:
        """The stages this invocation computed (the others came from the cache)."""
        return [s for o in self.outcomes for s in o.stages if not s.reused]


@dataclass
class DatasetOutcome:
    """One dataset of a several-dataset experiment: every system's outcome and evaluation,
    or, with ``--only`` another dataset, ``outcomes`` None when some run is not cached."""

    name: str
    dataset: Dataset
    outcomes: list[SystemOutcome] | None
    reports: dict[str, EvalReport] = field(default_factory=dict)
    run_files: dict[str, Path] = field(default_factory=dict)
    computed_here: bool = True

    @property
    def complete(self) -> bool:
        return self.outcomes is not None


@dataclass
class SuiteResult:
    """What a several-dataset experiment produced (``[[datasets]]``): per dataset its
    outcomes, and the comparisons with the baseline, Holm-corrected over the whole table."""

    config: ExperimentConfig
    environment: Environment
    datasets: list[DatasetOutcome]
    comparisons: dict[str, dict[str, dict[str, Comparison]]]  # dataset -> system -> measure
    output: Path
    seconds: float = 0.0
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def outcomes(self) -> list[SystemOutcome]:
        """Every system outcome of every complete dataset."""
        return [o for d in self.datasets if d.outcomes for o in d.outcomes]

    @property
    def computed(self) -> list[StageRecord]:
        """The stages this invocation computed (the others came from the cache)."""
        return [s for o in self.outcomes for s in o.stages if not s.reused]

    def value(self, system: str, dataset: str, measure: str) -> float | None:
        """A system's mean of ``measure`` on a dataset, None where it was not run."""
        for d in self.datasets:
            if d.name == dataset and d.complete:
                return d.reports[system].aggregate.get(measure)
        return None

    def mean(self, system: str, measure: str) -> tuple[float | None, int]:
        """A system's mean of ``measure`` over the datasets it was run on, and their number
        (the unweighted mean of per-dataset means, as BEIR averages its datasets)."""
        values = [
            v for d in self.datasets if (v := self.value(system, d.name, measure)) is not None
        ]
        return (sum(values) / len(values) if values else None), len(values)
