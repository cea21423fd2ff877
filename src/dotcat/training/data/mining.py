"""Hard-negative mining from BM25 or from a dense index of the current model.

Hard negatives are documents a retriever ranks high for a query that are not judged relevant.
DPR (Karpukhin et al., "Dense Passage Retrieval for Open-Domain Question Answering", EMNLP
2020) adds one BM25 negative per query to the in-batch negatives; ANCE (Xiong et al.,
"Approximate Nearest Neighbor Negative Contrastive Learning for Dense Text Retrieval", ICLR
2021) mines them from a dense index of the model being trained, refreshed during training.

Rank window: negatives are taken from the retriever's ranks ``[start, end)`` (0-based; the
top ``end`` documents are retrieved and the first ``start`` skipped). The ranks are the
retriever's own, counted *before* judged-relevant documents are removed, so a window means the
same depth for every query. Skipping the very top matters because unjudged relevant documents
("false negatives") crowd there (Qu et al., "RocketQA", NAACL 2021).

Exclusion: a document judged relevant to the query (grade > 0) is never a negative. Documents
judged non-relevant (grade <= 0) are kept: an assessor looked and said no, which makes them
the most trustworthy negatives there are.

Mined negatives are saved as JSON Lines (:func:`save_negatives`, :func:`load_negatives`) with a
header recording how they were mined, so a training run can be repeated exactly.
"""

from __future__ import annotations

import datetime as dt
import gzip
import itertools
import json
import logging
import os
import tempfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import faiss
import numpy as np

from dotcat.data.corpus import iter_document_fields
from dotcat.errors import DataFormatError, DotcatError
from dotcat.files import writing
from dotcat.index import document_text
from dotcat.index.bm25 import BM25Index
from dotcat.index.config import BM25Config
from dotcat.progress import progress_bar
from dotcat.training.config import DEFAULT_WINDOW, check_window
from dotcat.types import Qrels

logger = logging.getLogger(__name__)

Negatives = dict[str, list[str]]

NEGATIVES_FORMAT = "dotcat-negatives"
NEGATIVES_FORMAT_VERSION = 1
DEFAULT_CHUNK_SIZE = 16_384


def window_negatives(
    ranked: Sequence[str], window: Sequence[int], judged: Mapping[str, int] | None
) -> list[str]:
    """The ids at ranks ``[start, end)`` of ``ranked`` (best first), minus relevant ones.

    Relevant: grade > 0 in ``judged`` (one query's qrels). Rank order is kept.
    """
    start, end = check_window(window)
    judged = judged or {}
    return [doc for doc in ranked[start:end] if judged.get(doc, 0) <= 0]


def _finish(
    negatives: Negatives, window: tuple[int, int], what: str, meta, size: int, **extra: Any
) -> Negatives:
    """Log the counts; record how the negatives were mined in ``meta`` (where given)."""
    n, empty = sum(len(v) for v in negatives.values()), sum(not v for v in negatives.values())
    if meta is not None:
        counts = {"n_queries": len(negatives), "n_negatives": n}
        meta.update(negatives_meta(what.lower(), window, size, **extra, **counts))
    mean = n / max(len(negatives), 1)
    logger.info(
        "%s negatives: %d queries, ranks [%d, %d), %.1f negatives per query",
        what, len(negatives), window[0], window[1], mean,
    )  # fmt: skip
    if empty:
        logger.warning("%d of %d queries got no %s negative", empty, len(negatives), what)
    return negatives


def mine_bm25_negatives(
    corpus: Iterable[Any],
    queries: Mapping[str, str],
    qrels: Qrels,
    window: Sequence[int] = DEFAULT_WINDOW,
    config: BM25Config | None = None,
    show_progress: bool = True,
    *,
    meta: dict[str, Any] | None = None,
) -> Negatives:
    """BM25 hard negatives: qid -> ids at BM25 ranks ``[start, end)``, judged-relevant removed.

    Args:
        corpus: a ``datasets.Dataset`` (``id``, ``title``, ``text``) or an iterable of documents
            (see :meth:`dotcat.index.bm25.BM25Index.build`).
        queries: qid -> text; every query gets an entry (possibly empty).
        qrels: qid -> docid -> grade; grade > 0 is excluded.
        window: ``(start, end)`` 0-based ranks, end exclusive (see the module docstring).
        config: BM25 settings; default ``BM25Config()`` (Pyserini's BEIR defaults).
        meta: if given, filled in with the header for :func:`save_negatives` (method, window,
            BM25 config, corpus size, created).

    Returns:
        qid -> negative ids in BM25 rank order (at most ``end - start``; fewer when relevant
        documents were removed or fewer documents match the query).
    """
    window = check_window(window)
    config = config if config is not None else BM25Config()
    index = BM25Index.build(corpus, config=config, show_progress=show_progress)
    run = index.search(queries, k=window[1], show_progress=show_progress)
    negatives = {
        qid: window_negatives([doc for doc, _ in run.get(qid, [])], window, qrels.get(qid))
        for qid in queries
    }
    return _finish(negatives, window, "BM25", meta, len(index), bm25_config=config.to_dict())


