"""load_corpus: Arrow on disk and memory-mapped, cached by (path, size, mtime), clean failures."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

import dotcat.data.corpus as corpus_module
from dotcat.data import CorpusStats, default_cache_dir, load_corpus
from dotcat.errors import DataFormatError


def jsonl(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.fixture()
def reads(monkeypatch):
    """Count how many times load_corpus streams the corpus file."""
    calls = []
    real = corpus_module.iter_corpus

    def counting(path, stats=None):
        calls.append(path)
        return real(path, stats=stats)

    monkeypatch.setattr(corpus_module, "iter_corpus", counting)
    return calls


def test_memory_mapped_dataset_from_beir_dir(tiny_beir_dir, tmp_path):
    from datasets.table import MemoryMappedTable

    stats = CorpusStats()
    ds = load_corpus(tiny_beir_dir, cache_dir=tmp_path / "cache", stats=stats)
    assert ds.column_names == ["id", "title", "text", "fields"]
    assert ds.num_rows == 6
    assert ds[1] == {
        "id": "d2",
        "title": "Dogs",
        "text": "Dogs were domesticated from wolves long ago.",
        "fields": "",  # a BEIR corpus's documents have none
    }
    # Arrow on disk, memory-mapped: nothing of the corpus held in Python memory.
    assert ds.cache_files
    assert all(str(tmp_path / "cache") in f["filename"] for f in ds.cache_files)
    assert isinstance(ds.data, MemoryMappedTable)
    assert stats.documents == 6 and stats.path.endswith("corpus.jsonl.gz")


def test_cache_hit_then_invalidation_on_edit(write, tmp_path, reads):
    cache = tmp_path / "cache"
    path = write(
        "c.jsonl", jsonl({"_id": "a", "text": "x"}, {"_id": "b", "title": "B", "text": ""})
    )
    first = CorpusStats()
    assert load_corpus(path, cache_dir=cache, stats=first)["id"] == ["a", "b"]
    again = CorpusStats()
    assert load_corpus(path, cache_dir=cache, stats=again)["id"] == ["a", "b"]
    assert len(reads) == 1, "second load must come from the cache"
    assert again == first and again.title_only == 1  # counts recorded with the cache entry

    # An edit of the same size, detected through the modification time alone.
    path.write_text(jsonl({"_id": "c", "text": "x"}, {"_id": "d", "title": "B", "text": ""}))
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert load_corpus(path, cache_dir=cache)["id"] == ["c", "d"]
    # An edit that changes the size.
    path.write_text(jsonl({"_id": "e", "text": "longer text"}))
    assert load_corpus(path, cache_dir=cache)["id"] == ["e"]
    assert len(reads) == 3
    entries = [p for p in cache.iterdir() if p.name != ".locks"]
    assert len(entries) == 1, "stale entries for the same file are removed"


def test_error_in_generator_surfaces_and_leaves_no_entry(write, tmp_path, assert_error, reads):
    cache = tmp_path / "cache"
    path = write("c.jsonl", jsonl({"_id": "a", "text": "x"}, {"_id": "a", "text": "y"}))
    for _ in range(2):  # the second attempt reads the file again: nothing was cached
        with pytest.raises(DataFormatError) as e:
            load_corpus(path, cache_dir=cache)
        assert type(e.value) is DataFormatError
        assert_error(e, path.resolve(), 2, "duplicate id 'a' (first at line 1)", field="_id")
    assert len(reads) == 2
    assert [p.name for p in cache.iterdir()] == [".locks"]


def test_interrupted_build_is_rebuilt(write, tmp_path, reads):
    cache = tmp_path / "cache"
    path = write("c.tsv", "a\tx\nb\ty\n")
    load_corpus(path, cache_dir=cache)
    (entry,) = (p for p in cache.iterdir() if p.name != ".locks")
    (entry / "stats.json").unlink()  # as if the process died before the build completed
    assert load_corpus(path, cache_dir=cache)["id"] == ["a", "b"]
    assert len(reads) == 2 and (entry / "stats.json").is_file()


def test_corpus_without_documents(write, tmp_path, assert_error):
    path = write("c.jsonl", jsonl({"_id": "a", "title": "", "text": ""}))
    with pytest.raises(DataFormatError) as e:
        load_corpus(path, cache_dir=tmp_path / "cache")
    assert_error(e, path.resolve(), None, "no documents (1 records, 1 without title or text)")


def test_default_cache_dir_follows_env(monkeypatch, tmp_path, write):
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path / "dc"))
    assert default_cache_dir() == tmp_path / "dc" / "datasets"
    load_corpus(write("c.tsv", "a\tx\n"))
    assert any((tmp_path / "dc" / "datasets").iterdir())
    monkeypatch.delenv("DOTCAT_CACHE")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert default_cache_dir() == Path.home() / ".cache" / "dotcat" / "datasets"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert default_cache_dir() == tmp_path / "xdg" / "dotcat" / "datasets"


def test_damaged_entry_is_rebuilt(write, tmp_path, reads, caplog):
    cache = tmp_path / "cache"
    path = write("c.tsv", "a\tx\n")
    ds = load_corpus(path, cache_dir=cache)
    for f in ds.cache_files:
        os.remove(f["filename"])  # the marker survives, the Arrow data does not
    with caplog.at_level(logging.WARNING, logger="dotcat.data"):
        assert load_corpus(path, cache_dir=cache)["id"] == ["a"]
    assert len(reads) == 2
    assert "is unusable" in caplog.text


def test_file_changed_during_build_is_not_cached(write, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    path = write("c.tsv", "a\tx\nb\ty\n")
    real = corpus_module.iter_corpus

    def touching(p, stats=None):
        for i, doc in enumerate(real(p, stats=stats)):
            if i == 1:
                st = path.stat()
                os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
            yield doc

    monkeypatch.setattr(corpus_module, "iter_corpus", touching)
    load_corpus(path, cache_dir=cache)
    assert not list(cache.glob("*/stats.json"))
