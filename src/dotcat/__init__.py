"""dotcat: neural search with a BERT_DOT bi-encoder, FAISS, and a BERT_CAT re-ranker."""

__version__ = "0.1.0"
