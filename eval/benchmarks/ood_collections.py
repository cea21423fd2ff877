"""Test collections built from text this machine has or Debian packages provide, in BEIR layout.

    python eval/benchmarks/ood_collections.py debian runs/collections/debian
    python eval/benchmarks/ood_collections.py pydoc runs/collections/pydoc
    python eval/benchmarks/ood_collections.py pylib runs/collections/pylib
    python eval/benchmarks/ood_collections.py faq runs/collections/faq
    python eval/benchmarks/ood_collections.py man runs/collections/man

dotcat's models train on SciFact; these collections check that what is chosen there carries
to text the models never saw. In each, a query's one relevant document is known from the
structure of the source, never from a ranking:

- ``debian``: Debian package descriptions (``Translation-en`` of the configured apt
  sources; ``apt-get update -o Acquire::Languages=en`` fetches it). Query: the one-line
  synopsis; document: the long description. Packages whose descriptions share their first
  paragraph (``foo``, ``foo-data``, ``foo-doc``...) are one group, of which one package is
  kept, so a query has exactly one right answer.
- ``pydoc``: docstrings of the Python standard library, read with :mod:`ast` (nothing is
  imported). Query: the docstring's summary line; document: the rest of the docstring.
- ``pylib``: long documents. Documents: the pages of the Python library reference
  (``apt-get install python3.11-doc``: ``/usr/share/doc/python3.11/html/library/*.html``), one
  per module, thousands of tokens each. Query: the first sentence of a function's, class's or
  method's docstring in the standard library's *sources* (Debian's ``/usr/lib/python3.11``,
  written apart from the reference's prose); relevant: the page that documents that object.
  Kept only where the object's entry starts beyond what the default encoder reads of the page
  (its first 256 tokens), the query is not in the page verbatim and does not name the object.
  Dev and test queries come from different pages.
- ``man``: manual pages (sections 1, 5, 7, 8 of ``/usr/share/man``, from the Debian packages
  installed). Query: the one-line description of a page's NAME section (``lexgrog -w``);
  document: its DESCRIPTION section, rendered by groff. Descriptions shared by several pages
  are dropped and pages sharing their DESCRIPTION's first paragraph are one group, of which
  one page is kept, so a query has exactly one right answer.
- ``faq``: questions and answers. The Python FAQ (``python3.11-doc``) and the Debian FAQ
  (``apt-get install debian-faq``): query: a question (a section heading ending in ``?``);
  document: its answer (the section's text); every answer is a document.

Each run writes ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv``, ``qrels/dev.tsv`` and
``SOURCE.md`` (what it was built from, versions and checksums, how queries were chosen, and
the collection's statistics measured with the default encoder's tokenizer), deterministically
for the same source text and seed. Test queries are for testing only: never train or tune on
them; dev queries are for choices (fusion, feedback, passage settings).
"""

from __future__ import annotations

import bisect
import functools
import json
import random
import re
import statistics
import sys
import sysconfig
import unicodedata
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import common
import ood_sources as src

MIN_QUERY_WORDS = 4
MIN_DOC_WORDS = 30
PYTHON_DOCS = Path("/usr/share/doc/python3.11/html")
DEBIAN_STDLIB = Path("/usr/lib/python3.11")
DEBIAN_FAQ = Path("/usr/share/doc/debian/FAQ")
#: pylib: at most this many queries from one page, so that a few big pages do not weigh most.
QUERIES_PER_PAGE = 10
#: faq: an answer this short ("See the next question.") cannot be found by its content.
MIN_ANSWER_WORDS = 20


def _words(text: str) -> int:
    return len(text.split())


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


@dataclass
class Collection:
    """What a builder makes: the corpus (``_id``, ``title``, ``text``), the queries (``_id``,
    ``text``, ``doc``: the relevant document, ``split``: test or dev, and where known
    ``answer_at``: the character offset of the answer in the document's encoded text), and
    Markdown lines saying what it was built from and how the queries were chosen."""

    corpus: list[dict]
    queries: list[dict]
    source: list[str]
    method: list[str] = field(default_factory=list)


@dataclass
class Options:
    documents: int
    queries: int
    dev_queries: int
    seed: int


# --- the default encoder's view of a text ----------------------------------------------------