def iter_document_chunks(
    corpus: Iterable[Any], chunk_size: int
) -> Iterator[tuple[list[str], list[str], list[str]]]:
    """Yield ``(ids, titles, texts)`` lists of up to ``chunk_size`` documents, in corpus order.

    ``corpus``: a ``datasets.Dataset`` with ``id``, ``title`` (optional), ``text`` columns (read
    in batches from its memory-mapped Arrow file), or an iterable of ``dotcat.data.Document``
    objects or of mappings with ``id`` (or ``_id``), ``title`` and ``text``.
    """
    if chunk_size < 1:
        raise DotcatError(f"chunk size must be >= 1, got {chunk_size}")
    fields = iter_document_fields(corpus, batch_size=chunk_size)
    while chunk := list(itertools.islice(fields, chunk_size)):
        ids, titles, texts = (list(column) for column in zip(*chunk, strict=True))
        yield ids, titles, texts


def _as_matrix(x: Any, rows: int, what: str) -> np.ndarray:
    x = np.ascontiguousarray(np.asarray(x, dtype=np.float32))
    if x.ndim != 2 or x.shape[0] != rows:
        raise DotcatError(f"encoder returned {what} of shape {x.shape}, expected ({rows}, dim)")
    return x


def mine_dense_negatives(
    encoder: Any,
    corpus: Iterable[Any],
    queries: Mapping[str, str],
    qrels: Qrels,
    window: Sequence[int] = DEFAULT_WINDOW,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    show_progress: bool = True,
    *,
    meta: dict[str, Any] | None = None,
) -> Negatives:
    """Dense hard negatives (ANCE style): the encoder's own top ranks, judged-relevant removed.

    The queries are encoded once (``encoder.encode_queries``); the corpus is streamed in chunks
    of ``chunk_size`` documents, each encoded (``encoder.encode_documents`` on
    :func:`dotcat.index.docstore.document_text`) and searched exactly by inner product
    (``faiss.knn``), the per-chunk top-``end`` lists merged in a ``faiss.ResultHeap``. Only the
    queries' vectors, one chunk of document vectors and the ``[queries, end]`` result arrays
    are ever in memory, so the corpus may be far larger than RAM; the result is the same as a
    flat inner-product index over the whole corpus. Equal scores are ordered by corpus
    position (a tie exactly at the cut-off may fall either way).

    Args:
        encoder: a :class:`dotcat.models.bi_encoder.BiEncoder` or any object with
            ``encode_queries(texts)`` and ``encode_documents(texts)`` returning float32 ``[n, dim]``
            arrays, and ``similarity`` (``"cos"`` vectors are L2-normalised here too, to be safe);
            its ``fingerprint`` (if any) is recorded in ``meta``.
        corpus: a ``datasets.Dataset`` or an iterable of documents
            (see :func:`iter_document_chunks`).
        queries: qid -> text; every query gets an entry.
        qrels: qid -> docid -> grade; grade > 0 is excluded.
        window: ``(start, end)`` 0-based ranks, end exclusive.
        chunk_size: documents encoded and searched at a time (bounds memory).
        meta: if given, filled in with the header for :func:`save_negatives`.

    Returns:
        qid -> negative ids in rank order.
    """
    window = check_window(window)
    qids = list(queries)
    if not qids:
        logger.warning("no queries to mine negatives for")
        doc_ids = [i for ids, _, _ in iter_document_chunks(corpus, chunk_size) for i in ids]
    else:
        texts = [queries[q] for q in qids]
        heap, doc_ids = _dense_search(encoder, corpus, texts, window[1], chunk_size, show_progress)
    if not doc_ids:
        raise DotcatError("the corpus has no documents: nothing to mine")
    negatives: Negatives = {
        qid: window_negatives(_ranked(heap, row, doc_ids), window, qrels.get(qid))
        for row, qid in enumerate(qids)
    }
    return _finish(
        negatives, window, "dense", meta, len(doc_ids),
        model_fingerprint=getattr(encoder, "fingerprint", None),
        model=str(getattr(encoder, "name", "")) or None,
        similarity=getattr(encoder, "similarity", None),
    )  # fmt: skip


