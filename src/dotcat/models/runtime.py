"""Where and how fast a model runs: device, autocast precision, CPU threads.

bf16 autocast roughly doubles matmul throughput only on CPUs with native bf16 instructions
(x86 AVX512_BF16 / AMX_BF16, ARMv8.6 BF16); elsewhere PyTorch emulates it, slower than fp32,
so ``precision="auto"`` picks bf16 on CPU only when the flags are there. On CUDA ``auto`` picks
bf16 where the GPU has it (Ampere and later), else fp16.

The detection can be overridden with the environment variable ``DOTCAT_NATIVE_BF16``: ``on``
makes ``auto`` choose bf16 (emulated, slow, but the numbers a bf16 CPU gives), ``off`` makes
it choose as an AVX2-only CPU does (no bf16; int8 documents, fp32 queries). CI runs the tests
under both, so neither kind of CPU can hide a failure of the other.

PyTorch is imported by the functions that need it, not by this module: a search from the shell
chooses its query path here and runs it without PyTorch (:mod:`.exported_encoder`); importing
PyTorch alone takes longer than that whole search.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import logging
import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dotcat import options
from dotcat.errors import DotcatError

if TYPE_CHECKING:
    import torch

logger = logging.getLogger(__name__)

#: Autocast precisions: name -> the ``torch`` dtype's name (None: plain fp32).
PRECISIONS: dict[str, str | None] = {"fp32": None, "bf16": "bfloat16", "fp16": "float16"}
_X86_BF16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})
#: Environment variable that overrides the native-bf16 detection (``auto``, ``on``, ``off``).
NATIVE_BF16_ENV = "DOTCAT_NATIVE_BF16"
_ENV_SWITCH = {"": None, "auto": None, "1": True, "on": True, "0": False, "off": False}
_interop_done = False


def resolve_device(device: str) -> torch.device:
    """``"auto"`` -> ``cuda`` when a GPU is visible, else ``cpu``; other names checked."""
    import torch

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        resolved = torch.device(device)
    except RuntimeError as e:
        raise DotcatError(f"unknown device {device!r} (auto, cpu, cuda, cuda:N)") from e
    if resolved.type == "cuda" and not torch.cuda.is_available():
        raise DotcatError(f"device {device!r} requested but no CUDA GPU is available")
    return resolved


def model_device(config: Any) -> torch.device:
    """The device a model's ``config`` names; on a CPU, PyTorch's intra-op threads set to its
    ``num_threads`` (:func:`configure_threads`)."""
    device = resolve_device(config.device)
    if device.type == "cpu":
        configure_threads(config.num_threads)
    return device


#: Where an NVIDIA driver shows itself on Linux (PyTorch's CUDA needs it loaded).
NVIDIA_DRIVER = Path("/proc/driver/nvidia/version")


def runs_on_cpu(device: str) -> bool:
    """Whether ``device`` resolves to the CPU (:func:`resolve_device`), answered without
    importing PyTorch where it can be: ``cpu``, and ``auto`` on a machine without an NVIDIA
    driver loaded (:data:`NVIDIA_DRIVER`) while PyTorch is not imported yet."""
    if device == "cpu":
        return True
    if device == "auto" and "torch" not in sys.modules and not NVIDIA_DRIVER.exists():
        return True
    return resolve_device(device).type == "cpu"


def autocast_rule(device: str) -> str:
    """The precision ``auto`` gives a PyTorch model on ``device`` (:func:`resolve_precision`):
    on a CPU bf16 where native, else fp32, found without importing PyTorch on most CPUs."""
    if runs_on_cpu(device):
        return "bf16" if cpu_has_native_bf16() else "fp32"
    return precision_name(resolve_precision("auto", resolve_device(device)))


#: /proc/cpuinfo flags and NumPy's names for them: its runtime dispatch read CPUID (no PyTorch
#: import: a search from the shell needs none). /proc/cpuinfo describes the host, CPUID what this
#: process runs on, and the kernels of FAISS, oneDNN and ONNX Runtime follow CPUID; the two
#: differ under an emulator (``make test-zen3`` runs the suite as an AVX2-only Zen 3 under
#: ``qemu-x86_64 -cpu EPYC-Milan``).
_CPUID_NAMES = {
    "avx2": "AVX2", "fma": "FMA3", "f16c": "F16C", "bmi2": "BMI2", "gfni": "GFNI", "vaes": "VAES",
    "avx512f": "AVX512F", "avx512_vnni": "AVX512VNNI", "avx512_bf16": "AVX512BF16",
    "avx512_fp16": "AVX512FP16",
}  # fmt: skip
#: Flags NumPy has no name for (Intel's AVX-VNNI and AMX): dropped where CPUID denies any flag
#: /proc/cpuinfo lists, which then describes another CPU than this process's.
_UNCHECKED = frozenset({"avx_vnni", "amx_bf16", "amx_int8", "amx_tile"})


@functools.cache
def cpu_flags() -> frozenset[str]:
    """The CPU feature flags from /proc/cpuinfo (empty where it does not exist), less those
    CPUID denies to this process (see :data:`_CPUID_NAMES`): every AVX-512 flag where it denies
    AVX-512, and the :data:`_UNCHECKED` ones where it denies any."""
    from numpy._core._multiarray_umath import __cpu_features__ as cpuid

    flags = _proc_cpuinfo_flags()
    denied = {f for f, name in _CPUID_NAMES.items() if f in flags and not cpuid.get(name, True)}
    if "avx512f" in denied:
        denied |= {f for f in flags if f.startswith("avx512")}
    return flags - (denied | (_UNCHECKED if denied else frozenset()))


def _proc_cpuinfo_flags() -> frozenset[str]:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    return frozenset(value.split())
    except OSError:
        pass
    return frozenset()


def native_bf16_override() -> bool | None:
    """``DOTCAT_NATIVE_BF16`` read as True (``on``/``1``), False (``off``/``0``) or None (unset,
    ``auto``: detect).

    Raises:
        DotcatError: any other value.
    """
    raw = os.environ.get(NATIVE_BF16_ENV, "").strip().lower()
    if raw not in _ENV_SWITCH:
        raise DotcatError(
            f"{NATIVE_BF16_ENV}={os.environ[NATIVE_BF16_ENV]!r}: expected auto, on or off"
        )
    return _ENV_SWITCH[raw]


def cpu_has_native_bf16() -> bool:
    """True where the CPU computes bf16 natively, so bf16 autocast is a speed-up, not a cost.

    ``DOTCAT_NATIVE_BF16=on|off`` overrides the detection (see the module docstring).
    """
    forced = native_bf16_override()
    return detect_native_bf16() if forced is None else forced


def detect_native_bf16() -> bool:
    """Whether this CPU's hardware computes bf16 natively (``DOTCAT_NATIVE_BF16`` ignored): its
    flags, checked against CPUID (:func:`cpu_flags`), without importing PyTorch."""
    flags = cpu_flags()
    if platform.machine().lower() in ("aarch64", "arm64"):
        return "bf16" in flags
    return bool(flags & _X86_BF16_FLAGS)


#: Precisions run by ONNX Runtime instead of PyTorch autocast (CPU only).
ONNX_PRECISIONS = ("int8",)
#: Per model kind, the int8 runtimes ``auto`` prefers, first installed first: OpenVINO, whose
#: activation ranges per group of each token's features kept more of fp32's quality than ONNX
#: Runtime's one per tensor (docs/precision.md, "Measured"). Indexes record the runtime.
INT8_BY_DEFAULT = {"encoder": ("openvino",), "cross-encoder": ("openvino",)}
#: Per CPU kind, where it differs: on AVX2 ONNX Runtime's 7-bit export encodes 2.22x
#: sentence-transformers' fp32, OpenVINO's int8 1.20x (results/precision_speed_zen3.md).
INT8_BY_CPU = {"avx2": {"encoder": ("onnxruntime",), "cross-encoder": ("onnxruntime",)}}
#: The runtimes of the int8 path (each runs both model kinds).
INT8_BACKENDS = tuple(b for b in options.INT8_BACKENDS if b != "auto")
_VNNI_FLAGS = frozenset({"avx512_vnni", "avx_vnni"})
_AVX2_FLAGS = frozenset({"avx2", "fma"})
#: What ``auto`` runs the bi-encoder at, per CPU kind (:func:`cpu_kind`): (documents, queries);
#: ``int8`` on :func:`int8_runtimes`, else (none installed) the autocast rule. The fastest path
#: keeping >= 99.8% of fp32's default-pipeline nDCG@10 on the mean of six collections, >= 98.5%
#: on each, none significantly below (docs/precision.md): measured on a Zen 4 and, for ``avx2``,
#: a Zen 3. ``vnni`` follows Zen 4 untested; other CPUs (e.g. ARM) keep fp32, unmeasured.
AUTO_ENCODER = {
    "vnni+bf16": ("int8", "int8"),
    "vnni": ("int8", "int8"),
    "bf16": ("bf16", "bf16"),
    "avx2": ("int8", "fp32"),
    "other": ("fp32", "fp32"),
}
#: Where ``auto`` re-ranks at int8 (else the autocast rule), by the same bar: on AVX2 the 7-bit
#: export, smoothed (``onnx_backend.default_keep_fp32``).
INT8_RERANK_CPUS = frozenset({"vnni+bf16", "vnni", "avx2"})
#: The sides of the bi-encoder whose precision ``auto`` chooses apart.
SIDES = ("documents", "queries")


def cpu_has_vnni() -> bool:
    """Whether int8 dot products are native here (AVX512-VNNI or AVX-VNNI). ``DOTCAT_NATIVE_BF16
    =off`` (behave as an AVX2-only CPU) says no, ``=on`` (behave as a Zen 4-class CPU) yes."""
    forced = native_bf16_override()
    return bool(cpu_flags() & _VNNI_FLAGS) if forced is None else forced


def cpu_kind() -> str:
    """This CPU as precision sees it: ``vnni+bf16`` (AMD Zen 4, Intel Sapphire Rapids), ``vnni``
    (Cascade Lake, Ice Lake, AVX-VNNI clients), ``bf16``, ``avx2`` (AVX2 and FMA only: Zen 3,
    Skylake) or ``other``. ``DOTCAT_NATIVE_BF16=on`` gives ``vnni+bf16``, ``=off`` ``avx2``."""
    vnni, bf16 = cpu_has_vnni(), cpu_has_native_bf16()
    kinds = {(True, True): "vnni+bf16", (True, False): "vnni", (False, True): "bf16"}
    avx2 = native_bf16_override() is False or cpu_flags() >= _AVX2_FLAGS
    return kinds.get((vnni, bf16), "avx2" if avx2 else "other")


def int8_runtimes(kind: str, cpu: str | None = None) -> tuple[str, ...]:
    """A model ``kind``'s int8 runtimes under ``auto`` on a ``cpu`` kind (default: this one)."""
    by_cpu = INT8_BY_CPU.get(cpu or cpu_kind(), {})
    return by_cpu.get(kind, INT8_BY_DEFAULT.get(kind, ()))


