"""Does a document of 50 MB on a single line index like the same text on many lines?

    python eval/studies/probe/long_document.py [--mb 50] [--passages-mb 5] [--src DIR]

Issue 55's second probe found ``dotcat index`` of a 50 MB single-line text (beside two small
notes) past 120 s with no progress shown, ~100 s of it tokenizing the whole text twice to learn
whether it was longer than 512 tokens, and SIGTERM taking effect 40-45 s late inside the
tokenizer. This study builds the same text twice, as one line and as a normal multi-line file
(lines of the pylib collection's reference pages, ``runs/collections/pylib``, repeated up to
``--mb`` MB, ending with a word found nowhere else), each beside the same two notes, and runs
``dotcat --progress index`` on each folder as a user does (the default model; documents cut or
split as the default decides), then with ``--passages`` on a ``--passages-mb`` text (every
passage encoded: minutes per MB on a CPU). For each build: the wall time, the peak RSS, when
stderr's first line came (the imports come first) and the longest silence on it after that
(no bar line, no log line: what "progress shown" means in a log),
and whether ``dotcat search`` finds the last word's document first, BM25 and the default
hybrid. The ratio single / multi-line is the acceptance figure (at most 2). Then SIGTERM is
sent to single-line builds at a third, a half and two thirds of their measured time, each with
the corpus not yet converted, and the time to "dotcat: interrupted" is measured.

``--src DIR`` runs another checkout's ``src/`` (the code before a change, say): the figures are
then that code's. Timings depend on the machine's load, recorded in the results file.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))  # eval/benchmarks
import common

LAST_WORD = "zqxjlastword"
NOTES = {
    "a.md": "# Cats\n\nA small note about cats and their whiskers.\n",
    "b.md": "# Dogs\n\nAnother small note about dogs and their walks.\n",
}
PYLIB = common.ROOT / "runs" / "collections" / "pylib" / "corpus.jsonl"


def lines_of_text(mb: float) -> list[str]:
    """Non-blank lines of pylib's pages, repeated until they hold ``mb`` MB."""
    pages = [json.loads(line)["text"] for line in PYLIB.open(encoding="utf-8")]
    source = [line for page in pages for line in page.split("\n") if line.strip()]
    out, size, i = [], 0, 0
    while size < mb * 1_000_000:
        line = source[i % len(source)]
        out.append(line)
        size += len(line.encode("utf-8")) + 1
        i += 1
    return out


def folders(work: Path, mb: float, tag: str) -> dict[str, Path]:
    """``{single, multi}``: the two notes beside ``long.txt``, one line or many."""
    lines = lines_of_text(mb)
    texts = {"single": " ".join(lines), "multi": "\n".join(lines)}
    out = {}
    for variant, text in texts.items():
        folder = work / f"{tag}-{variant}"
        if not (folder / "long.txt").is_file():
            folder.mkdir(parents=True, exist_ok=True)
            for name, note in NOTES.items():
                (folder / name).write_text(note, encoding="utf-8")
            sep = " " if variant == "single" else "\n"
            (folder / "long.txt").write_text(f"{text}{sep}{LAST_WORD}\n", encoding="utf-8")
        out[variant] = folder
    return out


