"""Corpus sources: folders of files of every kind, record fields, Python objects, bad files."""

from __future__ import annotations

import gzip
import json
import logging
import os

import pytest
from tests.data.documents import (
    HTML_PAGE,
    encrypted_pdf,
    minimal_pdf,
    write_bad_files,
    write_every_kind,
)

from dotcat.data import CorpusOptions, CorpusStats, Document, iter_corpus, load_corpus
from dotcat.data.sources import open_source, path_id
from dotcat.errors import DataFormatError, DotcatError


def docs_of(source, **options) -> dict[str, Document]:
    return {d.id: d for d in iter_corpus(source, options=CorpusOptions(**options))}


# ---------------------------------------------------------------- folders


def test_a_folder_of_every_kind_gives_one_document_per_file_and_record(tmp_path):
    words = write_every_kind(tmp_path)
    docs = list(iter_corpus(tmp_path))
    assert sorted(d.id for d in docs) == sorted(words)
    for doc in docs:
        assert words[doc.id] in doc.text.lower(), doc
    by_id = {d.id: d for d in docs}
    # Titles: the first heading, the HTML <title>, the PDF metadata, the record's field.
    assert by_id["notes/fjords.md"].title == "Fjords of Norway"
    assert by_id["guide.rst"].title == "Sauna"
    assert by_id["page.html"].title == "Rainfall in Bergen"
    assert by_id["paper.pdf"].title == "Plates"
    assert by_id["zipped/lichen.md.gz"].title == "Lichen"
    assert by_id["table.csv#c1"] == Document("table.csv#c1", "Deserts, hot", "Camels cross dunes.")
    assert by_id["records.jsonl#r1"].title == "Tides"
    # No heading: the file name without its suffixes.
    assert by_id["notes/plain.txt"].title == "plain"
    # The whole text, without Markdown's markup (nothing cut).
    assert by_id["notes/fjords.md"].text == (
        "Intro line\n\nFjords of Norway\n\nGlaciers carved each fjord."
    )


def test_a_page_that_marks_its_main_element_is_read_whole_from_it(tmp_path):
    """Documentation pages (Sphinx, MkDocs...) mark ``role="main"``: every entry of it is kept,
    also the link lists a main-text heuristic drops, and nothing outside it."""
    items = "".join(
        f'<li><a href="mod{i}.html"><code>mod{i}</code> \u2014 Tools for topic{i} handling</a>'
        f'<a class="headerlink" href="#t{i}">\u00b6</a></li>'
        for i in range(15)
    )
    page = (
        "<html><head><title>Data Handling \u2014 Docs</title></head><body>"
        '<div class="related"><a href="/">Index</a> | <a href="/m">Modules</a></div>'
        '<div class="body" role="main"><section><h1>Data Handling</h1>'
        f"<p>The modules of this chapter handle data.</p><ul>{items}</ul></section></div>"
        '<div class="footer">Copyright 2024 the authors.</div></body></html>'
    )
    (tmp_path / "chapter.html").write_bytes(page.encode())  # no charset declared: UTF-8
    doc = docs_of(tmp_path)["chapter.html"]
    assert doc.title == "Data Handling \u2014 Docs"
    for i in range(15):
        assert f"mod{i} \u2014 Tools for topic{i} handling" in doc.text
    assert "\u00b6" not in doc.text and "Copyright" not in doc.text and "Modules" not in doc.text
    assert doc.text.splitlines()[:2] == [
        "Data Handling",
        "The modules of this chapter handle data.",
    ]


def test_html_main_text_leaves_the_boilerplate_out(tmp_path):
    (tmp_path / "page.html").write_text(HTML_PAGE)
    doc = docs_of(tmp_path)["page.html"]
    assert "Atlantic air" in doc.text and "two hundred" in doc.text
    for boilerplate in ("About us", "newsletter", "Cookie policy", "analyticsbeacon", "color"):
        assert boilerplate not in doc.text


