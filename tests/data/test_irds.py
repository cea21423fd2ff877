"""``irds:ID`` names read through the real ir_datasets package: a dataset registered from
local files (ir_datasets' own TSV and TREC readers) is written as a BEIR directory in the
cache and read by every reader of dotcat."""

from __future__ import annotations

import sys
import uuid
from typing import NamedTuple

import pytest

from dotcat.data import available_splits, load_corpus, load_qrels, load_queries
from dotcat.data.catalog import cached_dir, fetch, resolve_data_path
from dotcat.data.irds import doc_fields
from dotcat.errors import DotcatError

ir_datasets = pytest.importorskip("ir_datasets")


@pytest.fixture()
def irds_name(tmp_path, monkeypatch) -> str:
    """A fresh ir_datasets id over three local files; the test's own dotcat cache."""
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path / "cache"))
    docs = tmp_path / "docs.tsv"
    docs.write_text("d1\tcats purr\nd2\tdogs bark\nd3\tbirds sing\n")
    queries = tmp_path / "queries.tsv"
    queries.write_text("1\twhich animal barks\n2\twho sings\n")
    qrels = tmp_path / "qrels.txt"  # d2 judged twice: the higher grade stays
    qrels.write_text("1 0 d2 1\n2 0 d3 2\n1 1 d2 2\n")
    dataset_id = f"dotcat-test/{uuid.uuid4().hex[:8]}"
    ir_datasets.registry.register(dataset_id, ir_datasets.create_dataset(docs, queries, qrels))
    return f"irds:{dataset_id}"


def test_an_irds_id_reads_as_a_beir_directory(irds_name):
    assert load_queries(irds_name, split="test") == {"1": "which animal barks", "2": "who sings"}
    assert load_qrels(irds_name, "test") == {"1": {"d2": 2}, "2": {"d3": 2}}
    corpus = load_corpus(irds_name)
    assert list(corpus["id"]) == ["d1", "d2", "d3"] and corpus[1]["text"] == "dogs bark"
    folder = resolve_data_path(irds_name)
    assert folder == cached_dir(irds_name) and available_splits(folder) == ["test"]
    assert "__" in folder.name and folder.parent.name == "irds"


def test_get_writes_an_irds_id_where_asked(irds_name, tmp_path):
    out = fetch(irds_name, tmp_path / "out")
    assert sorted(p.name for p in out.iterdir()) == [
        "corpus.jsonl", "dotcat-source.json", "qrels", "queries.jsonl"
    ]  # fmt: skip
    with pytest.raises(DotcatError, match="exists and is not empty"):
        fetch(irds_name, tmp_path / "out")


def test_unknown_ids_and_a_missing_package_are_one_line(tmp_path, monkeypatch):
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path / "cache"))
    with pytest.raises(DotcatError, match="irds:no-such/set: ir_datasets has no dataset"):
        load_queries("irds:no-such/set")
    monkeypatch.setitem(sys.modules, "ir_datasets", None)  # as if it were not installed
    with pytest.raises(DotcatError, match=r"needs the ir_datasets package \(pip install "
                       r"'dotcat\[irds\]'\)"):  # fmt: skip
        load_queries("irds:vaswani")
    assert list((tmp_path / "cache" / "collections" / "irds").iterdir()) == []  # nothing left


class _TitledDoc(NamedTuple):
    doc_id: str
    title: str
    body: str

    def default_text(self) -> str:
        return f"{self.title} {self.body}"


class _Doc(NamedTuple):
    doc_id: str
    title: str
    text: str


def test_documents_keep_title_and_text():
    assert doc_fields(_Doc("a", "Cats", "purr")) == ("Cats", "purr")
    assert doc_fields(_TitledDoc("a", "Cats", "purr loudly")) == ("Cats", "purr loudly")
