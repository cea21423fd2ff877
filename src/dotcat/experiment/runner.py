"""Run an experiment: build what is missing, run every system, evaluate, write the report.

Each system is up to three cached stages (:mod:`dotcat.experiment.artifacts`), computed by the
code the commands use:

1. an index, when the system names a ``model``: :func:`dotcat.index.build.build_index` with BM25
   inside, then :func:`dotcat.tuning.tune_fusion`, as ``dotcat index`` does;
2. a first-stage run: :func:`dotcat.search.lexical.bm25_search` over the dataset's corpus (as
   ``dotcat bm25``), or :meth:`dotcat.search.pipeline.SearchPipeline.run` over the index (as
   ``dotcat search --queries``);
3. with ``rerank``, the first stage's top ``depth`` re-ranked by
   :class:`dotcat.search.reranker.Reranker` (as ``dotcat rerank`` and ``search --rerank``:
   the first stage fetches ``max(k, depth)`` results, the re-ranked run keeps ``k``). Over an
   index with passages the cross-encoder reads each document's best passage as the first
   stage found it (kept beside the run, ``*.passages.json``), as ``search --rerank`` does.

With ``[[datasets]]`` the same runs for each dataset in turn (:func:`run_experiment`); the
cache is shared, so datasets with the same corpus share an index.

Stages that only differ in a later setting share the earlier ones (a hybrid system and the
same hybrid re-ranked share the first stage). Models load only for what must be computed,
so an experiment whose artifacts are all cached runs no model at all.
"""

from __future__ import annotations

import json
import logging
import platform
import shutil
import time
from collections.abc import Callable, Mapping
from contextlib import closing
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from dotcat.data import (
    available_splits,
    find_corpus_file,
    find_qrels_file,
    find_queries_file,
    load_judgements,
    load_qrels,
    load_queries,
    read_run,
    write_run,
)
from dotcat.data.catalog import cached_dir, looks_like_name, resolve_data_path
from dotcat.data.index_source import corpus_shas
from dotcat.data.views import beir_view
from dotcat.errors import DotcatError
from dotcat.evaluation import EvalReport, compare, evaluate_runs, holm_across
from dotcat.evaluation.metrics import recall_curve
from dotcat.experiment.artifacts import (
    Cache,
    StageRecord,
    digest,
    file_digest,
    index_fingerprint,
    model_fingerprint,
)
from dotcat.experiment.config import DatasetConfig, ExperimentConfig, SystemConfig, slug
from dotcat.experiment.report import write_report
from dotcat.experiment.results import (
    Dataset,
    DatasetOutcome,
    Environment,
    ExperimentResult,
    SuiteResult,
    SystemOutcome,
)
from dotcat.experiment.suite_report import write_suite_report
from dotcat.files import write_json
from dotcat.index import DocStore, IndexConfig, document_text
from dotcat.index.manifest import Manifest
from dotcat.index.passages import AUTO_LENGTH_FACTOR, AUTO_LONG_SHARE, DEFAULT_WINDOW
from dotcat.models import EncoderConfig
from dotcat.models.runtime import (
    available_cpus,
    cpu_flags,
    cpu_model,
    describe_precision,
    resolve_device,
)
from dotcat.search.aggregation import to_run
from dotcat.search.config import RERANK_SETTINGS
from dotcat.search.feedback import RM3
from dotcat.search.fusion import default_fusion
from dotcat.search.lexical import bm25_search
from dotcat.search.pipeline import SearchPipeline
from dotcat.search.reranker import Reranker, corpus_texts
from dotcat.tuning import build_and_tune, tune_fusion

logger = logging.getLogger(__name__)

#: CPU flags recorded with the results: they decide precision and speed.
RELEVANT_CPU_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16")


def resolve_environment(config: ExperimentConfig) -> Environment:
    """The device and precision ``auto`` resolve to here, and the CPU that decides them."""
    device = resolve_device(config.device)
    precision = describe_precision(config.precision, device)
    flags = cpu_flags()
    machine = {
        "cpu": cpu_model(),
        "cpu_flags": [f for f in RELEVANT_CPU_FLAGS if f in flags],
        "cores": available_cpus(),
        "python": platform.python_version(),
    }
    return Environment(device=device.type, precision=precision, machine=machine)


