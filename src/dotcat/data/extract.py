"""Text and title out of one document file: plain text, Markdown, reStructuredText, HTML, PDF.

:func:`extract` takes a file's bytes (already un-gzipped) and its kind and returns
``(title, text)``, or raises :class:`Unreadable` with a short reason that the folder reader
counts and names in its summary line. The text is kept whole, never cut: splitting long
documents is the indexer's business, and it needs the full text to do it.

Libraries, chosen for being the maintained reference of their job:

- HTML: a page that marks its main content (HTML5's ``<main>`` or ARIA's ``role="main"``, as
  documentation generators such as Sphinx, MkDocs and most site templates do) is read whole
  from that element, block by block (lxml; scripts, styles, navigation, forms and permalink
  signs left out): a heuristic extractor drops entries of reference pages (on the Python
  library reference trafilatura lost 4.0% of the words and whole entries). Other pages go to
  trafilatura (Barbaresi, 2021, "Trafilatura: A Web Scraping Library and Command-Line Tool for Text
  Discovery and Extraction", ACL demos), the main-text extractor that the published comparisons
  rank first and that web-corpus pipelines use: it drops menus, headers, footers, cookie notices and
  scripts that would otherwise dominate an exported page. It pulls lxml, justext and date
  parsers, so it is the optional extra ``dotcat[html]``; a page on which it finds no main
  text is indexed on all of its text (``html2txt``).
- PDF: pypdf, pure Python with no dependencies (a core dependency): text per page with
  ``extract_text``, the title from the document information dictionary. pdfminer.six lays out
  text more faithfully but is several times slower and larger; search needs words, not layout.
  Encrypted files are opened with the empty password (as a viewer does); one that needs a real
  password is unreadable.
- Markdown: markdown-it-py (CommonMark; already installed with typer's rich) finds the first
  heading, so that ``#`` lines in code blocks are not mistaken for one. The text is the file as
  written: Markdown's markup is light and both encoders and BM25 read through it.
- reStructuredText: the first section title (a line under- and optionally over-lined with one
  punctuation character, as the RST specification defines), found with a regular expression:
  docutils would be a dependency for one line.

Title: that heading, the HTML ``<title>`` (trafilatura's metadata) or the PDF metadata title,
else the file name without its suffixes. Text files must be UTF-8 (a byte-order mark is
dropped, CRLF becomes LF); a NUL byte marks a binary file.
"""

from __future__ import annotations

import importlib.util
import io
import re

from dotcat.errors import DotcatError, first_line
from dotcat.progress import quiet_logger

#: The extra that brings trafilatura, named in the error when it is missing.
HTML_EXTRA = "pip install 'dotcat[html]'"
#: Document kinds that are text (read as UTF-8, may be gzipped).
TEXT_KINDS = frozenset({"text", "markdown", "rst", "html"})
_BINARY_PROBE = 8192  # bytes searched for a NUL, as git and grep decide "binary"
_RST_ADORNMENT = re.compile(r"""^([!-/:-@\[-`{-~])\1{2,}\s*$""")


class Unreadable(Exception):
    """A document file that cannot be read; ``str()`` is the reason (a few words)."""


def check_html_support() -> None:
    """Raise a one-line DotcatError naming the extra when trafilatura is not installed."""
    if importlib.util.find_spec("trafilatura") is None:
        raise DotcatError(f"reading HTML files needs trafilatura: {HTML_EXTRA}")


def extract(data: bytes, kind: str, stem: str) -> tuple[str, str]:
    """``(title, text)`` of a document file's bytes.

    Args:
        data: the file's content (decompressed when it was gzipped).
        kind: ``text``, ``markdown``, ``rst``, ``html`` or ``pdf``.
        stem: the file name without its suffixes: the title when the file names none.

    Raises:
        Unreadable: an empty or binary file, invalid UTF-8, an encrypted or corrupt PDF, or
            no text at all.
    """
    if not data.strip():
        raise Unreadable("empty")
    if kind == "pdf":
        title, text = _pdf(data)
    elif kind == "html":
        title, text = _html(data)
    else:
        text = _utf8(data)
        title = {"markdown": markdown_title, "rst": rst_title}.get(kind, lambda _: "")(text)
    if not text.strip():
        raise Unreadable("no text")
    return title.strip() or stem, text


def _utf8(data: bytes) -> str:
    if b"\0" in data[:_BINARY_PROBE]:
        raise Unreadable("binary")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Unreadable(f"not UTF-8: byte 0x{data[e.start]:02x} at offset {e.start}") from None
    return text.removeprefix("\ufeff").replace("\r\n", "\n")


def markdown_title(text: str) -> str:
    """The inline text of the first heading (ATX ``#`` or setext underline), or ``""``."""
    from markdown_it import MarkdownIt  # only Markdown files need it; keeps `dotcat` fast

    tokens = MarkdownIt("commonmark").parse(text)
    for i, token in enumerate(tokens):
        if token.type == "heading_open" and i + 1 < len(tokens):
            return tokens[i + 1].content
    return ""


