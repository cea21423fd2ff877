"""Readers of the text a Debian machine provides, for the collections ``ood_collections.py``
builds: Debian package descriptions, the Python standard library's docstrings (read with
:mod:`ast`, nothing imported), and HTML documentation pages as text with the character offset
of chosen elements (where a function's entry starts on its reference page, where a question's
answer is). No collection logic here: what becomes a query or a document is decided there.

HTML is read with lxml, not with the main-text extractor of dotcat's folder sources
(``dotcat.data.extract``: trafilatura). That extractor is built for web pages: on reference
pages it drops link lists and some whole entries (``tarfile.TarInfo``'s methods), and where an
entry lies in its text cannot be known (``eval/studies/html_extraction/``). :func:`html_text`
keeps every word of the page's main element, one line per block, and records the offset of
each element that has an id: the structure the relevance judgements come from.
"""

from __future__ import annotations

import ast
import hashlib
import re
import subprocess
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

APT_LISTS = Path("/var/lib/apt/lists")


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_sha256(paths: list[Path], root: Path) -> str:
    """One digest for many files: the sha256 of ``sha256sum``'s lines for them in the order of
    their paths relative to ``root`` (``cd ROOT && sha256sum FILES | LC_ALL=C sort -k2 |
    sha256sum`` gives the same)."""
    ordered = sorted(paths, key=lambda p: str(p.relative_to(root)).encode())
    lines = [f"{sha256(p)}  {p.relative_to(root)}\n" for p in ordered]
    return hashlib.sha256("".join(lines).encode()).hexdigest()


def dpkg_version(package: str) -> str:
    """The installed version of a Debian package, or ``not installed``."""
    done = subprocess.run(
        ["dpkg-query", "-W", "-f", "${Version}", package], capture_output=True, text=True
    )
    return done.stdout.strip() if done.returncode == 0 and done.stdout.strip() else "not installed"


# --- Debian package descriptions ------------------------------------------------------------


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


# --- manual pages ----------------------------------------------------------------------------

MAN_ROOT = Path("/usr/share/man")
_WHATIS = re.compile(r'^(?P<path>.+?): "(?P<line>.*)"$')


def man_pages(sections: tuple[str, ...], root: Path = MAN_ROOT) -> list[Path]:
    """The English manual pages of ``sections`` (``root/manN/*.gz``), less symbolic links and
    ``.so`` redirections (aliases of another page)."""
    pages = []
    for section in sections:
        for path in sorted((root / f"man{section}").glob("*.gz")):
            if path.is_symlink() or _first_line(path).startswith(".so "):
                continue
            pages.append(path)
    return pages


def _first_line(path: Path) -> str:
    import gzip

    try:
        with gzip.open(path, "rt", encoding="utf-8", errors="replace") as f:
            return f.readline()
    except (OSError, EOFError):
        return ""


def whatis_lines(pages: list[Path], chunk: int = 500) -> dict[Path, str]:
    """Each page's one-line description from its NAME section (``ls - list directory
    contents`` gives ``list directory contents``), read by man-db's ``lexgrog -w``, which
    knows both the man and the mdoc macros; pages it cannot read are left out."""
    found: dict[Path, str] = {}
    for start in range(0, len(pages), chunk):
        files = [str(p) for p in pages[start : start + chunk]]
        done = subprocess.run(["lexgrog", "-w", *files], capture_output=True, text=True)
        for line in done.stdout.splitlines():
            m = _WHATIS.match(line)
            if m and " - " in m["line"]:
                found[Path(m["path"])] = m["line"].split(" - ", 1)[1].strip()
    return found


def render_man(path: Path) -> str:
    """A page as text: groff's ``man`` macros (tables through ``tbl``) at 200 columns, no
    hyphenation, no overstriking or colour."""
    import gzip

    with gzip.open(path, "rb") as f:
        source = f.read()
    done = subprocess.run(
        ["groff", "-man", "-t", "-Tutf8", "-Kutf8", "-P-cbou", "-rLL=200n", "-rHY=0"],
        input=source,
        capture_output=True,
    )
    return done.stdout.decode("utf-8", errors="replace")


