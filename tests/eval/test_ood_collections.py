"""The collection builders of eval/benchmarks on tiny trees made here: the long-document
collection keeps only queries whose answer lies beyond the encoder's window, never in the page
verbatim and never naming their object; FAQ answers leave out the questions nested in them."""

from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "eval" / "benchmarks"


@pytest.fixture(scope="module")
def ood():
    """``ood_collections`` and ``ood_sources``, imported as the scripts import each other
    (their ``common`` puts the checkout's src first on the paths: undone afterwards)."""
    saved_path, saved_env = list(sys.path), os.environ.get("PYTHONPATH")
    sys.path.insert(0, str(BENCHMARKS))
    import ood_collections
    import ood_sources

    yield ood_collections, ood_sources
    sys.path[:] = saved_path
    if saved_env is None:
        os.environ.pop("PYTHONPATH", None)
    else:
        os.environ["PYTHONPATH"] = saved_env


FILLER = " ".join(f"Paragraph {i} tells of widgets, gears and levers." for i in range(60))


def _entry(obj: str, body: str) -> str:
    return (
        f'<dl class="py function"><dt class="sig sig-object py" id="{obj}">{obj}()'
        f'<a class="headerlink" href="#{obj}">¶</a></dt><dd><p>{body}</p></dd></dl>'
    )


def _page(title: str, parts: list[str]) -> str:
    return (
        "<html><head><title>x</title><script>var hidden = 1;</script></head><body>"
        '<div class="sphinxsidebar">Navigation</div><div class="body" role="main"><section>'
        f'<h1>{title}<a class="headerlink" href="#">¶</a></h1>{"".join(parts)}'
        "</section></div></body></html>"
    )


@pytest.fixture()
def tiny_python(tmp_path) -> tuple[Path, Path]:
    """A standard library of two modules (one re-exports a class from a private module) and
    their reference pages: some entries within the first window, some beyond it."""
    lib = tmp_path / "stdlib"
    lib.mkdir()
    (lib / "gears.py").write_text(
        "from _gearimpl import Ratchet\n\n"
        "def early():\n    '''Merge two sorted queues into one stream of items.'''\n\n"
        "def late():\n    '''Compute the checksum of a stream of widgets.\n\n    More.'''\n\n"
        "def copied():\n    '''Reverse the order of lines in a text file.'''\n\n"
        "def spin():\n    '''Spin the wheel once more, faster.'''\n\n"
        "def tiny():\n    '''Do it.'''\n",
        encoding="utf-8",
    )
    (lib / "_gearimpl.py").write_text(
        "class Ratchet:\n    '''A wheel that turns one way and locks the other.'''\n",
        encoding="utf-8",
    )
    (lib / "levers.py").write_text(
        "def pull():\n    '''Move the arm down until it clicks into place.'''\n", encoding="utf-8"
    )
    docs = tmp_path / "library"
    docs.mkdir()
    gears = [
        _entry("gears.early", "Merges queues."),
        f"<p>{FILLER}</p>",
        _entry("gears.late", "Hashes what flows through."),
        _entry("gears.copied", "Reverse the order of lines in a text file."),
        _entry("gears.spin", "Turns the wheel."),
        _entry("gears.tiny", "Tiny."),
        _entry("gears.Ratchet", "A one-way wheel."),
        _entry("gears.in_c", "Written in C: no Python source."),
    ]
    (docs / "gears.html").write_text(_page("gears — Gears", gears), encoding="utf-8")
    levers = [f"<p>{FILLER}</p>", _entry("levers.pull", "Lowers the arm.")]
    (docs / "levers.html").write_text(_page("levers — Levers", levers), encoding="utf-8")
    return lib, docs


def test_sphinx_page_text_and_entry_offsets(ood, tiny_python):
    _, src = ood
    page = src.sphinx_page(tiny_python[1] / "gears.html")
    assert page.title == "gears — Gears"
    assert "¶" not in page.text and "Navigation" not in page.text and "hidden" not in page.text
    assert page.text.startswith("gears.early()\nMerges queues.\nParagraph 0 tells")
    for obj in ("gears.early", "gears.late", "gears.Ratchet"):
        assert page.text[page.entries[obj] :].startswith(f"{obj}()\n")


