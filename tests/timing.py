"""Wall-clock bounds in tests, scaled for slow runs.

A few tests assert that something is quick (an argument error in ~1 s, a server up in 30 s).
Under an emulator (`make test-zen3` runs the suite under qemu, ~5-10x slower) the same code
takes longer without being wrong; ``DOTCAT_TEST_SLOWDOWN`` (default 1) scales every bound.
"""

from __future__ import annotations

import os

SLOWDOWN = float(os.environ.get("DOTCAT_TEST_SLOWDOWN", "1"))


def within(seconds: float) -> float:
    """A bound of ``seconds`` on this machine, scaled by ``DOTCAT_TEST_SLOWDOWN``."""
    return seconds * SLOWDOWN