class Tokens:
    """The default encoder's WordPiece tokenizer (all-MiniLM-L6-v2, packaged) and its window:
    how long a document is and how far into it an answer starts, as the encoder sees them."""

    def __init__(self) -> None:
        from transformers import AutoTokenizer

        from dotcat.models.bi_encoder import read_st_settings
        from dotcat.models.resolve import resolve_model

        settings = read_st_settings(resolve_model("default"))
        self.tokenizer = AutoTokenizer.from_pretrained(settings.transformer_dir)
        self.tokenizer.model_max_length = 10**9  # only counting: no length warning
        self.window = settings.max_length
        #: Text tokens one window holds: the window less [CLS] and [SEP].
        self.seen = self.window - 2

    def starts(self, text: str) -> list[int]:
        """The character offset where each token of ``text`` starts."""
        enc = self.tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
        return [start for start, _ in enc["offset_mapping"]]

    def count(self, text: str) -> int:
        return len(self.tokenizer(text, add_special_tokens=False)["input_ids"])


def encoded_text(doc: dict) -> str:
    """A document as dotcat encodes and BM25-indexes it (title, a space, text)."""
    from dotcat.index.build import document_text

    return document_text(doc["title"], doc["text"])


# --- Debian ---------------------------------------------------------------------------------


def build_debian(opts: Options) -> Collection:
    files = src.translation_files()
    groups: dict[str, tuple[str, str, str]] = {}
    for name, synopsis, body in src.debian_packages(files):
        if _words(synopsis) < MIN_QUERY_WORDS or _words(body) < MIN_DOC_WORDS:
            continue
        key = _norm(body.split("\n\n")[0])
        # Keep one package per shared first paragraph: the shortest name is the main one.
        if key not in groups or len(name) < len(groups[key][0]):
            groups[key] = (name, synopsis, body)
    by_synopsis: dict[str, list[tuple[str, str, str]]] = {}
    for item in groups.values():
        by_synopsis.setdefault(_norm(item[1]), []).append(item)
    # A synopsis shared by several kept packages has no single right answer: drop them all.
    items = sorted(v[0] for v in by_synopsis.values() if len(v) == 1)
    docs = [
        {"_id": name, "title": "", "text": body, "query": synopsis}
        for name, synopsis, body in items
    ]
    source = [f"- `{p.name}` sha256 {src.sha256(p)}" for p in files]
    method = [
        "Query: a package's synopsis; document: its long description. One package per shared "
        f"first paragraph, synopses shared by kept packages dropped; >= {MIN_QUERY_WORDS} "
        f"query words, >= {MIN_DOC_WORDS} document words; documents and queries sampled."
    ]
    return Collection(*_sample(docs, opts), source, method)


# --- Python standard library docstrings ---------------------------------------------------


def build_pydoc(opts: Options) -> Collection:
    root = Path(sysconfig.get_paths()["stdlib"])
    files = src.stdlib_files(root)
    docs: dict[str, dict] = {}
    seen_body: set[str] = set()
    seen_summary: dict[str, int] = {}
    for path in files:
        for name, doc in src.docstrings(path, root):
            parts = src.split_docstring(doc)
            if parts is None:
                continue
            summary, body = parts
            if _words(summary) < MIN_QUERY_WORDS or _words(body) < MIN_DOC_WORDS:
                continue
            key = _norm(body)
            if key in seen_body:  # the same text copied to several places (e.g. _pyio / io)
                continue
            seen_body.add(key)
            seen_summary[_norm(summary)] = seen_summary.get(_norm(summary), 0) + 1
            docs[name] = {"_id": name, "title": "", "text": body, "query": summary}
    unique = [d for d in docs.values() if seen_summary[_norm(d["query"])] == 1]
    unique.sort(key=lambda d: d["_id"])
    source = [
        f"Python {sys.version.split()[0]} standard library at `{root}`, {len(files)} files; "
        f"sha256 of their sha256sum list {src.tree_sha256(files, root)}"
    ]
    method = [
        "Query: a docstring's summary line; document: the rest of the docstring. Copies of a "
        "body and summaries shared by several docstrings dropped; documents and queries sampled."
    ]
    return Collection(*_sample(unique, opts), source, method)