def auto_precision(kind: str, device: torch.device, side: str = "documents") -> str:
    """The precision ``auto`` stands for, for a model ``kind`` (``encoder``, ``cross-encoder``;
    for the encoder one ``side``, ``documents`` or ``queries``): the encoder's from
    :data:`AUTO_ENCODER`, the cross-encoder's int8 on :data:`INT8_RERANK_CPUS`; int8 only where
    one of the kind's runtimes (:func:`int8_runtimes`) is installed, otherwise the autocast rule
    of :func:`resolve_precision` (bf16 where native, else fp32; on GPUs ``auto``)."""
    if device.type != "cpu":
        return "auto"
    if kind == "encoder":
        wanted = AUTO_ENCODER[cpu_kind()][SIDES.index(side)]
    else:
        wanted = "int8" if cpu_kind() in INT8_RERANK_CPUS else "auto"
    autocast_rule = precision_name(resolve_precision("auto", device))
    if wanted == "int8":
        runtimes = int8_runtimes(kind)
        choice = "int8" if any(backend_installed(r) for r in runtimes) else autocast_rule
    else:
        choice = autocast_rule if wanted == "auto" else wanted
    what = f"the encoder's {side}" if kind == "encoder" else f"the {kind}"
    _say_once(logging.INFO, f"precision auto for {what} on this CPU ({cpu_kind()}): {choice}")
    return choice


