"""Text, title and metadata out of one document file: plain text, Markdown, reStructuredText,
HTML, PDF.

:func:`extract` takes a file's bytes (already un-gzipped) and its kind and returns an
:class:`Extracted` (title, text, fields), or raises :class:`Unreadable` with a short reason
that the folder reader counts and names in its summary line. The text is kept whole, never
cut: splitting long documents is the indexer's business, and it needs the full text to do it.

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
- Markdown and reStructuredText (:mod:`dotcat.data.markup`): the front matter is split off
  into fields (its ``title`` the title), and the text rendered as a reader sees it
  (markdown-it-py, docutils): no ``#``, ``**``, link targets, roles, directives or HTML; the
  first heading is the title.

Title: the front matter's, that heading, the HTML ``<title>`` or the PDF metadata title (a
generic one that a producer writes, "Enscript Output", "Microsoft Word - report.docx" or a
file name, is passed over for the PDF's first outline entry or first line), else the file
name without its suffixes. Fields (:mod:`dotcat.data.metadata`): the front matter; a PDF's
author, subject, keywords, creator, producer, creation and modification dates and page count;
an HTML page's language and its ``<meta>`` author, description, keywords and dates. Text and
HTML files are read as UTF-8, else in the encoding given, declared or detected
(:mod:`dotcat.data.encodings`; CRLF becomes LF); a NUL byte outside UTF-16/32 marks a binary file.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import logging
import re
from dataclasses import dataclass
from typing import Any

from dotcat.data.encodings import Decoded, NotDecodable, binary, decode
from dotcat.data.markup import front_matter, markdown_text, rst_text
from dotcat.data.metadata import record_fields, scalar_value
from dotcat.errors import DotcatError, first_line
from dotcat.progress import quiet_logger

#: The extra that brings trafilatura, named in the error when it is missing.
HTML_EXTRA = "pip install 'dotcat[html]'"
#: Document kinds that are text (read as UTF-8, may be gzipped).
TEXT_KINDS = frozenset({"text", "markdown", "rst", "html"})


#: PDF titles that name the program or the file, not the document (lower case, matched whole).
GENERIC_PDF_TITLE = re.compile(
    r"(?:enscript output|untitled(?:[ -]\d+)?|document\d*|no title|title|unknown|none|slide \d+|"
    r"powerpoint presentation|presentation\d*|microsoft (?:word|powerpoint|excel) - .*|"
    r".*\.(?:docx?|dvi|tex|txt|pdf|ps|rtf|odt|pptx?|xlsx?|indd|qxd|html?)|[\W_\d]*)"
)
#: How long a first line may be to stand for a PDF's title.
PDF_HEADING_CHARS = 120


class Unreadable(Exception):
    """A document file that cannot be read; ``str()`` is the reason (a few words)."""


@dataclass(frozen=True)
class Extracted:
    """What a document file holds: its title, its text, its other fields (typed,
    :mod:`dotcat.data.metadata`), and whether its encoding was guessed (``guessed`` or
    ``unsure``, :class:`dotcat.data.encodings.Decoded`)."""

    title: str
    text: str
    fields: dict[str, Any]
    guess: str = ""


def check_html_support() -> None:
    """Raise a one-line DotcatError naming the extra when trafilatura is not installed."""
    if importlib.util.find_spec("trafilatura") is None:
        raise DotcatError(f"reading HTML files needs trafilatura: {HTML_EXTRA}")


def extract(
    data: bytes,
    kind: str,
    stem: str,
    encoding: str | None = None,
    forced: str | None = None,
    where: str = "",
) -> Extracted:
    """The title, text and fields of a document file's bytes.

    Args:
        data: the file's content (decompressed when it was gzipped).
        kind: ``text``, ``markdown``, ``rst``, ``html`` or ``pdf``.
        stem: the file name without its suffixes: the title when the file names none.
        encoding: a text or HTML file's encoding when it is not UTF-8 (None: detected).
        forced: a text or HTML file's encoding, UTF-8 or not (a rule for the file).
        where: the file, for the warning about front matter that does not parse.

    Raises:
        Unreadable: an empty or binary file, text in no encoding tried, an encrypted or
            corrupt PDF, or no text at all.
    """
    if not data.strip():
        raise Unreadable("empty")
    guess = ""
    if kind == "pdf":
        title, text, fields = _pdf(data)
    else:
        text, used, guess = _text(data, encoding, forced, kind == "html")
        title, text, fields = _html(text) if kind == "html" else _marked_up(text, kind, where)
        fields.setdefault("encoding", used)
    if not text.strip():
        raise Unreadable("no text")
    return Extracted(title.strip() or stem, text, fields, guess)


def _text(data: bytes, encoding: str | None, forced: str | None, html: bool = False) -> Decoded:
    """A text file's text (CRLF as LF), the encoding it was read in, and how; an HTML page in
    the character set it declares in a ``<meta>``, unless a rule or a byte-order mark says."""
    if binary(data, forced):
        raise Unreadable("binary")
    declared = _HTML_CHARSET.search(data[:4096]) if html else None
    try:
        found = decode(data, encoding, forced, declared and declared.group(1).decode("ascii"))
    except NotDecodable as e:
        raise Unreadable(str(e)) from None
    return found._replace(text=found.text.removeprefix("\ufeff").replace("\r\n", "\n"))


def _marked_up(text: str, kind: str, where: str) -> tuple[str, str, dict[str, Any]]:
    """Title, plain text and front matter fields of a Markdown or reStructuredText text (a
    plain text file as it is)."""
    if kind not in ("markdown", "rst"):
        return "", text, {}
    matter, body = front_matter(text, kind, where)
    heading, plain = markdown_text(body) if kind == "markdown" else rst_text(body, where)
    title = matter.pop("title", None)
    title = scalar_value(title) if not isinstance(title, (dict, list)) else None
    return str(title) if title is not None else heading, plain, record_fields(matter)


def _pdf(data: bytes) -> tuple[str, str, dict[str, Any]]:
    """Text of every page (joined by a blank line), the title and the metadata, with pypdf."""
    import pypdf  # only PDF files need it (~0.1 s); keeps `dotcat` fast

    with quiet_logger("pypdf"):  # a damaged file: warnings line by line; the summary names it
        try:
            reader = pypdf.PdfReader(io.BytesIO(data))
            if reader.is_encrypted and not reader.decrypt(""):
                raise Unreadable("encrypted PDF: needs a password")
            pages = [page.extract_text() or "" for page in reader.pages]
            title = _pdf_title(reader)
            fields = _pdf_fields(reader)
        except Unreadable:
            raise
        except pypdf.errors.DependencyError as e:
            raise Unreadable(f"encrypted PDF: {_first_line(e)}") from None
        except Exception as e:  # noqa: BLE001 - a damaged file can make a parser raise anything
            raise Unreadable(f"corrupt PDF: {_first_line(e)}") from None
    text = "\n\n".join(page.strip("\n") for page in pages)
    if not text.strip():
        raise Unreadable("no text in the PDF: scanned pages?")
    return title or _pdf_heading(reader, text), text, fields


def _pdf_title(reader) -> str:
    """The metadata title, unless it is a generic one (:data:`GENERIC_PDF_TITLE`)."""
    try:
        title = reader.metadata.title if reader.metadata else None
    except Exception:  # noqa: BLE001 - a broken information dictionary only loses the title
        return ""
    if not isinstance(title, str) or GENERIC_PDF_TITLE.fullmatch(title.strip().lower()):
        return ""
    return title


def _pdf_heading(reader, text: str) -> str:
    """A title for a PDF whose metadata names none: its first outline entry (bookmark), else
    its first line where that is short enough to be a heading."""
    try:
        outline = reader.outline
        first = outline[0] if outline else None
        while isinstance(first, list) and first:
            first = first[0]
        heading = getattr(first, "title", None)
    except Exception:  # noqa: BLE001 - a broken outline only loses this title
        heading = None
    if isinstance(heading, str) and heading.strip():
        return heading.strip()
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= PDF_HEADING_CHARS else ""


#: PDF information keys kept as fields, and their field names.
_PDF_FIELDS = {"author": "author", "subject": "subject", "creator": "creator",
               "producer": "producer", "creation_date": "created",
               "modification_date": "modified"}  # fmt: skip


def _pdf_fields(reader) -> dict[str, Any]:
    """A PDF's information dictionary as fields, and its page count."""
    found: dict[str, Any] = {"pages": len(reader.pages)}
    info = reader.metadata
    if not info:
        return found
    for key, name in _PDF_FIELDS.items():
        with contextlib.suppress(Exception):  # a malformed date or string only loses that field
            found[name] = getattr(info, key)
    keywords = info.get("/Keywords")
    if isinstance(keywords, str):
        found["keywords"] = [k.strip() for k in re.split(r"[,;]", keywords) if k.strip()]
    return record_fields(found)


