"""dotcat.search.lexical: one call indexes a corpus in memory and searches a batch of queries
(the index itself: tests/index/test_bm25.py)."""

from __future__ import annotations

import pytest

from dotcat.errors import DotcatError
from dotcat.index.config import BM25Config
from dotcat.search.lexical import bm25_search

DOCS = [
    {"id": "d1", "title": "Wolves", "text": "Wolves hunt in packs across the tundra."},
    {"id": "d2", "title": "Dogs", "text": "Dogs were domesticated from wolves long ago."},
    {"id": "d3", "title": "Tea", "text": "Green tea is brewed from unoxidised leaves."},
]


def test_every_query_gets_its_top_k_matching_documents():
    queries = {"q1": "wolves", "q2": "brewed tea leaves", "q3": "the of and"}
    run = bm25_search(DOCS, queries, k=1, show_progress=False)
    assert set(run) == {"q1", "q2", "q3"}
    assert [d for d, _ in run["q2"]] == ["d3"]
    assert len(run["q1"]) == 1 and run["q1"][0][0] in {"d1", "d2"}
    assert run["q3"] == []  # stop words only: no document matches
    wide = bm25_search(DOCS, {"q1": "wolves"}, k=10, show_progress=False)
    assert {d for d, _ in wide["q1"]} == {"d1", "d2"}


def test_the_config_is_the_index_config():
    unstemmed = BM25Config(stemmer=None)
    assert bm25_search(DOCS, {"q": "hunting"}, config=unstemmed, show_progress=False)["q"] == []
    assert bm25_search(DOCS, {"q": "hunting"}, show_progress=False)["q"]  # stemmed: hunt
    with pytest.raises(DotcatError, match="k must be"):
        bm25_search(DOCS, {"q": "wolves"}, k=0, show_progress=False)
