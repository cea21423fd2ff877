"""Out-of-domain test collections built from text this machine already has, in BEIR layout.

    python eval/benchmarks/ood_collections.py debian runs/collections/debian
    python eval/benchmarks/ood_collections.py pydoc runs/collections/pydoc

dotcat's models train on SciFact; these collections check that what is chosen there carries
to text the models never saw (the out-of-domain rows of the benchmarks). Both are
known-item collections: a short summary written by a person is the query, and the longer text
it summarises (with the summary removed) is the one relevant document.

- ``debian``: Debian package descriptions (``Translation-en`` of the configured apt
  sources; ``apt-get update -o Acquire::Languages=en`` fetches it). Query: the one-line
  synopsis; document: the long description. Packages whose descriptions share their first
  paragraph (``foo``, ``foo-data``, ``foo-doc``...) are one group, of which one package is
  kept, so a query has exactly one right answer.
- ``pydoc``: docstrings of the Python standard library, read with :mod:`ast` (nothing is
  imported). Query: the docstring's summary line; document: the rest of the docstring.

Each run writes ``corpus.jsonl``, ``queries.jsonl``, ``qrels/test.tsv`` and ``SOURCE.md``
(what it was built from and checksums), deterministically for the same source text and seed.
The collections are for testing only: no split of them is ever used to train or tune.
"""

from __future__ import annotations

import ast
import hashlib
import json
import random
import re
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from pathlib import Path

import common

APT_LISTS = Path("/var/lib/apt/lists")
MIN_QUERY_WORDS = 4
MIN_DOC_WORDS = 30


def _words(text: str) -> int:
    return len(text.split())


def _norm(text: str) -> str:
    return re.sub(r"\W+", " ", text.lower()).strip()


# --- Debian ---------------------------------------------------------------------------------


def translation_files() -> list[Path]:
    """The English description files apt has fetched, main archive first."""
    files = sorted(
        APT_LISTS.glob("*_i18n_Translation-en*"), key=lambda p: ("security" in p.name, p.name)
    )
    if not files:
        raise SystemExit(
            f"no Translation-en file in {APT_LISTS}; run: apt-get update -o Acquire::Languages=en"
        )
    return files


def _read_compressed(path: Path) -> str:
    if path.suffix == ".lz4":
        return subprocess.run(
            ["lz4", "-dc", str(path)], check=True, capture_output=True
        ).stdout.decode()
    if path.suffix in (".gz", ".xz"):
        opener = {"gz": "gzip", "xz": "lzma"}[path.suffix[1:]]
        return __import__(opener).open(path, "rt", encoding="utf-8").read()
    return path.read_text(encoding="utf-8")


def debian_packages(files: list[Path]) -> Iterator[tuple[str, str, str]]:
    """(package, synopsis, long description) for every stanza; later files do not override."""
    seen: set[str] = set()
    for path in files:
        for stanza in _read_compressed(path).split("\n\n"):
            name, synopsis, body = None, None, []
            for line in stanza.splitlines():
                if line.startswith("Package: "):
                    name = line[len("Package: ") :].strip()
                elif line.startswith("Description-en: "):
                    synopsis = line[len("Description-en: ") :].strip()
                elif line.startswith(" ") and synopsis is not None:
                    # Debian's format: " ." is an empty line; leading space is syntax.
                    body.append("" if line.strip() == "." else line.strip())
            if name and synopsis and name not in seen:
                seen.add(name)
                yield name, synopsis, "\n".join(body).strip()


def build_debian(size: int, n_queries: int, seed: int) -> tuple[list[dict], list[dict], str]:
    files = translation_files()
    groups: dict[str, tuple[str, str, str]] = {}
    for name, synopsis, body in debian_packages(files):
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
    source = "\n".join(f"- `{p.name}` sha256 {_sha256(p)}" for p in files)
    return (*_sample(docs, size, n_queries, seed), source)


# --- Python standard library docstrings ---------------------------------------------------

_SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "__pycache__",
}


def stdlib_files() -> list[Path]:
    root = Path(sysconfig.get_paths()["stdlib"])
    return sorted(
        p for p in root.rglob("*.py") if not _SKIP_DIRS.intersection(p.relative_to(root).parts)
    )


