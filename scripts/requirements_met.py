"""Exit 0 when this environment already satisfies dotcat's requirements (and those of the extras
named as arguments), their own requirements included; 1 otherwise, naming the first one not met.

    python scripts/requirements_met.py dev openvino html

scripts/bootstrap.sh asks this before it runs pip: resolving every dependency again (pip's
resolver, the package index's metadata) took minutes of `make scifact`'s set-up when nothing had
changed. Versions are compared with `packaging` (pip's own rules), environment markers and
extras evaluated as pip evaluates them; dotcat itself is checked from its pyproject.toml, not
its installed metadata (which a changed pyproject.toml makes stale).
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: dotcat's own dependency there
    import tomli as tomllib

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def unmet(requirements: list[str], extras: tuple[str, ...] = ("",)) -> str | None:
    """The first requirement (or requirement of a requirement) not installed at a version it
    allows, or None."""
    todo = [(Requirement(r), extras) for r in requirements]
    seen: set[tuple[str, str]] = set()
    while todo:
        requirement, wanted = todo.pop()
        if requirement.marker and not any(
            requirement.marker.evaluate({"extra": extra}) for extra in wanted
        ):
            continue
        name = canonicalize_name(requirement.name)
        try:
            installed = distribution(name)
        except PackageNotFoundError:
            return f"{requirement} (not installed)"
        if not requirement.specifier.contains(installed.version, prereleases=True):
            return f"{requirement} (installed: {installed.version})"
        key = (name, tuple(sorted(requirement.extras)))
        if key not in seen:  # what it needs in turn, with the extras asked of it
            seen.add(key)
            todo += [(Requirement(r), ("", *key[1])) for r in installed.requires or []]
    return None


def main(extras: list[str]) -> int:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    optional = project.get("optional-dependencies", {})
    requirements = list(project["dependencies"])
    for extra in extras:
        requirements += optional[extra]
    missing = unmet(requirements)
    if missing is not None:
        print(f"requirements_met: {missing}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