def _dense_search(
    encoder: Any,
    corpus: Iterable[Any],
    texts: list[str],
    k: int,
    chunk_size: int,
    show_progress: bool,
) -> tuple[Any, list[str]]:
    """The encoder's exact top ``k`` for the query ``texts`` (:func:`exact_search`), cosine
    vectors L2-normalised."""
    cos = getattr(encoder, "similarity", "dot") == "cos"
    query_vectors = _as_matrix(encoder.encode_queries(texts), len(texts), "query vectors")
    if cos:
        faiss.normalize_L2(query_vectors)
    dim = query_vectors.shape[1]
    return exact_search(
        query_vectors,
        corpus,
        k,
        lambda docs: _document_vectors(encoder, docs, dim, cos),
        chunk_size=chunk_size,
        desc="dense mining",
        show_progress=show_progress,
    )


def exact_search(
    query_vectors: np.ndarray,
    corpus: Iterable[Any],
    k: int,
    encode_documents: Callable[[list[str]], np.ndarray],
    *,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    desc: str = "search",
    show_progress: bool = False,
) -> tuple[Any, list[str]]:
    """Every query's exact inner-product top ``k`` over ``corpus``, in bounded memory.

    The corpus is streamed in chunks of ``chunk_size`` documents
    (:func:`iter_document_chunks`), each encoded by ``encode_documents`` on
    :func:`dotcat.index.docstore.document_text` and searched with ``faiss.knn``; the per-chunk top
    ``k`` lists are merged in a ``faiss.ResultHeap``, as a flat index over the whole corpus
    would rank them. Returns the finalized heap (rows: queries; ``I``: positions in the
    returned document ids) and the document ids in corpus order.
    """
    heap = faiss.ResultHeap(len(query_vectors), k, keep_max=True)
    doc_ids: list[str] = []
    total = len(corpus) if hasattr(corpus, "__len__") else None
    with progress_bar(total=total, desc=desc, unit="doc", enabled=show_progress) as bar:
        for ids, titles, texts in iter_document_chunks(corpus, chunk_size):
            docs = [document_text(t, x) for t, x in zip(titles, texts, strict=True)]
            vectors = encode_documents(docs)
            scores, positions = faiss.knn(
                query_vectors, vectors, min(k, len(ids)), metric=faiss.METRIC_INNER_PRODUCT
            )
            heap.add_result(scores, positions + len(doc_ids))
            doc_ids += ids
            bar.update(len(ids))
    heap.finalize()
    return heap, doc_ids


def _document_vectors(encoder: Any, docs: list[str], dim: int, cos: bool) -> np.ndarray:
    """One chunk's document vectors, checked against the queries' dimension."""
    vectors = _as_matrix(encoder.encode_documents(docs), len(docs), "document vectors")
    if vectors.shape[1] != dim:
        raise DotcatError(
            f"encoder returned document vectors of dim {vectors.shape[1]} and query "
            f"vectors of dim {dim}"
        )
    if cos:
        faiss.normalize_L2(vectors)
    return vectors


def _ranked(heap: Any, row: int, doc_ids: Sequence[str]) -> list[str]:
    """A finalised heap row's document ids, score descending, then corpus position."""
    positions, scores = heap.I[row], heap.D[row]
    found = positions >= 0
    positions, scores = positions[found], scores[found]
    order = np.lexsort((positions, -scores))
    return [doc_ids[p] for p in positions[order]]


def negatives_meta(
    method: str,
    window: Sequence[int],
    corpus_size: int,
    model_fingerprint: str | None = None,
    **extra: Any,
) -> dict[str, Any]:
    """The header of a negatives file: how and from what the negatives were mined.

    Keys: ``method`` (``"bm25"`` or ``"dense"``), ``window`` ``[start, end]``,
    ``model_fingerprint`` (the dense model's weights sha256, ``None`` for BM25), ``corpus_size``,
    ``created`` (UTC, ISO 8601) and any ``extra`` JSON-serialisable items.
    """
    start, end = check_window(window)
    return {
        "method": method,
        "window": [start, end],
        "model_fingerprint": model_fingerprint,
        "corpus_size": int(corpus_size),
        "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        **extra,
    }