def load_dataset(spec: DatasetConfig) -> Dataset:
    """The split's judged queries and qrels, and the fingerprints of the files behind them
    (a dataset name is resolved to its directory in the cache, fetched on first use)."""
    path, split = resolve_data_path(spec.path), spec.split
    if spec.queries is not None:  # one's own files: read through a BEIR view of them
        path = beir_view(spec.path, spec.queries, spec.qrels, split)
    fingerprint = {
        "corpus": file_digest(find_corpus_file(path)),
        "queries": file_digest(find_queries_file(path)),
        "qrels": file_digest(find_qrels_file(path, split)),
    }
    # The dev queries `dotcat index` chooses the hybrid fusion on (never the test split).
    for other in ("dev", "train"):
        if other in available_splits(path):
            fingerprint[f"qrels_{other}"] = file_digest(find_qrels_file(path, other))
    queries, qrels = load_queries(path, split=split), load_qrels(path, split)
    return Dataset(path, split, queries, qrels, fingerprint, name=spec.label, given=spec.path)


class _NotCached(Exception):
    """A stage that a lookup-only runner (``--only`` another dataset) did not find."""


class _Runner:
    """Makes (or finds) each system's stages; holds the models loaded along the way."""

    def __init__(
        self,
        config: ExperimentConfig,
        env: Environment,
        data: Dataset,
        cache: Cache,
        compute: bool = True,
    ):
        self.config, self.env, self.data, self.cache = config, env, data, cache
        self.compute = compute  # False: only find stages in the cache (_NotCached otherwise)
        self._pipelines: dict[tuple, Any] = {}
        self._rerankers: dict[tuple, Any] = {}

    def run_system(self, system: SystemConfig) -> SystemOutcome:
        start = time.perf_counter()
        stages: list[StageRecord] = []
        index_dir = index_fp = None
        if system.model is not None:
            index_dir, index_fp, record = self._built_index(system)
            stages.append(record)
        elif system.index is not None:
            index_dir, index_fp = Path(system.index), self._existing_index(system)
        k = self.config.k
        # Re-ranking reads the first stage's top max(k, depth), as the search pipeline does.
        depth = max(k, system.depth) if system.rerank else k
        first = self._first_stage(system, index_dir, index_fp, depth)
        stages.append(first)
        if system.rerank is not None:
            stages.append(self._rerank(system, first, index_dir))
        seconds = time.perf_counter() - start
        run_file = Path(stages[-1].path)
        return SystemOutcome(system.name, system, stages, run_file, seconds, self.data.name)

    def _lookup(self, kind: str, path: Path) -> StageRecord | None:
        found = self.cache.lookup(kind, path)
        if found is None and not self.compute:
            raise _NotCached(f"{kind} {path.name}")
        return found

    # -- indexes -------------------------------------------------------------------------------

    def _existing_index(self, system: SystemConfig) -> str:
        index_dir = Path(system.index)
        shas = corpus_shas(Manifest.read(index_dir).corpus)
        if shas and self.data.fingerprint["corpus"] not in shas:
            logger.warning(
                "%s: the index was built from another corpus than %s's (sha256 %s...); its "
                "results are evaluated against this dataset's qrels all the same",
                index_dir, self.data.path, shas[-1][:12],
            )  # fmt: skip
        return index_fingerprint(index_dir)

    def _index_description(self, system: SystemConfig) -> dict[str, Any]:
        """Everything an index built from ``system.model`` depends on (its fingerprint's source)."""
        encoder = system.encoder_config().to_json()
        description = {
            "kind": "index",
            "corpus": self.data.fingerprint["corpus"],
            "dev_qrels": {k: v for k, v in self.data.fingerprint.items() if k.startswith("qrels_")},
            "model": model_fingerprint(system.model),
            "encoder": {k: v for k, v in encoder.items() if k in EncoderConfig.VECTOR_SETTINGS},
            "faiss": system.faiss,
            "bm25": True,
            "precision": self.env.precision,
            "device": self.env.device,
        }
        if system.passages is not False:
            description["passages"] = _passage_description(system)
        return description

    def _built_index(self, system: SystemConfig) -> tuple[Path, str, StageRecord]:
        description = self._index_description(system)
        fingerprint = digest(description)
        path = self.cache.index_path(fingerprint)
        found = self._lookup("index", path)
        if found is not None:
            return path, fingerprint, found
        logger.info("%s: building an index with %s into %s", system.name, system.model, path)
        start = time.perf_counter()
        manifest, fusion = self._build(system, path)
        fused = fusion.describe() if fusion else f"{default_fusion().describe()}, no dev queries"
        details = {"model": system.model, "documents": manifest.documents["count"], "fusion": fused}
        record = self.cache.commit("index", path, time.perf_counter() - start, description, details)
        return path, fingerprint, record

    def _build(self, system: SystemConfig, path: Path):
        """The index and its fusion, as ``dotcat index`` makes them (:func:`build_and_tune`);
        an index built before an interruption only gets its fusion chosen."""
        device, precision = self.config.device, self.config.precision
        if (path / "manifest.json").is_file():
            fusion = tune_fusion(path, self.data.path, device=device, precision=precision)
            return Manifest.read(path), fusion
        encoder = system.encoder_config(device, precision)
        config = IndexConfig(
            faiss_spec=system.faiss, device=device, bm25=True, passages=system.passage_config()
        )
        built = build_and_tune(self.data.path, path, encoder, config, overwrite=True)
        return built.manifest, built.fusion

    # -- runs ----------------------------------------------------------------------------------

    def _first_stage(
        self, system: SystemConfig, index_dir: Path | None, index_fp: str | None, k: int
    ) -> StageRecord:
        description: dict[str, Any] = {
            "kind": "first_stage",
            "first_stage": system.first_stage,
            "k": k,
            "split": self.data.split,
            "queries": self.data.fingerprint["queries"],
            "qrels": self.data.fingerprint["qrels"],
        }
        if index_dir is None:
            description |= {
                "corpus": self.data.fingerprint["corpus"],
                "bm25": system.bm25_config().to_json(),
                **system.feedback,
            }
        else:
            description["index"] = index_fp
            description["settings"] = system.pipeline_config().first_stage_json()
            if system.first_stage != "bm25":
                description |= {"precision": self.env.precision, "device": self.env.device}
        path = self.cache.run_path(digest(description))
        found = self._lookup("first_stage", path)
        if found is not None:
            return found
        logger.info(
            "%s: %s first stage, top %d of %d queries",
            system.name, system.first_stage, k, len(self.data.queries),
        )  # fmt: skip
        start = time.perf_counter()
        if index_dir is None:
            run = self._bm25(system, k)
        else:
            pipeline = self._pipeline(index_dir, system)
            queries = self.data.queries
            found = pipeline.matches(queries, k, first_stage=system.first_stage, show_progress=True)
            run = to_run(found)
            write_json(_passages_path(path), _best_passages(found))
        write_run(run, path, tag=f"dotcat-{system.first_stage}")
        details = {"queries": len(run), "results": sum(len(d) for d in run.values())}
        return self.cache.commit(
            "first_stage", path, time.perf_counter() - start, description, details
        )

    def _bm25(self, system: SystemConfig, k: int):
        config = system.bm25_config()
        rm3 = None
        if system.feedback:
            rm3 = RM3(system.fb_docs, system.fb_terms, system.original_query_weight)
        return bm25_search(self.data.corpus(), self.data.queries, k=k, config=config, rm3=rm3)

    def _pipeline(self, index_dir: Path, system: SystemConfig):
        """The first stage's pipeline over ``index_dir`` (shared by systems that differ only
        in their re-ranking or in the first stage a call asks for)."""
        config = system.pipeline_config(self.config.device, self.config.precision)
        config = replace(config.first_stage_only(), first_stage="auto")
        key = (str(index_dir), json.dumps(config.to_json(), sort_keys=True))
        if key not in self._pipelines:
            self._pipelines[key] = SearchPipeline(index_dir, config)
        return self._pipelines[key]

    def _rerank(
        self, system: SystemConfig, first: StageRecord, index_dir: Path | None
    ) -> StageRecord:
        reranker = self._reranker(system, index_dir)
        settings = system.pipeline_config().to_json()
        description = {
            "kind": "rerank",
            "first_stage": first.fingerprint,
            "model": model_fingerprint(system.rerank),
            "settings": {k: v for k, v in settings.items() if k in RERANK_SETTINGS},
            "depth": system.depth,
            # The weight itself: `auto` follows records (the index's calibration) that change.
            "interpolate": reranker.alpha,
            "k": self.config.k,
            "queries": self.data.fingerprint["queries"],
            "precision": self.env.precision,
            "device": self.env.device,
        }
        path = self.cache.run_path(digest(description))
        found = self._lookup("rerank", path)
        if found is not None:
            return found
        logger.info("%s: re-ranking the top %d with %s", system.name, system.depth, system.rerank)
        start = time.perf_counter()
        # The file keeps the first stage's order (ties included), as the pipeline hands it on.
        first_run = {q: list(docs.items()) for q, docs in read_run(first.path).items()}
        heads = {doc for docs in first_run.values() for doc, _ in docs[: system.depth]}
        if index_dir:
            texts = _index_texts(index_dir, heads)
            passages = _passage_texts(index_dir, Path(first.path), system.rerank_passages)
        else:
            texts, passages = corpus_texts(self.data.corpus(), heads), None
        out = reranker.rerank(
            first_run, self.data.queries, texts, system.depth, True, pair_texts=passages
        )
        run = {q: docs[: self.config.k] for q, docs in out.items()}
        write_run(run, path, tag="dotcat-rerank")
        seconds = time.perf_counter() - start
        pairs = sum(min(system.depth, len(d)) for d in first_run.values())
        details = {
            "pairs": pairs,
            "pairs_per_second": round(pairs / max(seconds, 1e-9), 2),
            "interpolation": reranker.alpha,
            "interpolation_source": reranker.alpha_source,
        }
        return self.cache.commit("rerank", path, seconds, description, details)

    def _reranker(self, system: SystemConfig, index_dir: Path | None):
        """The system's re-ranker; over an index, with the weights calibrated on its corpus
        (as ``dotcat search --rerank`` over that index)."""
        config = system.pipeline_config(self.config.device, self.config.precision)
        key = (system.rerank, system.interpolate, system.batch_size, system.rerank_backend)
        if key not in self._rerankers:
            self._rerankers[key] = Reranker.from_config(config)
        loaded = self._rerankers[key]
        weights = Manifest.read(index_dir).rerank if index_dir else None
        # The loaded model is shared; the weight is per index (a cheap wrapper, no reload).
        return Reranker(loaded.cross_encoder, system.depth, system.interpolate, weights)