def _sample(docs: list[dict], opts: Options) -> tuple[list[dict], list[dict]]:
    """A corpus of ``opts.documents`` documents, ``opts.queries`` test queries drawn from it,
    then ``opts.dev_queries`` dev queries from the documents left (the test draw comes first,
    so adding dev queries left the test queries as they were)."""
    rng = random.Random(opts.seed)
    size = opts.documents
    corpus = rng.sample(docs, min(size, len(docs))) if len(docs) > size else list(docs)
    corpus.sort(key=lambda d: d["_id"])
    queried = rng.sample(corpus, min(opts.queries, len(corpus)))
    queried.sort(key=lambda d: d["_id"])
    taken = {d["_id"] for d in queried}
    rest = [d for d in corpus if d["_id"] not in taken]
    dev = sorted(rng.sample(rest, min(opts.dev_queries, len(rest))), key=lambda d: d["_id"])
    queries = [_query(f"q{i}", d["query"], d["_id"], "test") for i, d in enumerate(queried)]
    queries += [_query(f"dev{i}", d["query"], d["_id"], "dev") for i, d in enumerate(dev)]
    return corpus, queries


def _query(qid: str, text: str, doc: str, split: str, **extra) -> dict:
    return {"_id": qid, "text": text, "doc": doc, "split": split, **extra}


# --- pylib: the Python library reference, long pages ------------------------------------------

_ROLE = re.compile(r":[\w:.-]+:`~?!?([^`]*)`")


def plain(text: str) -> str:
    """reStructuredText inline markup out of a docstring sentence: ``:func:`x``` and
    ````x```` become ``x``."""
    return _ROLE.sub(r"\1", text).replace("``", "").replace("`", "")


def reference_queries(
    pages: dict[str, src.Page], index: src.StdlibIndex, tokens: Tokens
) -> tuple[list[dict], Counter]:
    """One candidate query per documented object whose docstring the sources hold: the
    docstring's first sentence, with the page that documents the object as its document.

    Dropped, and counted under the reason: no docstring in Python source, fewer than
    :data:`MIN_QUERY_WORDS` words, the object's own name in the query, the query in the
    page verbatim (after lower-casing and dropping punctuation), and an entry that starts
    within the encoder's window. The same query text on two pages is ambiguous: dropped too.
    """
    dropped: Counter = Counter()
    found: dict[str, list[dict]] = {}
    for stem, page in pages.items():
        doc = {"title": page.title, "text": page.text}
        text = encoded_text(doc)
        starts, page_norm = tokens.starts(text), _norm(text)
        shift = len(text) - len(page.text)  # the title and its space come first
        for name, offset in page.entries.items():
            docstring = index.docstring(name)
            query = plain(src.first_sentence(docstring)) if docstring else ""
            late = _token_index(starts, offset + shift) >= tokens.seen
            reason = _pylib_drop(name, query, page_norm, late)
            if reason:
                dropped[reason] += 1
                continue
            item = {"text": query, "doc": stem, "object": name, "answer_at": offset + shift}
            found.setdefault(_norm(query), []).append(item)
    candidates = []
    for items in found.values():
        if len({item["doc"] for item in items}) > 1:
            dropped["same text on several pages"] += len(items)
        else:  # the same docstring on several objects of one page: one query
            dropped["same text twice on a page"] += len(items) - 1
            candidates.append(min(items, key=lambda item: item["object"]))
    return sorted(candidates, key=lambda item: item["object"]), dropped


def _pylib_drop(name: str, query: str, page_norm: str, late: bool) -> str | None:
    """Why a candidate query is dropped, or None to keep it."""
    if not query:
        return "no docstring in Python source"
    if _words(query) < MIN_QUERY_WORDS:
        return f"fewer than {MIN_QUERY_WORDS} words"
    if re.search(rf"\b{re.escape(name.rpartition('.')[2].lower())}\b", query.lower()):
        return "names the object"
    if _norm(query) in page_norm:
        return "in the page verbatim"
    return None if late else "entry within the first window"


def _token_index(starts: list[int], offset: int) -> int:
    """How many tokens start before character ``offset``."""
    return bisect.bisect_left(starts, offset)


