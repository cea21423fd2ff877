"""``dotcat search INDEX "query"`` from a cold process: wall seconds before and after, where
they go, and whether the results are the same.

    python eval/benchmarks/bench_cli_search.py --before-undo 700d611,... [--index INDEX]
    python eval/benchmarks/bench_cli_search.py --before-ref 2fb7140
    python eval/benchmarks/bench_cli_search.py --before-src /path/to/an/older/checkout/src

*Before* is another tree of dotcat's sources: this checkout's with commits undone
(``--before-undo``: their diffs reversed, so other work since is in both), a commit's
(``--before-ref``, extracted with ``git archive``) or a ``src`` folder (``--before-src``), run by
the same interpreter and packages (``PYTHONPATH``); *after* is this checkout. The index is built
beforehand (``make scifact``). Bytecode caches are written and read as a user's Python does
(``PYTHONDONTWRITEBYTECODE`` is left out of the runs' environment; the untimed first runs
write them).

- **Wall**: each run starts the ``dotcat`` console script's entry in a new process, the default
  (hybrid) search of one query, as a user types it; the page cache is warm (one untimed run of
  each first). After and before take turns, run by run, so a drift of the machine's speed
  falls on both; reported: median, min and max seconds, and the median of the pairs' ratios.
- **Phases**: the same command in a process that times its parts (``time.perf_counter`` and
  ``time.process_time``: the CPU seconds move little with other processes' load): importing
  the command line, importing the search pipeline (FAISS, bm25s...), opening the index (FAISS,
  doc store, BM25), loading the query encoder, the search, printing; medians over ``--runs``.
  Python's own start-up and exit is the process's wall time less the timed part.
- **Results**: the one query's hits (``--json``) and every SciFact test query's top 100
  (``--queries``, the hybrid default and dense alone) from both: the same documents in the
  same order, scores within ``--tolerance``.
"""

from __future__ import annotations

import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import common

#: A SciFact test query (its first).
QUERY = "0-dimensional biomaterials show inductive properties."
#: Runs of the child that times phases: it wraps the library's functions by name (the same in
#: both trees) and prints what it measured on stderr.
PROBE = r"""
import atexit, json, sys, time

def clock():
    return time.perf_counter(), time.process_time()

marks = {}

def add(phase, start):
    wall, cpu = clock()
    mark = marks.setdefault(phase, [0.0, 0.0])
    mark[0] += wall - start[0]
    mark[1] += cpu - start[1]

begin = clock()
import dotcat.cli as cli
from dotcat.cli.commands import app
add("import the command line", begin)
start = clock()
from dotcat.search import dense, pipeline
add("import the search pipeline", start)
import dotcat.cli.search as cli_search

def wrap(owner, name, phase):
    function = getattr(owner, name)
    def timed(*args, **kwargs):
        start = clock()
        try:
            return function(*args, **kwargs)
        finally:
            add(phase, start)
    setattr(owner, name, timed)

wrap(pipeline, "open_stages", "open the index")
wrap(dense.DenseRetriever, "__init__", "load the query encoder")
wrap(pipeline.SearchPipeline, "search", "search")
wrap(cli_search, "print_hits", "print")
def report():
    add("timed in the process", begin)
    marks["torch imported"] = "torch" in sys.modules
    print("PROBE " + json.dumps(marks), file=sys.stderr)

atexit.register(report)  # run however the entry ends the process
sys.argv[0] = "dotcat"
sys.exit(getattr(cli, "run", app)())  # the console script's entry (app before run)
"""
#: The console script as each tree's entry point runs it (``dotcat.cli:run``; ``app`` before).
LAUNCH = [sys.executable, "-c", "import sys, dotcat.cli as cli; sys.argv[0] = 'dotcat'; "
          "sys.exit((getattr(cli, 'run', None) or cli.app)())"]  # fmt: skip
PHASES = (
    "import the command line",
    "import the search pipeline",
    "open the index",
    "load the query encoder",
    "search",
    "print",
)


def main() -> None:
    parser = common.parser(__doc__, output="cli_search.md", work="runs/cli_search")
    parser.add_argument("--index", type=Path, default=Path("indexes/scifact-minilm"))
    parser.add_argument("--query", default=QUERY)
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--tolerance", type=float, default=1e-5)
    before = parser.add_mutually_exclusive_group(required=True)
    before.add_argument("--before-undo", help="commits (comma-separated) undone from this tree")
    before.add_argument("--before-ref", help="a commit of this repository")
    before.add_argument("--before-src", type=Path, help="a folder of dotcat's sources")
    parser.add_argument("--skip-results", action="store_true", help="no --queries runs")
    args = parser.parse_args()
    if not (args.index / "manifest.json").is_file():
        raise SystemExit(f"{args.index}: no index; build it first (make scifact)")
    args.work.mkdir(parents=True, exist_ok=True)
    trees = {"after": common.ROOT / "src", "before": before_tree(args)}
    print(f"machine: {common.describe()}", flush=True)
    command = ["search", str(args.index), args.query]
    same = compare_hits(trees, command, args.tolerance)
    runs = None if args.skip_results else compare_runs(trees, args, args.tolerance)
    wall = time_walls(trees, command, args.runs)
    phases = {name: time_phases(src, command, args.runs) for name, src in trees.items()}
    write_report(args, wall, phases, same, runs)


