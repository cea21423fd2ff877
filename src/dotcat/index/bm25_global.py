"""BM25 over shards with the collection's statistics: a shard scores as the merged index does.

A BM25 score reads three statistics of the whole collection (:mod:`dotcat.index.bm25`)::

    score(q, d) = sum_{t in q} idf(t) * tf(t,d) / (tf(t,d) + k1 * (1 - b + b * |d| / avgdl))
    idf(t)      = ln(1 + (N - df(t) + 0.5) / (df(t) + 0.5))

the number of documents N, each term's document frequency df(t) and the mean length avgdl. A shard's
own index was built with its own (N_s, df_s, avgdl_s), so its scores are not the merged index's, and
rankings merged across shards would not be either (Viles and French, "Dissemination of collection
wide information in a distributed information retrieval system", SIGIR 1995; Elasticsearch's
``dfs_query_then_fetch`` gathers the same statistics first). Here every shard reports its statistics
(:func:`shard_statistics`: its terms, their document frequencies, its document count and length in
tokens), they are summed (:meth:`CollectionStatistics.combine`), and each shard's score matrix is
computed again from the counts it was computed from (:class:`~dotcat.index.bm25.TermCounts`) with N,
df(t) and avgdl of the collection (:func:`with_collection_statistics`), by bm25s' own formulas, in
the same arithmetic, so that a shard's score of a document equals the merged index's.

The same arithmetic updates one index in place of building it again
(:func:`updated`): after ``dotcat add``, ``delete`` or a sync, the rows that stay keep their
term counts, the new rows are tokenized and counted, and every score is computed again with
the new N, df(t) and avgdl: the scores a build over the same rows gives.

Term ids: each shard numbers its (stemmed) terms as it first meets them, ``""`` first; the
collection numbers them as the merged index does, which is built over the shards' documents in
shard order: the shards' vocabularies concatenated, each term at its first appearance
(:meth:`CollectionStatistics.combine`). Query expansion (RM3) breaks ties between terms by
these ids, so that it too chooses the merged index's terms.
"""

from __future__ import annotations

import copy
from array import array
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from dotcat.errors import DotcatError
from dotcat.index.bm25 import (
    BM25Index,
    EmptyBM25,
    TermCounts,
    _bm25s,
    _texts,
    make_tokenizer,
)
from dotcat.index.config import BM25Config

if TYPE_CHECKING:
    import bm25s

#: Score-matrix entries computed at a time (bounds the temporary arrays: ~24 bytes each).
_BLOCK = 1 << 22


@dataclass(frozen=True)
class ShardStatistics:
    """What one shard contributes to the collection's statistics.

    Attributes:
        terms: its (stemmed) terms, by its own term id.
        df: each term's document frequency in the shard.
        documents: its rows (documents, or passages in an index with passages).
        tokens: its length in tokens, ``sum_d |d|``.
    """

    terms: list[str]
    df: np.ndarray
    documents: int
    tokens: int


@dataclass(frozen=True)
class ShardView:
    """The collection's statistics as one shard needs them, by its own term ids.

    Attributes:
        ids: each of its terms' collection id.
        df: each of its terms' document frequency in the collection.
        documents: N, the collection's rows.
        tokens: the collection's length in tokens (avgdl = tokens / documents).
    """

    ids: np.ndarray
    df: np.ndarray
    documents: int
    tokens: int

    @property
    def avgdl(self) -> float:
        return self.tokens / max(self.documents, 1)