def _index_texts(index_dir: Path, ids: set[str]) -> dict[str, str]:
    """id -> the text the models read, from an index's doc store (as the pipeline reads it)."""
    with _docstore(index_dir) as store:
        docs = store.by_ids(sorted(ids))
    return {doc_id: document_text(d.title, d.text) for doc_id, d in docs.items()}


def _docstore(index_dir: Path) -> closing[DocStore]:
    """An index's doc store, closed at the end of a ``with``."""
    return closing(DocStore(index_dir / Manifest.read(index_dir).files["docstore"]))


def _passage_description(system: SystemConfig) -> dict[str, Any]:
    """What an index's passages depend on: the settings, the default window where none is
    given (a changed default is another index), and whether the build chose to split."""
    out = system.passage_config().to_json()
    if system.passage_window is None:
        out["default_window"] = DEFAULT_WINDOW
    if system.passages is None:
        out["auto"] = {"share": AUTO_LONG_SHARE, "length": AUTO_LENGTH_FACTOR}
    return out


def _passages_path(run: Path) -> Path:
    return run.with_name(run.name + ".passages.json")


def _best_passages(found: Mapping[str, list]) -> dict[str, dict[str, list[int]]]:
    """qid -> doc id -> the FAISS ids of the passages the first stage found of it, best first
    (a re-ranker reads its best ``rerank_passages``; none for a document matched whole)."""
    return {
        qid: {
            match.doc_id: [ref.pid for ref, _ in match.passages if ref.stop is not None]
            for match in matches
            if match.passages and match.passages[0][0].stop is not None
        }
        for qid, matches in found.items()
    }