def split_by_group(
    items: list[dict], group: Callable[[dict], str], opts: Options
) -> tuple[list[dict], list[dict]]:
    """Dev and test items from disjoint groups (pages): groups in a seeded random order go to
    dev until it holds ``opts.dev_queries`` items, the rest to test, of which at most
    ``opts.queries`` are kept (a seeded sample)."""
    rng = random.Random(opts.seed)
    groups = sorted({group(item) for item in items})
    rng.shuffle(groups)
    dev_groups: set[str] = set()
    count = Counter(group(item) for item in items)
    for name in groups:
        if sum(count[g] for g in dev_groups) >= opts.dev_queries:
            break
        dev_groups.add(name)
    dev = [item for item in items if group(item) in dev_groups]
    test = [item for item in items if group(item) not in dev_groups]
    if len(test) > opts.queries:
        drawn = {id(item) for item in rng.sample(test, opts.queries)}
        test = [item for item in test if id(item) in drawn]
    return dev, test


def cap_per_group(
    items: list[dict], group: Callable[[dict], str], cap: int, seed: int
) -> list[dict]:
    """At most ``cap`` items per group, a seeded sample of each, in the items' order."""
    rng = random.Random(seed)
    by_group: dict[str, list[dict]] = {}
    for item in items:
        by_group.setdefault(group(item), []).append(item)
    kept: set[int] = set()
    for name in sorted(by_group):
        members = by_group[name]
        kept.update(id(item) for item in rng.sample(members, min(cap, len(members))))
    return [item for item in items if id(item) in kept]


def build_pylib(
    opts: Options, library: Path = PYTHON_DOCS / "library", stdlib_root: Path = DEBIAN_STDLIB
) -> Collection:
    """The long-document collection from the reference's pages in ``library`` and the
    standard library's sources under ``stdlib_root``."""
    paths = sorted(library.glob("*.html"))
    if not paths:
        raise SystemExit(f"no pages in {library}; run: apt-get install python3.11-doc")
    pages = {path.stem: src.sphinx_page(path) for path in paths}
    corpus = [{"_id": stem, "title": p.title, "text": p.text} for stem, p in pages.items()]
    index = src.StdlibIndex.read(stdlib_root)
    candidates, dropped = reference_queries(pages, index, Tokens())
    capped = cap_per_group(candidates, lambda q: q["doc"], QUERIES_PER_PAGE, opts.seed)
    dropped[f"over {QUERIES_PER_PAGE} on a page"] = len(candidates) - len(capped)
    dev, test = split_by_group(capped, lambda q: q["doc"], opts)
    dropped["not drawn for test"] = len(capped) - len(dev) - len(test)
    queries = [
        _query(f"q{i}", q["text"], q["doc"], "test", **_extra(q)) for i, q in enumerate(test)
    ]
    queries += [
        _query(f"dev{i}", q["text"], q["doc"], "dev", **_extra(q)) for i, q in enumerate(dev)
    ]
    stdlib = src.stdlib_files(stdlib_root)
    source = [
        f"- Documents: `{library}/*.html`, {len(paths)} pages, Debian package python3.11-doc "
        f"{src.dpkg_version('python3.11-doc')}; sha256 of the files' sha256sum list "
        f"{src.tree_sha256(paths, library)}",
        f"- Queries: `{stdlib_root}`, {len(stdlib)} `.py` files, Debian package "
        f"libpython3.11-stdlib {src.dpkg_version('libpython3.11-stdlib')}; sha256 of the "
        f"files' sha256sum list {src.tree_sha256(stdlib, stdlib_root)}",
        f"- HTML read with lxml {_version('lxml')}; tokens counted with the default encoder's "
        f"tokenizer (transformers {_version('transformers')})",
    ]
    entries = sum(len(p.entries) for p in pages.values())
    method = [
        "Document: a page's text (the `role=main` element, one line per block, permalink signs "
        "dropped), its title the page's heading. Query: the first sentence of the docstring of "
        "an object the page documents (a `dt` with class `sig-object`; found in the sources "
        "through `from ... import` as `json.JSONDecoder` leads to `json/decoder.py`), reST "
        "markup removed.",
        "",
        f"Of {entries} documented objects, dropped:",
        "",
        *[f"- {reason}: {n}" for reason, n in dropped.most_common()],
    ]
    return Collection(corpus, queries, source, method)


def _extra(query: dict) -> dict:
    return {"answer_at": query["answer_at"], "object": query["object"]}


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


# --- faq: questions and their answers ---------------------------------------------------------


