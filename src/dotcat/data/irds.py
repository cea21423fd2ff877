"""``irds:ID``: a dataset of the ``ir_datasets`` package (MacAvaney et al., SIGIR 2021)
written out as a BEIR directory, so every reader of dotcat reads it as it reads BEIR's own.

An ir_datasets id names one set of documents, queries and judgements (the split is part of
the id: ``beir/nfcorpus/dev``, ``msmarco-passage/dev/small``); its queries and qrels become
the split ``test`` of the directory. Documents keep their ``title`` where their type has one
and their ``text`` (else ir_datasets' ``default_text()``); queries take ``default_text()``
(a TREC topic's title); a (query, document) pair judged twice keeps its highest grade.
ir_datasets downloads the source files itself, into its own cache (``IR_DATASETS_HOME``).

``ir_datasets`` is an optional extra (``pip install 'dotcat[irds]'``), imported on use.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from dotcat.errors import DotcatError, first_line
from dotcat.progress import progress_bar

logger = logging.getLogger(__name__)

PREFIX = "irds:"
#: The split an ir_datasets id's queries and qrels are written as.
SPLIT = "test"
INSTALL_HINT = "pip install 'dotcat[irds]'"


def load_irds(dataset_id: str):
    """The ir_datasets dataset of an id.

    Raises:
        DotcatError: ir_datasets is not installed, or does not know the id.
    """
    try:
        import ir_datasets
    except ImportError:
        raise DotcatError(
            f"{PREFIX}{dataset_id}: reading ir_datasets ids needs the ir_datasets package "
            f"({INSTALL_HINT})"
        ) from None
    try:
        return ir_datasets.load(dataset_id)
    except KeyError:
        raise DotcatError(
            f"{PREFIX}{dataset_id}: ir_datasets has no dataset {dataset_id!r} (its catalogue: "
            "https://ir-datasets.com)"
        ) from None


def write_irds_beir(dataset_id: str, folder: Path) -> dict[str, int]:
    """Write an ir_datasets dataset into ``folder`` in BEIR layout; return what it holds.

    ``folder`` is a fresh (temporary) folder: the caller renames it into place.

    Raises:
        DotcatError: see :func:`load_irds`; a dataset without documents; or ir_datasets
            failing to fetch or read its files (offline, say), in one line.
    """
    dataset = load_irds(dataset_id)
    if not dataset.has_docs():
        raise DotcatError(f"{PREFIX}{dataset_id}: the dataset has no documents")
    counts = {}
    try:
        counts["documents"] = _write_docs(dataset, folder / "corpus.jsonl", dataset_id)
        if dataset.has_queries():
            counts["queries"] = _write_queries(dataset, folder / "queries.jsonl")
        if dataset.has_qrels():
            counts["judgements"] = _write_qrels(dataset, folder / "qrels" / f"{SPLIT}.tsv")
    except (DotcatError, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - ir_datasets raises anything its sources do
        raise DotcatError(_failure(dataset_id, e)) from e
    return counts


def _failure(dataset_id: str, error: Exception) -> str:
    """One line for ir_datasets' failure; a failed download says how to fetch it elsewhere."""
    name = f"{PREFIX}{dataset_id}"
    head = error.args[0] if error.args and isinstance(error.args[0], str) else ""
    if "download" in head.lower():  # RuntimeError("All download sources failed", ...)
        return (
            f"{name}: ir_datasets could not download its source files ({head}; no network?); "
            f"fetch it on a machine with network with `dotcat datasets get {name} DIR`, then "
            "copy DIR here and give its path"
        )
    return f"{name}: ir_datasets could not read it: {first_line(error)}"


def _write_docs(dataset, path: Path, dataset_id: str) -> int:
    count = 0
    total = dataset.docs_count() if hasattr(dataset, "docs_count") else None
    with open(path, "w", encoding="utf-8") as out:
        for doc in progress_bar(dataset.docs_iter(), desc=f"converting {dataset_id}", total=total,
                                unit="doc"):  # fmt: skip
            title, text = doc_fields(doc)
            out.write(json.dumps({"_id": doc.doc_id, "title": title, "text": text}) + "\n")
            count += 1
    return count


def doc_fields(doc) -> tuple[str, str]:
    """``(title, text)`` of an ir_datasets document (module docstring)."""
    fields = getattr(doc, "_fields", ())
    title = doc.title if "title" in fields and isinstance(doc.title, str) else ""
    if "text" in fields and isinstance(doc.text, str):
        return title, doc.text
    text = doc.default_text()
    if title and text.startswith(title):  # default_text() often leads with the title
        text = text[len(title) :].lstrip()
    return title, text


def _write_queries(dataset, path: Path) -> int:
    count = 0
    with open(path, "w", encoding="utf-8") as out:
        for query in dataset.queries_iter():
            text = query.default_text() if hasattr(query, "default_text") else query.text
            out.write(json.dumps({"_id": query.query_id, "text": text}) + "\n")
            count += 1
    return count


def _write_qrels(dataset, path: Path) -> int:
    grades: dict[tuple[str, str], int] = {}
    twice = 0
    for qrel in dataset.qrels_iter():
        key = (qrel.query_id, qrel.doc_id)
        twice += key in grades
        grades[key] = max(grades.get(key, qrel.relevance), qrel.relevance)
    if twice:
        logger.info("%d (query, document) pairs judged twice: their highest grade is kept", twice)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as out:
        out.write("query-id\tcorpus-id\tscore\n")
        out.writelines(f"{qid}\t{doc_id}\t{grade}\n" for (qid, doc_id), grade in grades.items())
    return len(grades)