def before_tree(args) -> Path:
    """The ``src`` folder of the sources to compare with."""
    if args.before_src is not None:
        return args.before_src.resolve()
    if args.before_undo is not None:  # outside the repository: git apply works as patch there
        out = Path(tempfile.mkdtemp(prefix="dotcat-before-"))
        shutil.copytree(common.ROOT / "src", out / "src",
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip
        for commit in reversed(args.before_undo.split(",")):
            diff = subprocess.run(["git", "diff", f"{commit}^", commit, "--", "src"],
                                  cwd=common.ROOT, capture_output=True, check=True)  # fmt: skip
            diff = diff.stdout
            subprocess.run(["git", "apply", "-R", "-"], input=diff, cwd=out, check=True)
        return out / "src"
    out = args.work / f"before-{args.before_ref}"
    if not (out / "src" / "dotcat").is_dir():
        out.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(["git", "archive", args.before_ref, "src"], cwd=common.ROOT,
                                 capture_output=True, check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(out)], input=archive, check=True)
    return (out / "src").resolve()


def env(src: Path) -> dict[str, str]:
    """The environment that runs ``dotcat`` from the sources in ``src`` (bytecode cached)."""
    kept = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    return {**kept, "PYTHONPATH": str(src)}


def dotcat(src: Path, args: list[str], probe: bool = False) -> tuple[float, str, str]:
    """``dotcat ARGS`` (with ``probe``: in the phase-timing child) from ``src``, in a new
    process: wall seconds, stdout, stderr."""
    line = [sys.executable, "-c", PROBE, *args] if probe else [*LAUNCH, *args]
    start = time.perf_counter()
    done = subprocess.run(line, env=env(src), capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"dotcat {' '.join(args)} ({src}) failed:\n{done.stderr}")
    return seconds, done.stdout, done.stderr


def time_walls(trees: dict[str, Path], command: list[str], runs: int) -> dict[str, list[float]]:
    """Wall seconds of ``runs`` cold runs of each tree, taking turns (one untimed run each
    first, so the page cache holds every file)."""
    for src in trees.values():
        dotcat(src, command)
    walls: dict[str, list[float]] = {name: [] for name in trees}
    for run in range(runs):
        order = list(trees) if run % 2 == 0 else list(reversed(trees))
        for name in order:
            walls[name].append(dotcat(trees[name], command)[0])
        print(f"run {run + 1}/{runs}: " + ", ".join(f"{n} {w[-1]:.2f} s" for n, w in
                                                    walls.items()), flush=True)  # fmt: skip
    return walls


def time_phases(src: Path, command: list[str], runs: int) -> dict[str, list]:
    """Per phase, ``[wall, cpu]`` seconds of each of ``runs`` runs of the timing child."""
    out: dict[str, list] = {}
    for _ in range(runs):
        wall, _, err = dotcat(src, command, probe=True)
        line = next(x for x in err.splitlines() if x.startswith("PROBE "))
        marks = json.loads(line.removeprefix("PROBE "))
        marks["process"] = [wall, None]
        for phase, value in marks.items():
            out.setdefault(phase, []).append(value)
    return out


def compare_hits(trees: dict[str, Path], command: list[str], tolerance: float) -> str:
    """Whether both trees give the query the same hits (ids in order, scores within
    ``tolerance``), in words."""
    hits = {name: json.loads(dotcat(src, [*command, "--json"])[1]) for name, src in trees.items()}
    ids = {name: [h["doc_id"] for h in found] for name, found in hits.items()}
    worst = max(abs(a["score"] - b["score"]) for a, b in zip(*hits.values(), strict=True))
    verdict = "the same" if ids["after"] == ids["before"] and worst <= tolerance else "DIFFERENT"
    return f"{verdict}: {len(ids['after'])} hits, ids in the same order: " \
           f"{ids['after'] == ids['before']}, largest score difference {worst:.2e}"  # fmt: skip


def compare_runs(trees: dict[str, Path], args, tolerance: float) -> list[str]:
    """Every SciFact test query's top 100, hybrid and dense, from both trees, compared."""
    lines = []
    for stage in ("auto", "dense"):
        runs = {}
        for name, src in trees.items():
            with tempfile.NamedTemporaryFile(suffix=".trec", dir=args.work) as out:
                dotcat(src, ["-q", "search", str(args.index), "--queries", str(common.SCIFACT),
                             "--split", "test", "-k", "100", "--first-stage", stage,
                             "--output", out.name])  # fmt: skip
                runs[name] = read_run(Path(out.name))
        lines.append(f"- first stage {stage}: " + compare(runs["after"], runs["before"], tolerance))
        print(lines[-1], flush=True)
    return lines