def test_stdlib_index_follows_imports(ood, tiny_python):
    _, src = ood
    index = src.StdlibIndex.read(tiny_python[0])
    assert index.docstring("gears.Ratchet").startswith("A wheel that turns one way")
    assert index.docstring("gears.late").startswith("Compute the checksum")
    assert index.docstring("gears.in_c") is None


def test_pylib_keeps_only_late_unseen_queries(ood, tiny_python, tmp_path):
    collections, _ = ood
    lib, docs = tiny_python
    opts = collections.Options(documents=0, queries=100, dev_queries=1, seed=13)
    built = collections.build_pylib(opts, library=docs, stdlib_root=lib)
    assert sorted(d["_id"] for d in built.corpus) == ["gears", "levers"]
    kept = {q["object"]: q for q in built.queries}
    # early: within the window; copied: in its page verbatim; spin: names itself; tiny: too
    # short; in_c: no Python source.
    assert sorted(kept) == ["gears.Ratchet", "gears.late", "levers.pull"]
    assert kept["gears.late"]["text"] == "Compute the checksum of a stream of widgets."
    # Dev and test come from different pages.
    splits = {q["doc"]: set() for q in built.queries}
    for q in built.queries:
        splits[q["doc"]].add(q["split"])
    assert sorted(len(s) for s in splits.values()) == [1, 1]
    assert {q["split"] for q in built.queries} == {"test", "dev"}
    text = {d["_id"]: collections.encoded_text(d) for d in built.corpus}
    for q in built.queries:
        assert text[q["doc"]][q["answer_at"] :].startswith(q["object"] + "()")

    out = tmp_path / "out"
    collections.write_collection(out, built, "pylib")
    source = (out / "SOURCE.md").read_text(encoding="utf-8")
    assert "- entry within the first window: 1" in source
    assert "- in the page verbatim: 1" in source
    assert "- names the object: 1" in source
    assert "query in its document verbatim | 0 of" in source
    late = re.findall(
        r"(test|dev): answer starts beyond the first 256 tokens \| (\d) of (\d) ", source
    )
    assert sorted(split for split, _, _ in late) == ["dev", "test"]
    assert all(n == total for _, n, total in late)
    qrels = (out / "qrels" / "test.tsv").read_text(encoding="utf-8").splitlines()
    dev = (out / "qrels" / "dev.tsv").read_text(encoding="utf-8").splitlines()
    assert qrels[0] == "query-id\tcorpus-id\tscore" and len(qrels) + len(dev) == 2 + 3
    lines = (out / "queries.jsonl").read_text(encoding="utf-8").splitlines()
    ids = [json.loads(line)["_id"] for line in lines]
    assert sorted(ids) == sorted([row.split("\t")[0] for row in qrels[1:] + dev[1:]])


def test_faq_answers_leave_out_nested_questions(ood, tmp_path):
    _, src = ood
    page = tmp_path / "faq.html"
    page.write_text(
        '<html><body><div role="main"><section id="general"><h2>General</h2>'
        '<section id="why"><h3>Why gears?<a class="headerlink">¶</a></h3><p>Because they turn.</p>'
        '<section id="how"><h4>How many gears?</h4><p>Seven, usually.</p></section>'
        "<p>And they last.</p></section></section>"
        '<div class="section"><div class="titlepage"><div><div><h2 class="title">'
        '<a id="s1.2"></a>1.2. What is a lever?</h2></div></div></div>'
        "<p>A bar on a pivot.</p></div></div></body></html>",
        encoding="utf-8",
    )
    entries = list(src.faq_entries(page))
    assert entries == [
        ("why", "Why gears?", "Because they turn.\nAnd they last."),
        ("how", "How many gears?", "Seven, usually."),
        ("s1.2", "What is a lever?", "A bar on a pivot."),
    ]
