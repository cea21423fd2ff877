"""Training examples for BERT_DOT: (query, positive, hard negatives) triples from qrels.

Every judged-relevant (query, document) pair is one example, as in DPR (Karpukhin et al.,
"Dense Passage Retrieval for Open-Domain Question Answering", EMNLP 2020): the query's positive
is scored against the other examples' documents of the batch (in-batch negatives) and against
its own hard negatives, mined from BM25 or from a dense index (:mod:`dotcat.training.data.mining`).

A judged-relevant document is never used as a negative: such "false negatives" are the main
noise of mined negatives (Qu et al., "RocketQA", NAACL 2021), so they are removed here again,
whatever file the negatives came from.

The dev split used for model selection is carved from the training queries by a hash of
``(seed, qid)`` (:func:`dotcat.data.splits.split_dev`), so it is reproducible and stable when
queries are added; :func:`dev_subset` bounds the corpus it is evaluated on.
"""

from __future__ import annotations

import hashlib
import logging
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NamedTuple

import datasets
import numpy as np

from dotcat.data import load_corpus, load_qrels, load_queries
from dotcat.data.index_source import is_index_dir
from dotcat.errors import DotcatError
from dotcat.search.reranker import corpus_texts
from dotcat.types import Qrels

logger = logging.getLogger(__name__)

_EXAMPLES = 5


def seeded_rng(*parts: object) -> random.Random:
    key = "\x00".join(str(p) for p in parts).encode("utf-8")
    return random.Random(int.from_bytes(hashlib.sha256(key).digest()[:8], "big"))


@dataclass(frozen=True)
class TrainingExample:
    """One training example: a query, one judged-relevant document and its hard negatives.

    Attributes:
        qid: query id.
        query: query text.
        positive_id: id of a document judged relevant to the query.
        negative_ids: ids of hard negatives (never judged relevant to the query); may be
            fewer than asked for when too few were mined (see :func:`build_examples`).
    """

    qid: str
    query: str
    positive_id: str
    negative_ids: tuple[str, ...] = ()


@dataclass
class ExampleStats:
    """Counts from :func:`build_examples`; pass an instance as ``stats=`` to receive them.

    Attributes:
        queries: queries with text and at least one positive (one or more examples each).
        examples: examples built (after ``on_short="drop"`` removals).
        skipped_no_qrels: queries with text but no document judged ``>= min_relevance``.
        skipped_no_text: queries with a positive but without a (non-blank) text.
        short_negatives: examples with fewer than ``n_negatives`` negatives available.
        dropped_short: examples dropped for it (``on_short="drop"``, or ``"repeat"`` with none).
        removed_relevant: mined negatives removed because they are judged relevant (> 0).
    """

    queries: int = 0
    examples: int = 0
    skipped_no_qrels: int = 0
    skipped_no_text: int = 0
    short_negatives: int = 0
    dropped_short: int = 0
    removed_relevant: int = 0


def relevant_docs(judged: Mapping[str, int] | None) -> set[str]:
    """The documents judged relevant (grade > 0) in one query's qrels."""
    return {doc for doc, rel in (judged or {}).items() if rel > 0}