def backend_installed(backend: str) -> bool:
    """Whether an int8 runtime's packages are installed (OpenVINO is an optional extra)."""
    return openvino_installed() if backend == "openvino" else True  # onnxruntime is a dependency


def openvino_installed() -> bool:
    """Whether OpenVINO and NNCF (its weight compression) are installed: ``dotcat[openvino]``."""
    return all(importlib.util.find_spec(m) is not None for m in ("openvino", "nncf"))


def int8_backend(kind: str, backend: str = "auto") -> str:
    """The runtime that runs a model ``kind`` at int8: ``auto`` is the first of the kind's
    :func:`int8_runtimes` installed, else ONNX Runtime.

    Raises:
        DotcatError: an unknown runtime.
    """
    if backend == "auto":
        runtimes = int8_runtimes(kind)
        return next((r for r in runtimes if backend_installed(r)), "onnxruntime")
    if backend not in INT8_BACKENDS:
        raise DotcatError(f"unknown int8 backend {backend!r} (auto, {', '.join(INT8_BACKENDS)})")
    return backend


def choose_precision(
    precision: str, kind: str, device: torch.device, fast: bool = True, auto_int8: bool = True
) -> tuple[bool, torch.dtype | None]:
    """``(int8, autocast dtype)`` for a model of ``kind`` asked to run at ``precision``.

    ``auto`` goes through :func:`auto_precision` (``auto_int8=False`` keeps it to the autocast
    rule, e.g. for a cross-encoder head still to be trained); ``fast=False`` is plain fp32.
    """
    if precision == "auto" and auto_int8:
        precision = auto_precision(kind, device)
    int8 = fast and is_int8(precision, device)
    return int8, resolve_precision(precision if fast and not int8 else "fp32", device)


