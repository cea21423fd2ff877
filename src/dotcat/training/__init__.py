"""Training BERT_DOT: examples from qrels, hard-negative mining, batching.

- :mod:`dotcat.training.examples`: :func:`split_dev` (deterministic dev split),
  :class:`TrainingExample`, :func:`build_examples`, :func:`load_training_data`.
- :mod:`dotcat.training.mining`: BM25 and dense (ANCE-style) hard negatives from a rank window,
  never judged-relevant; :func:`save_negatives` / :func:`load_negatives` to repeat a run.
- :mod:`dotcat.training.sampler`: :class:`NoDuplicatePositiveBatchSampler` (no false in-batch
  negatives, resumable) and :func:`false_negative_mask` for the contrastive loss.
"""

from dotcat.data.splits import split_dev
from dotcat.training.examples import (
    ExampleStats,
    TrainingData,
    TrainingExample,
    build_examples,
    load_training_data,
    relevant_docs,
)
from dotcat.training.mining import (
    DEFAULT_WINDOW,
    check_window,
    iter_document_chunks,
    load_negatives,
    mine_bm25_negatives,
    mine_dense_negatives,
    negatives_meta,
    save_negatives,
    window_negatives,
)
from dotcat.training.sampler import NoDuplicatePositiveBatchSampler, false_negative_mask

__all__ = [
    "DEFAULT_WINDOW",
    "ExampleStats",
    "NoDuplicatePositiveBatchSampler",
    "TrainingData",
    "TrainingExample",
    "build_examples",
    "check_window",
    "false_negative_mask",
    "iter_document_chunks",
    "load_negatives",
    "load_training_data",
    "mine_bm25_negatives",
    "mine_dense_negatives",
    "negatives_meta",
    "relevant_docs",
    "save_negatives",
    "split_dev",
    "window_negatives",
]

# The training loop (dotcat train dot): model, trainer; see also .checkpoint and .distributed.
from dotcat.training.model import TrainableBiEncoder  # noqa: E402
from dotcat.training.trainer import (  # noqa: E402
    DotTrainConfig,
    LossConfig,
    backward_batch,
    evaluate_dev,
    train_bi_encoder,
)

__all__ += [
    "DotTrainConfig",
    "LossConfig",
    "TrainableBiEncoder",
    "backward_batch",
    "evaluate_dev",
    "train_bi_encoder",
]
