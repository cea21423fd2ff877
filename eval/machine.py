"""What machine a benchmark ran on, for the results files (shared by the eval scripts)."""

from __future__ import annotations

from dotcat.models.runtime import cpu_model  # noqa: F401 - re-exported for the scripts

#: The flags that change dotcat's speed or numbers (native bf16, int8 dot products, wide SIMD).
RELEVANT_FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8")


def cpu_flags() -> str:
    """The relevant CPU flags this machine has, e.g. ``avx2 fma avx512f avx512_bf16``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    present = set(line.split(":", 1)[1].split())
                    return " ".join(f for f in RELEVANT_FLAGS if f in present) or "none of note"
    except OSError:
        pass
    return "unknown"


def describe() -> str:
    """One line for a results file: CPU model, flags, cores."""
    import os

    return f"{cpu_model()}; flags: {cpu_flags()}; {os.cpu_count()} cores"