def describe_precision(precision: str, device: torch.device) -> str:
    """What ``precision`` runs at here, for records: e.g. ``int8`` or, for ``auto`` on CPU,
    ``encoder int8, cross-encoder bf16``."""
    if precision != "auto":
        return precision
    if device.type != "cpu":
        return precision_name(resolve_precision("auto", device))
    documents, queries = (auto_precision("encoder", device, side) for side in SIDES)
    encoder = documents if documents == queries else f"{documents}, queries {queries}"
    return f"encoder {encoder}, cross-encoder {auto_precision('cross-encoder', device)}"


@functools.cache
def _say_once(level: int, message: str) -> None:
    logger.log(level, message)


def is_int8(precision: str, device: torch.device) -> bool:
    """Whether ``precision`` asks for the int8 path (:mod:`dotcat.models.onnx_backend`).

    Raises:
        DotcatError: int8 on a GPU (the int8 kernels are ONNX Runtime's CPU ones).
    """
    if precision not in ONNX_PRECISIONS:
        return False
    if device.type != "cpu":
        raise DotcatError(f"precision {precision} runs on CPU only (device is {device})")
    return True


def resolve_precision(precision: str, device: torch.device) -> torch.dtype | None:
    """The autocast dtype for ``precision`` on ``device``; None means plain fp32.

    ``auto``: bf16 on CUDA GPUs that support it, else fp16; on CPU bf16 only with native
    bf16 instructions (see :func:`cpu_has_native_bf16`), else fp32. ``fp32``, ``bf16``,
    ``fp16`` force a choice (forced bf16 on a CPU without it works, emulated and slow).
    """
    import torch

    if precision == "auto":
        if device.type == "cuda":
            return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return torch.bfloat16 if device.type == "cpu" and cpu_has_native_bf16() else None
    if precision not in PRECISIONS:
        raise DotcatError(f"unknown precision {precision!r} ({', '.join(options.PRECISIONS)})")
    name = PRECISIONS[precision]
    dtype = None if name is None else getattr(torch, name)
    if dtype is torch.bfloat16 and device.type == "cpu" and not detect_native_bf16():
        _say_once(logging.WARNING, "bf16 on a CPU without native bf16: emulated, slower than fp32")
    return dtype


