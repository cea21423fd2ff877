"""Benchmarks in one command: ``dotcat experiment CONFIG``.

A TOML file names a dataset or several, the systems to compare (BM25, dense, hybrid, each optionally
re-ranked by BERT_CAT), the measures and a baseline (:mod:`dotcat.experiment.config`).
:func:`run_experiment` builds what is missing (indexes, runs), reusing what an earlier invocation
built whenever its fingerprint is unchanged (:mod:`dotcat.experiment.artifacts`), evaluates every
system against the baseline with significance tests, and writes a report folder: the TREC runs,
``results.json``, ``report.md`` and PNG plots (:mod:`dotcat.experiment.report`; over several
datasets, the systems x datasets table: :mod:`dotcat.experiment.suite_report`).
"""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "ExperimentConfig": "dotcat.experiment.config",
    "check_paths": "dotcat.experiment.config",
    "load_config": "dotcat.experiment.config",
    "parse_config": "dotcat.experiment.config",
    "run_experiment": "dotcat.experiment.runner",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
