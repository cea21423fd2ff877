"""Text in any encoding: UTF-8 first, then the one a user names, else a named guess.

A file is read in the first of:

1. the encoding given for it (a ``dotcat.toml`` rule, ``--fields GLOB:encoding=...``);
2. what a byte-order mark says (UTF-8, UTF-16, UTF-32), else an HTML page's ``<meta>`` charset;
3. UTF-8, when it decodes as UTF-8 (ASCII does; a legacy 8-bit file almost never does as soon
   as it holds one accented letter);
4. ``--encoding`` (the folder's encoding for whatever is not UTF-8);
5. a guess, named with the file in one warning per read (:func:`guess`).

A guess prefers UTF-8, then Windows-1252, over what a detector says, because a detector is
least sure on short texts: charset-normalizer (Ousret's successor of chardet, which requests
uses) reads the Latin-1 line "Le modèle déjà entraîné" as Baltic cp1257, and short Latin-1,
cp1252 and KOI8 messages as cp775, Big5 or Shift-JIS (figures in ``eval/studies/encoding/``).
So a file that is mostly UTF-8 (a line pasted from elsewhere, a character cut at the end) is
read as UTF-8 and its other bytes as Windows-1252; then the first of :data:`SCRIPTS` whose text
looks as that script does is taken: text in one Western language (:func:`one_language`) as
Windows-1252, or Latin-9 where only that gives Western letters (``€`` and ``œ`` are elsewhere
in Latin-9), Turkish, Central European (Latin-2, Windows-1250), Baltic (Latin-7, Windows-1257),
any other Western text, Hebrew, Cyrillic (Windows-1251, KOI8-R or KOI8-U) and Greek text by
what each script's text must look like (the detector read Greek and Hebrew as Cyrillic, Polish
and Czech as Windows-1252); only other text (CJK...) goes to the detector. A guess is
``unsure`` where the detector found nothing or read the bytes otherwise; those come first in
the warning. Latin-1 is read as Windows-1252: both give the same text but for C1 control
characters, which no text holds (the WHATWG encoding standard reads Latin-1 so). The
encoding used is recorded per file (the ``encoding`` field).
"""

from __future__ import annotations

import codecs
import contextlib
import re
from typing import NamedTuple

from dotcat.errors import SettingError


def _alphabets(letters: str) -> tuple[frozenset[str], ...]:
    """Each alphabet of ``letters`` (space-separated), small and capital letters."""
    return tuple(frozenset(a + a.upper()) for a in letters.split())