def man_section(text: str, name: str | tuple[str, ...]) -> str:
    """The body of the rendered page's section ``name`` (its heading at the left margin, its
    body indented; the next line at the margin, a heading or the footer, ends it), paragraphs
    joined into lines, blank lines between them."""
    body: list[str] = []
    inside = False
    for line in text.splitlines():
        if line and not line[0].isspace():
            if inside:
                break
            heading = line.strip()  # (a tuple of names: a heading holding any of them)
            inside = heading == name or isinstance(name, tuple) and any(n in heading for n in name)
            continue
        if inside:
            body.append(line.strip())
    paragraphs = "\n".join(body).split("\n\n")
    return "\n\n".join(" ".join(p.split()) for p in paragraphs if p.strip())


# --- Python standard library sources ---------------------------------------------------------

_SKIP_DIRS = {
    "test",
    "tests",
    "idlelib",
    "lib2to3",
    "site-packages",
    "dist-packages",
    "__pycache__",
}


def stdlib_files(root: Path) -> list[Path]:
    """The standard library's ``.py`` files under ``root``, tests and bundled tools left out."""
    return sorted(
        p for p in root.rglob("*.py") if not _SKIP_DIRS.intersection(p.relative_to(root).parts)
    )


def module_name(path: Path, root: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"))
    except (SyntaxError, UnicodeDecodeError):
        return None


def docstrings(path: Path, root: Path) -> Iterator[tuple[str, str]]:
    """(qualified name, docstring) of the module, its classes and functions, methods included."""
    tree = _parse(path)
    if tree is None:
        return
    stack: list[tuple[ast.AST, str]] = [(tree, module_name(path, root))]
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


_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(`'\"])")


def first_sentence(doc: str) -> str:
    """The docstring's first sentence: its first paragraph on one line, up to the first
    ``.``, ``!`` or ``?`` followed by a space and a capital (so ``e.g. x`` does not end it)."""
    paragraph = " ".join(doc.split("\n\n", 1)[0].split())
    return _SENTENCE_END.split(paragraph, 1)[0]


@dataclass
class StdlibIndex:
    """Where each documented name of the standard library is defined, and its docstring.

    ``definitions[module][qualname]`` is the docstring of a class, function or method defined
    in ``module``'s source; ``imports[module][name]`` is what a top-level ``from M import x as
    name`` (``(M, x)``), ``from M import *`` (``(M, "*")``, under the key ``*M``) or ``import M
    as name`` (``(M, "")``) binds, at any depth of ``if``/``try`` blocks, the first binding
    winning (``os`` binds ``path`` to ``posixpath`` first). :meth:`docstring` follows these
    to the definition, as ``json.JSONDecoder`` leads to ``json.decoder.JSONDecoder``.
    """

    definitions: dict[str, dict[str, str]] = field(default_factory=dict)
    imports: dict[str, dict[str, tuple[str, str]]] = field(default_factory=dict)

    @classmethod
    def read(cls, root: Path) -> StdlibIndex:
        index = cls()
        for path in stdlib_files(root):
            tree = _parse(path)
            if tree is None:
                continue
            module = module_name(path, root)
            package = module if path.name == "__init__.py" else module.rpartition(".")[0]
            index.definitions[module] = _definitions(tree)
            index.imports[module] = _imports(tree, package)
        return index

    def docstring(self, name: str, hops: int = 4) -> str | None:
        """The docstring of ``name`` (e.g. ``os.path.join``), or None where its definition
        is not in Python source (a C module) or cannot be followed in ``hops`` imports."""
        parts = name.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            module = ".".join(parts[:cut])
            if module in self.definitions:
                return self._lookup(module, parts[cut:], hops)
        return None

    def _lookup(self, module: str, rest: list[str], hops: int) -> str | None:
        doc = self.definitions.get(module, {}).get(".".join(rest))
        if doc is not None or hops == 0:
            return doc
        bound = self.imports.get(module, {})
        if rest[0] in bound:
            source, attr = bound[rest[0]]
            return self._lookup(source, [attr, *rest[1:]] if attr else rest[1:], hops - 1)
        for key, (source, _) in bound.items():
            if key.startswith("*") and (found := self._lookup(source, rest, hops - 1)):
                return found
        return None


def _definitions(tree: ast.Module) -> dict[str, str]:
    found: dict[str, str] = {}
    stack: list[tuple[ast.AST, str]] = [(tree, "")]
    while stack:
        node, prefix = stack.pop()
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{prefix}{child.name}"
                doc = ast.get_docstring(child, clean=True)
                if doc and name not in found:
                    found[name] = doc
                if isinstance(child, ast.ClassDef):
                    stack.append((child, f"{name}."))
            elif isinstance(child, (ast.If, ast.Try)) and not prefix:
                stack.append((child, prefix))
    return found


def _imports(tree: ast.Module, package: str) -> dict[str, tuple[str, str]]:
    bound: dict[str, tuple[str, str]] = {}
    nodes = list(tree.body)
    while nodes:
        node = nodes.pop(0)
        if isinstance(node, (ast.If, ast.Try)):
            blocks = [node.body, getattr(node, "orelse", [])]
            blocks += [h.body for h in getattr(node, "handlers", [])]
            nodes = [n for block in blocks for n in block] + nodes
        elif isinstance(node, ast.ImportFrom):
            base = _absolute(node.module or "", node.level, package)
            for alias in node.names:
                if alias.name == "*":
                    bound.setdefault(f"*{base}", (base, "*"))
                else:  # ``from pkg import mod`` binds a module: an empty attribute follows it
                    target = (base, alias.name)
                    bound.setdefault(alias.asname or alias.name, target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    bound.setdefault(alias.asname, (alias.name, ""))
    return bound


def _absolute(module: str, level: int, package: str) -> str:
    if level == 0:
        return module
    base = package.split(".")[: len(package.split(".")) - (level - 1)] if package else []
    return ".".join([*base, module] if module else base)


# --- HTML pages --------------------------------------------------------------------------

#: Elements that start a new line of text.
_BLOCK_TAGS = (
    "address article aside blockquote caption dd div dl dt figcaption figure footer h1 h2 h3 "
    "h4 h5 h6 header hr li main nav ol p pre section table tbody thead tfoot tr ul"
)
BLOCKS = frozenset(_BLOCK_TAGS.split())
#: Elements whose text is not the page's prose.
SKIPPED = frozenset({"script", "style", "noscript", "template", "head"})


class _Text:
    """A string built piece by piece with HTML's whitespace rules: runs of white space are
    one space, blocks start on a new line, ``pre`` keeps its text as it is."""

    def __init__(self) -> None:
        self.parts: list[str] = []
        self.length = 0

    def _last(self) -> str:
        return self.parts[-1][-1] if self.parts else "\n"

    def add(self, text: str | None, pre: bool = False) -> None:
        if not text:
            return
        if not pre:
            text = re.sub(r"\s+", " ", text)
            if self._last() in " \n":
                text = text.lstrip(" ")
        if text:
            self.parts.append(text)
            self.length += len(text)

    def newline(self) -> None:
        if self._last() == " ":
            self.parts[-1] = self.parts[-1][:-1]
            self.length -= 1
            if not self.parts[-1]:
                self.parts.pop()
        if self._last() != "\n":
            self.parts.append("\n")
            self.length += 1


def html_text(root, skip: Callable[[object], bool] = lambda el: False) -> tuple[str, dict]:
    """The text of an lxml element and the offset in it where each element with an ``id``
    attribute starts, leaving out ``skip(element)``'s subtrees (and script, style...).

    Returns:
        ``(text, offsets)``: one line per block element, with no leading or trailing white
        space; ``offsets[id]`` indexes ``text``.
    """
    out = _Text()
    offsets: dict[str, int] = {}

    def visit(el, pre: bool) -> None:
        tag = el.tag if isinstance(el.tag, str) else ""
        if tag and tag not in SKIPPED and not skip(el):
            block = tag in BLOCKS
            if block or tag == "br":
                out.newline()
            if el.get("id") is not None:
                offsets.setdefault(el.get("id"), out.length)
            inner = pre or tag == "pre"
            out.add(el.text, inner)
            for child in el:
                visit(child, inner)
            if block:
                out.newline()
        out.add(el.tail, pre)

    visit(root, False)
    full = "".join(out.parts)
    leading = len(full) - len(full.lstrip())  # only a ``pre`` can start with white space
    return full.strip(), {k: max(0, v - leading) for k, v in offsets.items()}


def read_html(path: Path):
    """A page's element tree; its bytes are UTF-8 (as both Python's and Debian's documentation
    declare), whether or not the page says so."""
    import lxml.html

    return lxml.html.fromstring(path.read_bytes(), parser=lxml.html.HTMLParser(encoding="utf-8"))


def has_class(el, name: str) -> bool:
    return name in (el.get("class") or "").split()


@dataclass(frozen=True)
class Page:
    """A reference page's title, its text, and where each documented object's entry starts
    in the text (``entries[id]``, e.g. ``entries["json.dumps"]``)."""

    title: str
    text: str
    entries: dict[str, int]


def sphinx_page(path: Path) -> Page:
    """A Sphinx HTML page: the title is its first heading, the text is the main element's
    (headings' permalink signs and the title heading left out), and ``entries`` are the
    offsets of the Python objects it documents (``dt`` elements with class ``sig-object``)."""
    tree = read_html(path)
    main = tree.xpath('//div[@role="main"]')
    if not main:
        raise SystemExit(f"{path}: no <div role='main'>: not a Sphinx page")
    heading = next(iter(main[0].xpath(".//h1")), None)
    title = "" if heading is None else heading.text_content().replace("\N{PILCROW SIGN}", "")

    def skip(el) -> bool:
        return (el.tag == "a" and has_class(el, "headerlink")) or el is heading

    text, offsets = html_text(main[0], skip)
    objects = main[0].xpath('.//dt[contains(concat(" ", @class, " "), " sig-object ")][@id]')
    entries = {dt.get("id"): offsets[dt.get("id")] for dt in objects if dt.get("id") in offsets}
    return Page(" ".join(title.split()), text, entries)


_NUMBERING = re.compile(r"^\s*(?:\d+(?:\.\d+)*\.?|[A-Z]\.(?:\d+\.?)*)\s+")


def faq_entries(path: Path) -> Iterator[tuple[str, str, str]]:
    """(anchor, question, answer) for each section of an FAQ page whose heading is a
    question (ends with ``?``): Sphinx (``<section>``) and DocBook (``<div class="section">``)
    HTML. The answer is the section's text without its heading and without the sections
    nested in it that are questions themselves (each is its own entry)."""
    tree = read_html(path)
    sections = tree.xpath('//section[@id] | //div[contains(@class, "section")]')
    questions = {}
    for section in sections:
        heading = _section_heading(section)
        if heading is None:
            continue
        words = " ".join(heading.text_content().replace("\N{PILCROW SIGN}", "").split())
        words = _NUMBERING.sub("", words)
        if words.endswith("?"):
            questions[section] = (heading, words)
    for section, (heading, question) in questions.items():

        def skip(el, own=section, head=heading) -> bool:
            nested = el is not own and el in questions
            return nested or el is head or (el.tag == "a" and has_class(el, "headerlink"))

        answer, _ = html_text(section, skip)
        anchor = section.get("id") or next(iter(heading.xpath(".//a/@id")), "") or question
        yield anchor, question, answer


def _section_heading(section):
    """A section's own heading: a heading child (Sphinx) or the one in its title page
    (DocBook), not one of a nested section."""
    for child in section:
        if isinstance(child.tag, str) and re.fullmatch(r"h[1-6]", child.tag):
            return child
        if has_class(child, "titlepage"):
            found = child.xpath(".//h1|.//h2|.//h3|.//h4|.//h5|.//h6")
            return found[0] if found else None
    return None
