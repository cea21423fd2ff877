"""Judgements out: qrels (TREC or BEIR layout), and a whole BEIR directory of one's own.

- :func:`judged_qrels`: the store's standing grades as ``{qid: {doc_id: grade}}`` (skips left
  out); one assessor's, or every assessor's combined per document (``median``: the lower
  middle grade, so two assessors who disagree give the lower one; ``max``; ``min``).
- :func:`write_qrels`: TREC qrels (``qid 0 docid grade``, what trec_eval and ir-measures read)
  or BEIR's ``query-id<TAB>corpus-id<TAB>score`` with its header, written atomically.
- :func:`export_beir`: a BEIR directory (Thakur et al., 2021) of the index's documents, the
  judged queries (with their descriptions) and ``qrels/<split>.tsv``, plus
  ``dotcat_judgments.json`` (the pools' provenance, the assessors, their agreement, and the
  index's corpus identity: a model trained on the folder is known to fit that index), which
  ``dotcat eval``, ``experiment``, ``rerank`` and ``train`` read like any benchmark's.

Judgements of documents the index no longer holds (deleted since they were pooled) are left
out of both, with one warning giving their count.
"""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dotcat.data import iter_corpus
from dotcat.data._io import jsonl_lines
from dotcat.data.index_source import EXPORT_RECORD, index_holding, source_corpus_sha256
from dotcat.data.qrels import qrels_lines
from dotcat.errors import DotcatError
from dotcat.files import atomic_dir, check_can_create_in, write_json, write_text
from dotcat.judging.agreement import assessor_agreement
from dotcat.judging.config import ExportConfig, QrelsConfig
from dotcat.judging.store import JudgmentStore
from dotcat.types import Qrels

logger = logging.getLogger(__name__)
#: How several assessors' grades of one document become one.
_COMBINE = {"median": statistics.median_low, "max": max, "min": min}
#: Output layouts of :func:`write_qrels`, told from the file name by default.
LAYOUTS = ("trec", "beir")
#: What :func:`export_beir` writes into its folder: all a folder --overwrite replaces may hold.
_EXPORTED = {"corpus.jsonl", "queries.jsonl", "qrels", EXPORT_RECORD}


def judged_qrels(
    store: JudgmentStore, config: QrelsConfig | None = None, known_docs: Iterable[str] | None = None
) -> dict[str, dict[str, int]]:
    """The standing grades as qrels (module docstring), topics in the store's order.

    Args:
        known_docs: the documents the index holds; judgements of others are left out (one
            warning line).

    Raises:
        DotcatError: an assessor who judged nothing, or no judgement at all.
    """
    config = config or QrelsConfig()
    config.validate()
    if config.assessor is not None and config.assessor not in store.assessors():
        listed = ", ".join(store.assessors()) or "none yet"
        raise DotcatError(f"no judgements by assessor {config.assessor!r} (assessors: {listed})")
    grades: dict[tuple[str, str], list[int]] = {}
    for j in store.current(config.assessor):
        if j.grade is not None:
            grades.setdefault((j.qid, j.doc_id), []).append(j.grade)
    if known_docs is not None:
        grades = _drop_unknown(grades, set(known_docs), store.path)
    combine = _COMBINE[config.combine]
    order = {t.qid: i for i, t in enumerate(store.topics())}
    qrels: dict[str, dict[str, int]] = {}
    for (qid, doc), values in sorted(
        grades.items(), key=lambda kv: (order.get(kv[0][0], 0), kv[0])
    ):
        qrels.setdefault(qid, {})[doc] = int(combine(values))
    if not qrels:
        raise DotcatError(f"{store.path}: no judgements yet (judge on `dotcat serve --judge`)")
    return qrels


def _drop_unknown(
    grades: dict[tuple[str, str], list[int]], known: set[str], where: Path
) -> dict[tuple[str, str], list[int]]:
    gone = sorted({doc for _, doc in grades if doc not in known})
    if gone:
        logger.warning(
            "%s: %d judged documents are no longer in the index and are left out (e.g. %s)",
            where, len(gone), ", ".join(repr(d) for d in gone[:5]),
        )  # fmt: skip
    return {key: v for key, v in grades.items() if key[1] in known}