def test_the_walk_is_sorted_and_ids_are_posix_relative_paths(tmp_path):
    for rel in ("b.md", "a/z.md", "a-b/y.md", "a/b/x.md", "my notes/50% #1.txt"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(f"text of {rel}")
    ids = [d.id for d in iter_corpus(tmp_path)]
    # Depth first, by path components: a/ before a-b/, whatever the characters' codes.
    assert ids == ["a/b/x.md", "a/z.md", "a-b/y.md", "b.md", "my%20notes/50%25%20%231.txt"]
    assert path_id("my notes/a\tb.md") == "my%20notes/a%09b.md"


def test_hidden_files_and_folders_are_skipped_unless_asked_for(tmp_path):
    (tmp_path / ".git").mkdir()
    (tmp_path / ".git" / "notes.txt").write_text("git internals")
    (tmp_path / ".draft.md").write_text("hidden draft")
    (tmp_path / "shown.md").write_text("shown")
    assert list(docs_of(tmp_path)) == ["shown.md"]
    assert sorted(docs_of(tmp_path, hidden=True)) == [".draft.md", ".git/notes.txt", "shown.md"]


def test_include_and_exclude_globs(tmp_path):
    for rel in ("a.md", "b.txt", "notes/c.md", "notes/2024/d.md", "node_modules/e.md"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    assert sorted(docs_of(tmp_path, include=["*.md"], exclude=["node_modules"])) == [
        "a.md",
        "notes/2024/d.md",
        "notes/c.md",
    ]
    assert sorted(docs_of(tmp_path, include=["notes/*.md"])) == ["notes/2024/d.md", "notes/c.md"]
    assert sorted(docs_of(tmp_path, include=["**/*.md"], exclude=["notes/2024/*"])) == [
        "a.md",
        "node_modules/e.md",
        "notes/c.md",
    ]
    with pytest.raises(DataFormatError, match=r"no file to read matches include=\['\*.pdf'\]"):
        docs_of(tmp_path, include=["*.pdf"])
    # `**/` inside a pattern matches no folder too (as gitignore, globstar and ripgrep do); a
    # leading `/` anchors at the top folder.
    assert sorted(docs_of(tmp_path, include=["notes/**/*.md"])) == ["notes/2024/d.md", "notes/c.md"]
    kept = docs_of(tmp_path, include=["*.md"], exclude=["notes/**/*.md", "/e.md"])
    assert sorted(kept) == ["a.md", "node_modules/e.md"]


def test_unreadable_files_are_skipped_and_named_in_one_warning(tmp_path, caplog):
    write_every_kind(tmp_path)
    bad = write_bad_files(tmp_path)
    (tmp_path / "locked.pdf").write_bytes(encrypted_pdf(["secret words"], password="pw"))
    (tmp_path / "latin1.txt").write_bytes("caf\xe9".encode("latin-1"))
    stats = CorpusStats()
    with caplog.at_level(logging.WARNING, logger="dotcat"):
        docs = list(iter_corpus(tmp_path, stats=stats))
    assert len(docs) == 12 and stats.unreadable == 4 and stats.files == 16
    latin = next(d for d in docs if d.id == "latin1.txt")  # not UTF-8: read in its encoding
    assert latin.text == "café" and latin.fields["encoding"] == "cp1252"
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 2, warnings  # the files skipped; the encoding guessed
    assert warnings[0].startswith(f"{tmp_path}: skipped 4 of 16 files that cannot be read: ")
    assert "latin1.txt (cp1252, unsure)" in warnings[1]
    for rel, reason in zip(
        [*bad, "locked.pdf"], ["binary", "corrupt PDF", "empty", "encrypted PDF"], strict=True
    ):
        assert f"{rel} ({reason}" in warnings[0]
    assert "Traceback" not in caplog.text


def test_strict_stops_at_the_first_unreadable_file(tmp_path):
    (tmp_path / "a.md").write_text("fine")
    write_bad_files(tmp_path)
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(tmp_path, options=CorpusOptions(strict=True)))
    assert str(e.value) == f"{tmp_path / 'blob.txt'}: cannot read: binary (strict)"


def test_a_folder_with_nothing_to_read_says_what_it_holds(tmp_path):
    (tmp_path / "a.docx").write_bytes(b"PK\x03\x04")
    (tmp_path / "b.docx").write_bytes(b"PK\x03\x04")
    with pytest.raises(
        DataFormatError, match=r"no file to index here: .*\.md .*; it holds 2 \.docx"
    ):
        open_source(tmp_path)


def test_a_file_without_a_suffix_is_text_unless_it_is_binary(tmp_path, caplog):
    """``README``, ``TODO``, ``README.gz`` (Debian's docs) are read as grep reads them; an
    executable without a suffix is a kind not read, as a ``.docx`` is."""
    (tmp_path / "README").write_text("Install with make install.")
    (tmp_path / "NEWS.gz").write_bytes(gzip.compress(b"Version 2 reads gzipped notes."))
    (tmp_path / "tool").write_bytes(b"\x7fELF\x02\x01\x01\x00" + bytes(64))
    (tmp_path / "empty").write_bytes(b"")
    with caplog.at_level(logging.WARNING):
        docs = {d.id: d for d in iter_corpus(tmp_path)}
    assert {i: (d.title, d.text) for i, d in docs.items()} == {
        "NEWS.gz": ("NEWS", "Version 2 reads gzipped notes."),
        "README": ("README", "Install with make install."),
    }
    assert "does not index (2 (no suffix)): empty, tool;" in caplog.text
    (tmp_path / "corpus").write_text('{"_id": "a", "text": "records"}\n')  # given alone:
    assert [d.id for d in iter_corpus(tmp_path / "corpus")] == ["a"]  # a corpus file, as before


def test_a_single_document_file_is_a_one_document_corpus(tmp_path):
    path = tmp_path / "report.pdf"
    path.write_bytes(minimal_pdf(["Quarterly figures"], "Report"))
    assert list(iter_corpus(path)) == [Document("report.pdf", "Report", "Quarterly figures")]


def test_folder_options_are_refused_for_a_corpus_file_or_python_documents(tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text('{"_id": "a", "text": "x"}\n')
    with pytest.raises(DotcatError, match="include selects files in a folder; .* a corpus file"):
        open_source(path, CorpusOptions(include=("*.md",)))
    with pytest.raises(DotcatError, match="hidden selects files .* documents given in Python"):
        open_source(["text"], CorpusOptions(hidden=True))


def test_the_cache_of_a_folder_follows_every_file(tmp_path, monkeypatch):
    import dotcat.data.corpus as corpus_module

    reads = []
    real = corpus_module.iter_corpus
    monkeypatch.setattr(
        corpus_module, "iter_corpus", lambda *a, **k: reads.append(1) or real(*a, **k)
    )
    folder, cache = tmp_path / "docs", tmp_path / "cache"
    (folder / "sub").mkdir(parents=True)
    (folder / "a.md").write_text("alpha")
    (folder / "sub" / "b.txt").write_text("beta")
    assert load_corpus(folder, cache_dir=cache)["text"] == ["alpha", "beta"]
    assert load_corpus(folder, cache_dir=cache)["text"] == ["alpha", "beta"]
    assert len(reads) == 1, "the second load comes from the cache"
    # An edit of the same size deep in the folder, seen through its modification time alone.
    nested = folder / "sub" / "b.txt"
    nested.write_text("BETA")
    st = nested.stat()
    os.utime(nested, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert load_corpus(folder, cache_dir=cache)["text"] == ["alpha", "BETA"]
    (folder / "c.md").write_text("gamma")  # a new file
    assert load_corpus(folder, cache_dir=cache)["id"] == ["a.md", "c.md", "sub/b.txt"]
    # Other options, another read; the stale entries of the same folder are gone.
    assert load_corpus(folder, cache_dir=cache, options=CorpusOptions(exclude=("c.md",)))["id"] == [
        "a.md",
        "sub/b.txt",
    ]
    assert len(reads) == 4
    assert len([p for p in cache.iterdir() if p.name != ".locks"]) == 1


def test_the_folder_fingerprint_is_its_files_content(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for root in (a, b):
        root.mkdir()
        (root / "x.md").write_text("same words")
    first, second = CorpusStats(), CorpusStats()
    list(iter_corpus(a, stats=first))
    os.utime(b / "x.md", ns=(1, 1))  # another mtime, same bytes
    list(iter_corpus(b, stats=second))
    assert len(first.sha256) == 64 and first.sha256 == second.sha256
    (b / "x.md").write_text("other words")
    list(iter_corpus(b, stats=second))
    assert second.sha256 != first.sha256


# ---------------------------------------------------------------- record fields


def _jsonl(*records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


@pytest.mark.parametrize("gz", ["", ".gz"])
def test_field_names_for_every_record_format(tmp_path, gz):
    import pyarrow as pa
    import pyarrow.parquet as pq

    rows = [
        {"key": "k1", "head": "H1", "body": "first body"},
        {"key": "k2", "head": None, "body": ""},
    ]
    files = {
        f"c.jsonl{gz}": _jsonl(*rows),
        f"c.json{gz}": json.dumps(rows),
        f"c.csv{gz}": "key,head,body\nk1,H1,first body\nk2,,\n",
        f"c.tsv{gz}": "key\thead\tbody\nk1\tH1\tfirst body\nk2\t\t\n",
    }
    for name, content in files.items():
        data = content.encode()
        (tmp_path / name).write_bytes(gzip.compress(data) if gz else data)
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "c.parquet")
    options = {"id_field": "key", "title_field": "head", "text_field": "body"}
    for name in [*files, "c.parquet"]:
        docs = list(iter_corpus(tmp_path / name, options=CorpusOptions(**options)))
        # The second record has a title field set to null/empty and no text: skipped.
        assert docs == [Document("k1", "H1", "first body")], name


def test_a_missing_field_lists_the_fields_the_record_has(tmp_path, assert_error):
    path = tmp_path / "c.jsonl"
    path.write_text(_jsonl({"_id": "a", "body": "x", "url": "u"}))
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(
        e,
        path,
        1,
        "missing field (expected 'text' or 'contents'); the record has fields _id, body, url: "
        "name the field with text_field",
        field="text",
    )
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path, options=CorpusOptions(text_field="body", id_field="docid")))
    assert_error(e, path, 1, "missing id (expected 'docid')", "_id, body, url", field="docid")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path, options=CorpusOptions(text_field="body", title_field="name")))
    assert_error(e, path, 1, "name the field with title_field", field="name")
    assert list(iter_corpus(path, options=CorpusOptions(text_field="body"))) == [
        Document("a", "", "x")
    ]


