"""The machine line for ``eval/training_parity.py``, which imports ``machine`` from this folder:
``describe`` of ``eval/benchmarks/common.py``, the one helper the eval scripts share."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "benchmarks"))
from common import describe  # noqa: E402, F401