def docstrings(path: Path, root: Path) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of the module, its classes and functions, methods included."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return
    module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
    stack: list[tuple[ast.AST, str]] = [(tree, module)]
    while stack:
        node, name = stack.pop()
        doc = ast.get_docstring(node, clean=True)
        if doc:
            yield name, doc
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                stack.append((child, f"{name}.{child.name}"))


def split_docstring(doc: str) -> tuple[str, str] | None:
    """The summary (first paragraph, one or two lines) and the rest, or None."""
    paragraphs = doc.split("\n\n", 1)
    if len(paragraphs) < 2:
        return None
    summary = " ".join(paragraphs[0].split())
    rest = paragraphs[1].strip()
    if paragraphs[0].count("\n") > 1 or summary.endswith(":") or ">>>" in summary:
        return None
    return summary, rest


def build_pydoc(size: int, n_queries: int, seed: int) -> tuple[list[dict], list[dict], str]:
    root = Path(sysconfig.get_paths()["stdlib"])
    docs: dict[str, dict] = {}
    seen_body: set[str] = set()
    seen_summary: dict[str, int] = {}
    for path in stdlib_files():
        for name, doc in docstrings(path, root):
            parts = split_docstring(doc)
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
    source = (
        f"Python {sys.version.split()[0]} standard library at `{root}`, {len(stdlib_files())} files"
    )
    return (*_sample(unique, size, n_queries, seed), source)


# --- common ---------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sample(
    docs: list[dict], size: int, n_queries: int, seed: int
) -> tuple[list[dict], list[dict]]:
    rng = random.Random(seed)
    corpus = rng.sample(docs, min(size, len(docs))) if len(docs) > size else list(docs)
    corpus.sort(key=lambda d: d["_id"])
    queried = rng.sample(corpus, min(n_queries, len(corpus)))
    queried.sort(key=lambda d: d["_id"])
    queries = [{"_id": f"q{i}", "text": d["query"], "doc": d["_id"]} for i, d in enumerate(queried)]
    return corpus, queries


def write_collection(
    out: Path, corpus: list[dict], queries: list[dict], source: str, name: str
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "qrels").mkdir(exist_ok=True)
    with open(out / "corpus.jsonl", "w", encoding="utf-8") as f:
        for d in corpus:
            f.write(json.dumps({"_id": d["_id"], "title": d["title"], "text": d["text"]}) + "\n")
    with open(out / "queries.jsonl", "w", encoding="utf-8") as f:
        for q in queries:
            f.write(json.dumps({"_id": q["_id"], "text": q["text"]}) + "\n")
    with open(out / "qrels" / "test.tsv", "w", encoding="utf-8") as f:
        f.write("query-id\tcorpus-id\tscore\n")
        for q in queries:
            f.write(f"{q['_id']}\t{q['doc']}\t1\n")
    checksums = "\n".join(
        f"- `{p.relative_to(out)}` sha256 {_sha256(p)}"
        for p in (out / "corpus.jsonl", out / "queries.jsonl", out / "qrels" / "test.tsv")
    )
    (out / "SOURCE.md").write_text(
        f"# {name}: {len(corpus)} documents, {len(queries)} test queries (one relevant each)\n\n"
        f"Built by `{common.command()}` from:\n\n{source}\n\n"
        f"Files:\n\n{checksums}\n",
        encoding="utf-8",
    )


BUILDERS = {"debian": build_debian, "pydoc": build_pydoc}


def main(argv: list[str] | None = None) -> None:
    parser = common.parser(__doc__)
    parser.add_argument("name", choices=sorted(BUILDERS))
    parser.add_argument("out", type=Path)
    parser.add_argument("--documents", type=int, default=8000, help="corpus size (sampled)")
    parser.add_argument("--queries", type=int, default=300)
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    corpus, queries, source = BUILDERS[args.name](args.documents, args.queries, args.seed)
    write_collection(args.out, corpus, queries, source, args.name)
    print((args.out / "SOURCE.md").read_text(encoding="utf-8"))


if __name__ == "__main__":
    main()