def _passage_texts(
    index_dir: Path, run: Path, best: int
) -> dict[tuple[str, str], list[str]] | None:
    """``(qid, doc id)`` -> the ``best`` passages the re-ranker reads (title and passage
    text), from the run's ``*.passages.json`` and the index's doc store; None without them."""
    sidecar = _passages_path(run)
    if not sidecar.is_file():
        return None
    found = json.loads(sidecar.read_text(encoding="utf-8"))
    read = {qid: {doc: pids[:best] for doc, pids in docs.items()} for qid, docs in found.items()}
    pids = sorted({p for docs in read.values() for ps in docs.values() for p in ps})
    with _docstore(index_dir) as store:
        texts = store.passage_texts(pids)
    return {
        (qid, doc): [document_text(*texts[p]) for p in pids]
        for qid, docs in read.items()
        for doc, pids in docs.items()
    }


def run_experiment(
    config: ExperimentConfig,
    source_text: str | None = None,
    source_name: str | None = None,
    on_system: Callable[[SystemOutcome], None] | None = None,
    only: str | None = None,
) -> ExperimentResult | SuiteResult:
    """Build what is missing, run every system, evaluate, and write the report folder.

    With ``[[datasets]]``, every system runs on every dataset, each dataset's runs under
    ``runs/<dataset>/``; the paired tests against the baseline per dataset, Holm-corrected over the
    whole systems x datasets table (:func:`dotcat.evaluation.significance.holm_across`); the report
    with the table, the means and one summary plot (:mod:`dotcat.experiment.suite_report`).

    Args:
        config: a validated experiment (:func:`dotcat.experiment.config.load_config`).
        source_text, source_name: the experiment file's text and path, quoted in the report.
        on_system: called with each system's outcome as soon as its run is ready.
        only: a dataset's name: compute that dataset's runs only (the others are taken from
            the cache where every run of theirs is there, else left out of the report).

    Returns:
        An :class:`ExperimentResult` (one dataset) or a :class:`SuiteResult` (several); its
        ``files`` name what was written in ``config.output``: the runs, ``results.json``,
        ``report.md`` and plots.

    Raises:
        DotcatError: any problem with the data, the models or the indexes; ``only`` naming
            no dataset of the experiment.
    """
    labels = [d.label for d in config.dataset_list]
    if only is not None and only not in labels:
        raise DotcatError(f"--only {only!r}: the experiment's datasets are {', '.join(labels)}")
    start = time.perf_counter()
    output = Path(config.output)
    cache = Cache(config.cache if config.cache is not None else output / "cache")
    env = resolve_environment(config)
    result: ExperimentResult | SuiteResult
    if config.datasets is None:
        result = _run_single(config, env, cache, on_system)
        write_report(result, source_text, source_name, started=start)
    else:
        logger.info(
            "experiment: %d systems on %d datasets, precision %s on %s",
            len(config.systems), len(config.datasets), env.precision, env.device,
        )  # fmt: skip
        columns = [
            _run_dataset(config, env, cache, spec, only is None or spec.label == only, on_system)
            for spec in config.datasets
        ]
        raw = {c.name: compare(c.reports, config.baseline, config) for c in columns if c.complete}
        result = SuiteResult(config, env, columns, holm_across(raw, config.alpha), output)
        write_suite_report(result, source_text, source_name, only, started=start)
    result.seconds = time.perf_counter() - start
    return result