def test_csv_with_a_header_row_is_read_as_records(tmp_path, assert_error):
    path = tmp_path / "my.csv"
    path.write_text('id,text,extra\nd1,"a, quoted\nmulti-line text",1\n\nd2,plain,2\n')
    assert list(iter_corpus(path)) == [
        Document("d1", "", "a, quoted\nmulti-line text"),
        Document("d2", "", "plain"),
    ]
    path.write_text("id,text\nd1,one\nd2,two,three\n")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(path))
    assert_error(e, path, 3, "3 columns, the header has 2")


def test_a_tsv_with_a_header_of_its_own_is_read_as_records(tmp_path):
    path = tmp_path / "c.tsv"
    path.write_text("_id\turl\ttext\nd1\thttp://x\thello\n")
    assert list(iter_corpus(path)) == [Document("d1", "", "hello")]
    # The headerless two- and three-column layouts are read as before.
    path.write_text("d1\thello\nd2\tworld\n")
    assert [d.id for d in iter_corpus(path)] == ["d1", "d2"]


def test_record_files_in_a_folder_take_the_field_names(tmp_path):
    (tmp_path / "a.jsonl").write_text(_jsonl({"_id": "1", "body": "one"}))
    (tmp_path / "b.csv").write_text("_id,body\n2,two\n")
    (tmp_path / "c.md").write_text("# C\n\nthree")
    docs = docs_of(tmp_path, text_field="body")
    assert {i: d.text for i, d in docs.items()} == {
        "a.jsonl#1": "one",
        "b.csv#2": "two",
        "c.md": "C\n\nthree",  # Markdown's markup left out
    }


