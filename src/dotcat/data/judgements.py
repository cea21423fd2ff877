"""What runs are evaluated against: qrels, and the ids they may name.

A BEIR directory holds its queries and corpus beside its qrels, so judgements naming an
unknown query or document can be told apart (and counted by
:func:`dotcat.evaluation.metrics.evaluate`); a bare qrels file cannot be checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotcat.data.catalog import resolve_data_path
from dotcat.data.corpus import load_corpus
from dotcat.data.qrels import find_qrels_file, load_qrels
from dotcat.data.queries import load_queries
from dotcat.errors import DataFormatError


@dataclass(frozen=True)
class Judgements:
    """Qrels, and what their ids are checked against (None: not checked)."""

    qrels: dict[str, dict[str, int]]
    known_queries: set[str] | None = None
    known_docs: set[str] | None = None


def load_judgements(
    path: str | Path, split: str = "test", queries: str | Path | None = None, corpus: Any = None
) -> Judgements:
    """A qrels file, or a BEIR directory's ``qrels/<split>.tsv`` (or a dataset name's) with its
    queries' and corpus's ids to check them against (as ``dotcat eval`` and ``dotcat
    experiment`` evaluate).

    Args:
        queries: a queries file (or BEIR directory) whose ids the qrels are checked against,
            in place of the directory's own.
        corpus: a corpus (an index directory, a corpus file or folder, a BEIR directory)
            whose ids the qrels are checked against, in place of the directory's own. With a
            qrels file and these two, the figures equal those of the BEIR directory holding
            the three (``dotcat judge export``).

    Raises:
        DataFormatError: a missing split (listing the available ones), a malformed file, or
            one without judgements (nothing to evaluate against).
    """
    qrels = load_qrels(path, split=split)
    path = resolve_data_path(path)  # a dataset name: its BEIR directory in the cache
    if not qrels:
        file = find_qrels_file(path, split)
        raise DataFormatError(file, None, "no judgements: there is nothing to evaluate")
    if path.is_dir():  # a BEIR directory: its own queries and corpus, unless others are given
        queries = path if queries is None else queries
        corpus = path if corpus is None else corpus
    known_queries = set(load_queries(queries)) if queries is not None else None
    known_docs = {str(i) for i in load_corpus(corpus)["id"]} if corpus is not None else None
    return Judgements(qrels, known_queries, known_docs)
