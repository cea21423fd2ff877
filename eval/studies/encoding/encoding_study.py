"""How often a text file's encoding is read right: dotcat's rule before issue 64 (UTF-8, else
charset-normalizer's best match, Windows-1252 among equals) against the rule since
(:mod:`dotcat.data.encodings`: UTF-8, mostly-UTF-8, Western text as Windows-1252 or Latin-9,
then the detector), on a labelled set built from the translations installed on this machine.

    python eval/studies/encoding/encoding_study.py

The set: for each language, the translated messages of the gettext catalogues under
/usr/share/locale/LANG/LC_MESSAGES (Debian packages' translations: coreutils, apt, glib,
gtk, postgres...; the ``iso_*`` name lists left out, they are not prose), written in each
encoding people keep that language in. A short file is one message of 20 to 200 characters
with at least one character beyond ASCII; a long one runs of one catalogue's messages, one a
line, to at least 4,000 characters (messages the encoding cannot hold left out). A file is
read right when the text read is the text written (a file read as cp1252 that was written
as Latin-1 is right: the text is the same). Seeded: the same machine gives the same set.
Writes ``encoding.md`` beside this script.
"""

from __future__ import annotations

import codecs
import gettext
import random
import sys
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks

import common  # noqa: E402

LOCALE = Path("/usr/share/locale")
UNICODE = ("utf-8", "utf-8-sig", "utf-16")
#: A UTF-8 file whose last line was pasted from a cp1252 one (long files only).
MIXED = "utf-8+cp1252"
WEST = (*UNICODE, "cp1252", "latin-1", "iso8859-15", MIXED)
#: Language (locale folder) -> the encodings its files are written in.
SETS = {
    "en@quot": (*UNICODE, "cp1252"),  # English with typographic quotes (latin-1 has none)
    "fr": WEST, "de": WEST, "es": WEST, "pt": WEST, "it": WEST, "nl": WEST,
    "ru": (*UNICODE, "cp1251", "koi8-r"),
    "uk": (*UNICODE, "cp1251", "koi8-u"),
    "ja": (*UNICODE, "shift_jis", "euc-jp"),
    "zh_CN": (*UNICODE, "gb18030"),
    "pl": (*UNICODE, "cp1250", "iso8859-2"),
    "cs": (*UNICODE, "cp1250", "iso8859-2"),
    "sk": (*UNICODE, "cp1250", "iso8859-2"),
    "hu": (*UNICODE, "cp1250", "iso8859-2"),
    "hr": (*UNICODE, "cp1250", "iso8859-2"),
    "sl": (*UNICODE, "cp1250", "iso8859-2"),
    "ro": (*UNICODE, "cp1250", "iso8859-2"),
    "lt": (*UNICODE, "cp1257", "iso8859-13"),
    "lv": (*UNICODE, "cp1257", "iso8859-13"),
    "et": (*UNICODE, "cp1252", "iso8859-15", "cp1257"),
    "el": (*UNICODE, "cp1253", "iso8859-7"),
    "he": (*UNICODE, "cp1255", "iso8859-8"),
    "tr": (*UNICODE, "cp1254", "iso8859-9"),
    "bg": (*UNICODE, "cp1251"),
}  # fmt: skip
SHORT, LONG, LONG_CHARS = 30, 5, 4000
#: The Latin-1 note of issue 64.
NOTE = "Le modèle déjà entraîné est prêt : la démo a lieu à Noël.\n"


def catalogue(path: Path) -> list[str]:
    """A gettext catalogue's translations (plural forms and the header left out)."""
    try:
        with open(path, "rb") as f:
            messages = gettext.GNUTranslations(f)._catalog  # noqa: SLF001 - msgid -> msgstr
    except (OSError, UnicodeDecodeError, ValueError):
        return []
    return [v for k, v in sorted(messages.items(), key=lambda kv: str(kv[0]))
            if isinstance(k, str) and k and isinstance(v, str) and v.strip()]  # fmt: skip


def encode(text: str, encoding: str) -> bytes:
    """``text`` written in ``encoding``; ``utf-8+cp1252``: UTF-8 with its last line in cp1252
    (a line pasted from a Windows file)."""
    if encoding != MIXED:
        return text.encode(encoding)
    head, _, last = text.rstrip("\n").rpartition("\n")
    return (head + "\n").encode() + last.encode("cp1252") + b"\n"


def fits(text: str, encoding: str) -> bool:
    try:
        encode(text, encoding)
    except UnicodeEncodeError:
        return False
    return True


def build(rng: random.Random) -> tuple[list[tuple[str, str, str, str]], dict[str, list[str]]]:
    """``(language, encoding, short|long, text)`` samples, and the catalogues used per
    language."""
    samples, used = [], {}
    for lang, encodings in SETS.items():
        files = sorted(p for p in (LOCALE / lang / "LC_MESSAGES").glob("*.mo")
                       if not p.name.startswith("iso_"))  # fmt: skip
        by_file = {p.name: catalogue(p) for p in files}
        by_file = {name: msgs for name, msgs in by_file.items() if msgs}
        used[lang] = sorted(by_file)
        short = [m for msgs in by_file.values() for m in msgs
                 if 20 <= len(m) <= 200 and not m.isascii()]  # fmt: skip
        for encoding in encodings:
            pool = [m for m in short if fits(m, encoding)] if encoding != MIXED else []
            samples += [
                (lang, encoding, "short", m) for m in rng.sample(pool, min(SHORT, len(pool)))
            ]
            names = sorted(by_file)
            for _ in range(LONG):
                msgs = by_file[rng.choice(names)]
                start, lines = rng.randrange(len(msgs)), []
                for m in msgs[start:] + msgs[:start]:
                    line = " ".join(m.split())
                    if fits(line, encoding):
                        lines.append(line)
                    if sum(map(len, lines)) >= LONG_CHARS:
                        break
                samples.append((lang, encoding, "long", "\n".join(lines) + "\n"))
    return samples, used