def test_a_bad_record_in_a_folder_stops_the_read_naming_file_and_line(tmp_path, assert_error):
    (tmp_path / "a.md").write_text("fine")
    bad = tmp_path / "b.jsonl"
    bad.write_text(_jsonl({"_id": "1", "text": "x"}) + "{oops\n")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(tmp_path))
    assert_error(e, bad, 2, "malformed JSON")


# ---------------------------------------------------------------- Python objects


def test_a_list_of_strings_gets_position_ids():
    assert list(iter_corpus(["first text", "second text"])) == [
        Document("0", "", "first text"),
        Document("1", "", "second text"),
    ]


def test_a_list_of_dicts_with_field_names(assert_error):
    rows = [{"key": "a", "body": "alpha"}, {"key": "b", "body": "beta"}]
    docs = list(iter_corpus(rows, options=CorpusOptions(id_field="key", text_field="body")))
    assert docs == [Document("a", "", "alpha"), Document("b", "", "beta")]
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(rows))
    assert_error(e, "<list>", 1, "missing id", "the record has fields key, body", field="_id")
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus(["text", {"id": "x", "text": "y"}]))
    assert_error(e, "<list>", 2, "item is dict, expected strings")


def test_a_dataframe_and_a_dataset():
    import datasets
    import pandas as pd

    frame = pd.DataFrame({"docid": [7, 8], "title": ["T", None], "text": ["seven", "eight"]})
    expected = [Document("7", "T", "seven"), Document("8", "", "eight")]
    options = CorpusOptions(id_field="docid")
    assert list(iter_corpus(frame, options=options)) == expected
    dataset = datasets.Dataset.from_pandas(frame)
    assert list(iter_corpus(dataset, options=options)) == expected
    loaded = load_corpus(frame, options=options)
    assert loaded["id"] == ["7", "8"] and loaded.column_names == ["id", "title", "text", "fields"]


