"""Benchmarks in one command: ``dotcat experiment CONFIG``.

A TOML file names a dataset or several, the systems to compare (BM25, dense, hybrid, each
optionally re-ranked by BERT_CAT), the measures and a baseline
(:mod:`dotcat.experiment.config`). :func:`run_experiment` builds what is missing (indexes,
runs), reusing what an earlier invocation built whenever its fingerprint is unchanged
(:mod:`dotcat.experiment.artifacts`), evaluates every system against the baseline with
significance tests, and writes a report folder: the TREC runs, ``results.json``,
``report.md`` and PNG plots (:mod:`dotcat.experiment.report`; over several datasets, the
systems x datasets table: :mod:`dotcat.experiment.suite_report`).
"""

from dotcat.experiment.config import ExperimentConfig, check_paths, load_config, parse_config

__all__ = ["ExperimentConfig", "check_paths", "load_config", "parse_config", "run_experiment"]


def __getattr__(name: str):
    if name == "run_experiment":  # imported on use: it pulls in torch, FAISS and matplotlib
        from dotcat.experiment.runner import run_experiment

        return run_experiment
    raise AttributeError(f"module 'dotcat.experiment' has no attribute {name!r}")