def faq_pages() -> list[tuple[str, Path]]:
    """(prefix of document ids, page) for the Python FAQ and the Debian FAQ."""
    python = sorted(p for p in (PYTHON_DOCS / "faq").glob("*.html") if p.stem != "index")
    debian = sorted(DEBIAN_FAQ.glob("*.en.html"))
    if not python:
        raise SystemExit(f"no pages in {PYTHON_DOCS / 'faq'}; run: apt-get install python3.11-doc")
    if not debian:
        raise SystemExit(f"no pages in {DEBIAN_FAQ}; run: apt-get install debian-faq")
    return [("python", p) for p in python] + [("debian", p) for p in debian]


def build_faq(opts: Options) -> Collection:
    corpus, items, dropped = [], [], Counter()
    pages = faq_pages()
    for prefix, path in pages:
        for anchor, question, answer in src.faq_entries(path):
            doc_id = f"{prefix}/{path.name.split('.')[0]}#{anchor}"
            corpus.append({"_id": doc_id, "title": "", "text": answer})
            reason = None
            if _words(answer) < MIN_ANSWER_WORDS:
                reason = f"answer under {MIN_ANSWER_WORDS} words"
            elif _norm(question) in _norm(answer):
                reason = "in the answer verbatim"
            if reason:
                dropped[reason] += 1
            else:
                items.append({"text": question, "doc": doc_id})
    # Asked twice ("What is Python?"), a question has two right answers. Punctuation counts
    # here: "in C?" and "in C++?" are two questions.
    shared = Counter(" ".join(item["text"].lower().split()) for item in items)
    dropped["same question twice"] = sum(n for n in shared.values() if n > 1)
    items = [item for item in items if shared[" ".join(item["text"].lower().split())] == 1]
    rng = random.Random(opts.seed)
    order = rng.sample(items, len(items))
    dev_ids = {id(item) for item in order[: opts.dev_queries]}
    test_ids = {id(item) for item in order[opts.dev_queries :][: opts.queries]}
    dev = [item for item in items if id(item) in dev_ids]
    test = [item for item in items if id(item) in test_ids]
    queries = [_query(f"q{i}", q["text"], q["doc"], "test") for i, q in enumerate(test)]
    queries += [_query(f"dev{i}", q["text"], q["doc"], "dev") for i, q in enumerate(dev)]
    paths = [path for _, path in pages]
    source = [
        f"- Python FAQ: `{PYTHON_DOCS / 'faq'}/*.html` (not index.html), Debian package "
        f"python3.11-doc {src.dpkg_version('python3.11-doc')}",
        f"- Debian FAQ: `{DEBIAN_FAQ}/*.en.html`, Debian package debian-faq "
        f"{src.dpkg_version('debian-faq')}",
        f"- {len(paths)} pages; sha256 of their sha256sum list (paths from `/`) "
        f"{src.tree_sha256(paths, Path('/'))}; HTML read with lxml {_version('lxml')}",
    ]
    method = [
        "Query: a section heading that ends with `?` (its numbering dropped); document: the "
        "section's text without its heading and without the question sections nested in it. "
        "Every answer is a document; dev and test queries a seeded random split.",
        "",
        f"Of {len(corpus)} questions, dropped:",
        "",
        *[f"- {reason}: {n}" for reason, n in dropped.most_common()],
    ]
    return Collection(corpus, queries, source, method)


# --- man: manual pages ------------------------------------------------------------------------

#: Manual sections read: user commands, file formats, overviews and conventions, administration.
MAN_SECTIONS = ("1", "5", "7", "8")


def _man_in(language: str, heading: tuple[str, ...]) -> Callable[[Options], Collection]:
    """:func:`build_man` of the pages in ``language`` (``/usr/share/man/LANG``)."""
    return functools.partial(build_man, root=src.MAN_ROOT / language, heading=heading,
                             words=_cjk_words)  # fmt: skip


def _cjk_words(text: str) -> int:
    """Words of text that may not space its words apart: two CJK characters count as one."""
    return _words(text) + sum(unicodedata.east_asian_width(c) == "W" for c in text) // 2