def store_linear_weights(model: torch.nn.Module, dtype: torch.dtype | None) -> int:
    """Store the weights and biases of ``model``'s linear layers in ``dtype``, once.

    Under bf16 autocast a linear layer casts its fp32 weight and bias to bf16 on every call:
    the cast cache lives inside one autocast region, and an encoder call is one region. For
    a small model answering one short query those casts are a large share of the work (22M
    MiniLM weights re-cast per query: ~11.9 -> ~9-10.6 ms per query when stored in bf16, Zen
    4). Stored in bf16 they give exactly what autocast gave (the same fp32 -> bf16 rounding,
    done once; autocast leaves bf16 tensors as they are), and take half the memory. Other
    layers (embeddings, LayerNorm) stay in fp32, as autocast runs them.

    Only for models that always run under autocast with ``dtype`` and are never trained
    (the inference encoders); nothing is done for ``None`` (fp32) or a non-bf16 dtype.

    Returns:
        how many linear layers were changed.
    """
    import torch

    if dtype != torch.bfloat16:
        return 0
    changed = 0
    for module in model.modules():
        if isinstance(module, torch.nn.Linear) and module.weight.dtype != dtype:
            module.weight.data = module.weight.data.to(dtype)
            if module.bias is not None:
                module.bias.data = module.bias.data.to(dtype)
            changed += 1
    return changed


def precision_name(dtype: torch.dtype | None) -> str:
    """``fp32``, ``bf16`` or ``fp16``: the name an index manifest or a record stores."""
    wanted = None if dtype is None else str(dtype).removeprefix("torch.")
    return next(name for name, value in PRECISIONS.items() if value == wanted)


def autocast(device: torch.device, dtype: torch.dtype | None):
    """``torch.autocast`` for ``dtype`` on ``device``, or a no-op context for fp32."""
    if dtype is None:
        return contextlib.nullcontext()
    import torch

    return torch.autocast(device_type=device.type, dtype=dtype)


@contextlib.contextmanager
def quiet_transformers():
    """Hide transformers' per-call "Loading weights"/"Writing model shards" bars.

    Our models load from local directories in well under a second, so those bars are noise on
    the terminal of every ``dotcat`` command; dotcat's own bars cover the long work. The
    previous setting is restored afterwards (a user's own transformers use is left alone).
    """
    # transformers takes ~1 s to import; this module is imported where no model loads.
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    if enabled:
        hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo, else what ``platform`` knows."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def available_cpus() -> int:
    """CPUs this process may run on (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def busy_cpus() -> int | None:
    """Threads of *other* processes runnable right now (None where the OS does not say).

    The fourth field of Linux's ``/proc/loadavg`` is the instantaneous count of runnable
    threads system-wide (unlike the load averages it does not lag); this process's own
    runnable threads (the caller, and OpenMP workers still spin-waiting after the last
    parallel region) are taken off, read from ``/proc/self/task/*/stat``.
    """
    try:
        running = int(Path("/proc/loadavg").read_text(encoding="ascii").split()[3].split("/")[0])
        own = 0
        for task in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{task}/stat", encoding="ascii") as f:
                    own += f.read().rpartition(")")[2].split()[0] == "R"
            except OSError:
                continue  # the thread ended meanwhile
    except (OSError, IndexError, ValueError):
        return None
    return max(0, running - max(own, 1))


def free_threads(limit: int) -> int:
    """Intra-op threads a small call can use without waiting on a busy core: the cores no
    other task wants right now, at most ``limit``, at least 1 (1 where unknown)."""
    busy = busy_cpus()
    return 1 if busy is None else max(1, min(limit, available_cpus() - busy))


def configure_threads(num_threads: int | None = None) -> int:
    """Give PyTorch's intra-op pool every available core (or ``num_threads``).

    ``OMP_NUM_THREADS`` set by the user wins when ``num_threads`` is None. Inter-op threads
    are set once per process, and only before any parallel work (PyTorch refuses later).

    Returns:
        the intra-op thread count now in effect.
    """
    global _interop_done
    import torch

    if num_threads is None:
        if os.environ.get("OMP_NUM_THREADS"):
            return torch.get_num_threads()
        num_threads = available_cpus()
    if num_threads < 1:
        raise DotcatError(f"num_threads must be >= 1, got {num_threads}")
    if torch.get_num_threads() != num_threads:
        torch.set_num_threads(num_threads)
        logger.debug("torch intra-op threads: %d", num_threads)
    if not _interop_done:
        _interop_done = True
        with contextlib.suppress(RuntimeError):
            torch.set_num_interop_threads(num_threads)
    return torch.get_num_threads()
