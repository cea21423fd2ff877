"""Indexing every corpus source: Python objects, folders of files (shards, add, the manifest's
fingerprint), and the command line end to end on a folder."""

from __future__ import annotations

import json

import numpy as np
import pytest
from tests.data.documents import write_bad_files, write_every_kind
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import CorpusOptions, CorpusStats, load_corpus
from dotcat.index import DenseIndex, IndexConfig, Manifest, build_index
from dotcat.index.updates import add_documents
from dotcat.models import BiEncoder, EncoderConfig

TEXTS = [
    "Cats are small domesticated carnivorous mammals.",
    "Mitochondria produce ATP through oxidative phosphorylation.",
    "Insulin regulates glucose uptake in muscle.",
    "Glaciers carve deep fjords over thousands of years.",
]


@pytest.fixture(scope="module")
def encoder(tiny_bert_dir):
    config = EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    return BiEncoder.load(config)


def stored(index_dir) -> list[tuple[str, str, str]]:
    """``(id, title, text)`` of every document, in position order."""
    index = DenseIndex(index_dir, device="cpu")
    docs = index.documents(list(range(len(index))))
    return [(docs[p].id, docs[p].title, docs[p].text) for p in range(len(index))]


def finds_itself(index_dir, encoder, texts) -> None:
    index = DenseIndex(index_dir, device="cpu")
    _, positions = index.search(encoder.encode_documents(texts), k=1)
    np.testing.assert_array_equal(positions[:, 0], np.arange(len(texts)))


@pytest.mark.parametrize("kind", ["strings", "dicts", "dataframe", "dataset"])
def test_build_index_from_python_documents(kind, encoder, tmp_path):
    import datasets
    import pandas as pd

    rows = [{"key": f"k{i}", "body": text} for i, text in enumerate(TEXTS)]
    sources = {
        "strings": (TEXTS, None, [str(i) for i in range(len(TEXTS))]),
        "dicts": (rows, CorpusOptions(id_field="key", text_field="body"), None),
        "dataframe": (pd.DataFrame(rows), CorpusOptions(id_field="key", text_field="body"), None),
        "dataset": (
            datasets.Dataset.from_list(rows),
            CorpusOptions(id_field="key", text_field="body"),
            None,
        ),
    }
    source, options, ids = sources[kind]
    ids = ids or [f"k{i}" for i in range(len(TEXTS))]
    out = tmp_path / "idx"
    manifest = build_index(source, out, encoder, show_progress=False, corpus_options=options)
    assert manifest.documents["count"] == len(TEXTS)
    assert stored(out) == [(i, "", t) for i, t in zip(ids, TEXTS, strict=True)]
    assert manifest.corpus["kind"] == "python" and len(manifest.corpus["sha256"]) == 64
    finds_itself(out, encoder, TEXTS)


def test_build_index_from_a_folder_and_its_manifest(encoder, tmp_path):
    folder = tmp_path / "docs"
    words = write_every_kind(folder)
    out = tmp_path / "idx"
    manifest = build_index(folder, out, encoder, IndexConfig(bm25=True), show_progress=False)
    stats = CorpusStats()
    load_corpus(folder, stats=stats)
    assert manifest.corpus["kind"] == "folder" and manifest.corpus["path"] == str(folder)
    assert manifest.corpus["sha256"] == stats.sha256 and manifest.documents["count"] == len(words)
    assert sorted(doc_id for doc_id, _, _ in stored(out)) == sorted(words)
    # A record read with a field option is recorded with it.
    (folder / "records.jsonl").write_text('{"_id": "r1", "body": "The moon pulls tides."}\n')
    options = CorpusOptions(text_field="body", exclude=("*.csv", "*.tsv", "*.json", "*.parquet"))
    manifest = build_index(
        folder, out, encoder, overwrite=True, show_progress=False, corpus_options=options
    )
    assert manifest.corpus["options"] == {"text_field": "body", "exclude": list(options.exclude)}
    assert manifest.corpus["sha256"] != stats.sha256  # the folder changed


