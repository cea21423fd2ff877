"""A real HTTP server on 127.0.0.1 serving dataset archives made by the tests, each with its
own behaviour (a 404, a dropped connection, no ranges...), and the archives themselves."""

from __future__ import annotations

import hashlib
import io
import json
import threading
import zipfile
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from tests.conftest import TINY_DOCS, TINY_QUERIES

DOCS = TINY_DOCS
QUERIES = [*TINY_QUERIES, {"_id": "q4", "text": "plants and light"}]
QRELS = {"test": [("q1", "d2", 1), ("q2", "d4", 1), ("q3", "d6", 1)], "dev": [("q4", "d3", 1)]}


def beir_files(qrels: bool = True) -> dict[str, bytes]:
    """A small BEIR dataset's files: relative path -> bytes."""
    files = {
        "corpus.jsonl": "".join(json.dumps(d) + "\n" for d in DOCS).encode(),
        "queries.jsonl": "".join(json.dumps(q) + "\n" for q in QUERIES).encode(),
    }
    for split, rows in QRELS.items() if qrels else ():
        lines = ["query-id\tcorpus-id\tscore"] + [f"{q}\t{d}\t{r}" for q, d, r in rows]
        files[f"qrels/{split}.tsv"] = ("\n".join(lines) + "\n").encode()
    return files


def make_zip(files: dict[str, bytes], top: str | None = "tiny") -> bytes:
    """A zip of ``files`` (stored, uncompressed), under one top folder as BEIR's are; the same
    bytes in every process (a fixed date: tests are named by its md5, and pytest-xdist's
    workers must collect the same names)."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zf:
        for name, data in files.items():
            zf.writestr(zipfile.ZipInfo(f"{top}/{name}" if top else name), data)
    return out.getvalue()


def md5(data: bytes) -> str:
    return hashlib.md5(data).hexdigest()


@dataclass
class Served:
    """What the server answers for one path.

    Attributes:
        data: the file's bytes.
        status: an HTTP status other than 200 sends that error instead.
        drops: how many answers stop after ``drop_after`` bytes and close the connection.
        ranges: whether a ``Range`` request is honoured (206) or answered whole (200).
        busy: how many requests get a 503 first.
    """

    data: bytes = b""
    status: int = 200
    drops: int = 0
    drop_after: int = 0
    ranges: bool = True
    busy: int = 0


class ArchiveServer:
    """``ThreadingHTTPServer`` on 127.0.0.1 (a free port) in a daemon thread; ``files`` maps a
    path (``/tiny.zip``) to its :class:`Served`; ``requests`` logs ``(path, Range header)``."""

    def __init__(self) -> None:
        self.files: dict[str, Served] = {}
        self.requests: list[tuple[str, str | None]] = []
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:  # quiet
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                server.requests.append((self.path, self.headers.get("Range")))
                served = server.files.get(self.path)
                if served is None or served.status != 200:
                    self.send_error(404 if served is None else served.status)
                    return
                if served.busy:
                    served.busy -= 1
                    self.send_error(503)
                    return
                self._send(served)

            def _send(self, served: Served) -> None:
                start = 0
                asked = self.headers.get("Range")
                if asked and served.ranges:
                    start = int(asked.removeprefix("bytes=").split("-")[0])
                    if start >= len(served.data):  # RFC 9110: 416 with the full length
                        self.send_response(416)
                        self.send_header("Content-Range", f"bytes */{len(served.data)}")
                        self.send_header("Content-Length", "0")
                        self.end_headers()
                        return
                body = served.data[start:]
                self.send_response(206 if start else 200)
                self.send_header("Content-Length", str(len(body)))
                if start:
                    end = len(served.data) - 1
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(served.data)}")
                self.end_headers()
                if served.drops:
                    served.drops -= 1
                    self.wfile.write(body[: served.drop_after])
                    self.close_connection = True
                    return
                self.wfile.write(body)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
