"""Query-time search: BM25 (:mod:`dotcat.search.bm25`) and dense retrieval over an index."""