def build_examples(
    queries: Mapping[str, str],
    qrels: Qrels,
    negatives: Mapping[str, Sequence[str]] | None = None,
    n_negatives: int = 0,
    min_relevance: int = 1,
    seed: int = 0,
    *,
    on_short: Literal["keep", "drop", "repeat"] = "keep",
    stats: ExampleStats | None = None,
) -> list[TrainingExample]:
    """One :class:`TrainingExample` per (query, judged-relevant document) pair.

    Queries come in the order of ``queries``, positives in qrels order. For each example,
    ``n_negatives`` negatives are sampled without replacement from the query's mined list with
    a ``random.Random`` seeded by ``sha256(seed, qid, positive_id)``: the same inputs give the
    same examples on every run, and two positives of one query get different samples.

    Judged-relevant documents (grade > 0, whatever ``min_relevance``) are removed from the
    mined lists before sampling (counted in ``stats.removed_relevant``, logged): false negatives
    hurt contrastive training (Qu et al., RocketQA, 2021). Judged non-relevant documents
    (grade <= 0) are fine negatives and are kept. Repeated ids in a mined list count once.

    Args:
        negatives: qid -> mined negative ids (best first), e.g. from
            :func:`dotcat.training.data.mining.mine_bm25_negatives`; ``None`` for none.
        n_negatives: negatives per example (0: in-batch negatives only).
        min_relevance: smallest grade that makes a document a positive (>= 1).
        on_short: when fewer than ``n_negatives`` are available: ``"keep"`` the example with
            what there is; ``"drop"`` it; ``"repeat"`` the available ones (cycled, in sampled
            order) up to ``n_negatives``, dropping examples with none. A fixed count per example
            is what a ``[B, n, d]`` negatives tensor needs.
        stats: filled in with counts (see :class:`ExampleStats`).

    Raises:
        DotcatError: ``n_negatives < 0``, ``min_relevance < 1`` or an unknown ``on_short``.
    """
    if n_negatives < 0:
        raise DotcatError(f"number of negatives must be >= 0, got {n_negatives}")
    if min_relevance < 1:
        raise DotcatError(f"min_relevance must be >= 1, got {min_relevance}")
    if on_short not in ("keep", "drop", "repeat"):
        raise DotcatError(f"on_short must be keep, drop or repeat, got {on_short!r}")
    stats = stats if stats is not None else ExampleStats()
    examples: list[TrainingExample] = []
    no_text = [
        qid
        for qid, judged in qrels.items()
        if any(rel >= min_relevance for rel in judged.values())
        and not (queries.get(qid) or "").strip()
    ]
    stats.skipped_no_text += len(no_text)
    for qid, text in queries.items():
        if not (text or "").strip():
            continue  # counted in no_text when judged
        judged = qrels.get(qid) or {}
        positives = [doc for doc, rel in judged.items() if rel >= min_relevance]
        if not positives:
            stats.skipped_no_qrels += 1
            continue
        stats.queries += 1
        pool: list[str] = []
        if negatives is not None and n_negatives > 0:
            relevant = relevant_docs(judged)
            mined = list(dict.fromkeys(negatives.get(qid, ())))
            pool = [doc for doc in mined if doc not in relevant]
            stats.removed_relevant += len(mined) - len(pool)
        for positive in positives:
            chosen: list[str] | None = []
            if n_negatives > 0 and negatives is not None:
                rng = seeded_rng(seed, qid, positive)
                chosen = _draw(pool, n_negatives, rng, on_short, stats)
            if chosen is not None:
                examples.append(TrainingExample(qid, text, positive, tuple(chosen)))
    stats.examples = len(examples)
    _log_stats(stats, n_negatives, no_text)
    return examples


def _draw(
    pool: list[str], n: int, rng: random.Random, on_short: str, stats: ExampleStats
) -> list[str] | None:
    """``n`` negatives of ``pool`` drawn by ``rng`` (see :func:`build_examples`'s
    ``on_short`` for a short pool); None: the example is dropped."""
    if len(pool) >= n:
        return rng.sample(pool, n)
    stats.short_negatives += 1
    chosen = rng.sample(pool, len(pool))
    if on_short == "drop" or (on_short == "repeat" and not chosen):
        stats.dropped_short += 1
        return None
    if on_short == "repeat":
        chosen = [chosen[i % len(chosen)] for i in range(n)]
    return chosen


def _warn_some(what: str, items: Sequence[str], count: int | None = None) -> None:
    """Warn that ``count`` (default: all) of ``items`` are ``what``, naming a few."""
    shown = ", ".join(repr(x) for x in items[:_EXAMPLES])
    logger.warning("%d %s (e.g. %s)", len(items) if count is None else count, what, shown)


def _log_stats(stats: ExampleStats, n_negatives: int, no_text: list[str]) -> None:
    logger.info(
        "%d training examples from %d queries (%d negatives each)",
        stats.examples, stats.queries, n_negatives,
    )  # fmt: skip
    if stats.skipped_no_text:
        _warn_some("judged queries have no text and were skipped", no_text, stats.skipped_no_text)
    if stats.skipped_no_qrels:
        logger.info("%d queries without a relevant document were skipped", stats.skipped_no_qrels)
    if stats.removed_relevant:
        logger.warning(
            "%d mined negatives are judged relevant to their query and were removed",
            stats.removed_relevant,
        )
    if stats.short_negatives:
        logger.warning(
            "%d examples have fewer than %d mined negatives available%s",
            stats.short_negatives, n_negatives,
            f" ({stats.dropped_short} dropped)" if stats.dropped_short else "",
        )  # fmt: skip


