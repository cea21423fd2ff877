"""Issue 64, "text as its author wrote it": a folder of a library's .rst and .md docs (Sphinx
roles and directives, raw HTML sidebars, code, diagrams, front matter, a Jinja template) is
indexed with no markup in any text, title, snippet (`dotcat search --json`) or in what the
judging page's API serves; and the encoding rule: a Latin-1 note read right, guessed files
named in one warning with the options that fix them."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import httpx
import pytest
from tests.serve.conftest import live_server
from typer.main import get_command
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.cli.main import spell_options
from dotcat.data import iter_corpus
from dotcat.data.encodings import decode

DOCS = Path(__file__).with_name("markup_docs")
#: What must never reach the text: reStructuredText and Sphinx markup, HTML, template tags,
#: Markdown fences, diagram sources.
MARKUP = ("..", "<div", ":ref:", 'class="', "<a ", "</", "href", ":class:", ":func:", "::",
          "{%", "{{", "{#", "```", "-->", "->>", "maxdepth", "toctree", "mermaid", "digraph",
          "sequenceDiagram", "track(", "**", "`")  # fmt: skip
TITLES = {
    "_templates/page.md": "page",  # its front matter is a template's: no title, no comment line
    "api.rst": "API reference",
    "changelog.md": "Changelog",
    "guide/install.md": "Installing quantlib",
    "index.rst": "Embedding Quantization",
}
#: Words each document keeps: prose of every kind of block, and code as code.
KEPT = {
    "_templates/page.md": ["Questions about quantization go to the forum."],
    "api.rst": ["Quantize float32 embeddings to int8", "lose most of the ranking signal"],
    "changelog.md": ["rescore=True by default", "uint8 codes", "calibration with Quantizer.fit"],
    "guide/install.md": ["pip install quantlib", "the\nkernel notes for AVX2", "manylinux"],
    "index.rst": ["See the calibration guide", "Quantizer(bits=8).fit(sample)",
                  "recovers most of the lost recall", "interactive benchmark chart",
                  "Use Quantizer.fit instead", "version 2.1"],
}  # fmt: skip


def no_markup(text: str, where: str) -> None:
    found = [token for token in MARKUP if token in text]
    assert not found, f"{where}: {found} in {text!r}"


def test_the_docs_read_as_their_text_titles_and_fields(caplog):
    with caplog.at_level(logging.WARNING, logger="dotcat"):
        docs = {d.id: d for d in iter_corpus(DOCS)}
    assert {doc_id: d.title for doc_id, d in docs.items()} == TITLES
    for doc_id, doc in docs.items():
        no_markup(doc.text, doc_id)
        no_markup(doc.title, doc_id)
        for words in KEPT[doc_id]:
            assert words in doc.text, (doc_id, words)
    assert docs["guide/install.md"].fields["tags"] == ["install", "setup"]
    assert docs["api.rst"].fields["tags"] == ["api", "reference"]
    assert "layout" not in docs["_templates/page.md"].fields
    assert caplog.records == []  # a template's front matter fails softly: no warning


@pytest.fixture(scope="module")
def docs_index(tmp_path_factory, tiny_bert_dir) -> Path:
    root = tmp_path_factory.mktemp("markup")
    shutil.copytree(DOCS, root / "docs")
    result = CliRunner().invoke(app, ["-q", "index", str(root / "docs"), str(root / "index"),
                                      "--model", str(tiny_bert_dir), "--device", "cpu",
                                      "--precision", "fp32"])  # fmt: skip
    assert result.exit_code == 0, result.output
    return root / "index"


QUERIES = ["quantization calibration", "install with pip", "sidebar quickstart", "reference",
           "toctree maxdepth", "mermaid graph", "questions forum", "binary rescoring"]  # fmt: skip


def test_no_snippet_shows_markup(docs_index):
    for query in QUERIES:
        result = CliRunner().invoke(app, ["search", str(docs_index), query, "-k", "5", "--json",
                                          "--device", "cpu"])  # fmt: skip
        assert result.exit_code == 0, result.output
        hits = json.loads(result.stdout)
        assert len(hits) == 5
        for hit in hits:
            for key in ("snippet", "title"):
                no_markup(hit[key], f"{query!r}: {hit['doc_id']} {key}")
            if hit.get("passage"):
                no_markup(hit["passage"]["text"], f"{query!r}: {hit['doc_id']} passage")


def test_the_judging_api_serves_no_markup(docs_index, tmp_path):
    from dotcat.judging import JudgmentStore, PoolConfig, build_pool, read_topics
    from dotcat.search.pipeline import PipelineConfig, SearchPipeline

    topics = tmp_path / "topics.jsonl"
    topics.write_text("".join(json.dumps({"_id": f"q{i}", "text": q}) + "\n"
                              for i, q in enumerate(QUERIES)), encoding="utf-8")  # fmt: skip
    pipeline = SearchPipeline(docs_index, PipelineConfig(device="cpu", precision="fp32"))
    with JudgmentStore(tmp_path / "judgments.sqlite", docs_index, create=True) as store:
        build_pool(pipeline, store, read_topics(topics), PoolConfig(pool_depth=5))
        with live_server(pipeline, judge=True, judgments=str(store.path)) as url:
            seen = set()
            for qid in (f"q{i}" for i in range(len(QUERIES))):
                topic = httpx.get(f"{url}/judge/api/topic", params={"qid": qid}).json()
                for entry in topic["docs"]:
                    no_markup(entry["title"], f"{qid}: {entry['doc_id']} title")
                    params = {"qid": qid, "doc_id": entry["doc_id"]}
                    doc = httpx.get(f"{url}/judge/api/document", params=params).json()
                    no_markup(doc["title"] + "\n" + doc["text"], f"{qid}: {doc['doc_id']}")
                    seen.add(doc["doc_id"])
    assert seen == set(TITLES)


NOTE = "Le modèle déjà entraîné est prêt : la démo a lieu à Noël.\n"


def test_the_latin1_note_is_read_right_and_named_as_a_guess():
    found = decode(NOTE.encode("latin-1"))  # charset-normalizer reads it as Baltic cp1257
    assert (found.text, found.encoding, found.guess) == (NOTE, "cp1252", "unsure")
    assert decode(NOTE.encode("cp1252")).text == NOTE
    assert decode("Cœur à 5 € près.\n".encode("iso8859-15")).encoding == "iso8859-15"


@pytest.mark.parametrize(
    ("text", "encoding"),
    [
        ("Съешь же ещё этих мягких французских булок, да выпей чаю.\n", "cp1251"),
        ("Съешь же ещё этих мягких французских булок, да выпей чаю.\n", "koi8-r"),
        ("Über die Brücke gehen wir morgen früh zur Bäckerei.\n", "cp1252"),
        ("El niño pidió más información sobre la opción.\n", "latin-1"),
        ("Σημειώσεις για τη συνάντηση της Τρίτης με την ομάδα.\n", "cp1253"),  # was Cyrillic
        ("Σημειώσεις για τη συνάντηση της Τρίτης με την ομάδα.\n", "iso8859-7"),
        ("הערות לפגישה של יום שלישי עם הצוות.\n", "cp1255"),  # was Cyrillic too
        ("Kısa not: öğrenci işleri çarşamba günü.\n", "iso8859-9"),
        ("Zastosować zmianę trybu do indeksu.\n", "cp1250"),  # was Windows-1252 'Zastosowaæ'
        ("Przyciąganie do krawędzi.\n", "iso8859-2"),
        ("Chyba při čtení souboru.\n", "cp1250"),
        ("Opravdu odstranit všechny uživatele?\n", "iso8859-2"),
        ("Nije moguće otvoriti datoteku.\n", "cp1250"),
        ("Il file è già presente.\n", "cp1252"),  # è and à, not Czech č and Slovak ŕ
        ("Spausdinti šiuo laiku, ačiū.\n", "cp1257"),  # was Windows-1250 'điuo'
        ("Burimi është i zënë.\n", "cp1252"),  # not Lithuanian ė
    ],
)
def test_each_legacy_text_is_read_as_written(text, encoding):
    assert decode(text.encode(encoding)).text == text


def test_a_short_chinese_text_is_not_taken_for_greek():
    # Windows-1253 reads it as "ΙθΦΓ": an accented vowel, but a capital inside a word. Which CJK
    # encoding the detector then names depends on charset-normalizer's version.
    assert decode("\n设置                 符号\n\n".encode("gb18030")).encoding != "cp1253"


def test_a_utf8_file_with_a_pasted_cp1252_line_keeps_both():
    data = "Résumé des étapes déjà faites\n".encode() + "Dernière ligne collée\n".encode("cp1252")
    found = decode(data)
    assert found.text == "Résumé des étapes déjà faites\nDernière ligne collée\n"
    assert (found.encoding, found.guess) == ("utf-8", "unsure")


def test_guessed_files_are_named_with_what_fixes_them(tmp_path, caplog):
    (tmp_path / "note.txt").write_bytes(NOTE.encode("latin-1"))
    (tmp_path / "ru.txt").write_bytes("Привет, как дела у тебя сегодня?\n".encode("cp1251"))
    (tmp_path / "plain.md").write_text("# Plain\n\nUTF-8 here: déjà.\n", encoding="utf-8")
    (tmp_path / "dotcat.toml").write_text('[files."*.md"]\nencoding = "utf-8"\n', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="dotcat"):
        docs = {d.id: d for d in iter_corpus(tmp_path)}
    assert docs["note.txt"].text == NOTE and docs["ru.txt"].fields["encoding"] == "cp1251"
    (line,) = [r.getMessage() for r in caplog.records]  # no "not read: 1 file(s) (.toml)"
    assert "2 file(s) not in UTF-8 read as a guess" in line
    assert line.index("note.txt (cp1252, unsure)") < line.index("ru.txt (cp1251)")
    assert "encoding=NAME" in line and "file_rules='GLOB:encoding=NAME'" in line
    spelled = spell_options(line, {"encoding", "file_rules"}, get_command(app).commands["index"])
    assert "name it: --encoding NAME, or for some files --fields 'GLOB:encoding=NAME'" in spelled
    assert "the field 'encoding' says" in spelled
    caplog.clear()
    (tmp_path / "dotcat.toml").write_text('[files."*.txt"]\nencoding = "latin-1"\n', "utf-8")
    (tmp_path / "ru.txt").unlink()
    with caplog.at_level(logging.WARNING, logger="dotcat"):
        docs = {d.id: d for d in iter_corpus(tmp_path)}
    assert docs["note.txt"].text == NOTE and docs["note.txt"].fields["encoding"] == "iso8859-1"
    assert caplog.records == []  # given, not guessed
