"""What the eval scripts share: paths, the machine a run is on, the options most of them take,
the head of a results file, and the ``dotcat`` command line run as a user runs it.

A benchmark runs as ``python eval/benchmarks/NAME.py`` from the repository root (this folder is
then first on ``sys.path``); a study under ``eval/studies/`` puts this folder on ``sys.path``
before its imports. Importing this module puts the checkout's ``src/`` first, for the script
and for the ``dotcat`` processes it starts, so a script measures the code beside it. Nothing
here imports dotcat or torch at import time: ``st_onnx_compat.py check`` runs where dotcat is
not installed.

Every results file starts with :func:`header`: what ran (the command, from the repository
root), when (UTC) and where (:func:`describe`), so that a figure can be traced and run again.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
#: Where the maintained benchmarks write their current results.
RESULTS = ROOT / "eval" / "benchmarks" / "results"
#: The bundled SciFact (BEIR layout), every benchmark's default data.
SCIFACT = ROOT / "data" / "scifact"
#: The test collections by name: the bundled SciFact, and those ``ood_collections.py`` builds.
COLLECTIONS = {
    "scifact": SCIFACT,
    **{
        name: ROOT / "runs" / "collections" / name
        for name in ("pylib", "faq", "pydoc", "debian", "man")
    },
}
#: ``parser(data=REQUIRED)``: ``--data`` must be given.
REQUIRED = object()

_SRC = str(ROOT / "src")
if _SRC not in sys.path:
    sys.path.insert(0, _SRC)
if _SRC not in os.environ.get("PYTHONPATH", "").split(os.pathsep):
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [_SRC, os.environ.get("PYTHONPATH")]))

_SCRIPT = Path(sys.executable).with_name("dotcat")
#: The ``dotcat`` command line: the console script beside this interpreter, else the CLI's app
#: from this interpreter (a checkout run from source, e.g. on a lent GPU machine).
DOTCAT = (
    [str(_SCRIPT)]
    if _SCRIPT.exists()
    else [sys.executable, "-c", "from dotcat.cli import app; app()"]
)

#: The CPU flags that change dotcat's speed or numbers (native bf16, int8 dot products, SIMD).
RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """The relevant CPU flags this process has, e.g. ``avx2 fma avx512f avx512_bf16``: those of
    /proc/cpuinfo less what CPUID denies (:func:`dotcat.models.runtime.cpu_flags`), so a run
    under qemu as a Zen 3 says AVX2 even though /proc/cpuinfo shows the host's flags."""
    from dotcat.models.runtime import cpu_flags as checked_flags

    present = checked_flags()
    if not present:
        return "unknown"
    return " ".join(f for f in RELEVANT_FLAGS if f in present) or "none of note"


def describe(torch: bool = False) -> str:
    """One line for a results file: CPU model, relevant flags, cores; with ``torch``, also
    PyTorch's version, its threads and the GPU (what a model-bound figure depends on)."""
    from dotcat.models.runtime import cpu_model

    line = f"{cpu_model()}; flags: {cpu_flags()}; {os.cpu_count()} cores"
    if torch:
        import torch as th

        gpu = th.cuda.get_device_name(0) if th.cuda.is_available() else "no GPU"
        line += f"; torch {th.__version__} ({th.get_num_threads()} threads), {gpu}"
    return line


def parser(
    doc: str,
    *,
    output: str | Path | None = None,
    data: Path | object | None = None,
    work: str | None = None,
) -> argparse.ArgumentParser:
    """An argument parser whose help is the script's docstring, with the options many scripts
    share, each added only when asked for: ``--output`` (the results file; a bare file name
    defaults under :data:`RESULTS`, a path is taken as it is), ``--data`` (a BEIR directory;
    :data:`SCIFACT` or another default, or :data:`REQUIRED`) and ``--work`` (a folder for
    intermediate files, kept so that a second run reuses them)."""
    p = argparse.ArgumentParser(
        description=doc, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    if output is not None:
        default = RESULTS / output if isinstance(output, str) else output
        p.add_argument("--output", type=_results_file, default=default,
                       help=f"default: {shown(default)}")  # fmt: skip
    if data is REQUIRED:
        p.add_argument("--data", type=Path, required=True, help="a BEIR directory")
    elif data is not None:
        p.add_argument("--data", type=Path, default=data, help=f"default: {shown(data)}")
    if work is not None:
        p.add_argument("--work", type=Path, default=Path(work), help=f"default: {work}")
    return p


def _results_file(value: str) -> Path:
    """``--output``: a bare file name under :data:`RESULTS`, a path as it is."""
    return RESULTS / value if Path(value).name == value else Path(value)


def setup_logging(level: int = logging.INFO) -> None:
    """Log lines with their time and logger (dotcat's progress messages during long runs)."""
    logging.basicConfig(level=level, format="%(asctime)s %(name)s: %(message)s")


def shown(path: str | Path) -> str:
    """``path`` relative to the repository where it lies inside it: results files carry no
    machine's absolute paths."""
    p = Path(path)
    try:
        return str(p.resolve().relative_to(ROOT))
    except ValueError:
        return str(p)


def command() -> str:
    """The command line that runs this script again, from the repository root."""
    return "python " + shlex.join([shown(sys.argv[0]), *sys.argv[1:]])


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def header(title: str, *notes: str, torch: bool = False) -> list[str]:
    """The head of a results file: its title, the command, the date and the machine (with
    ``torch``, PyTorch's version and threads too); ``notes`` (e.g. the precision a model ran
    at) follow on the machine's line."""
    where = " ".join([f"Date: {now()}. Machine: {describe(torch)}.", *notes])
    return [f"# {title}", "", f"Command: `{command()}`", where, ""]


def write(path: Path, lines: list[str]) -> None:
    """Write a results file (its folder made if needed) and say where."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines).rstrip("\n") + "\n", encoding="utf-8")
    print(f"wrote {shown(path)}", flush=True)


def dotcat(*args: str, capture: bool = False, quiet: bool = True) -> tuple[str, float]:
    """``dotcat ARGS`` in a new process, as a user runs it; its stdout (with ``capture``) and
    wall seconds. A failure stops the script with dotcat's own message."""
    line = [*DOTCAT, *(["-q"] if quiet else []), *map(str, args)]
    print("$ dotcat", shlex.join(map(str, args)), flush=True)
    started = time.perf_counter()
    done = subprocess.run(line, capture_output=capture, text=True)
    seconds = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(
            f"dotcat {shlex.join(map(str, args))} failed"
            + (f":\n{done.stderr}" if capture else f" (exit status {done.returncode})")
        )
    return done.stdout or "", seconds


def training_record_path(model: str | Path) -> Path:
    """The run record ``dotcat train`` writes into ``model`` (``dotcat_training.json``; the name
    is dotcat's, imported here, not at import time: see the module's docstring)."""
    from dotcat.models.resolve import TRAINING_RECORD

    return Path(model) / TRAINING_RECORD


def training_finished(model: str | Path) -> bool:
    """True when ``model``'s training record says its run finished: an interrupted ``dotcat
    train`` leaves its record (``status: running``) and a best-so-far model, which a script
    must not take for the finished one."""
    from dotcat.files import read_json_or_none

    record = read_json_or_none(training_record_path(model))
    return isinstance(record, dict) and record.get("status") == "finished"
