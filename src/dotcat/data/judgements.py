"""What runs are evaluated against: qrels, and the ids they may name.

A BEIR directory holds its queries and corpus beside its qrels, so judgements naming an
unknown query or document can be told apart (and counted by
:func:`dotcat.evaluation.metrics.evaluate`); a bare qrels file cannot be checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def load_judgements(path: str | Path, split: str = "test") -> Judgements:
    """A qrels file, or a BEIR directory's ``qrels/<split>.tsv`` (or a dataset name's) with its
    queries' and corpus's ids to check them against (as ``dotcat eval`` and ``dotcat
    experiment`` evaluate).

    Raises:
        DataFormatError: a missing split (listing the available ones), a malformed file, or
            one without judgements (nothing to evaluate against).
    """
    qrels = load_qrels(path, split=split)
    path = resolve_data_path(path)  # a dataset name: its BEIR directory in the cache
    if not qrels:
        file = find_qrels_file(path, split)
        raise DataFormatError(file, None, "no judgements: there is nothing to evaluate")
    if not path.is_dir():
        return Judgements(qrels)
    queries = set(load_queries(path))
    docs = {str(doc_id) for doc_id in load_corpus(path)["id"]}
    return Judgements(qrels, queries, docs)