#: Block-level elements: each starts a new line of the extracted text.
_HTML_BLOCKS = frozenset(
    "address article aside blockquote caption dd details div dl dt figcaption figure footer h1 "  # noqa: SIM905
    "h2 h3 h4 h5 h6 header hr li main ol p pre section summary table td th tr ul".split()
)
#: A page's declared character set (``<meta charset>`` or ``http-equiv`` Content-Type), but
#: UTF-16 or UTF-32, which browsers pass over too (the bytes that name it are ASCII's).
_HTML_CHARSET = re.compile(rb"""<meta[^>]*charset=["']?(?!utf-?(?:16|32))([\w-]+)""", re.I)
#: Elements whose content is not the page's text.
_HTML_SKIPPED = frozenset("script style noscript template nav form button select svg".split())  # noqa: SIM905


def _html(page: str) -> tuple[str, str, dict[str, Any]]:
    """Title, text and metadata of a page's text: the marked main element read whole
    (:func:`_html_main`), else trafilatura's main text; all its text when it finds none. The
    title is the page's ``<title>`` (else trafilatura's, such as its one ``<h1>``)."""
    check_html_support()
    tree = _html_tree(page)
    text = _html_main(tree) if tree is not None else None
    title, text = ("", text) if text else _html_trafilatura(page)
    if tree is None:
        return title, text, {}
    if not text.strip():  # a fragment (no <html>): trafilatura reads none
        text = _lines(tree)
    return " ".join((tree.findtext(".//title") or "").split()) or title, text, _html_fields(tree)


