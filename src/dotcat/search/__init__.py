"""Query-time search: first stages over an index (dense, BM25, hybrid), BERT_CAT re-ranking,
the pipeline that chains them (:mod:`dotcat.search.pipeline`), and one-off BM25 over a corpus."""
