"""A BEIR view of one's own corpus, queries and qrels (what an experiment's [dataset] reads)."""

from __future__ import annotations

from dotcat.data import load_corpus, load_qrels, load_queries
from dotcat.data.views import beir_view


def test_a_view_of_a_folder_of_documents(tmp_path):
    """A folder as the corpus failed: its view looked for the folder's corpus.jsonl."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.md").write_text("# A\n\ncats\n")
    (docs / "b.md").write_text("# B\n\ndogs\n")
    (tmp_path / "q.tsv").write_text("q1\tcats\n")
    (tmp_path / "qrels.txt").write_text("q1 0 a.md 1\n")
    view = beir_view(docs, tmp_path / "q.tsv", tmp_path / "qrels.txt", "dev")
    assert sorted(load_corpus(view)["id"]) == ["a.md", "b.md"]
    assert load_queries(view) == {"q1": "cats"}
    assert load_qrels(view, "dev") == {"q1": {"a.md": 1}}
