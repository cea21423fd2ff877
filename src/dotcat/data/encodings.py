"""Text in any encoding: UTF-8 first, then the one a user names, else the one detected.

Most files are UTF-8 (or ASCII, which is UTF-8), and a file in a legacy 8-bit encoding
(Latin-1, Windows-1252) is almost never valid UTF-8 as soon as it holds one accented letter:
so a file is read as UTF-8 when it decodes as UTF-8 (a byte-order mark honoured), and
otherwise in the encoding given (``--encoding``, a folder's ``dotcat.toml``), else in the one
charset-normalizer detects (Ousret's successor of chardet, which requests uses). A file given
an encoding for itself (a ``dotcat.toml`` rule, ``--fields GLOB:encoding=...``) is read in
that encoding, UTF-8 or not. The encoding used is recorded per file (the ``encoding`` field).
"""

from __future__ import annotations

import codecs

from dotcat.errors import SettingError

#: Byte-order marks and the encodings they announce (UTF-32's first: its LE mark starts
#: with UTF-16's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
#: The encoding chosen among equally likely ones (:func:`detect`).
PREFERRED = "cp1252"
#: How many bytes detection reads (charset-normalizer's own default sample is smaller).
DETECT_BYTES = 1 << 20


class NotDecodable(Exception):
    """Bytes that no encoding tried decodes; ``str()`` is the reason."""


def check_encoding(name: str, where: str = "--encoding") -> str:
    """An encoding Python knows, by its canonical name (``latin-1`` -> ``iso8859-1``).

    Raises:
        SettingError: an unknown encoding, named with ``where``.
    """
    try:
        return codecs.lookup(name).name
    except LookupError:
        raise SettingError(
            "encoding", f"{where} {name!r}: not an encoding Python knows (e.g. latin-1, cp1252)"
        ) from None


def decode(data: bytes, fallback: str | None = None, forced: str | None = None) -> tuple[str, str]:
    """``(text, encoding used)`` of ``data``: ``forced`` if given, else UTF-8 (or what a
    byte-order mark says), else ``fallback``, else the detected encoding.

    Raises:
        NotDecodable: ``forced`` or ``fallback`` cannot decode it, or nothing was detected.
    """
    if forced is not None:
        return _decode(data, forced), codecs.lookup(forced).name
    for mark, encoding in _BOMS:
        if data.startswith(mark):
            return _decode(data, encoding), encoding.removesuffix("-sig")
    try:
        return data.decode("utf-8"), "utf-8"
    except UnicodeDecodeError as e:
        where = f"byte 0x{data[e.start]:02x} at offset {e.start}"
    if fallback is not None:
        return _decode(data, fallback), codecs.lookup(fallback).name
    detected = detect(data)
    if detected is None:
        raise NotDecodable(f"not UTF-8 ({where}) and no encoding detected: give --encoding")
    return _decode(data, detected), detected


def detect(data: bytes) -> str | None:
    """The encoding charset-normalizer finds most likely for ``data`` (its first MiB), or
    None. Among equally likely ones (a short text of a few accented letters fits several code
    pages) Windows-1252 is preferred, the legacy encoding of most Western text (and what the
    WHATWG encoding standard reads Latin-1 as)."""
    from charset_normalizer import from_bytes  # only files that are not UTF-8 need it

    matches = list(from_bytes(data[:DETECT_BYTES]))
    if not matches:
        return None
    best = matches[0]
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    if any(PREFERRED in m.could_be_from_charset for m in tied):
        return PREFERRED
    return codecs.lookup(best.encoding).name


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise NotDecodable(
            f"not {encoding}: byte 0x{data[e.start]:02x} at offset {e.start}"
        ) from None
    except LookupError:
        raise NotDecodable(f"unknown encoding {encoding!r}") from None
