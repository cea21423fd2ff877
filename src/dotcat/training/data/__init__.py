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

from dotcat.exports import lazy_exports

_EXPORTS = {
    "ExampleStats": "dotcat.training.data.examples",
    "TrainingData": "dotcat.training.data.examples",
    "TrainingExample": "dotcat.training.data.examples",
    "build_examples": "dotcat.training.data.examples",
    "load_training_data": "dotcat.training.data.examples",
    "relevant_docs": "dotcat.training.data.examples",
    "iter_document_chunks": "dotcat.training.data.mining",
    "load_negatives": "dotcat.training.data.mining",
    "mine_bm25_negatives": "dotcat.training.data.mining",
    "mine_dense_negatives": "dotcat.training.data.mining",
    "negatives_meta": "dotcat.training.data.mining",
    "save_negatives": "dotcat.training.data.mining",
    "window_negatives": "dotcat.training.data.mining",
    "NoDuplicatePositiveBatchSampler": "dotcat.training.data.sampler",
    "batch_false_negatives": "dotcat.training.data.sampler",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
