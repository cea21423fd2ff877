"""Reading corpora, queries and qrels; reading and writing TREC runs.

Formats: BEIR directories (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``), plain
JSON Lines, JSON, CSV, TSV and Parquet, TREC qrels and runs, each text one optionally gzipped;
folders of text, Markdown, reStructuredText, HTML and PDF files; documents in Python (lists,
data frames). Every problem in the input is one :class:`dotcat.errors.DataFormatError` naming
the file, the line and the problem.

- :func:`iter_corpus` streams :class:`Document` objects; :func:`load_corpus` returns a
  memory-mapped Arrow :class:`datasets.Dataset` (columns ``id``, ``title``, ``text``), cached.
  Both fill an optional :class:`CorpusStats` (documents, title-only, skipped, unreadable
  files) and take :class:`CorpusOptions` (field names, a folder's file selection).
- :func:`load_queries`, :func:`load_qrels`: dictionaries; :func:`load_judgements`: qrels with
  the ids they may name (a BEIR directory's queries and corpus).
- :func:`read_run`, :func:`write_run`: TREC runs (atomic write).
"""

from dotcat.exports import lazy_exports

_EXPORTS = {
    "CorpusOptions": "dotcat.data.sources",
    "CorpusStats": "dotcat.data.sources",
    "Document": "dotcat.data.corpus",
    "default_cache_dir": "dotcat.data.corpus",
    "document_fields": "dotcat.data.corpus",
    "find_corpus_file": "dotcat.data.corpus",
    "iter_corpus": "dotcat.data.corpus",
    "load_corpus": "dotcat.data.corpus",
    "Judgements": "dotcat.data.judgements",
    "load_judgements": "dotcat.data.judgements",
    "available_splits": "dotcat.data.qrels",
    "find_qrels_file": "dotcat.data.qrels",
    "load_qrels": "dotcat.data.qrels",
    "find_queries_file": "dotcat.data.queries",
    "load_queries": "dotcat.data.queries",
    "check_output_file": "dotcat.data.runs",
    "ranked": "dotcat.data.runs",
    "read_run": "dotcat.data.runs",
    "write_run": "dotcat.data.runs",
}
__all__ = sorted(_EXPORTS)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
