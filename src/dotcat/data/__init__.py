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

from dotcat.data.corpus import (
    CorpusOptions,
    CorpusStats,
    Document,
    default_cache_dir,
    document_fields,
    find_corpus_file,
    iter_corpus,
    load_corpus,
)
from dotcat.data.judgements import Judgements, load_judgements
from dotcat.data.qrels import available_splits, find_qrels_file, load_qrels
from dotcat.data.queries import find_queries_file, load_queries
from dotcat.data.runs import check_output_file, ranked, read_run, write_run

__all__ = [
    "CorpusOptions",
    "CorpusStats",
    "Document",
    "Judgements",
    "available_splits",
    "check_output_file",
    "default_cache_dir",
    "document_fields",
    "find_corpus_file",
    "find_qrels_file",
    "find_queries_file",
    "iter_corpus",
    "load_corpus",
    "load_judgements",
    "load_qrels",
    "load_queries",
    "ranked",
    "read_run",
    "write_run",
]