def rst_title(text: str) -> str:
    """The first section title: a text line whose next line is an adornment of one repeated
    punctuation character at least as long as the title (an overline may precede it)."""
    lines = text.split("\n")
    for i in range(len(lines) - 1):
        title, under = lines[i].strip(), lines[i + 1].rstrip()
        adorned = _RST_ADORNMENT.match(under) and not _RST_ADORNMENT.match(lines[i])
        if title and adorned and len(under) >= len(title):
            return title
    return ""


def _pdf(data: bytes) -> tuple[str, str]:
    """Text of every page (joined by a blank line) and the metadata title, with pypdf."""
    import pypdf  # only PDF files need it (~0.1 s); keeps `dotcat` fast

    with quiet_logger("pypdf"):  # a damaged file: warnings line by line; the summary names it
        try:
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                raise Unreadable("encrypted PDF: needs a password")
            pages = [page.extract_text() or "" for page in reader.pages]
            title = _pdf_title(reader)
        except Unreadable:
            raise
        except pypdf.errors.DependencyError as e:
            raise Unreadable(f"encrypted PDF: {_first_line(e)}") from None
        except Exception as e:  # noqa: BLE001 - a damaged file can make a parser raise anything
            raise Unreadable(f"corrupt PDF: {_first_line(e)}") from None
    text = "\n\n".join(page.strip("\n") for page in pages)
    if not text.strip():
        raise Unreadable("no text in the PDF: scanned pages?")
    return title, text


def _pdf_title(reader) -> str:
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # noqa: BLE001 - a broken information dictionary only loses the title
        return ""
    return title if isinstance(title, str) else ""


#: Block-level elements: each starts a new line of the extracted text.
_HTML_BLOCKS = frozenset(
    "address article aside blockquote caption dd details div dl dt figcaption figure footer h1 "  # noqa: SIM905
    "h2 h3 h4 h5 h6 header hr li main ol p pre section summary table td th tr ul".split()
)
#: A page's declared character set (``<meta charset>`` or ``http-equiv`` Content-Type); pages
#: that declare none are read as UTF-8.
_HTML_CHARSET = re.compile(rb"""<meta[^>]*charset=["']?([A-Za-z0-9_-]+)""", re.IGNORECASE)
#: Elements whose content is not the page's text.
_HTML_SKIPPED = frozenset(
    ["script", "style", "noscript", "template", "nav", "form", "button", "select", "svg"]
)


def _html(data: bytes) -> tuple[str, str]:
    """Title and text: the marked main element read whole (:func:`_html_main`), else
    trafilatura's main text; all the page's text when it finds no main text."""
    check_html_support()
    if b"\0" in data[:_BINARY_PROBE]:
        raise Unreadable("binary")
    marked = _html_main(data)
    return marked if marked is not None else _html_trafilatura(data)


def _html_main(data: bytes) -> tuple[str, str] | None:
    """``(title, text)`` of the page's ``<main>`` / ``role="main"`` element, one line per
    block; None when the page marks no main element (or it holds no text)."""
    import lxml.html  # with trafilatura, an optional extra (dotcat[html])

    declared = _HTML_CHARSET.search(data[:4096])
    encoding = declared.group(1).decode("ascii") if declared else "utf-8"
    try:
        parser = lxml.html.HTMLParser(encoding=encoding)
        tree = lxml.html.fromstring(data, parser=parser)
    except Exception:  # noqa: BLE001 - left to trafilatura, which reports what it cannot read
        return None
    main = tree.xpath('//main | //*[@role="main"]')
    if not main:
        return None
    lines = [" ".join(line.split()) for line in _block_text(main[0]).split("\n")]
    text = "\n".join(line for line in lines if line)
    title = " ".join((tree.findtext(".//title") or "").split())
    return (title, text) if text else None


def _block_text(element) -> str:
    """The text of an lxml element, a newline around each block element (skipped elements
    and permalink anchors left out, their tails kept)."""
    parts: list[str] = []

    def visit(el) -> None:
        tag = el.tag if isinstance(el.tag, str) else ""
        permalink = tag == "a" and "headerlink" in (el.get("class") or "").split()
        if tag and tag not in _HTML_SKIPPED and not permalink:
            newline = "\n" if tag in _HTML_BLOCKS or tag == "br" else ""
            parts.extend((newline, el.text or ""))
            for child in el:
                visit(child)
            parts.append(newline)
        parts.append(el.tail or "")

    visit(element)
    return "".join(parts)


def _html_trafilatura(data: bytes) -> tuple[str, str]:
    import trafilatura  # an optional extra (dotcat[html])

    with quiet_logger("trafilatura"), quiet_logger("htmldate"):
        try:
            doc = trafilatura.bare_extraction(
                data, with_metadata=True, favor_recall=True, include_comments=False
            )
            title = (doc.title if doc is not None else None) or ""
            text = (doc.text if doc is not None else None) or trafilatura.html2txt(data) or ""
        except Exception as e:  # noqa: BLE001 - a damaged file can make a parser raise anything
            raise Unreadable(f"unreadable HTML: {_first_line(e)}") from None
    return title, text


def _first_line(error: BaseException) -> str:
    """The error's first line, or its type when it has no text; at most 120 characters."""
    return first_line(error)[:120]
