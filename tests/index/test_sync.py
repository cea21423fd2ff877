"""Syncing an index with its folder: only what changed is read and encoded, and the result
searches as a fresh build of the folder does (dense, BM25, hybrid, fields)."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.errors import DotcatError
from dotcat.index import layout
from dotcat.index.manifest import Manifest
from dotcat.index.sync import sync_index
from dotcat.index.updates import add_documents, delete_documents, read_files
from dotcat.models import EncoderConfig
from dotcat.search.pipeline import PipelineConfig, SearchPipeline
from dotcat.tuning import build_and_tune

WORDS = [
    "cats",
    "dogs",
    "wolves",
    "light",
    "energy",
    "cells",
    "insulin",
    "glucose",
    "vaccines",
    "immune",
    "plants",
]
QUERIES = {f"q{i}": f"{WORDS[i]} {WORDS[(i * 3 + 1) % len(WORDS)]}" for i in range(len(WORDS))}


def note(i: int, extra: str = "") -> str:
    words = " ".join(WORDS[(i + j) % len(WORDS)] for j in range(4 + i % 5))
    return f"# Note {i}\n\n{words} and note number {i}. {extra}\n"


def make_folder(root: Path) -> Path:
    docs = root / "docs"
    (docs / "sub").mkdir(parents=True)
    for i in range(12):
        (docs / ("sub" if i % 4 == 0 else "") / f"n{i}.md").write_text(note(i))
    (docs / "tickets.csv").write_text(
        "id,title,text,product\n1,Login,cannot log in with insulin,accounts\n"
        "2,Invoice,cats on the invoice,billing\n3,Refund,dogs want a refund,billing\n"
    )
    return docs


def change_folder(docs: Path) -> None:
    """One file edited, two added, one removed, one renamed, one touched; the record file's
    records: one edited, one removed, one added."""
    (docs / "n1.md").write_text(note(1, "Edited: glucose and vaccines now."))
    (docs / "added1.md").write_text("Fresh words about wolves and plants.")
    (docs / "sub" / "added2.txt").write_text("Another new text on immune cells.")
    (docs / "n2.md").unlink()
    (docs / "n3.md").rename(docs / "n3-renamed.md")
    stat = (docs / "n5.md").stat()
    os.utime(docs / "n5.md", ns=(stat.st_atime_ns, stat.st_mtime_ns + 5 * 10**9))
    (docs / "tickets.csv").write_text(
        "id,title,text,product\n2,Invoice,cats on the new invoice,billing\n"
        "3,Refund,dogs want a refund,billing\n4,Password,reset the password of light,accounts\n"
    )


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir) -> EncoderConfig:
    return EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32", pooling="mean")


@pytest.fixture(scope="module")
def synced(tmp_path_factory, encoder):
    """A folder indexed, changed, synced; and a fresh build of the changed folder."""
    root = tmp_path_factory.mktemp("sync")
    docs = make_folder(root)
    build_and_tune(docs, root / "idx", encoder, show_progress=False)
    change_folder(docs)
    done = build_and_tune(docs, root / "idx", encoder, show_progress=False)
    build_and_tune(docs, root / "fresh", encoder, show_progress=False)
    return root, done


def test_a_sync_reads_and_encodes_only_what_changed(synced):
    root, done = synced
    result = done.sync
    # Documents: n1 edited, tickets#2 edited; added1, added2, n3-renamed, tickets#4 new;
    # n2, n3, tickets#1 gone; n5 touched (its mtime field), tickets#3 (its file's mtime).
    assert (result.added, result.changed, result.removed) == (4, 2, 3)
    assert result.refielded == 2
    assert result.unchanged == 15 - 3 - 2
    # Files read: the five changed or new ones and the touched one, of 14 listed.
    assert (result.files_read, result.files) == (6, 14)
    manifest = Manifest.read(root / "idx")
    assert manifest.generation == 2 and manifest.made
    assert [u["op"] for u in manifest.updates] == ["sync"]


@pytest.mark.kernels
def test_the_synced_index_searches_as_a_fresh_build_of_the_folder(synced):
    root, _ = synced
    config = PipelineConfig(device="cpu", precision="fp32")
    mine, fresh = SearchPipeline(root / "idx", config), SearchPipeline(root / "fresh", config)
    assert mine.index.document_count == fresh.index.document_count == 16
    for stage in ("dense", "bm25", "hybrid"):
        a = mine.run(QUERIES, k=50, first_stage=stage)
        b = fresh.run(QUERIES, k=50, first_stage=stage)
        for qid in QUERIES:
            got, want = dict(a[qid]), dict(b[qid])
            assert got.keys() == want.keys(), (stage, qid)
            ids = sorted(want)
            np.testing.assert_allclose([got[i] for i in ids], [want[i] for i in ids], atol=1e-5)
    ids = sorted(fresh.index.store.all_ids())
    mine_docs = mine.index.store.by_ids(ids)
    fresh_docs = fresh.index.store.by_ids(ids)
    for i in ids:
        assert (mine_docs[i].title, mine_docs[i].text) == (fresh_docs[i].title, fresh_docs[i].text)
        assert mine.index.fields_of([mine_docs[i].pos]) == {
            mine_docs[i].pos: fresh.index.fields_of([fresh_docs[i].pos])[fresh_docs[i].pos]
        }
    assert mine.index.field_kinds() == fresh.index.field_kinds()
    assert (read_files(root / "idx")["files"]) == read_files(root / "fresh")["files"]


def test_a_folder_unchanged_makes_no_new_generation(synced, encoder):
    root, _ = synced
    before = layout.generation_id(root / "idx")
    done = build_and_tune(root / "docs", root / "idx", encoder, show_progress=False)
    assert (done.sync.added, done.sync.changed, done.sync.removed, done.sync.files_read) == (
        0,
        0,
        0,
        0,
    )
    assert layout.generation_id(root / "idx") == before


@pytest.mark.kernels
def test_a_setting_that_changes_the_vectors_is_refused_with_the_rebuild(synced, tmp_path):
    root, _ = synced
    before = layout.generation_id(root / "idx")
    runner = CliRunner()
    for option in (["--max-length", "64"], ["--faiss", "HNSW32"], ["--no-bm25"]):
        result = runner.invoke(app, ["index", str(root / "docs"), str(root / "idx"), *option])
        assert result.exit_code == 2, result.output
        line = result.output.strip().splitlines()[-1]
        assert "would change what the index holds" in line
        assert f"--overwrite {option[0]}" in line, line
    assert layout.generation_id(root / "idx") == before


def test_a_second_writer_is_refused_with_a_clear_line(synced):
    root, _ = synced
    with layout.index_lock(root / "idx"):
        result = CliRunner().invoke(app, ["index", str(root / "docs"), str(root / "idx")])
    assert result.exit_code == 2
    assert "another dotcat process is building or updating this index" in result.output


@pytest.mark.kernels
def test_a_corpus_file_is_compared_record_by_record(tmp_path, encoder):
    corpus = tmp_path / "tickets.csv"
    corpus.write_text("id,title,text\n1,a,cats here\n2,b,dogs there\n3,c,light\n")
    build_and_tune(corpus, tmp_path / "idx", encoder, show_progress=False)
    (tmp_path / "mine.jsonl").write_text('{"id": "mine", "text": "wombats"}\n')
    add_documents(tmp_path / "idx", tmp_path / "mine.jsonl", device="cpu", precision="fp32",
                  show_progress=False)  # fmt: skip
    corpus.write_text("id,title,text\n1,a,cats here\n2,b,dogs elsewhere\n4,d,energy\n")
    done = build_and_tune(corpus, tmp_path / "idx", encoder, show_progress=False).sync
    assert (done.added, done.changed, done.removed, done.unchanged) == (1, 1, 1, 2)
    store = SearchPipeline(tmp_path / "idx", device="cpu").index.store
    assert sorted(store.all_ids()) == ["1", "2", "4", "mine"]  # `dotcat add`'s kept
    assert store.by_ids(["2"])["2"].text == "dogs elsewhere"


def test_a_reader_opening_a_generation_holds_the_swap_back(tmp_path):
    index, new = tmp_path / "idx", tmp_path / ".idx.building"
    for folder, n in ((index, 1), (new, 2)):
        folder.mkdir()
        (folder / "manifest.json").write_text(f'{{"generation": {n}}}')
    swapped = threading.Event()

    def swap() -> None:
        layout.swap_into_place(new, index)
        swapped.set()

    with layout.reading(index) as seen:
        writer = threading.Thread(target=swap)
        writer.start()
        assert not swapped.wait(0.5)  # the swap waits for the reader's opens
        assert layout.generation_id(index) == seen
    writer.join(timeout=30)
    assert swapped.is_set() and '"generation": 2' in (index / "manifest.json").read_text()


def test_an_update_links_what_it_does_not_change(synced):
    root, _ = synced
    copy = root / "linked"
    shutil.rmtree(copy, ignore_errors=True)
    layout.copy_for_update(root / "idx", copy)
    for name in ("index.faiss", "manifest.json", "bm25/dotcat_bm25.json"):
        assert os.path.samefile(copy / name, root / "idx" / name)
    assert not os.path.samefile(copy / "docstore.sqlite", root / "idx" / "docstore.sqlite")
    shutil.rmtree(copy)


@pytest.mark.kernels
def test_python_build_and_tune_refuses_a_changed_model(synced, tiny_cat_dir):
    root, _ = synced
    with pytest.raises(DotcatError, match="would change what the index holds"):
        build_and_tune(root / "docs", root / "idx", EncoderConfig(model=str(tiny_cat_dir)))


def _folder(root: Path, name: str, files: dict[str, str]) -> Path:
    (root / name).mkdir()
    for file, text in files.items():
        (root / name / file).write_text(text)
    return root / name


def test_documents_added_with_dotcat_add_stay_whatever_the_folder_options(tmp_path, encoder):
    rows = "id,text\n1,about terns\n"
    docs = _folder(tmp_path, "docs", {"a.txt": "about lighthouses", "b.md": "about gulls",
                                      "t.csv": rows})  # fmt: skip
    extra = _folder(tmp_path, "extra", {"manual.txt": "manually added note about puffins",
                                        "t.csv": "id,text\n9,another t.csv\n"})  # fmt: skip
    index = tmp_path / "idx"
    build_and_tune(docs, index, encoder, show_progress=False)
    add_documents(index, extra, device="cpu", precision="fp32", show_progress=False)
    (docs / "t.csv").write_text(rows + "2,about skuas\n")  # t.csv#9 is no row of it: kept
    result = CliRunner().invoke(app, ["index", str(docs), str(index)])
    assert "1 added, 0 changed, 0 removed" in result.output, result.output
    # Options unchanged, changed, then leaving a.txt out: only a.txt goes.
    for options, removed in (([], 0), (["--exclude", "*.docx"], 0), (["--exclude", "*.txt"], 1)):
        result = CliRunner().invoke(app, ["index", str(docs), str(index), *options])
        assert result.exit_code == 0, result.output
        assert f"0 added, 0 changed, {removed} removed" in result.output, (options, result.output)
    # Run again as first typed, without them: what the last sync left out stays out.
    result = CliRunner().invoke(app, ["index", str(docs), str(index)])
    assert "0 added, 0 changed, 0 removed" in result.output, result.output
    # Other options that select no file (a mistyped pattern) are refused: nothing removed.
    result = CliRunner().invoke(app, ["index", str(docs), str(index), "--include", "*.mdx"])
    assert result.exit_code == 2 and "no file to read matches" in result.output, result.output
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))
    assert sorted(pipeline.index.store.all_ids()) == [
        "b.md", "manual.txt", "t.csv#1", "t.csv#2", "t.csv#9"
    ]  # fmt: skip
    found = pipeline.run({"q": "puffins"}, k=5, first_stage="bm25")["q"]
    assert [doc_id for doc_id, _ in found] == ["manual.txt"]


def test_an_added_id_a_file_takes_over_goes_with_the_file(tmp_path, encoder):
    docs = _folder(tmp_path, "docs", {"a.txt": "about lighthouses"})
    index = tmp_path / "idx"
    build_and_tune(docs, index, encoder, show_progress=False)
    add_documents(index, [{"_id": "new.md", "text": "added by hand"}], device="cpu",
                  precision="fp32", show_progress=False)  # fmt: skip
    (docs / "new.md").write_text("# N\n\nfrom the file\n")
    sync_index(docs, index, show_progress=False)  # the file's text replaces the added one
    (docs / "new.md").unlink()
    assert sync_index(docs, index, show_progress=False).removed == 1  # and goes with it
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))
    assert sorted(pipeline.index.store.all_ids()) == ["a.txt"]


def test_a_sync_of_a_folder_left_with_no_file_empties_the_index(tmp_path, encoder):
    docs = _folder(tmp_path, "docs", {"a.txt": "a note about kiwis"})
    index, unrecorded = tmp_path / "idx", tmp_path / "unrecorded"
    for built in (index, unrecorded):
        build_and_tune(docs, built, encoder, show_progress=False)
    (unrecorded / "files.json").unlink()  # as an index built before files were recorded
    (docs / "a.txt").unlink()
    runner = CliRunner()
    for built in (index, unrecorded):
        result = runner.invoke(app, ["index", str(docs), str(built)])
        assert result.exit_code == 0, result.output
        assert "0 added, 0 changed, 1 removed, 0 unchanged" in result.output
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))
    assert pipeline.index.document_count == 0
    for stage in ("dense", "bm25", "hybrid"):
        assert pipeline.run({"q": "kiwis"}, k=5, first_stage=stage) == {"q": []}, stage
        result = runner.invoke(app, ["search", str(index), "kiwis", "--first-stage", stage])
        assert result.exit_code == 0 and "no results" in result.output, result.output
    # A first build of the empty folder is still refused in one line.
    result = runner.invoke(app, ["index", str(docs), str(tmp_path / "other")])
    assert result.exit_code == 2 and "no file to index here" in result.output, result.output
    assert not (tmp_path / "other").exists()


def test_a_file_whose_documents_were_deleted_or_replaced_is_still_the_folders(tmp_path, encoder):
    rows = "id,title,text\n1,Kiwi,kiwis eat worms\n2,Gull,gulls eat fish\n3,Tern,terns dive\n"
    docs = _folder(tmp_path, "docs", {"birds.csv": rows, "a.txt": "a note about moss"})
    index = tmp_path / "idx"
    build_and_tune(docs, index, encoder, show_progress=False)
    delete_documents(index, ["birds.csv#1"])
    (tmp_path / "up.jsonl").write_text('{"id": "birds.csv#2", "text": "gulls steal chips"}\n')
    add_documents(index, tmp_path / "up.jsonl", upsert=True, device="cpu", precision="fp32",
                  show_progress=False)  # fmt: skip
    (docs / "birds.csv").unlink()
    result = CliRunner().invoke(app, ["index", str(docs), str(index)])
    assert result.exit_code == 0 and "2 removed" in result.output, result.output
    pipeline = SearchPipeline(index, PipelineConfig(device="cpu", precision="fp32"))
    assert sorted(pipeline.index.store.all_ids()) == ["a.txt"]