#: Byte-order marks and the encodings they announce (UTF-32's first: its LE mark starts
#: with UTF-16's).
_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF8, "utf-8-sig"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)
#: What Western European text (French, German, Spanish, Portuguese, Italian, Catalan, Dutch,
#: Danish, Norwegian, Swedish, Finnish) holds beyond ASCII: its letters and the punctuation of
#: Windows-1252. Left out: what other scripts' legacy bytes turn into when read as cp1252 (ð þ
#: ý ÿ from Cyrillic, Turkish, Czech; ³ ¹ ± ¶ ¼ from Polish; ¤ ½ from Latin-9's € œ; ‚ from
#: Shift-JIS).
WESTERN = frozenset(
    "ÀÁÂÃÄÅÆÇÈÉÊËÌÍÎÏÑÒÓÔÕÖØÙÚÛÜßàáâãäåæçèéêëìíîïñòóôõöøùúûüŒœŠšŽžªº×\xa0«»¡¿°§©®·£€…–—‘’“”„•‹›™"
)
#: The letters beyond ASCII of each Western language: French (its æ left out: Polish ć read in
#: Windows-1252 is æ; French writes it in a few Latin words), German, Spanish, Portuguese,
#: Italian, Dutch, Catalan/Occitan, Danish/Norwegian, Swedish, Finnish, Estonian, Faroese,
#: Icelandic.
WESTERN_ALPHABETS = _alphabets(
    "àâçéèêëîïôœùûüÿ äöüß áéíñóúü àáâãçéêíóôõú àèéìíîòóùú àáéèêëíïóöúü àáçèéíïòóúü åæéø åäöé äöåšž "
    "äöõüšž áíóúæø áéíóúæö"
)
#: The letters beyond ASCII of Polish, Czech, Slovak, Hungarian, Croatian/Slovenian and
#: Romanian (Windows-1250 and Latin-2 hold them).
CENTRAL_ALPHABETS = _alphabets("ąćęłńóśźż áčďéěíňóřšťúůýž áäčďéíĺľňóôŕšťúýž áéíóöőúüű čćđšž ăâîşţ")
#: The letters beyond ASCII of Lithuanian, Latvian and Estonian (Windows-1257, Latin-7).
BALTIC_ALPHABETS = _alphabets("ąčęėįšųūž āčēģīķļņšūž äöõüšž")
#: Punctuation of Windows-1250 and Windows-1257 text beyond ASCII.
CENTRAL_PUNCTUATION = frozenset("\xa0„“”‚‘’–—…•·°§")
#: Turkish letters beyond ASCII, with Windows-1252's punctuation (Windows-1254 adds ğ ı ş).
TURKISH = frozenset("çÇğĞıİöÖşŞüÜâÂîÎûÛ") | {c for c in WESTERN if not c.isalpha()}
#: Punctuation of Cyrillic, Greek and Hebrew text beyond ASCII.
PUNCTUATION = frozenset("\xa0«»„“”‘’–—…№•·΄΅₪־׳״\u200e\u200f")
#: Cyrillic vowels (ъ is one in Bulgarian): 40-45% of the letters of Russian, Ukrainian,
#: Bulgarian or Serbian text; a tenth of Greek text's read in Windows-1251.
CYRILLIC_VOWELS = frozenset("аеёиоуыэюяіїєъАЕЁИОУЫЭЮЯІЇЄЪ")
#: How many bytes a guess reads.
DETECT_BYTES = 1 << 20
_NOT_ASCII = re.compile(r"[^\x00-\x7f]")
_LETTERS = "\u0386-\u03ce\u0400-\u04ff\u05d0-\u05ea"  # Greek, Cyrillic, Hebrew
_MIXED_WORD = re.compile(f"[A-Za-z][{_LETTERS}]|[{_LETTERS}][A-Za-z]")
_CAPITAL_INSIDE = re.compile(r"[а-яёα-ωάέήίόύώϊϋΐΰ][А-ЯЁΑ-ΩΆΈΉΊΌΎΏ]")  # in one word
_NOT_WESTERN = re.compile(r"[^\W\d_\x00-\x7f]{3}|[^\W\d_][¿¡]")
_CENTRAL_IN_WESTERN = re.compile(r"[èÈ][aeoAEO]|[æÆ][aeiouAEIOU]|[ãÃ][^\W\d_oesiOESI]")
_WORD_START_Ğ = re.compile(r"(?<![^\W\d_])[ğĞ]")
_FOUR_LETTERS = re.compile(r"[^\W\d_\x00-\x7f]{4}")
_CYRILLIC = re.compile(r"[\u0400-\u04ff]")
_GREEK = re.compile(r"[\u0386-\u03ce]")
_TONOS = re.compile(r"[άέήίόύώΐΰΆΈΉΊΌΎΏ]")
_HEBREW = re.compile(r"[\u05d0-\u05ea]")
_FINAL_INSIDE = re.compile(r"ς\w|[ךםןףץ][\u05d0-\u05ea]")


class NotDecodable(Exception):
    """Bytes that no encoding tried decodes; ``str()`` is the reason."""


class Decoded(NamedTuple):
    """A file's text, the encoding it was read in, and how that was known: ``""`` (given, a
    byte-order mark or UTF-8), ``guessed``, or ``unsure`` (see the module docstring)."""

    text: str
    encoding: str
    guess: str = ""


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


def binary(data: bytes, forced: str | None = None) -> bool:
    """Whether ``data`` is no text: a NUL byte in its first 8 KiB (as git and grep decide),
    unless ``forced`` or a byte-order mark says UTF-16 or UTF-32, whose text is half NULs."""
    told = codecs.lookup(forced).name if forced else next(
        (name for mark, name in _BOMS if data.startswith(mark)), "")  # fmt: skip
    return b"\0" in data[:8192] and not told.startswith(("utf-16", "utf-32"))


