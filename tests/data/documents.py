"""Document files made inside the tests: a real PDF (written by hand, titled and encrypted
with pypdf), an HTML page with boilerplate, and a folder holding one file of every kind."""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path

HTML_PAGE = """<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>Rainfall in Bergen</title>
<script>var tracking = "analyticsbeacon";</script><style>body {color: red}</style></head>
<body>
<nav><a href="/">Home</a> | <a href="/about">About us</a> | <a href="/shop">Shop</a></nav>
<header>Weather portal header with a newsletter signup</header>
<main><article><h1>Rainfall in Bergen</h1>
<p>Bergen is one of the rainiest cities in Europe, with precipitation on more than two hundred
days a year.</p>
<p>The mountains around the city force moist Atlantic air upwards, where it cools and falls as
drizzle.</p>
</article></main>
<footer>Copyright 2024 Weather portal. All rights reserved. Cookie policy.</footer>
</body></html>
"""


def minimal_pdf(lines: list[str], title: str | None = None) -> bytes:
    """A one-page PDF showing ``lines`` in Helvetica, with a correct cross-reference table and,
    if given, a title in its document information dictionary."""
    shown = "".join(f"({line}) Tj T* " for line in lines)
    stream = f"BT /F1 12 Tf 14 TL 72 720 Td {shown}ET".encode()
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R "
        b"/Resources << /Font << /F1 5 0 R >> >> >>",
        b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
    ]
    if title:
        objects.append(f"<< /Title ({title}) >>".encode())
    out = bytearray(b"%PDF-1.4\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    info = b" /Info %d 0 R" % len(objects) if title else b""
    out += b"trailer\n<< /Size %d /Root 1 0 R%s >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        info,
        xref,
    )
    return bytes(out)


def encrypted_pdf(lines: list[str], password: str) -> bytes:
    """:func:`minimal_pdf` encrypted by pypdf (RC4, which needs no crypto library)."""
    import pypdf

    writer = pypdf.PdfWriter(clone_from=pypdf.PdfReader(io.BytesIO(minimal_pdf(lines))))
    writer.encrypt(user_password=password, owner_password="owner", algorithm="RC4-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def write_every_kind(root: Path) -> dict[str, str]:
    """One file of every kind dotcat reads, each with a word no other file has.

    Returns ``{document id: its unique word}``.
    """
    files: dict[str, bytes] = {
        "notes/fjords.md": b"Intro line\n\n# Fjords of Norway\n\nGlaciers carved each fjord.\n",
        "notes/plain.txt": b"Volcanoes erupt basalt.\n",
        "guide.rst": b"=====\nSauna\n=====\n\nFinnish saunas are hot.\n",
        "page.html": HTML_PAGE.encode(),
        "paper.pdf": minimal_pdf(["Tectonic plates drift", "a few centimetres a year"], "Plates"),
        "records.jsonl": b'{"_id": "r1", "title": "Tides", "text": "The moon pulls tides."}\n',
        "array.json": json.dumps([{"id": "a1", "text": "Aurora borealis glows."}]).encode(),
        "table.csv": b'id,title,text\nc1,"Deserts, hot","Camels cross dunes."\n',
        "table.tsv": b"id\ttitle\ttext\nt1\tReefs\tCorals build reefs.\n",
        "zipped/lichen.md.gz": gzip.compress(b"# Lichen\n\nLichen colonise rocks.\n"),
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    _write_parquet(root / "rows.parquet", [{"id": "p1", "text": "Penguins huddle together."}])
    return {
        "notes/fjords.md": "glaciers",
        "notes/plain.txt": "basalt",
        "guide.rst": "saunas",
        "page.html": "drizzle",
        "paper.pdf": "tectonic",
        "records.jsonl#r1": "moon",
        "array.json#a1": "aurora",
        "table.csv#c1": "camels",
        "table.tsv#t1": "corals",
        "zipped/lichen.md.gz": "lichen",
        "rows.parquet#p1": "penguins",
    }


def write_bad_files(root: Path) -> list[str]:
    """A corrupt PDF, a binary file and an empty file; returns their relative paths, sorted."""
    (root / "broken.pdf").write_bytes(b"%PDF-1.4\n1 0 obj << /Type /Catalog")
    (root / "blob.txt").write_bytes(bytes(range(256)) * 4)
    (root / "empty.md").write_bytes(b"")
    return ["blob.txt", "broken.pdf", "empty.md"]


def _write_parquet(path: Path, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)