def build_man(opts: Options, root: Path = src.MAN_ROOT, heading: str | tuple = "DESCRIPTION",
              words: Callable[[str], int] = _words) -> Collection:  # fmt: skip
    """Manual pages: query, the one-line description of a page's NAME section; document, its
    DESCRIPTION section as groff renders it (``root``, ``heading`` and ``words``: the pages
    of another language, its heading, how its words are counted)."""
    from concurrent.futures import ThreadPoolExecutor

    pages = src.man_pages(MAN_SECTIONS, root)
    if not pages:
        raise SystemExit(f"no manual pages under {root}/man{{{','.join(MAN_SECTIONS)}}}")
    whatis = src.whatis_lines(pages)
    shared = Counter(_norm(line) for line in whatis.values())
    dropped: Counter = Counter({"no NAME line lexgrog reads": len(pages) - len(whatis)})
    candidates = []
    for path, line in sorted(whatis.items()):
        if shared[_norm(line)] > 1:
            dropped["description shared by several pages"] += 1
        elif words(line) < MIN_QUERY_WORDS:
            dropped[f"description under {MIN_QUERY_WORDS} words"] += 1
        else:
            candidates.append((path, line))
    # Render a seeded sample, twice what the corpus needs (groff takes ~60 ms a page).
    rng = random.Random(opts.seed)
    drawn = sorted(rng.sample(candidates, min(len(candidates), 2 * opts.documents)))
    dropped["not drawn to render"] = len(candidates) - len(drawn)
    with ThreadPoolExecutor(2) as pool:
        texts = list(pool.map(lambda item: src.render_man(item[0]), drawn))
    groups: dict[str, dict] = {}
    for (path, line), text in zip(drawn, texts, strict=True):
        body = src.man_section(text, heading)
        if words(body) < MIN_DOC_WORDS:
            dropped[f"DESCRIPTION under {MIN_DOC_WORDS} words"] += 1
            continue
        name = path.name.removesuffix(".gz")
        doc = {"_id": name, "title": "", "text": body, "query": line}
        key = _norm(body.split("\n\n")[0])
        # One page per shared first paragraph (tools documented together): the shortest name.
        if key in groups:
            dropped["first paragraph shared with another page"] += 1
            if len(name) >= len(groups[key]["_id"]):
                continue
        groups[key] = doc
    docs = sorted(groups.values(), key=lambda d: d["_id"])
    source = [
        f"- `{root}/man{{{','.join(MAN_SECTIONS)}}}/*.gz`: {len(pages)} pages (symbolic links "
        f"and `.so` aliases left out), from the packages installed on the machine; "
        f"sha256 of their sha256sum list {src.tree_sha256(pages, root)}",
        f"- NAME lines read with man-db {src.dpkg_version('man-db')} (`lexgrog -w`); pages "
        f"rendered with groff {src.dpkg_version('groff-base')} (`groff -man -t -Tutf8`, 200 "
        "columns, no hyphenation)",
    ]
    method = [
        "Query: the description of a page's NAME line (`ls - list directory contents` gives "
        "`list directory contents`); document: the page's DESCRIPTION section, paragraphs as "
        "lines. Descriptions shared by several pages dropped; one page per shared first "
        f"paragraph of DESCRIPTION (the shortest name kept); >= {MIN_QUERY_WORDS} query words, "
        f">= {MIN_DOC_WORDS} document words; documents and queries sampled.",
        "",
        f"Of {len(pages)} pages, dropped before sampling:",
        "",
        *[f"- {reason}: {n}" for reason, n in dropped.most_common()],
    ]
    return Collection(*_sample(docs, opts), source, method)


# --- writing and statistics -------------------------------------------------------------------


def statistics_lines(collection: Collection, tokens: Tokens) -> list[str]:
    """The collection's figures: documents and their length in the default encoder's tokens,
    queries per split, the share whose text is in their document verbatim and, where the
    answer's place is known, the share that starts beyond the encoder's window."""
    docs = {d["_id"]: d for d in collection.corpus}
    lengths = [tokens.count(encoded_text(d)) for d in collection.corpus]
    over = sum(n > tokens.seen for n in lengths)
    lines = [
        "| | |",
        "| --- | --- |",
        f"| documents | {len(lengths)} |",
        f"| document tokens: median / mean / max | {statistics.median(lengths):.0f} / "
        f"{statistics.mean(lengths):.0f} / {max(lengths)} |",
        f"| documents longer than the window ({tokens.window} tokens) | {over} "
        f"({over / len(lengths):.1%}) |",
    ]
    for split in ("test", "dev"):
        queries = [q for q in collection.queries if q["split"] == split]
        if not queries:
            continue
        words = statistics.median(_words(q["text"]) for q in queries)
        verbatim = sum(_norm(q["text"]) in _norm(encoded_text(docs[q["doc"]])) for q in queries)
        lines += [
            f"| {split} queries (median words) | {len(queries)} ({words:.0f}) |",
            f"| {split}: query in its document verbatim | {_share(verbatim, len(queries))} |",
        ]
        placed = [q for q in queries if "answer_at" in q]
        if placed:
            late = sum(
                _token_index(tokens.starts(encoded_text(docs[q["doc"]])), q["answer_at"])
                >= tokens.seen
                for q in placed
            )
            lines.append(
                f"| {split}: answer starts beyond the first {tokens.window} tokens | "
                f"{_share(late, len(placed))} |"
            )
    return lines


