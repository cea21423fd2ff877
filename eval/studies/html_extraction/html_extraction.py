"""How much of a reference page each HTML reader keeps: dotcat's folder extractor
(``dotcat.data.extract``, trafilatura's main text) against the structure-aware reader of
``ood_sources.sphinx_page`` (lxml, every block of the page's main element).

    python eval/studies/html_extraction/html_extraction.py

For each page of the Python library reference (``python3.11-doc``): the words of the full
text (lower-cased ``\\w+``, counted with repeats) that the extractor's text lacks, and how
many documented objects' signatures (white space and permalink signs removed) are found, in
page order, in each text. Writes ``html_extraction.md`` beside this script.
"""

from __future__ import annotations

import re
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks

import common  # noqa: E402
import ood_sources  # noqa: E402

LIBRARY = Path("/usr/share/doc/python3.11/html/library")


def squeeze(text: str) -> str:
    return "".join(c for c in text if not c.isspace() and c != "\N{PILCROW SIGN}")


def signatures_found(signatures: list[str], text: str) -> int:
    """How many signatures occur in ``text`` one after another, in the page's order."""
    flat, at, found = squeeze(text), 0, 0
    for signature in signatures:
        i = flat.find(signature, at)
        if i >= 0:
            found, at = found + 1, i + len(signature)
    return found


def compare(path: Path) -> dict:
    from dotcat.data.extract import extract

    page = ood_sources.sphinx_page(path)
    full = f"{page.title} {page.text}"
    _, extracted = extract(path.read_bytes(), "html", path.stem)
    words = Counter(re.findall(r"\w+", full.lower()))
    lost = sum((words - Counter(re.findall(r"\w+", extracted.lower()))).values())
    tree = ood_sources.read_html(path)
    xpath = '//div[@role="main"]//dt[contains(concat(" ", @class, " "), " sig-object ")][@id]'
    signatures = [squeeze(dt.text_content()) for dt in tree.xpath(xpath)]
    return {
        "page": path.stem,
        "words": sum(words.values()),
        "lost": lost,
        "entries": len(signatures),
        "lxml": signatures_found(signatures, full),
        "extract": signatures_found(signatures, extracted),
    }


def main() -> None:
    parser = common.parser(__doc__, output=Path(__file__).with_name("html_extraction.md"))
    args = parser.parse_args()
    rows = [compare(path) for path in sorted(LIBRARY.glob("*.html"))]
    words, lost = sum(r["words"] for r in rows), sum(r["lost"] for r in rows)
    entries = sum(r["entries"] for r in rows)
    over = [r for r in rows if r["lost"] > 0.05 * r["words"]]
    # Pages that document no object are mostly chapter indexes: lists of links to modules.
    listing = [r for r in rows if not r["entries"]]
    listing_lost = sum(r["lost"] for r in listing) / max(sum(r["words"] for r in listing), 1)
    worst = sorted(
        (r for r in rows if r["entries"]), key=lambda r: r["lost"] / r["words"], reverse=True
    )[:15]
    lines = common.header("HTML readers on the Python library reference")
    lines += [
        f"{len(rows)} pages, {words} words in the full text, {entries} documented objects.",
        "",
        "| reader | words lacking | pages lacking > 5% of words | signatures found in order |",
        "| --- | --- | --- | --- |",
        f"| `dotcat.data.extract` | {lost} ({lost / words:.1%}) | {len(over)} | "
        f"{sum(r['extract'] for r in rows)} of {entries} |",
        f"| `ood_sources.sphinx_page` (lxml) | 0 (by construction) | 0 | "
        f"{sum(r['lxml'] for r in rows)} of {entries} |",
        "",
        f"The {len(listing)} pages that document no object (chapter indexes: lists of links) "
        f"lack {listing_lost:.0%} of their words in the extracted text. Among the pages that "
        "document objects, those whose extracted text lacks the largest share of words:",
        "",
        "| page | words | lacking | signatures found (extract / lxml) |",
        "| --- | --- | --- | --- |",
        *[
            f"| {r['page']} | {r['words']} | {r['lost']} ({r['lost'] / max(r['words'], 1):.0%}) "
            f"| {r['extract']} / {r['lxml']} of {r['entries']} |"
            for r in worst
        ],
    ]
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