@dataclass(frozen=True)
class CollectionStatistics:
    """The statistics of the collection the shards make up (see the module docstring).

    Attributes:
        terms: each term's collection id (the merged index's).
        df: document frequency by collection id.
        documents: N.
        tokens: the collection's length in tokens.
    """

    terms: dict[str, int]
    df: np.ndarray
    documents: int
    tokens: int

    @classmethod
    def combine(cls, parts: Sequence[ShardStatistics]) -> CollectionStatistics:
        """The shards' statistics summed, their terms numbered as the merged index numbers
        them (``parts`` in shard order)."""
        terms: dict[str, int] = {}
        for part in parts:
            for term in part.terms:
                terms.setdefault(term, len(terms))
        df = np.zeros(len(terms), dtype=np.int64)
        for part in parts:
            np.add.at(df, [terms[t] for t in part.terms], np.asarray(part.df, dtype=np.int64))
        return cls(terms, df, sum(p.documents for p in parts), sum(p.tokens for p in parts))

    def view(self, part: ShardStatistics) -> ShardView:
        """What the shard that reported ``part`` needs: its terms' ids and frequencies."""
        ids = np.fromiter((self.terms[t] for t in part.terms), np.int64, count=len(part.terms))
        return ShardView(ids, self.df[ids], self.documents, self.tokens)

    def tokenizer(self, config: BM25Config) -> bm25s.tokenization.Tokenizer:
        """A tokenizer whose term ids are the collection's: a query tokenized with it gives
        the ids the merged index gives (terms no shard holds left out)."""
        tokenizer = make_tokenizer(config)
        if tokenizer.stemmer is not None:
            tokenizer.stem_to_sid = dict(self.terms)
        else:
            tokenizer.word_to_id = dict(self.terms)
        return tokenizer


def shard_statistics(bm25: BM25Index) -> ShardStatistics:
    """A shard's statistics (its index must have its term counts)."""
    df, tokens = np.asarray(bm25.document_frequencies), _counts(bm25).tokens
    return ShardStatistics(bm25.vocabulary, df, len(bm25), tokens)


def with_collection_statistics(
    bm25: BM25Index, view: ShardView, names: Sequence[str] | None = None
) -> BM25Index:
    """The shard ``bm25`` scoring with the collection's statistics (see the module docstring):
    its score matrix computed again from its term counts, its idf and document frequencies the
    collection's (what RM3 reads).

    Args:
        names: each row's name in the collection, if not its own id (a passage's id shifted
            by the passages of the shards before): equal scores are ordered by it, as the
            merged index orders them.

    Raises:
        DotcatError: the index has no term counts, or scores with a variant (BM25L, BM25+)
            whose scores are not ``idf * tf part``.
    """
    config, counts = bm25.config, _counts(bm25)
    if config.method not in _RESCORED:
        raise DotcatError(f"BM25 {config.method!r} cannot be scored across shards")
    idf_of = _bm25s().scoring._select_idf_scorer(config.method)
    present = view.df > 0
    idf64 = np.zeros(len(view.df), dtype=np.float64)
    idf64[present] = [idf_of(int(df), view.documents) for df in view.df[present]]
    idf = idf64.astype(np.float32)  # bm25s keeps its idf array in float32
    scores = bm25._retriever.scores
    data = _scores(config, counts, scores, idf, np.float64(view.avgdl))
    retriever = copy.copy(bm25._retriever)
    retriever.scores = {**scores, "data": data}
    shard = BM25Index(retriever, bm25._tokenizer, bm25.doc_ids, config, counts)
    # What feedback reads (dotcat.search.feedback): the collection's frequencies and idf.
    shard.__dict__["document_frequencies"] = np.asarray(view.df, dtype=np.int64)
    shard.__dict__["_idf"] = idf64
    if names is not None:
        order = sorted(range(len(names)), key=names.__getitem__)
        shard._id_rank[order] = np.arange(len(names))
    return shard


