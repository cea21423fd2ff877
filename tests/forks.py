"""Real ``dotcat`` processes at a fork's cost: a warm interpreter that forks one per command.

A process case (kill -9, Ctrl-C, a full disk) needs a real process: its own pid, signals,
resource limits and exit status. Starting ``dotcat`` pays 5-10 s of imports (torch,
transformers, FAISS) on a loaded 2-core machine; a probe of dozens of such cases would spend
minutes importing. So a *zygote* imports once and forks a child per command: each child is a
real process from the first instruction of the command on. The zygote never runs a model, so
no thread pool exists when it forks (OpenMP's pools do not survive a fork; torch's are
started by each child).

A child can be given, besides its arguments, environment and working folder:

* ``fsize``: a file-size limit (``RLIMIT_FSIZE``, SIGXFSZ ignored), so that a write past it
  fails with EFBIG, as on a full disk;
* ``stop``: a function (``module:attribute``, e.g. ``dotcat.index.layout:swap_into_place``)
  at whose ``call``-th call the child sends itself ``signal``, ``before`` or ``after`` the real
  call: a kill -9 or a Ctrl-C at an exact point, not at a racy moment; with ``delay_s``,
  the signal comes that many seconds after the call began, from a timer (whatever the child
  is doing then, a long call into a library included), and the time it was sent is written
  to the file ``mark``;
* ``drop``: Linux capabilities (by number) the child gives up, effective and permitted,
  before it runs anything: root without ``CAP_DAC_OVERRIDE`` (1) and ``CAP_FOWNER`` (3) is
  held to file permissions as any user is (what ``setpriv --bounding-set=-dac_override``
  does for a whole command), so a read-only or foreign-owned index is one for root too.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass
from pathlib import Path

#: Imported by the zygote before it forks: the CLI and the stages its commands load
#: (``module:attribute``: transformers' classes are imported when first named, ~3 s).
WARM = (
    "torch",
    "faiss",
    "datasets",
    "bm25s",
    "transformers:AutoModel",
    "transformers:AutoTokenizer",
    "transformers:BertModel",
    "transformers:AutoModelForSequenceClassification",
    "dotcat.cli",
    "dotcat.index.build",
    "dotcat.index.updates",
    "dotcat.index.shards",
    "dotcat.search.pipeline",
    "dotcat.models",
)

_ZYGOTE = textwrap.dedent(
    """
    import importlib, json, os, resource, signal, sys, time, traceback

    for name in json.loads(sys.argv[1]):
        module, _, attribute = name.partition(":")
        imported = importlib.import_module(module)
        if attribute:
            getattr(imported, attribute)


    def stop_at(spec):
        module, _, attribute = spec["at"].partition(":")
        owner = importlib.import_module(module)
        *path, name = attribute.split(".")
        for part in path:
            owner = getattr(owner, part)
        real = getattr(owner, name)
        calls = [0]
        number = getattr(signal, spec.get("signal", "SIGKILL"))

        def die():
            os.kill(os.getpid(), number)
            time.sleep(30)  # the signal arrives first

        def later():
            time.sleep(spec["delay_s"])
            with open(spec["mark"], "w") as f:
                f.write(repr(time.time()))
            os.kill(os.getpid(), number)

        def stopped(*args, **kwargs):
            calls[0] += 1
            hit = calls[0] == spec.get("call", 1)
            if hit and "delay_s" in spec:
                import threading

                threading.Thread(target=later, daemon=True).start()
                return real(*args, **kwargs)
            if hit and spec.get("when", "before") == "before":
                die()
            result = real(*args, **kwargs)
            if hit and spec.get("when") == "after":
                die()
            return result

        setattr(owner, name, stopped)


    def drop_capabilities(numbers):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        header = (ctypes.c_uint32 * 2)(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this pid
        data = (ctypes.c_uint32 * 6)()  # 2 x (effective, permitted, inheritable)
        if libc.capget(header, data) != 0:
            raise OSError(ctypes.get_errno(), "capget")
        for number in numbers:
            word, bit = divmod(number, 32)
            data[3 * word] &= ~(1 << bit)
            data[3 * word + 1] &= ~(1 << bit)
        if libc.capset(header, data) != 0:  # the child has one thread yet: all of it
            raise OSError(ctypes.get_errno(), "capset")


    def child(request):
        if request.get("drop"):
            drop_capabilities(request["drop"])
        os.chdir(request["cwd"])
        os.environ.update(request.get("env", {}))
        out = os.open(request["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        err = os.open(request["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(out, 1)
        os.dup2(err, 2)
        # Ctrl-C as at a terminal: a suite started in the background by a non-interactive
        # shell (`cmd &`) inherits SIGINT ignored, and Python then installs no handler.
        signal.signal(signal.SIGINT, signal.default_int_handler)
        if request.get("fsize") is not None:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            sys.dont_write_bytecode = True  # a .pyc cut at the limit would be kept (conftest)
            resource.setrlimit(resource.RLIMIT_FSIZE, (request["fsize"], request["fsize"]))
        if request.get("stop"):
            stop_at(request["stop"])
        from dotcat.cli import app

        code = 0
        try:
            app(request["args"], prog_name="dotcat")
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


    print("ready", flush=True)
    for line in sys.stdin:
        request = json.loads(line)
        start = time.perf_counter()
        pid = os.fork()
        if pid == 0:
            try:
                child(request)
            finally:
                os._exit(70)
        _, status = os.waitpid(pid, 0)
        seconds = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        print(json.dumps({"code": code, "seconds": seconds}), flush=True)
    """
)


@dataclass
class Done:
    """What a child did: its exit status (``-N``: killed by signal N), its output, its time."""

    code: int
    stdout: str
    stderr: str
    seconds: float


class Zygote:
    """The warm interpreter (see the module docstring); one command at a time."""

    def __init__(self, folder: Path, warm: tuple[str, ...] = WARM) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.runs = 0
        self.process = subprocess.Popen(
            [sys.executable, "-c", _ZYGOTE, json.dumps(list(warm))],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        ready = self.process.stdout.readline()
        if ready.strip() != "ready":
            raise RuntimeError(f"the zygote did not start: {ready!r}")

    def run(
        self,
        args: list,
        cwd: Path,
        *,
        env: dict[str, str] | None = None,
        fsize: int | None = None,
        stop: dict | None = None,
        drop: tuple[int, ...] = (),
    ) -> Done:
        """Run ``dotcat ARGS`` in a forked child; returns when it has exited."""
        self.runs += 1
        out, err = self.folder / f"{self.runs}.out", self.folder / f"{self.runs}.err"
        request = {
            "args": [str(a) for a in args],
            "cwd": str(cwd),
            "env": env or {},
            "fsize": fsize,
            "stop": stop,
            "drop": list(drop),
            "stdout": str(out),
            "stderr": str(err),
        }
        start = time.perf_counter()
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        reply = self.process.stdout.readline()
        if not reply:
            raise RuntimeError("the zygote died")
        answer = json.loads(reply)
        return Done(
            answer["code"],
            out.read_text(errors="replace"),
            err.read_text(errors="replace"),
            time.perf_counter() - start,
        )

    def close(self) -> None:
        self.process.stdin.close()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        if self.process.stdout:
            self.process.stdout.close()

    def __enter__(self) -> Zygote:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
