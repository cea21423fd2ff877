"""Relevance judgements (qrels): BEIR ``qrels/<split>.tsv`` and TREC qrels files.

Two layouts, optionally gzipped, told apart by the number of columns of the first record:

- BEIR: ``query-id<TAB>corpus-id<TAB>score`` with a header line (Thakur et al., 2021).
- TREC: ``qid iteration docid relevance`` (4 whitespace-separated columns, no header), as read
  by trec_eval and ir-measures.

Relevance grades are integers (negative grades, used by some TREC tracks, are kept).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path

from dotcat.data._io import find_one, is_integer, iter_lines, require_file
from dotcat.data.catalog import resolve_data_path
from dotcat.data.index_source import is_sqlite
from dotcat.data.sniff import BEIR_QRELS, QRELS_HEADERS, TREC_QRELS, hint
from dotcat.errors import DataFormatError

logger = logging.getLogger(__name__)

_LAYOUTS = {3: "query-id, corpus-id, score", 4: "qid, iteration, docid, relevance"}
_QRELS = (BEIR_QRELS, TREC_QRELS)


def available_splits(beir_dir: str | Path) -> list[str]:
    """The split names a BEIR directory has qrels for (``qrels/<split>.tsv[.gz]``), sorted."""
    qrels_dir = resolve_data_path(beir_dir) / "qrels"
    if not qrels_dir.is_dir():
        return []
    names = [p.name for p in qrels_dir.iterdir() if p.is_file()]
    return sorted({n[: -len(s)] for n in names for s in (".tsv", ".tsv.gz") if n.endswith(s)})


def find_qrels_file(path: str | Path, split: str = "test") -> Path:
    """The qrels file of ``path``: a BEIR directory's ``qrels/<split>.tsv[.gz]``, or a file.

    Raises:
        DataFormatError: the file does not exist; for a directory, the message lists the
            splits that do.
    """
    p = resolve_data_path(path)
    if not p.is_dir():
        return require_file(p)
    qrels_dir = p / "qrels"
    names = (f"{split}.tsv", f"{split}.tsv.gz")
    if not any((qrels_dir / name).is_file() for name in names):
        listed = ", ".join(available_splits(p)) or "none"
        raise DataFormatError(
            p, None, f"no qrels for split {split!r} (qrels/{split}.tsv); available splits: {listed}"
        )
    return find_one(qrels_dir, names, f"{split!r} qrels")


def iter_qrels(path: str | Path, split: str = "test") -> Iterator[tuple[int, str, str, int]]:
    """Each judgement of a qrels file (or a BEIR directory's split) with its line:
    ``(line, qid, docid, relevance)``, in file order; the format checks of :func:`load_qrels`
    (a repeated pair is not checked here)."""
    file = find_qrels_file(path, split)
    if is_sqlite(file):  # the judging page's store: its judgements are exported as qrels
        why = "is a judging store (SQLite), not qrels: export it with `dotcat judge qrels INDEX"
        raise DataFormatError(file, None, f"{why} QRELS --judgments {file}`, then give QRELS")
    columns = 0
    columns_line = 0
    for lineno, text in iter_lines(file):
        fields = [f.strip() for f in text.split("\t")]
        if len(fields) not in (3, 4):  # whitespace-separated where tabs do not give 3 or 4
            fields = text.split()
        if not columns:
            if fields[0].lower() in QRELS_HEADERS and not is_integer(fields[-1]):
                continue  # a header: BEIR's "query-id corpus-id score", "qid iter docid rel"
            if len(fields) not in _LAYOUTS:
                raise DataFormatError(file, lineno, _layout_problem(fields, file))
            columns, columns_line = len(fields), lineno
        elif len(fields) != columns:
            why = f"expected {columns} fields ({_LAYOUTS[columns]}) as on line {columns_line}"
            raise DataFormatError(file, lineno, f"{why}, found {len(fields)}{hint(file, _QRELS)}")
        qid, docid, rel = fields[0], fields[-2], fields[-1]  # (TREC's iteration, 2nd of 4: unread)
        if not is_integer(rel):
            raise DataFormatError(
                file, lineno, f"expected an integer, found {rel!r}{hint(file, _QRELS)}", "relevance"
            )
        yield lineno, qid, docid, int(rel)


def _layout_problem(fields: list[str], file: Path) -> str:
    """Why a first record is no qrels line; a TREC run's says so (a run given as qrels), and
    another kind of file says what it looks like (:func:`dotcat.data.sniff.hint`)."""
    problem = f"expected 3 fields ({_LAYOUTS[3]}) or 4 (TREC: {_LAYOUTS[4]}), found {len(fields)}"
    if len(fields) == 6 and fields[1] == "Q0":
        return problem + (
            ": this is a TREC run (qid Q0 docid rank score tag), not qrels; the qrels go last"
        )
    return problem + hint(file, _QRELS)


def load_qrels(path: str | Path, split: str = "test") -> dict[str, dict[str, int]]:
    """Read relevance judgements: ``{query_id: {doc_id: relevance}}``.

    Args:
        path: a qrels file (BEIR TSV or TREC format, optionally .gz) or a BEIR directory.
        split: for a BEIR directory, which ``qrels/<split>.tsv`` to read; ignored for a file.

    Raises:
        DataFormatError: a missing split (listing the available ones), a line with the wrong
            number of fields (a TREC run given as qrels says so), a non-integer relevance, or
            the same (query, document) pair judged twice, naming the file and line.
    """
    file = find_qrels_file(path, split)
    qrels: dict[str, dict[str, int]] = {}
    first_line: dict[tuple[str, str], int] = {}
    for lineno, qid, docid, rel in iter_qrels(file):
        key = (qid, docid)
        if key in first_line:
            why = f"query {qid!r} and document {docid!r} judged twice"
            raise DataFormatError(file, lineno, f"{why} (first at line {first_line[key]})")
        first_line[key] = lineno
        qrels.setdefault(qid, {})[docid] = rel
    if not qrels:
        logger.warning("%s: no judgements", file)
    else:
        logger.info("%s: %d judgements for %d queries", file, len(first_line), len(qrels))
    return qrels


def qrels_lines(qrels: Mapping[str, Mapping[str, int]], layout: str) -> Iterable[str]:
    """A qrels file's lines, ``trec`` or ``beir`` layout (a header first in BEIR's)."""
    if layout == "beir":
        yield "query-id\tcorpus-id\tscore\n"
    for qid, docs in qrels.items():
        for doc, grade in docs.items():
            yield f"{qid}\t{doc}\t{grade}\n" if layout == "beir" else f"{qid} 0 {doc} {grade}\n"