def updated(bm25: BM25Index, drop: Collection[str], rows: Iterable[object]) -> BM25Index | None:
    """``bm25`` with its rows whose ids are in ``drop`` removed and ``rows`` (documents as
    :meth:`BM25Index.build` takes them) added after the others, every score computed again from
    the term counts with the new collection's N, df(t) and avgdl (see the module docstring).

    The vocabulary only grows: a term no row holds any more keeps its id and an empty column
    (it scores nothing, as an unknown term). None where this cannot be done (an index without
    term counts, a variant whose scores are not ``idf * tf part``, or none before): build it
    again from the doc store instead.
    """
    config, counts = bm25.config, bm25.counts
    if counts is None or isinstance(bm25, EmptyBM25) or config.method not in _RESCORED:
        return None
    bm25s = _bm25s()
    old = bm25._retriever.scores
    indptr, indices = np.asarray(old["indptr"]), np.asarray(old["indices"])
    keep = np.fromiter((d not in drop for d in bm25.doc_ids), bool, count=len(bm25.doc_ids))
    doc_ids = [d for d, kept in zip(bm25.doc_ids, keep, strict=True) if kept]
    row_of = np.cumsum(keep) - 1  # an old row's number among those kept
    entry_kept = keep[indices]
    terms = [np.repeat(np.arange(len(indptr) - 1), np.diff(indptr))[entry_kept]]
    rows_of = [row_of[indices[entry_kept]]]
    tf = [np.asarray(counts.tf)[entry_kept]]
    lengths = [np.asarray(counts.lengths)[keep]]
    tokenizer = bm25._tokenizer  # the index's vocabulary, grown by the new rows' terms
    texts = _texts(rows, doc_ids)
    stream = tokenizer.streaming_tokenize(texts, update_vocab=True, allow_empty=True)
    for row, ids in enumerate(stream, start=len(doc_ids)):  # (doc_ids grows as it goes)
        found, counted = bm25s.scoring._get_counts_from_token_ids(
            array("i", ids), np.float32, np.int32
        )
        terms.append(found)
        rows_of.append(np.full(len(found), row))
        tf.append(counted)
        lengths.append(np.array([len(ids)], np.int32))
    n_docs = len(doc_ids)
    if n_docs == 0:
        return EmptyBM25(config)
    vocabulary = tokenizer.get_vocab_dict()
    data, rows, pointers = bm25s.BM25._np_csc(
        np.concatenate(tf).astype(np.int32), np.concatenate(rows_of).astype(np.int32),
        np.concatenate(terms).astype(np.int64), (n_docs, len(vocabulary)),
    )  # fmt: skip
    new_counts = TermCounts(data, np.concatenate(lengths).astype(np.int32))
    layout = {"indptr": pointers, "indices": rows, "num_docs": n_docs}
    idf_of = bm25s.scoring._select_idf_scorer(config.method)
    idf = np.array([idf_of(int(d), n_docs) if d else 0.0 for d in np.diff(pointers)], np.float32)
    avgdl = np.float64(new_counts.tokens / n_docs)
    retriever = bm25s.BM25(k1=config.k1, b=config.b, method=config.method)
    retriever.scores = {**layout, "data": _scores(config, new_counts, layout, idf, avgdl)}
    retriever.vocab_dict = vocabulary
    retriever.nonoccurrence_array = None
    return BM25Index(retriever, tokenizer, doc_ids, config, new_counts)


#: The variants whose scores are ``idf * tf part`` (computed again from the counts).
_RESCORED = ("lucene", "robertson", "atire")


def _scores(
    config: BM25Config, counts, scores: Mapping[str, np.ndarray], idf: np.ndarray, avgdl: np.float64
) -> np.ndarray:
    """bm25s' score of every stored entry, ``idf(t) * tfc(tf, |d|, avgdl)``, in its dtypes
    (float32 counts and idf, float64 lengths ratio, float32 result), block by block."""
    tfc_of = _bm25s().scoring._select_tfc_scorer(config.method)
    indptr = np.asarray(scores["indptr"])
    indices = np.asarray(scores["indices"])
    terms = np.repeat(np.arange(len(indptr) - 1, dtype=np.int64), np.diff(indptr))
    out = np.empty(len(indices), dtype=np.float32)
    for lo in range(0, len(indices), _BLOCK):
        hi = min(lo + _BLOCK, len(indices))
        tf = np.asarray(counts.tf[lo:hi], dtype=np.float32)
        lengths = np.asarray(counts.lengths)[indices[lo:hi]]
        tfc = tfc_of(tf_array=tf, l_d=lengths, l_avg=avgdl, k1=config.k1, b=config.b)
        out[lo:hi] = idf[terms[lo:hi]] * tfc
    return out


def _counts(bm25: BM25Index):
    if bm25.counts is None:
        raise DotcatError(
            "this BM25 index has no term counts (saved before they were kept, or by another "
            "bm25s); count them from its texts first (BM25Index.count_terms)"
        )
    return bm25.counts