def _run_single(
    config: ExperimentConfig,
    env: Environment,
    cache: Cache,
    on_system: Callable[[SystemOutcome], None] | None,
) -> ExperimentResult:
    """The ``[dataset]`` of the experiment: every system, its runs under ``runs/``."""
    data = load_dataset(config.dataset)
    logger.info(
        "experiment: %d systems, %d queries of %s (%s), precision %s on %s",
        len(config.systems), len(data.queries), data.path, data.split, env.precision, env.device,
    )  # fmt: skip
    output = Path(config.output)
    outcomes, run_files, runs, reports = _run_systems(
        _Runner(config, env, data, cache), output / "runs", on_system
    )
    return ExperimentResult(
        config=config,
        environment=env,
        dataset=data,
        outcomes=outcomes,
        reports=reports,
        comparisons=compare(reports, config.baseline, config),
        recall={n: recall_curve(r, data.qrels, recall_depths(config.k)) for n, r in runs.items()},
        run_files=run_files,
        output=output,
        seconds=0.0,
        files={f"runs/{p.name}": p for p in run_files.values()},
    )


def _run_systems(
    runner: _Runner, folder: Path, on_system: Callable[[SystemOutcome], None] | None
) -> tuple[list[SystemOutcome], dict[str, Path], dict[str, Any], dict[str, EvalReport]]:
    """Every system's outcome, its final run copied into ``folder`` and read back, and the
    runs' evaluation; the runner's models are let go before evaluating."""
    outcomes = []
    for system in runner.config.systems:
        outcomes.append(runner.run_system(system))
        if on_system is not None:
            on_system(outcomes[-1])
    config, data = runner.config, runner.data
    del runner
    run_files = _copy_runs(outcomes, folder)
    runs = {name: read_run(path) for name, path in run_files.items()}
    return outcomes, run_files, runs, _evaluate(config, data, runs)