class TrainingData(NamedTuple):
    """What :func:`load_training_data` returns; unpacks as ``queries, qrels, corpus``."""

    queries: dict[str, str]
    qrels: dict[str, dict[str, int]]
    corpus: datasets.Dataset


def load_training_data(
    data_path: str | Path,
    split: str = "train",
    queries: str | Path | None = None,
    qrels: str | Path | None = None,
) -> TrainingData:
    """Load the queries, qrels and corpus to train on.

    Either a BEIR directory (``corpus.jsonl``, ``queries.jsonl``, ``qrels/<split>.tsv``), or a
    corpus (a BEIR directory, a corpus file, or a dotcat index: the documents it holds) plus
    a queries file and a qrels file, which replace the directory's own.

    Only judged queries with text are kept, and qrels entries naming a document that is not in
    the corpus are dropped (it could neither be encoded as a positive nor be retrieved), with a
    warning giving the count.

    Raises:
        DotcatError: ``data_path`` is a corpus file and the queries or qrels file is missing;
            any :class:`dotcat.errors.DataFormatError` from the readers.
    """
    data_path = Path(data_path)
    if (not data_path.is_dir() or is_index_dir(data_path)) and (queries is None or qrels is None):
        raise DotcatError(
            f"{data_path}: not a BEIR directory; give the queries and qrels files as well"
        )
    judged = load_qrels(qrels) if qrels is not None else load_qrels(data_path, split)
    texts = load_queries(queries) if queries is not None else load_queries(data_path, split)
    corpus = load_corpus(data_path)

    in_corpus = set(corpus["id"])
    kept_qrels: dict[str, dict[str, int]] = {}
    missing_docs: list[str] = []
    for qid, docs in judged.items():
        kept = {doc: rel for doc, rel in docs.items() if doc in in_corpus}
        missing_docs += [doc for doc in docs if doc not in in_corpus]
        if kept:
            kept_qrels[qid] = kept
    if missing_docs:
        what = "qrels entries name documents missing from the corpus and were dropped"
        _warn_some(what, missing_docs)
    kept_queries = {qid: text for qid, text in texts.items() if qid in kept_qrels}
    if len(kept_queries) < len(texts):
        logger.info("%d queries without judgements ignored", len(texts) - len(kept_queries))
    no_text = [qid for qid in kept_qrels if qid not in kept_queries]
    if no_text:
        _warn_some("judged queries have no text", no_text)
    if not kept_queries:
        raise DotcatError(f"{data_path}: no judged query with text to train on (split {split!r})")
    logger.info(
        "training data: %d queries, %d judgements, %d documents",
        len(kept_queries), sum(len(d) for d in kept_qrels.values()), len(corpus),
    )  # fmt: skip
    return TrainingData(kept_queries, kept_qrels, corpus)


def document_texts(corpus: Any, ids: set[str]) -> dict[str, str]:
    """id -> encoded text (:func:`dotcat.index.docstore.document_text`) of the documents in
    ``ids``."""
    return known_texts(corpus_texts(corpus, ids), ids)


def known_texts(texts: dict[str, str], ids: set[str]) -> dict[str, str]:
    """``texts``; lists naming documents it lacks: one line now, not a ``KeyError`` mid-run."""
    if missing := sorted(ids - texts.keys()):
        said = f"{len(missing):,} document(s) not in the corpus (e.g. {missing[0]!r})"
        raise DotcatError(f"the training lists name {said}: made for another corpus?")
    return texts


def dev_subset(corpus: Any, dev_qrels: Qrels, max_docs: int, seed: int) -> Any:
    """The corpus, or for more than ``max_docs`` documents the judged ones plus a seeded sample."""
    if len(corpus) <= max_docs:
        return corpus
    judged = {doc for docs in dev_qrels.values() for doc in docs}
    ids = corpus["id"]
    keep = [i for i, doc in enumerate(ids) if doc in judged]
    others = np.setdiff1d(np.arange(len(ids)), np.asarray(keep, dtype=np.int64))
    sample = np.random.default_rng(seed).choice(
        others, size=min(max_docs, len(others)), replace=False
    )
    rows = sorted(set(keep) | set(sample.tolist()))
    logger.info("dev evaluation on %d of %d documents (judged + sample)", len(rows), len(ids))
    return corpus.select(rows)