def decode(
    data: bytes, fallback: str | None = None, forced: str | None = None, declared: str | None = None
) -> Decoded:
    """``data`` as text: ``forced`` if given, else what a byte-order mark says, else
    ``declared`` (an HTML page's charset) where it decodes ``data``, else UTF-8, else
    ``fallback``, else :func:`guess`.

    Raises:
        NotDecodable: ``forced`` or ``fallback`` cannot decode it, or no guess can.
    """
    if forced is not None:
        return Decoded(_decode(data, forced), codecs.lookup(forced).name)
    for mark, encoding in _BOMS:
        if data.startswith(mark):
            return Decoded(_decode(data, encoding), encoding.removesuffix("-sig"))
    if declared is not None:
        with contextlib.suppress(NotDecodable):  # a wrong or unknown charset: read as text is
            return Decoded(_decode(data, declared), codecs.lookup(declared).name)
    try:
        return Decoded(data.decode("utf-8"), "utf-8")
    except UnicodeDecodeError as e:
        where = f"byte 0x{data[e.start]:02x} at offset {e.start}"
    if fallback is not None:
        return Decoded(_decode(data, fallback), codecs.lookup(fallback).name)
    guessed = guess(data)
    if guessed is None:
        raise NotDecodable(f"not UTF-8 ({where}) and no encoding found: give --encoding")
    encoding, sure = guessed
    text = data.decode("utf-8", "dotcat-cp1252") if encoding == "utf-8" else _decode(data, encoding)
    return Decoded(text, encoding, "guessed" if sure else "unsure")


def guess(data: bytes) -> tuple[str, bool] | None:
    """``(encoding, sure)`` for bytes that are not UTF-8 (their first MiB), or None: UTF-8 where
    most of what is not ASCII is UTF-8 (the rest then read as Windows-1252), else the first of
    :data:`SCRIPTS` whose text looks as it must, else what charset-normalizer finds most likely (see
    the module docstring). ``sure``: the detector reads the bytes as the encoding chosen does."""
    from charset_normalizer import from_bytes  # only files that are not UTF-8 need it

    head = data[:DETECT_BYTES]
    # Most characters beyond ASCII well-formed UTF-8 (a line in another encoding pasted in, or a
    # character cut at the end, leaves a few bytes that are not): UTF-8.
    replaced = head.decode("utf-8", "replace")
    bad = replaced.count("\ufffd")
    if len(_NOT_ASCII.findall(replaced)) - bad > bad:
        return "utf-8", False
    best = next(iter(from_bytes(head)), None)
    detected = codecs.lookup(best.encoding).name if best is not None else None
    for encoding, script in SCRIPTS:
        try:
            text = head.decode(encoding)
        except UnicodeDecodeError:
            continue
        if script(text):
            return encoding, detected is not None and _same(head, detected, text)
    return (detected, True) if detected is not None else None


def western(text: str) -> bool:
    """Whether ``text`` reads as Western European text: everything beyond ASCII is in
    :data:`WESTERN`, no three letters beyond ASCII come in a row (a Cyrillic or Greek text read
    in a Western code page is runs of accented letters), and ``¿ ¡`` open words (Polish ż in
    Windows-1250 reads as ``¿`` inside them)."""
    beyond = _NOT_ASCII.findall(text)
    return bool(beyond) and WESTERN.issuperset(beyond) and not _NOT_WESTERN.search(text)


def one_language(text: str) -> bool:
    """Whether ``text`` is Western text (:func:`western`) whose letters beyond ASCII are all
    those of one Western language (:data:`WESTERN_ALPHABETS`), no vowel after ``è æ`` and only
    ``o e s i`` after ``ã`` (what č ć ă of Slavic and Romanian text read in Windows-1252 are)."""
    return (
        western(text)
        and _one_alphabet(text, WESTERN_ALPHABETS)
        and not _CENTRAL_IN_WESTERN.search(text)
    )


def central(text: str, alphabets: tuple[frozenset[str], ...] = CENTRAL_ALPHABETS) -> bool:
    """Whether ``text`` reads as Central European text: everything beyond ASCII the letters of
    one language of ``alphabets`` or :data:`CENTRAL_PUNCTUATION`, no four letters beyond ASCII
    in a row (Cyrillic, Greek, Hebrew or CJK text read in Windows-1250)."""
    beyond = {c for c in _NOT_ASCII.findall(text) if not c.isalpha()}
    return (
        CENTRAL_PUNCTUATION.issuperset(beyond)
        and _one_alphabet(text, alphabets)
        and not _FOUR_LETTERS.search(text)
    )


def baltic(text: str) -> bool:
    """Whether ``text`` reads as Baltic text: :func:`central` with :data:`BALTIC_ALPHABETS`."""
    return central(text, BALTIC_ALPHABETS)


