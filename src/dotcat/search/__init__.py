"""Query-time search: first stages over an index (dense, BM25, hybrid, or any registered),
BERT_CAT re-ranking, the pipeline that chains them (:mod:`dotcat.search.pipeline`), and
one-off BM25 over a corpus (:mod:`dotcat.search.lexical`)."""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "SearchPipeline": "dotcat.search.pipeline",
    "PipelineConfig": "dotcat.search.config",
    "Hit": "dotcat.search.hits",
    "Match": "dotcat.search.aggregation",
    "Fusion": "dotcat.search.fusion",
    "DenseRetriever": "dotcat.search.dense",
    "bm25_search": "dotcat.search.lexical",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