def _share(n: int, total: int) -> str:
    return f"{n} of {total} ({n / total:.1%})"


def write_collection(out: Path, collection: Collection, name: str) -> None:
    """The BEIR files and ``SOURCE.md``."""
    out.mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    _jsonl(
        out / "corpus.jsonl",
        ({k: d[k] for k in ("_id", "title", "text")} for d in collection.corpus),
    )
    _jsonl(
        out / "queries.jsonl", ({"_id": q["_id"], "text": q["text"]} for q in collection.queries)
    )
    files = [out / "corpus.jsonl", out / "queries.jsonl"]
    for split in ("test", "dev"):
        path = out / "qrels" / f"{split}.tsv"
        rows = [f"{q['_id']}\t{q['doc']}\t1\n" for q in collection.queries if q["split"] == split]
        if rows:
            path.write_text("query-id\tcorpus-id\tscore\n" + "".join(rows), encoding="utf-8")
            files.append(path)
        elif path.exists():
            path.unlink()
    counts = Counter(q["split"] for q in collection.queries)
    checksums = [f"- `{p.relative_to(out)}` sha256 {src.sha256(p)}" for p in files]
    lines = [
        f"# {name}: {len(collection.corpus)} documents, {counts['test']} test and "
        f"{counts['dev']} dev queries (one relevant document each)",
        "",
        f"Built by `{common.command()}` from:",
        "",
        *collection.source,
        "",
        *collection.method,
        "",
        "Statistics (tokens: the default encoder's tokenizer, on the title and text as dotcat "
        "encodes them):",
        "",
        *statistics_lines(collection, Tokens()),
        "",
        "Files:",
        "",
        *checksums,
    ]
    (out / "SOURCE.md").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _jsonl(path: Path, records: Iterable[dict]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for record in records:
            f.write(json.dumps(record) + "\n")


@dataclass(frozen=True)
class Builder:
    build: Callable[[Options], Collection]
    documents: int | None  # None: the whole source is the corpus
    queries: int
    dev_queries: int


BUILDERS = {
    "debian": Builder(build_debian, 8000, 300, 100),
    "pydoc": Builder(build_pydoc, 8000, 300, 100),
    "pylib": Builder(build_pylib, None, 500, 150),
    "faq": Builder(build_faq, None, 300, 80),
    "man": Builder(build_man, 4000, 300, 100),
    # Japanese and Chinese (manpages-ja, manpages-zh): text without spaces between words.
    "man-ja": Builder(_man_in("ja", ("説明", "解説", "DESCRIPTION")), 4000, 300, 100),
    "man-zh": Builder(_man_in("zh_CN", ("描述", "DESCRIPTION")), 4000, 300, 100),
    # Russian (manpages-ru): Cyrillic, 208 pages.
    "man-ru": Builder(_man_in("ru", ("ОПИСАНИЕ", "DESCRIPTION")), 4000, 100, 40),
}


def main(argv: list[str] | None = None) -> None:
    parser = common.parser(__doc__)
    parser.add_argument("name", choices=sorted(BUILDERS))
    parser.add_argument("out", type=Path)
    parser.add_argument(
        "--documents", type=int, help="corpus size, sampled (debian, pydoc: 8000; man: 4000)"
    )
    parser.add_argument(
        "--queries", type=int, help="test queries (at most, for pylib and faq); default: per name"
    )
    parser.add_argument("--dev-queries", type=int, help="dev queries; default: per name")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    builder = BUILDERS[args.name]
    opts = Options(
        documents=args.documents or builder.documents or 0,
        queries=args.queries if args.queries is not None else builder.queries,
        dev_queries=args.dev_queries if args.dev_queries is not None else builder.dev_queries,
        seed=args.seed,
    )
    write_collection(args.out, builder.build(opts), args.name)
    print((args.out / "SOURCE.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
