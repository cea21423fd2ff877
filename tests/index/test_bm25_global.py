"""BM25 over shards with the collection's statistics: a shard scores as the merged index."""

from __future__ import annotations

import random

import numpy as np
import pytest

from dotcat.errors import DotcatError
from dotcat.index.bm25 import BM25Index
from dotcat.index.bm25_global import (
    CollectionStatistics,
    shard_statistics,
    updated,
    with_collection_statistics,
)
from dotcat.index.config import BM25Config

WORDS = [
    "protein", "cell", "gene", "cancer", "virus", "immune", "insulin", "glucose", "neuron",
    "brain", "heart", "lung", "kidney", "vitamin", "bone", "muscle", "drug", "trial",
    "placebo", "dose", "running", "runs", "runner",
]  # fmt: skip
#: Words most documents lack (Robertson's idf is 0 for a word in half the documents or more).
RARE = [f"rare{j}" for j in range(100)]
QUERIES = ["rare3 insulin rare17", "cell cancer running rare4", "bone bone drug", "the of"]


def documents(n: int = 300, seed: int = 1) -> list[dict]:
    rng = random.Random(seed)
    return [
        {
            "id": f"d{i}",
            "title": rng.choice(WORDS) if i % 5 else "",
            "text": " ".join(
                rng.choice(RARE if rng.random() < 0.3 else WORDS) for _ in range(rng.randint(0, 40))
            ),
        }
        for i in range(n)
    ]


def build(docs, config=BM25Config()) -> BM25Index:
    return BM25Index.build(docs, config=config, show_progress=False)


def split(docs, cuts=(0, 90, 230, 300), config=BM25Config()) -> list[BM25Index]:
    return [build(docs[a:b], config) for a, b in zip(cuts, cuts[1:], strict=False)]


def merged_search(parts: list[BM25Index], query: str) -> list[tuple[str, float]]:
    """Every shard's matches, merged by score then id (as one index orders them)."""
    found = [hit for part in parts for hit in part.search_one(query, 10_000)]
    return sorted(found, key=lambda hit: (-hit[1], hit[0]))


def globalised(parts: list[BM25Index]) -> list[BM25Index]:
    stats = CollectionStatistics.combine([shard_statistics(p) for p in parts])
    return [with_collection_statistics(p, stats.view(shard_statistics(p))) for p in parts]


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
def test_shards_scored_with_the_collection_s_statistics_are_the_merged_index(method):
    docs, config = documents(), BM25Config(method=method)
    whole, parts = build(docs, config), split(docs, config=config)
    own = dict(merged_search(parts, QUERIES[0]))
    expected = dict(whole.search_one(QUERIES[0], 999))
    assert max(abs(own[d] - expected[d]) for d in own.keys() & expected.keys()) > 1e-3  # differ
    shards = globalised(parts)
    for query in QUERIES:
        got, want = merged_search(shards, query), whole.search_one(query, 10_000)
        assert [d for d, _ in got] == [d for d, _ in want]
        np.testing.assert_allclose([s for _, s in got], [s for _, s in want], rtol=0, atol=1e-6)


def test_collection_term_ids_document_frequencies_and_idf_are_the_merged_index_s():
    docs = documents()
    whole, parts = build(docs), split(docs)
    stats = CollectionStatistics.combine([shard_statistics(p) for p in parts])
    assert list(stats.terms) == whole.vocabulary  # numbered as the merged index numbers them
    np.testing.assert_array_equal(stats.df, whole.document_frequencies)
    assert (stats.documents, stats.tokens) == (len(whole), whole.counts.tokens)
    shard = globalised(parts)[1]
    view = stats.view(shard_statistics(parts[1]))
    for row, doc_id in enumerate(shard.doc_ids[:20]):  # what RM3 reads of a feedback document
        mine = {int(view.ids[t]): c for t, c in shard.term_frequencies(row).items()}
        theirs = whole.term_frequencies(whole.doc_ids.index(doc_id))
        assert mine.keys() == theirs.keys()
        np.testing.assert_allclose(list(mine.values()), [theirs[t] for t in mine], rtol=1e-5)
    tokenizer = stats.tokenizer(BM25Config())
    for query in QUERIES:
        ids = next(tokenizer.streaming_tokenize([query], update_vocab=False, allow_empty=False))
        assert ids == whole.query_token_ids(query)


def test_term_counts_are_saved_and_counted_again_for_an_older_index(tmp_path):
    docs = documents(60)
    index = build(docs)
    index.save(tmp_path / "bm25")
    loaded = BM25Index.load(tmp_path / "bm25", mmap=True)
    np.testing.assert_array_equal(loaded.counts.tf, index.counts.tf)
    np.testing.assert_array_equal(loaded.counts.lengths, index.counts.lengths)
    for name in ("counts.tf.npy", "counts.lengths.npy"):  # an index saved before they were kept
        (tmp_path / "bm25" / name).unlink()
    older = BM25Index.load(tmp_path / "bm25", mmap=True)
    assert older.counts is None
    with pytest.raises(DotcatError, match="no term counts"):
        shard_statistics(older)
    counted = older.count_terms(docs)
    np.testing.assert_array_equal(counted.tf, index.counts.tf)
    np.testing.assert_array_equal(counted.lengths, index.counts.lengths)
    with pytest.raises(DotcatError, match="not the ones"):
        older.count_terms(documents(60, seed=2))


@pytest.mark.parametrize("method", ["lucene", "robertson", "atire"])
def test_an_index_updated_from_its_counts_scores_as_a_build_of_its_rows(method, tmp_path):
    docs, config = documents(), BM25Config(method=method)
    build(docs[:200], config).save(tmp_path / "old")
    dropped = {d["id"] for d in docs[:200:7]}
    new = updated(BM25Index.load(tmp_path / "old"), dropped, docs[200:])
    new.save(tmp_path / "new")  # as an update saves it, then a search loads it
    new = BM25Index.load(tmp_path / "new", mmap=True)
    whole = build([d for d in docs[:200] if d["id"] not in dropped] + docs[200:], config)
    assert new.doc_ids == whole.doc_ids
    frequencies = [
        {t: int(df) for t, df in zip(b.vocabulary, b.document_frequencies, strict=True) if df}
        for b in (new, whole)
    ]
    assert frequencies[0] == frequencies[1]  # a term no row holds any more: an empty column
    for query in QUERIES:
        got, want = new.search_one(query, 10_000), whole.search_one(query, 10_000)
        assert got == want  # the same arithmetic: the same floats
    assert updated(new, {d["id"] for d in docs}, []).search_one(QUERIES[0]) == []  # all gone