def _one_alphabet(text: str, alphabets: tuple[frozenset[str], ...]) -> bool:
    """Whether some letter beyond ASCII is in ``text`` and all of them are in one of
    ``alphabets``."""
    letters = {c for c in _NOT_ASCII.findall(text) if c.isalpha()} - {"ª", "º"}
    return bool(letters) and any(letters <= alphabet for alphabet in alphabets)


def cyrillic(text: str) -> bool:
    """Whether ``text`` reads as Cyrillic text (:func:`_letters`), most of its letters lower case
    (KOI8 and Windows-1251 hold the same letters with the cases swapped) and a quarter of them
    :data:`CYRILLIC_VOWELS` (Greek's vowels in Windows-1251 are consonants and soft signs)."""
    letters = _letters(text, _CYRILLIC)
    n, vowels = len(letters), sum(c in CYRILLIC_VOWELS for c in letters)
    lower = sum(map(str.islower, letters))
    return 2 * lower > n and 4 * vowels >= n and not _CAPITAL_INSIDE.search(text)


def greek(text: str) -> bool:
    """Whether ``text`` reads as Greek text (:func:`_letters`) with an accented vowel (monotonic
    Greek accents every word of two syllables; Hebrew in a Greek code page has none) and final
    sigma only where a word ends (Cyrillic т and Hebrew ע in a Greek code page are ς), no capital
    after a small letter in a word (what GB18030's Chinese is in a Greek code page)."""
    letters = _letters(text, _GREEK)
    inside = _FINAL_INSIDE.search(text) or _CAPITAL_INSIDE.search(text)
    return bool(letters and _TONOS.search(text) and not inside)


def hebrew(text: str) -> bool:
    """Whether ``text`` reads as Hebrew text (:func:`_letters`) in logical order, the final forms
    ך ם ן ף ץ only where a word ends (Cyrillic к н п у х read in Windows-1255 are those)."""
    return bool(_letters(text, _HEBREW)) and not _FINAL_INSIDE.search(text)


def turkish(text: str) -> bool:
    """Whether ``text`` reads as Turkish text: everything beyond ASCII in :data:`TURKISH`, and
    no word begins with ğ (Lithuanian and Latvian š read in Windows-1254)."""
    beyond = _NOT_ASCII.findall(text)
    return bool(beyond) and TURKISH.issuperset(beyond) and not _WORD_START_Ğ.search(text)


def _letters(text: str, script: re.Pattern) -> list[str]:
    """The letters of ``script`` in ``text``; none where anything else beyond ASCII than those
    and :data:`PUNCTUATION` is in it, or a word mixes them with Latin letters (what a Polish
    or Czech text read in a Cyrillic, Greek or Hebrew code page does)."""
    beyond = "".join(_NOT_ASCII.findall(text))
    if _MIXED_WORD.search(text) or not PUNCTUATION.issuperset(script.sub("", beyond)):
        return []
    return script.findall(beyond)


#: The legacy code pages tried before the detector, in order, each with what a text read in
#: it must look like to be taken.
SCRIPTS = (
    ("cp1252", one_language),
    ("iso8859-15", one_language),
    ("cp1254", turkish),
    ("iso8859-2", central),  # (its 0x80-0x9f are controls, where Windows-1250 has letters)
    ("cp1250", central),
    ("iso8859-13", baltic),  # (as Latin-2 before Windows-1250)
    ("cp1257", baltic),
    ("cp1252", western),
    ("iso8859-15", western),
    ("cp1255", hebrew),
    ("cp1251", cyrillic),
    ("koi8-r", cyrillic),
    ("koi8-u", cyrillic),
    ("cp1253", greek),
    ("iso8859-7", greek),
)


def _same(data: bytes, encoding: str, text: str) -> bool:
    try:
        return data.decode(encoding) == text
    except (UnicodeDecodeError, LookupError):
        return False


def _cp1252_bytes(error: UnicodeDecodeError) -> tuple[str, int]:
    """A codec error handler: the bytes that are not UTF-8 as Windows-1252 (Latin-1 for the
    five it leaves undefined)."""
    bad = error.object[error.start : error.end]
    return "".join(bytes([b]).decode("cp1252", "ignore") or chr(b) for b in bad), error.end


codecs.register_error("dotcat-cp1252", _cp1252_bytes)


def _decode(data: bytes, encoding: str) -> str:
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as e:
        raise NotDecodable(
            f"not {encoding}: byte 0x{data[e.start]:02x} at offset {e.start}"
        ) from None
    except LookupError:
        raise NotDecodable(f"unknown encoding {encoding!r}") from None
