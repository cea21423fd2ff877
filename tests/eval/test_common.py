"""The benchmarks' shared module must import where dotcat is not installed: CI's
sentence-transformers side environment runs ``st_onnx_compat.py check`` there."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[2] / "eval" / "benchmarks"

# ``sys.modules[name] = None`` makes ``import name`` raise ImportError, as in an environment
# without dotcat; the checkout's src/ on sys.path would otherwise hide a module-level import.
_WITHOUT_DOTCAT = (
    "import sys; sys.modules['dotcat'] = None; sys.path.insert(0, {path!r}); import {module}"
)


def _imports_without_dotcat(module: str) -> subprocess.CompletedProcess:
    code = _WITHOUT_DOTCAT.format(path=str(BENCHMARKS), module=module)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)


def test_common_imports_without_dotcat():
    done = _imports_without_dotcat("common")
    assert done.returncode == 0, done.stderr


def test_st_onnx_compat_imports_without_dotcat():
    done = _imports_without_dotcat("st_onnx_compat")
    assert done.returncode == 0, done.stderr