def run(args: list[str], env: dict, term_after: float | None = None) -> dict:
    """``dotcat ARGS`` under ``/usr/bin/time``: wall seconds, peak RSS, the longest silence
    between two lines of stderr; with ``term_after``, SIGTERM then, and the seconds until
    "dotcat: interrupted" is printed."""
    with tempfile.NamedTemporaryFile(suffix=".time") as rss:
        line = ["/usr/bin/time", "-f", "%M", "-o", rss.name, *common.DOTCAT, *args]
        start = time.perf_counter()
        process = subprocess.Popen(line, stderr=subprocess.PIPE, stdout=subprocess.PIPE,
                                   env=env)  # fmt: skip
        stamps, text, sent, said = [start], b"", None, None
        os.set_blocking(process.stderr.fileno(), False)
        while True:
            ended = process.poll() is not None
            chunk = _read(process)
            now = time.perf_counter()
            if chunk:
                text += chunk
                stamps += [now] * len(re.findall(rb"[\r\n]", chunk))
                if sent is not None and said is None and b"dotcat: interrupted" in text:
                    said = now - sent
            if ended and not chunk:
                break
            if term_after is not None and sent is None and now - start >= term_after:
                _signal_dotcat(process.pid)
                sent = now
            time.sleep(0.02)
        wall = time.perf_counter() - start
        peak = int(Path(rss.name).read_text().split()[-1]) if Path(rss.name).stat().st_size else 0
    stamps.append(time.perf_counter())
    # (from the first line on: before it, the interpreter imports torch and the rest)
    gaps = [b - a for a, b in zip(stamps[1:], stamps[2:], strict=False)]
    return {
        "code": process.returncode,
        "wall": wall,
        "rss_mb": peak / 1024,
        "first": stamps[1] - start if len(stamps) > 2 else wall,
        "silence": max(gaps, default=0.0),
        "late": said,
        "stderr": text.decode("utf-8", "replace"),
    }


def _read(process) -> bytes:
    try:
        return process.stderr.read() or b""
    except (BlockingIOError, ValueError):
        return b""


def _signal_dotcat(time_pid: int) -> None:
    """SIGTERM to the dotcat process /usr/bin/time started (its only child)."""
    children = Path(f"/proc/{time_pid}/task/{time_pid}/children")
    pids = children.read_text().split() if children.exists() else []
    os.kill(int(pids[0]) if pids else time_pid, signal.SIGTERM)


def top_hit(index: Path, env: dict, stage: str) -> str:
    done = subprocess.run(
        [*common.DOTCAT, "-q", "search", str(index), LAST_WORD, "-k", "1", "--json",
         "--first-stage", stage],
        capture_output=True, text=True, env=env,
    )  # fmt: skip
    if done.returncode != 0:
        return f"error: {done.stderr.strip()[-200:]}"
    hits = json.loads(done.stdout)
    return hits[0]["doc_id"] if hits else "none"


def build(folder: Path, index: Path, env: dict, passages: bool) -> dict:
    shutil.rmtree(index, ignore_errors=True)
    args = ["--progress", "index", str(folder), str(index), *(["--passages"] if passages else [])]
    print("$ dotcat", " ".join(args), flush=True)
    got = run(args, env)
    index.with_suffix(".stderr").write_text(got["stderr"], encoding="utf-8")
    if got["code"] != 0:
        raise SystemExit(f"dotcat index failed:\n{got['stderr'][-2000:]}")
    got["bm25"] = top_hit(index, env, "bm25")
    got["hybrid"] = top_hit(index, env, "auto")
    print(f"  {got['wall']:.1f} s, {got['rss_mb']:.0f} MB, silence {got['silence']:.1f} s, "
          f"found {got['bm25']} / {got['hybrid']}", flush=True)  # fmt: skip
    return got


def interrupt(folder: Path, work: Path, env: dict, after: float) -> dict:
    """A single-line build from a corpus not yet converted, SIGTERM ``after`` seconds in."""
    cache = Path(env["DOTCAT_CACHE"])
    fresh = {**env, "DOTCAT_CACHE": str(work / "cache-term")}
    shutil.rmtree(fresh["DOTCAT_CACHE"], ignore_errors=True)
    Path(fresh["DOTCAT_CACHE"]).mkdir(parents=True)
    for keep in ("onnx", "verified_sha256.json"):  # the model's int8 export: warm, as before
        source = cache / keep
        if source.is_dir():
            shutil.copytree(source, Path(fresh["DOTCAT_CACHE"]) / keep)
        elif source.is_file():
            shutil.copy(source, Path(fresh["DOTCAT_CACHE"]) / keep)
    index = work / "idx-term"
    shutil.rmtree(index, ignore_errors=True)
    for leftover in work.glob(".idx-term.*"):
        shutil.rmtree(leftover, ignore_errors=True)
    got = run(["index", str(folder), str(index)], fresh, term_after=after)
    print(
        f"  SIGTERM at {after:.1f} s: exit {got['code']}, interrupted "
        f"{got['late'] if got['late'] is None else round(got['late'], 2)} s later",
        flush=True,
    )
    return {"after": after, **got}


