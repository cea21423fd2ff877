"""Print pyproject.toml's dependency floors as pip constraints (``name==floor``).

``.ci/run`` installs dotcat with them, so the suite also runs on the oldest versions dotcat
says it supports (what uv calls a lowest-direct resolution) and a floor cannot go stale.
torch is left to the caller (the CPU wheel on CPU machines).

    python3 .ci/floors.py [--skip torch] > floors.txt
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # the system Python CI starts from may be 3.10
    import tomli as tomllib

EXTRAS = ("dev", "openvino", "html")
FLOOR = re.compile(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)\s*(;.*)?$")


def floors(pyproject: Path, skip: set[str]) -> list[str]:
    """One ``name==version`` line per requirement written ``name>=version`` (markers kept)."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    requirements = list(project["dependencies"])
    for extra in EXTRAS:
        requirements += project["optional-dependencies"][extra]
    lines: dict[str, str] = {}
    for requirement in requirements:
        match = FLOOR.match(requirement)
        if match is None:
            raise SystemExit(f"{pyproject}: no '>=' floor in requirement {requirement!r}")
        name, version, marker = match.groups()
        if name.lower() not in skip:
            lines[name.lower()] = f"{name}=={version}{' ' + marker if marker else ''}"
    return list(lines.values())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--skip", action="append", default=[], help="a package to leave out")
    args = parser.parse_args()
    print("\n".join(floors(args.pyproject, {name.lower() for name in args.skip})))


if __name__ == "__main__":
    main()