def today(data: bytes) -> str:
    """The rule before issue 64 (dotcat.data.encodings at 8bbe8d2): a byte-order mark, UTF-8,
    else charset-normalizer's best match, cp1252 where it is among the equally likely."""
    from charset_normalizer import from_bytes

    for mark, encoding in ((codecs.BOM_UTF8, "utf-8-sig"), (codecs.BOM_UTF16_LE, "utf-16"),
                           (codecs.BOM_UTF16_BE, "utf-16")):  # fmt: skip
        if data.startswith(mark):
            return data.decode(encoding)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        pass
    matches = list(from_bytes(data[: 1 << 20]))
    if not matches:
        return ""
    best = matches[0]
    tied = [m for m in matches if (m.chaos, m.coherence) == (best.chaos, best.coherence)]
    chosen = "cp1252" if any("cp1252" in m.could_be_from_charset for m in tied) else best.encoding
    return data.decode(chosen, "replace")


def now(data: bytes) -> tuple[str, str, str]:
    """The rule since: ``(text, encoding, guess)`` (:func:`dotcat.data.encodings.decode`)."""
    from dotcat.data.encodings import NotDecodable, decode

    try:
        return tuple(decode(data))
    except NotDecodable:
        return "", "", "none"


def main() -> None:
    global SETS
    parser = common.parser(__doc__)
    parser.add_argument("--seed", type=int, default=64, help="draw another set")
    parser.add_argument(
        "--languages", help="comma-separated locales instead of SETS (others: Western encodings)"
    )
    parser.add_argument("--out", type=Path, default=Path(__file__).with_name("encoding.md"))
    args = parser.parse_args()
    if args.languages:
        SETS = {lang: SETS.get(lang, WEST) for lang in args.languages.split(",")}
    samples, used = build(random.Random(args.seed))
    right: dict[tuple, Counter] = defaultdict(Counter)
    wrong_as: dict[tuple, Counter] = defaultdict(Counter)
    for lang, encoding, length, text in samples:
        data = encode(text, encoding)
        read, chosen, guess = now(data)
        cell = right[lang, encoding]
        cell[length] += 1
        cell[f"today {length}"] += today(data) == text
        cell[f"now {length}"] += read == text
        cell["unsure"] += guess == "unsure"
        if read != text:
            wrong_as[lang, encoding][chosen or "(none)"] += 1
    note = NOTE.encode("latin-1")
    lines = common.header(
        "Encoding detection: before and after issue 64",
        f"charset-normalizer {_version('charset_normalizer')}.",
    )
    lines += [
        f"The Latin-1 note of issue 64, {NOTE.strip()!r}: before {today(note).strip()!r}; "
        f"now {now(note)[0].strip()!r} (read as {now(note)[1]}, {now(note)[2]}).", "",
        "Files read right (the text read is the text written), short (one message) and long "
        f"(>= {LONG_CHARS} characters); 'unsure': read by the preference where the detector "
        "found nothing or read them otherwise (named first in the warning); 'wrong now, read "
        "as': the encodings the rule since chose for the files it read wrong.", "",
        "| language | written in | short: before | short: now | long: before | long: now | "
        "unsure now | wrong now, read as |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]  # fmt: skip
    totals: Counter = Counter()
    for (lang, encoding), cell in right.items():
        totals.update(cell)
        wrong = ", ".join(f"{e} {n}" for e, n in wrong_as[lang, encoding].most_common(3))
        lines.append(
            f"| {lang} | {encoding} | {_share(cell, 'today short', 'short')} | "
            f"{_share(cell, 'now short', 'short')} | {_share(cell, 'today long', 'long')} | "
            f"{_share(cell, 'now long', 'long')} | {cell['unsure']} | {wrong} |"
        )
    lines.append(
        f"| **all** | | {_share(totals, 'today short', 'short')} | "
        f"{_share(totals, 'now short', 'short')} | {_share(totals, 'today long', 'long')} | "
        f"{_share(totals, 'now long', 'long')} | {totals['unsure']} | |"
    )
    lines += [
        "",
        "By encoding, short and long files of every language together:",
        "",
        "| written in | files | read right before | read right now |",
        "| --- | --- | --- | --- |",
    ]
    by_encoding: dict[str, Counter] = defaultdict(Counter)
    for (_, encoding), cell in right.items():
        by_encoding[encoding].update(cell)
    for encoding, cell in by_encoding.items():
        files = cell["short"] + cell["long"]
        before, after = (
            cell["today short"] + cell["today long"],
            cell["now short"] + cell["now long"],
        )
        lines.append(
            f"| {encoding} | {files} | {before} ({before / files:.1%}) | "
            f"{after} ({after / files:.1%}) |"
        )
    lines += ["", "Catalogues the texts came from (/usr/share/locale/LANG/LC_MESSAGES/):", ""]
    lines += [f"- {lang}: {len(names)} catalogues ({', '.join(names[:12])}"
              f"{', ...' if len(names) > 12 else ''})" for lang, names in used.items()]  # fmt: skip
    common.write(args.out, lines)


def _share(cell: Counter, hits: str, total: str) -> str:
    return f"{cell[hits]}/{cell[total]}" if cell[total] else "-"


def _version(module: str) -> str:
    import importlib.metadata

    return importlib.metadata.version(module.replace("_", "-"))


if __name__ == "__main__":
    main()