def test_duplicate_ids_across_python_items(assert_error):
    with pytest.raises(DataFormatError) as e:
        list(iter_corpus([{"id": "a", "text": "x"}, {"id": "a", "text": "y"}]))
    assert_error(e, "<list>", 2, "duplicate id 'a' (first at line 1)", field="id")


def test_something_else_is_refused_in_one_line():
    with pytest.raises(DotcatError, match="cannot read documents from a int: expected a path"):
        list(iter_corpus(42))


def test_a_pdf_encrypted_without_a_user_password_opens_as_in_a_viewer(tmp_path):
    (tmp_path / "owner-only.pdf").write_bytes(encrypted_pdf(["Open to read"], password=""))
    assert [d.text for d in iter_corpus(tmp_path)] == ["Open to read"]


def test_headings_that_are_titles_and_lines_that_are_not():
    from dotcat.data.markup import markdown_text, rst_text

    assert markdown_text("```\n# a shell comment\n```\n\nSetext title\n===\n")[0] == "Setext title"
    assert markdown_text("no heading at all\n")[0] == ""
    assert rst_text("Title\n=====\n\nbody\n")[0] == "Title"
    assert rst_text("Too long a title\n===\n")[0] == ""  # the underline must cover the title


def test_a_json_file_that_holds_no_records_is_skipped_like_an_unreadable_one(tmp_path, caplog):
    (tmp_path / "a.md").write_text("notes")
    (tmp_path / "settings.json").write_text('{\n  "theme": "dark"\n}\n')
    with caplog.at_level(logging.WARNING, logger="dotcat"):
        assert [d.id for d in iter_corpus(tmp_path)] == ["a.md"]
    assert "settings.json (not records: malformed JSON" in caplog.text