def read_run(path: Path) -> dict[str, list[tuple[str, float]]]:
    run: dict[str, list[tuple[str, float]]] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        qid, _, doc, _, score, _ = line.split()
        run.setdefault(qid, []).append((doc, float(score)))
    return run


def compare(after: dict, before: dict, tolerance: float) -> str:
    """Queries whose ranking differs beyond ties (two documents within ``tolerance`` of each
    other may come in either order, also across the cut at k), queries reordered within ties,
    and the largest difference of a document's score."""
    differ = [q for q in before if not same_ranking(after.get(q, []), before[q], tolerance)]
    reordered = [q for q in before if [d for d, _ in after.get(q, [])] != [d for d, _ in before[q]]]
    worst = max((abs(s - dict(before[q])[d]) for q in before for d, s in after.get(q, [])
                 if d in dict(before[q])), default=0.0)  # fmt: skip
    verdict = "the same" if not differ and worst <= tolerance else "DIFFERENT"
    return (f"{verdict}: {len(before)} queries, {len(differ)} ranked otherwise beyond ties "
            f"{differ[:5]}, {len(reordered) - len(differ)} with documents within {tolerance:g} "
            f"of each other in another order {sorted(set(reordered) - set(differ))[:5]}; "
            f"largest score difference {worst:.2e}")  # fmt: skip


def same_ranking(after: list, before: list, tolerance: float) -> bool:
    """Whether ``after`` ranks as ``before`` with ties allowed: every document scores within
    ``tolerance`` of its score there (one found by only one of them within ``tolerance`` of the
    other's last), and no two are in an order that ``before``'s scores contradict by more."""
    a, b = dict(after), dict(before)
    last_a, last_b = (after[-1][1] if after else 0.0), (before[-1][1] if before else 0.0)
    for doc, score in after:
        if abs(score - b.get(doc, last_b)) > tolerance and (doc in b or score > last_b):
            return False
    if any(doc not in a and score > last_a + tolerance for doc, score in before):
        return False
    scores = [b.get(doc, last_b) for doc, _ in after]
    return all(x >= y - tolerance for x, y in zip(scores, scores[1:], strict=False))


def median(values: list) -> float:
    return statistics.median(v for v in values if v is not None)


def write_report(args, wall, phases, same, runs) -> None:
    lines = common.header('`dotcat search INDEX "query"` from a cold process')
    ratios = [a / b for a, b in zip(wall["after"], wall["before"], strict=True)]
    before_name = (f"this tree less {args.before_undo}" if args.before_undo else
                   args.before_ref or common.shown(args.before_src))  # fmt: skip
    lines += [
        f"Index: `{common.shown(args.index)}`; query: `{args.query}`; the default (hybrid) "
        f"search, 10 results printed. Before: `{before_name}`; after: this checkout. "
        f"{args.runs} cold runs each, taking turns, page cache warm.",
        "",
        "## Wall seconds (a new process per run)",
        "",
        "| | median | min | max |",
        "| --- | ---: | ---: | ---: |",
    ]
    for name in ("before", "after"):
        w = wall[name]
        lines.append(f"| {name} | {statistics.median(w):.2f} | {min(w):.2f} | {max(w):.2f} |")
    lines += ["", f"After / before, the median of the {len(ratios)} pairs' ratios: "
              f"{statistics.median(ratios):.3f}.", ""]  # fmt: skip
    lines += ["## Where the time goes (medians of the timing child's runs)", "",
              "| phase | before wall s | before CPU s | after wall s | after CPU s |",
              "| --- | ---: | ---: | ---: | ---: |"]  # fmt: skip
    for phase in (*PHASES, "timed in the process"):
        cells = []
        for name in ("before", "after"):
            values = phases[name].get(phase, [[0.0, 0.0]])
            cells += [f"{median([v[0] for v in values]):.3f}",
                      f"{median([v[1] for v in values]):.3f}"]  # fmt: skip
        lines.append(f"| {phase} | " + " | ".join(cells) + " |")
    start = {
        n: median([p[0] for p in phases[n]["process"]])
        - median([t[0] for t in phases[n]["timed in the process"]])
        for n in phases
    }
    lines.append(f"| Python start-up and exit (the process less the timed part) | "
                 f"{start['before']:.3f} | | {start['after']:.3f} | |")  # fmt: skip
    torch = {n: all(phases[n]["torch imported"]) for n in phases}
    lines += ["", "Other parts of the timed process (argument checks, the BM25 and hybrid "
              "stages, the fusion) are the rest of its timed seconds. PyTorch imported: "
              f"before {torch['before']}, after {torch['after']}.", "",
              "## Results", "", f"- the query above, `--json`: {same}", *(runs or [])]  # fmt: skip
    common.write(args.output, lines)


if __name__ == "__main__":
    main()