def _open(path: Path, mode: str, gz: bool | None = None) -> IO[str]:
    if path.name.endswith(".gz") if gz is None else gz:
        return gzip.open(path, mode + "t", encoding="utf-8")
    return open(path, mode, encoding="utf-8")


def save_negatives(
    path: str | os.PathLike, negatives: Mapping[str, Sequence[str]], meta: Mapping[str, Any]
) -> Path:
    """Write mined negatives as JSON Lines, atomically (temporary file + ``os.replace``).

    Line 1 is the header: ``{"format": "dotcat-negatives", "format_version": 1, **meta,
    "n_queries": ...}`` (see :func:`negatives_meta`; ``created`` is added when missing). Then
    one ``{"qid": ..., "negatives": [...]}`` per query, in the mapping's order. A name ending
    in ``.gz`` is gzipped. An interrupted write leaves the previous file, or none.
    """
    path = Path(path)
    header = {"format": NEGATIVES_FORMAT, "format_version": NEGATIVES_FORMAT_VERSION, **meta}
    header.setdefault("created", dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    header["n_queries"] = len(negatives)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    with writing(path, remove=[tmp]):  # a full disk: one line, the previous file kept
        with _open(tmp, "w", gz=path.name.endswith(".gz")) as f:
            f.write(json.dumps(header, ensure_ascii=False) + "\n")
            for qid, docs in negatives.items():
                record = {"qid": str(qid), "negatives": [str(d) for d in docs]}
                f.write(json.dumps(record, ensure_ascii=False) + "\n")
        with open(tmp, "rb+") as raw:
            os.fsync(raw.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    logger.info("saved negatives of %d queries to %s", len(negatives), path)
    return path


def load_negatives(path: str | os.PathLike) -> tuple[Negatives, dict[str, Any]]:
    """Read a file written by :func:`save_negatives`: ``(qid -> negative ids, header)``.

    Raises:
        DataFormatError: (a :class:`DotcatError`) naming the file and line, for a missing or
            foreign header, an unsupported version, a malformed record, a repeated query id or
            a record count that disagrees with the header (a truncated file).
    """
    path = Path(path)
    if not path.is_file():
        raise DataFormatError(path, None, "no such negatives file")
    negatives: Negatives = {}
    meta: dict[str, Any] | None = None
    first_line: dict[str, int] = {}
    try:
        with _open(path, "r") as f:
            for lineno, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise DataFormatError(path, lineno, f"invalid JSON ({e.msg})") from None
                if not isinstance(obj, dict):
                    raise DataFormatError(path, lineno, "expected a JSON object")
                if meta is None:
                    meta = _check_header(path, lineno, obj)
                    continue
                qid, docs = obj.get("qid"), obj.get("negatives")
                if not isinstance(qid, str) or not qid:
                    raise DataFormatError(path, lineno, "missing or non-string", "qid")
                if not isinstance(docs, list) or not all(isinstance(d, str) for d in docs):
                    raise DataFormatError(path, lineno, "expected a list of strings", "negatives")
                if qid in first_line:
                    raise DataFormatError(
                        path, lineno, f"repeated query {qid!r} (first at line {first_line[qid]})"
                    )
                first_line[qid] = lineno
                negatives[qid] = docs
    except UnicodeDecodeError as e:
        raise DataFormatError(path, None, f"not UTF-8 text ({e.reason})") from None
    except (OSError, EOFError) as e:  # gzip errors
        raise DataFormatError(path, None, f"cannot read: {e}") from None
    if meta is None:
        raise DataFormatError(path, 1, "empty file: no negatives header")
    expected = meta.get("n_queries")
    if isinstance(expected, int) and expected != len(negatives):
        raise DataFormatError(
            path, None, f"header announces {expected} queries, file has {len(negatives)}"
        )
    logger.info("loaded negatives of %d queries from %s", len(negatives), path)
    return negatives, meta


def _check_header(path: Path, lineno: int, obj: dict[str, Any]) -> dict[str, Any]:
    if obj.get("format") != NEGATIVES_FORMAT:
        why = f"not a dotcat negatives file (no header with format {NEGATIVES_FORMAT!r})"
        raise DataFormatError(path, lineno, why)
    version = obj.get("format_version")
    if version != NEGATIVES_FORMAT_VERSION:
        why = f"negatives format version {version!r}; this dotcat reads {NEGATIVES_FORMAT_VERSION}"
        raise DataFormatError(path, lineno, why, "format_version")
    return obj
