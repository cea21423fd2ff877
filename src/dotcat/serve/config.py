"""How ``dotcat serve`` listens and what it accepts: settings checked before any model loads."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from dotcat.judging.config import JUDGMENTS_HELP
from dotcat.options import Applies, Check, Settings, at_least, setting, within

API_KEY_ENV = "DOTCAT_API_KEY"
#: What an API key may hold: an HTTP header carries ASCII as typed, other text as each client
#: encodes it (curl UTF-8, the server reads Latin-1), and a bearer token's spaces are cut.
API_KEY_TEXT = re.compile(r"[!-~]+")
API_KEY_RULE = "only ASCII letters, digits and punctuation (an HTTP header carries no other)"


def is_loopback(host: str) -> bool:
    """127.0.0.0/8, ::1 or localhost."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


#: The settings that count something: one at least.
_COUNTS = ("max_batch", "queue_size", "max_k", "max_depth", "max_queries", "workers",
           "max_query_chars", "max_body_bytes", "max_answer_bytes")  # fmt: skip


@dataclass(frozen=True, repr=False)
class ServeConfig(Settings):
    """How the server listens and what it accepts.

    Attributes:
        host, port: where to listen; a non-loopback host needs ``api_key``.
        api_key: required from clients when set (``X-API-Key`` or ``Authorization: Bearer``).
        max_batch: most queries per model call.
        batch_window_ms: after a batch's first request, wait at most this long for the rest of
            the crowd the last batch saw (:mod:`dotcat.serve.batcher`; 0: never wait).
        queue_size: most requests waiting for the model; beyond, 503 at once.
        timeout_s: time limit of one request (504 past it).
        max_k, max_depth, max_query_chars, max_queries, max_body_bytes: input caps.
        max_answer_bytes: the largest answer; a bigger one is refused with 400 (whole texts
            of long documents: ask fewer, or snippets).
        retry_after_s: the ``Retry-After`` of a 503.
        workers: server processes sharing the port, each with its own models
            (:mod:`dotcat.serve.server`).
        judge, judgments: serve the judging page and its API over this judgements file
            (:mod:`dotcat.serve.judging`; default: beside the index).
        query_log: append each query asked (opt-in: queries can be private).
        writable: accept document writes (``/documents``; needs ``api_key``).
        watch: sync the index with the folder it was built from when its files change
            (:mod:`dotcat.serve.live`).
    """

    host: str = setting(
        "127.0.0.1", help="Address to listen on; beyond loopback an API key is required."
    )
    port: int = setting(8080, help="Port to listen on (1-65535).")
    api_key: str | None = setting(
        None, help="Clients must send it (X-API-Key header).", envvar=API_KEY_ENV
    )
    max_batch: int = setting(64, help="Most queries per model call.")
    batch_window_ms: float = setting(
        5.0, help="Most ms a batch waits for the crowd the last one saw (0: never)."
    )
    queue_size: int = setting(64, help="Most requests waiting; beyond, 503 with Retry-After.")
    timeout_s: float = setting(
        30.0, help="Seconds one request may take (504).", flags=("--timeout",)
    )
    max_k: int = setting(1000, help="Most results one request may ask for.")
    max_depth: int = setting(1000, help="Most results one request may have re-ranked.")
    max_query_chars: int = setting(2000, help="Longest query text accepted.")
    max_queries: int = setting(64, help="Most queries in one POST.")
    max_body_bytes: int = setting(64 * 1024, help="Largest request body.")
    max_answer_bytes: int = setting(8 * 1024 * 1024, help="Largest answer (400 beyond).")
    retry_after_s: int = setting(1, help="The Retry-After of a 503.")
    workers: int = setting(1, help="Server processes, each with its own models (memory x N).")
    judge: bool = setting(
        False, help="Serve the judging page at /judge (pooled results, graded by keyboard)."
    )
    judgments: str | None = setting(None, help=JUDGMENTS_HELP)
    query_log: str | None = setting(
        None,
        help="Append every query asked to this file (JSON lines; off by default), for "
        "`dotcat judge pool --query-log`.",
    )

    writable: bool = setting(
        False,
        help="Accept document writes (PUT/POST/DELETE /documents; needs an API key): each one "
        "is on disk and searchable when answered.",
    )
    watch: bool = setting(
        False, help="Follow the folder the index was built from: sync it when its files change."
    )

    def applies(self) -> list[Applies]:
        return [(("judgments",), self.judge, "applies only with judge (the judging page)")]

    def checks(self) -> list[Check]:
        """An open address and writes need an API key; the limits must make sense."""
        return [
            (
                is_loopback(self.host) or bool(self.api_key),
                "host",
                f"host {self.host}: serving beyond this machine needs an API key "
                f"(--api-key or ${API_KEY_ENV})",
            ),
            (
                not self.api_key or API_KEY_TEXT.fullmatch(self.api_key),
                "api_key",
                f"api_key: {API_KEY_RULE}",
            ),
            (
                not self.writable or bool(self.api_key),
                "writable",
                f"writable: writes change the index; they need an API key (--api-key or "
                f"${API_KEY_ENV})",
            ),
            (
                not self.watch or self.workers == 1,
                "watch",
                "watch: one server process follows the folder; use workers=1",
            ),
            within("port", self.port, 1, 65535),
            *(at_least(name, getattr(self, name), 1) for name in _COUNTS),
            (self.timeout_s > 0, "timeout_s", f"timeout must be > 0 seconds, got {self.timeout_s}"),
            within("batch_window_ms", self.batch_window_ms, 0, 1000),
        ]

    def check(self) -> None:
        """:meth:`validate` (the name the server calls)."""
        self.validate()
