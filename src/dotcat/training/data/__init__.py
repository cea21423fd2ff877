"""The data a training run is made of, in one place.

- :mod:`.examples`: :class:`TrainingExample` (query, positive, hard negatives) from qrels,
  :func:`load_training_data`, the texts of the documents a run needs, the dev corpus sample.
- :mod:`.mining`: BM25 and dense (ANCE-style) hard negatives from a rank window, never
  judged-relevant; :func:`save_negatives` / :func:`load_negatives` to repeat a run.
- :mod:`.sampler`: :class:`NoDuplicatePositiveBatchSampler` (no false in-batch negatives,
  resumable) and the mask of what a batch still holds.
- :mod:`.pools`: BERT_CAT's negative pools from its first stages and their fused scores.
- :mod:`.teacher`: a teacher's scores of (query, document) pairs, cached on disk, resumable.
"""

from dotcat.training.data.examples import (
    ExampleStats,
    TrainingData,
    TrainingExample,
    build_examples,
    load_training_data,
    relevant_docs,
)
from dotcat.training.data.mining import (
    iter_document_chunks,
    load_negatives,
    mine_bm25_negatives,
    mine_dense_negatives,
    negatives_meta,
    save_negatives,
    window_negatives,
)
from dotcat.training.data.sampler import NoDuplicatePositiveBatchSampler, batch_false_negatives

__all__ = [
    "ExampleStats",
    "NoDuplicatePositiveBatchSampler",
    "TrainingData",
    "TrainingExample",
    "batch_false_negatives",
    "build_examples",
    "iter_document_chunks",
    "load_negatives",
    "load_training_data",
    "mine_bm25_negatives",
    "mine_dense_negatives",
    "negatives_meta",
    "relevant_docs",
    "save_negatives",
    "window_negatives",
]