def layout_of(path: str | Path, layout: str | None = None) -> str:
    """``trec`` or ``beir``: as given, else ``beir`` for a ``.tsv`` file name, else ``trec``."""
    if layout is not None:
        if layout not in LAYOUTS:
            raise DotcatError(f"qrels layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
        return layout
    return "beir" if str(path).lower().removesuffix(".gz").endswith(".tsv") else "trec"


def write_qrels(qrels: Qrels, path: str | Path, layout: str | None = None) -> str:
    """Write ``qrels`` to ``path`` (TREC or BEIR layout, see :func:`layout_of`); ids with
    white space are refused (neither layout can hold them). Returns the layout written."""
    layout = layout_of(path, layout)
    for qid, docs in qrels.items():
        for name in (qid, *docs):
            if not name or any(c.isspace() for c in name):
                raise DotcatError(f"id {name!r} holds white space: no qrels file can hold it")
    write_text(path, qrels_lines(qrels, layout), 0o644)
    return layout


@dataclass(frozen=True)
class Exported:
    """What :func:`export_beir` wrote."""

    path: Path
    documents: int
    queries: int
    judgments: int
    split: str


def export_beir(
    store: JudgmentStore,
    index_dir: str | Path,
    out_dir: str | Path,
    config: QrelsConfig | None = None,
    export: ExportConfig | None = None,
) -> Exported:
    """Write a BEIR directory of the index's documents and the store's judged queries.

    The folder is written beside its final place and renamed into it when complete: an
    interrupted export leaves no half directory.

    Args:
        config: whose judgements, combined how.
        export: the split the qrels are written as; whether an existing folder is replaced.

    Raises:
        DotcatError: ``out_dir`` exists (without ``export.overwrite``), is a file, a link, a
            folder that holds anything but an earlier export, or lies in an index (the source
            index included: never touched); or nothing is judged.
    """
    config, export = config or QrelsConfig(), export or ExportConfig()
    out_dir = Path(out_dir)
    _check_out_dir(out_dir, export.overwrite)
    check_can_create_in(out_dir)
    ids: list[str] = []
    qrels: Qrels = {}

    def fill(work: Path) -> None:
        write_text(work / "corpus.jsonl", jsonl_lines(_corpus_records(index_dir, ids)), 0o644)
        qrels.update(judged_qrels(store, config, ids))
        topics = {t.qid: t for t in store.topics() if t.qid in qrels}
        write_text(work / "queries.jsonl", jsonl_lines(_query_records(topics.values())), 0o644)
        write_qrels(qrels, work / "qrels" / f"{export.split}.tsv", "beir")
        write_json(work / EXPORT_RECORD, export_record(store, qrels, config, index_dir))

    atomic_dir(out_dir, fill, unique=True)
    judged = sum(len(d) for d in qrels.values())
    return Exported(out_dir, len(ids), len(qrels), judged, export.split)


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    """Refuse an ``out_dir`` that --overwrite must not replace: only an empty folder or one an
    earlier export wrote (its files and nothing else) is ever removed."""
    if (index := index_holding(out_dir)) is not None:
        raise DotcatError(
            f"{out_dir}: is or lies inside the dotcat index {index}; choose another folder"
        )
    if out_dir.is_symlink() or (out_dir.exists() and not out_dir.is_dir()):
        raise DotcatError(f"{out_dir}: is a file or a link, not a folder; choose another folder")
    names = set(os.listdir(out_dir)) if out_dir.exists() else set()
    if names and not (EXPORT_RECORD in names and names <= _EXPORTED):
        raise DotcatError(
            f"{out_dir}: exists, is not empty and is not a dotcat export; refusing to touch it"
        )
    if out_dir.exists() and not overwrite:
        raise DotcatError(f"{out_dir}: exists; choose another folder or give --overwrite")


def _corpus_records(index_dir: str | Path, ids: list[str]) -> Iterable[dict[str, str]]:
    for doc in iter_corpus(Path(index_dir)):
        ids.append(doc.id)
        yield {"_id": doc.id, "title": doc.title, "text": doc.text}


def _query_records(topics: Iterable[Any]) -> Iterable[dict[str, str]]:
    for t in topics:
        record = {"_id": t.qid, "text": t.text}
        if t.description:
            record["description"] = t.description
        yield record


def export_record(
    store: JudgmentStore, qrels: Mapping, config: QrelsConfig, index_dir: str | Path
) -> dict[str, Any]:
    """Where exported qrels came from: the store, its pools, the assessors and how their
    grades were combined, their agreement, the counts, and the index whose documents they
    judge (its corpus sha256: a model trained on the export is known to fit that index)."""
    return {
        "judgments": str(store.path.resolve()),
        "pools": store.pools(),
        "assessors": store.assessors(),
        "assessor": config.assessor,
        "combine": None if config.assessor else config.combine,
        "scale": store.scale,
        "agreement": [a.to_json() for a in assessor_agreement(store)],
        "queries": len(qrels),
        "judged": sum(len(d) for d in qrels.values()),
        "source": {
            "index": str(Path(index_dir).resolve()),
            "sha256": source_corpus_sha256(index_dir),
        },
    }