def _html_tree(page: str):
    """The page parsed by lxml, or None (given as UTF-8: lxml refuses text that opens with an
    XML declaration naming an encoding)."""
    import lxml.html  # with trafilatura, an optional extra (dotcat[html])

    try:
        parser = lxml.html.HTMLParser(encoding="utf-8")
        return lxml.html.fromstring(page.encode(), parser=parser)
    except Exception:  # noqa: BLE001 - left to trafilatura, which reports what it cannot read
        return None


def _html_main(tree) -> str | None:
    """The text of the page's ``<main>`` / ``role="main"`` element, one line per block; None
    when the page marks no main element."""
    main = tree.xpath('//main | //*[@role="main"]')
    return _lines(main[0]) if main else None


#: ``<meta>`` names and properties kept as fields (lower case), and their field names.
_HTML_META = {
    "author": "author", "description": "description", "keywords": "keywords",
    "date": "date", "dcterms.date": "date", "dc.date": "date",
    "article:published_time": "date", "article:modified_time": "modified",
    "og:site_name": "site", "generator": "generator",
}  # fmt: skip


def _html_fields(tree) -> dict[str, Any]:
    """An HTML page's language and its ``<meta>`` metadata (:data:`_HTML_META`)."""
    found: dict[str, Any] = {}
    language = tree.get("lang") if tree.tag == "html" else None
    if language:
        found["lang"] = language
    for meta in tree.iter("meta"):
        key = (meta.get("name") or meta.get("property") or "").strip().lower()
        name, content = _HTML_META.get(key), (meta.get("content") or "").strip()
        if name is None or not content or name in found:
            continue
        if name == "keywords":
            found[name] = [k.strip() for k in content.split(",") if k.strip()]
        else:
            found[name] = content
    return record_fields(found)


def _lines(element) -> str:
    """An element's text, one line per block (:func:`_block_text`), spaces collapsed."""
    lines = [" ".join(line.split()) for line in _block_text(element).split("\n")]
    return "\n".join(line for line in lines if line)


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


def _html_trafilatura(page: str) -> tuple[str, str]:
    import trafilatura  # an optional extra (dotcat[html])

    with quiet_logger("trafilatura", logging.CRITICAL), quiet_logger("htmldate"):
        try:
            doc = trafilatura.bare_extraction(
                page, with_metadata=True, favor_recall=True, include_comments=False
            )
            title = (doc.title if doc is not None else None) or ""
            text = (doc.text if doc is not None else None) or trafilatura.html2txt(page) or ""
        except Exception as e:  # noqa: BLE001 - a damaged file can make a parser raise anything
            raise Unreadable(f"unreadable HTML: {_first_line(e)}") from None
    return title, text


def _first_line(error: BaseException) -> str:
    """The error's first line, or its type when it has no text; at most 120 characters."""
    return first_line(error)[:120]