def uptime() -> str:
    """The load averages over 1, 5 and 15 minutes."""
    try:
        return ", ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def main() -> None:
    here = Path(__file__).resolve().parent
    p = common.parser(__doc__, output=here / "long_document.md", work="runs/long_document")
    p.add_argument("--mb", type=float, default=50.0, help="size of the long text (default 50)")
    p.add_argument(
        "--passages-mb",
        type=float,
        default=5.0,
        help="size of the text built with --passages (0: skip; default 5)",
    )
    p.add_argument("--src", type=Path, help="run this checkout's src/ instead of this one's")
    args = p.parse_args()
    work = args.work.resolve()
    work.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "DOTCAT_CACHE": str(work / "cache"), "HF_HUB_OFFLINE": "1"}
    env.pop("DOTCAT_QUIET", None)
    if args.src is not None:
        env["PYTHONPATH"] = str(args.src.resolve())
    load_before = uptime()
    warm = work / "warm"
    warm.mkdir(exist_ok=True)
    (warm / "a.md").write_text(NOTES["a.md"])
    build(warm, work / "idx-warm", env, passages=False)  # the int8 export on first use
    rows = []
    for mode, mb, passages in (("default", args.mb, False), ("--passages", args.passages_mb, True)):
        if mb <= 0:
            continue
        pair = folders(work, mb, f"{mb:g}mb")
        got = {v: build(pair[v], work / f"idx-{v}", env, passages) for v in ("multi", "single")}
        rows.append((mode, mb, got))
    single = folders(work, args.mb, f"{args.mb:g}mb")["single"]
    wall = rows[0][2]["single"]["wall"]
    terms = [interrupt(single, work, env, wall * share) for share in (1 / 3, 1 / 2, 2 / 3)]
    load_after = uptime()
    write_results(args, rows, terms, (load_before, load_after))


def write_results(args, rows, terms, loads) -> None:
    lines = common.header(
        "A document of 50 MB on one line, against the same text on many lines",
        f"Load average (1, 5, 15 min) before: {loads[0]}, after: {loads[1]}.",
    )
    if args.src is not None:
        lines += [f"Code: `{common.shown(args.src)}` (not this checkout's src).", ""]
    lines += [
        "| build | text | lines | wall s | peak RSS MB | first line s | longest silence s | "
        "top hit: BM25 | top hit: hybrid |",
        "| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for mode, mb, got in rows:
        for variant in ("multi", "single"):
            g = got[variant]
            lines.append(
                f"| {mode} | {mb:g} MB | {variant} | {g['wall']:.1f} | {g['rss_mb']:.0f} | "
                f"{g['first']:.1f} | {g['silence']:.1f} | {g['bm25']} | {g['hybrid']} |"
            )
    lines += ["", "Single-line time / multi-line time (at most 2 is the acceptance):", ""]
    for mode, mb, got in rows:
        ratio = got["single"]["wall"] / got["multi"]["wall"]
        lines.append(f"- {mode}, {mb:g} MB: {ratio:.2f}")
    lines += ["", "SIGTERM during a single-line build (corpus not yet converted):", ""]
    for t in terms:
        late = "not said" if t["late"] is None else f"{t['late']:.2f} s later"
        lines.append(f"- at {t['after']:.1f} s: exit {t['code']}, 'dotcat: interrupted' {late}")
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
