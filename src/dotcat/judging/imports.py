"""Judgements in: a qrels file one already has, or a pool judged from qrels (a simulation).

- :func:`import_qrels`: a qrels file (TREC or BEIR) into the store under an assessor's name,
  each line checked first (a query that is not pooled, a grade off the scale, a document the
  index does not hold: one line naming the file and line), nothing saved unless all pass.
- :func:`assess_pool`: every pooled document graded from qrels, a document the qrels do not
  name as 0: what an assessor who agrees with those qrels would give. The pooling studies use
  it (the full qrels as the simulated assessor, as Zobel, "How reliable are the results of
  large-scale information retrieval experiments?", SIGIR 1998, tested TREC's pools).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from dotcat.data.qrels import find_qrels_file, iter_qrels
from dotcat.errors import DataFormatError
from dotcat.judging.store import JudgmentStore, check_assessor
from dotcat.types import Qrels


def import_qrels(
    store: JudgmentStore,
    path: str | Path,
    assessor: str,
    known_docs: Iterable[str] | None = None,
) -> int:
    """Save the judgements of a qrels file as ``assessor``'s; returns how many.

    Args:
        known_docs: the index's documents; a judgement of another is refused.

    Raises:
        DataFormatError: naming the file and line of the first judgement of a query that is
            not pooled, a grade outside the scale, a document not in the index.
    """
    assessor = check_assessor(assessor)
    file = find_qrels_file(path)
    topics = {t.qid for t in store.topics()}
    scale = sorted(store.scale)
    known = set(known_docs) if known_docs is not None else None
    rows = []
    for lineno, qid, doc, grade in iter_qrels(file):
        if qid not in topics:
            raise DataFormatError(
                file, lineno, f"unknown query id {qid!r}: not one of the pooled queries "
                f"({len(topics)}; pool it first with dotcat judge pool)", "query-id",
            )  # fmt: skip
        if grade not in scale:
            raise DataFormatError(
                file, lineno, f"grade {grade} is outside the scale {scale[0]}-{scale[-1]}",
                "relevance",
            )  # fmt: skip
        if known is not None and doc not in known:
            raise DataFormatError(file, lineno, f"document {doc!r} is not in the index", "docid")
        rows.append((qid, doc, assessor, grade))
    return store.judge_many(rows, source=f"import {file}")


def assess_pool(store: JudgmentStore, qrels: Qrels, assessor: str) -> int:
    """Grade every pooled document as ``qrels`` do (an unnamed document: 0), clipped to the
    scale; returns how many were graded."""
    assessor = check_assessor(assessor)
    low, high = min(store.scale), max(store.scale)
    rows = []
    for topic in store.topics():
        judged = qrels.get(topic.qid, {})
        for entry in store.pooled(topic.qid):
            grade = min(high, max(low, int(judged.get(entry.doc_id, 0))))
            rows.append((topic.qid, entry.doc_id, assessor, grade))
    return store.judge_many(rows, source="simulated from qrels")