def _run_dataset(
    config: ExperimentConfig,
    env: Environment,
    cache: Cache,
    spec: DatasetConfig,
    compute: bool,
    on_system: Callable[[SystemOutcome], None] | None,
) -> DatasetOutcome:
    """One dataset's systems, runs copied into ``runs/<dataset>/`` and evaluated; with ``compute``
    False, only what the cache holds (the outcome has no systems if any stage is missing)."""
    p = spec.path  # here without fetching: a local path, or a name in the cache
    if not compute and not (Path(p).exists() or not looks_like_name(p) or cached_dir(p).is_dir()):
        logger.warning("%s: not run (%s is not fetched yet)", spec.label, spec.path)
        data = Dataset(Path(spec.path), spec.split, {}, {}, {}, name=spec.label, given=spec.path)
        return DatasetOutcome(spec.label, data, None, computed_here=False)
    data = load_dataset(spec)
    logger.info("%s: %d queries of %s (%s)", spec.label, len(data.queries), data.path, data.split)
    try:
        outcomes, run_files, _, reports = _run_systems(
            _Runner(config, env, data, cache, compute),
            Path(config.output) / "runs" / slug(spec.label),
            on_system,
        )
    except _NotCached as e:
        logger.warning("%s: not run (%s is not in the cache: run without --only)", spec.label, e)
        return DatasetOutcome(spec.label, data, None, computed_here=False)
    return DatasetOutcome(spec.label, data, outcomes, reports, run_files, compute)


def _evaluate(
    config: ExperimentConfig, data: Dataset, runs: Mapping[str, Mapping]
) -> dict[str, EvalReport]:
    """Every run against the split's qrels, as ``dotcat eval RUN... DATASET`` evaluates."""
    judged = load_judgements(data.path, data.split)
    return evaluate_runs(
        runs, judged.qrels, config.measures, judged.known_queries, judged.known_docs
    )


def recall_depths(k: int) -> list[int]:
    """Depths of the recall curve: every depth to 100, then about 100 more, log-spaced, to k."""
    depths = set(range(1, min(k, 100) + 1))
    if k > 100:
        depths |= {int(round(d)) for d in np.geomspace(100, k, num=100)}
    return sorted(depths)


def _copy_runs(outcomes: list[SystemOutcome], folder: Path) -> dict[str, Path]:
    """Each system's final run copied into the report folder as ``<slug>.trec``."""
    folder.mkdir(parents=True, exist_ok=True)
    out: dict[str, Path] = {}
    used: set[str] = set()
    for i, outcome in enumerate(outcomes):
        name = slug(outcome.name)
        if name in used:
            name = f"{name}-{i}"
        used.add(name)
        target = folder / f"{name}.trec"
        shutil.copyfile(outcome.run_file, target)
        out[outcome.name] = target
    if not out:
        raise DotcatError("the experiment has no systems")
    for stale in folder.glob("*.trec"):  # runs of systems an earlier version of the file had
        if stale.stem not in used:
            stale.unlink()
    return out