def test_shards_of_a_folder_split_the_same_sorted_walk(encoder, tmp_path):
    folder = tmp_path / "docs"
    for i in range(9):
        (folder / f"d{i % 3}").mkdir(parents=True, exist_ok=True)
        (folder / f"d{i % 3}" / f"n{i}.md").write_text(f"# Note {i}\n\n{TEXTS[i % 4]} {i}")
    whole = [doc_id for doc_id, _, _ in stored(_build(folder, tmp_path / "whole", encoder))]
    assert whole == sorted(whole, key=lambda i: i.split("/"))
    parts = []
    for i in range(2):
        config = IndexConfig(shard=(i, 2))
        out = tmp_path / f"s{i}"
        parts.append(build_index(folder, out, encoder, config, show_progress=False))
        whole_part = whole[: len(whole) // 2] if i == 0 else whole[len(whole) // 2 :]
        assert [doc_id for doc_id, _, _ in stored(out)] == whole_part
    assert parts[0].corpus["sha256"] == parts[1].corpus["sha256"]


def _build(source, out, encoder, **kwargs):
    build_index(source, out, encoder, show_progress=False, **kwargs)
    return out


def test_add_documents_from_a_folder_and_from_python(encoder, tmp_path, tiny_bert_dir):
    out = _build(TEXTS[:2], tmp_path / "idx", encoder)
    folder = tmp_path / "more"
    folder.mkdir()
    (folder / "a.md").write_text(TEXTS[2])
    (folder / "skip.txt").write_text("not this one")
    result = add_documents(
        out, folder, device="cpu", precision="fp32", corpus_options=CorpusOptions(include=("*.md",))
    )
    assert (result.added, result.documents) == (1, 3)
    result = add_documents(out, [{"id": "x", "text": TEXTS[3]}], device="cpu", precision="fp32")
    assert (result.added, result.documents) == (1, 4)
    assert [doc_id for doc_id, _, _ in stored(out)] == ["0", "1", "a.md", "x"]
    log = Manifest.read(out).updates
    assert log[0]["corpus"] == str(folder) and len(log[0]["sha256"]) == 64
    assert log[1]["corpus"] == "<list>"


@pytest.mark.kernels
def test_cli_indexes_a_folder_in_one_command_and_search_finds_a_word(tiny_bert_dir, tmp_path):
    folder = tmp_path / "mydocs"
    words = write_every_kind(folder)
    bad = write_bad_files(folder)
    out = tmp_path / "idx"
    runner = CliRunner()
    result = runner.invoke(
        app, ["-q", "index", str(folder), str(out), "--model", str(tiny_bert_dir),
              "--precision", "fp32"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    assert f"indexed {len(words)} documents" in result.stdout
    warnings = [line for line in result.stderr.splitlines() if line.startswith("WARNING")]
    assert len(warnings) == 1, result.stderr
    assert f"skipped 3 of {len(words) + 3} files that cannot be read: " in warnings[0]
    assert all(name in warnings[0] for name in bad)
    assert "Traceback" not in result.output
    for doc_id in ("paper.pdf", "rows.parquet#p1", "page.html"):
        query = words[doc_id]
        result = runner.invoke(
            app, ["search", str(out), query, "--first-stage", "bm25", "-k", "1", "--json"]
        )
        assert result.exit_code == 0, result.output
        assert [hit["doc_id"] for hit in json.loads(result.stdout)] == [doc_id]


@pytest.mark.kernels
def test_cli_add_takes_the_same_sources(tiny_bert_dir, tmp_path):
    corpus = tmp_path / "c.jsonl"
    lines = [json.dumps({"_id": f"d{i}", "text": text}) + "\n" for i, text in enumerate(TEXTS)]
    corpus.write_text("".join(lines))
    out = tmp_path / "idx"
    runner = CliRunner()
    model = ["--model", str(tiny_bert_dir), "--precision", "fp32"]
    assert runner.invoke(app, ["-q", "index", str(corpus), str(out), *model]).exit_code == 0
    new = tmp_path / "new.csv"
    new.write_text("key,body\nn1,Penguins huddle together.\n")
    args = ["add", str(out), str(new), "--id-field", "key", "--text-field", "body"]
    result = runner.invoke(app, [*args, "--precision", "fp32"])
    assert result.exit_code == 0, result.output
    assert "added 1 and replaced 0 documents" in result.stdout


@pytest.mark.kernels
def test_cli_add_reads_a_record_file_with_the_fields_the_index_was_built_with(
    tiny_bert_dir, tmp_path
):
    (tmp_path / "c.csv").write_text("key,body\nk1,Penguins huddle.\nk2,Gulls steal chips.\n")
    (tmp_path / "new.csv").write_text("key,body,id\nk2,Gulls steal fries.,7\nk3,Terns dive.,8\n")
    runner, out = CliRunner(), str(tmp_path / "idx")
    fields = ["--id-field", "key", "--text-field", "body"]
    built = ["-q", "index", str(tmp_path / "c.csv"), out, "--model", str(tiny_bert_dir), *fields]
    assert runner.invoke(app, [*built, "--precision", "fp32"]).exit_code == 0
    refused = runner.invoke(app, ["add", out, str(tmp_path / "new.csv"), "--precision", "fp32"])
    assert refused.exit_code == 2 and "'k2'" in refused.output, refused.output
    args = ["add", out, str(tmp_path / "new.csv"), "--upsert", "--precision", "fp32"]
    result = runner.invoke(app, args)
    assert "added 1 and replaced 1 documents" in result.stdout, result.output
    hits = runner.invoke(app, ["search", out, "fries", "--first-stage", "bm25", "--json"])
    assert [hit["doc_id"] for hit in json.loads(hits.stdout)] == ["k2"]
