"""The README and docs/ as tests: their examples run, their links resolve, and the README stays
a short guide.

How the examples run: every ```bash and ```python block of README.md and docs/*.md runs, in the
page's order, in one scratch folder per test session that holds the small files the examples
name (see :func:`sandbox`): ``my-docs/`` (a folder of Markdown, text and HTML files),
``tickets.csv``, ``questions.tsv`` with ``questions-qrels.tsv``, ``runs/cat`` (a tiny
cross-encoder standing in for one ``dotcat train cat`` made) and ``data/`` (the repository's
SciFact). Consecutive blocks of one language run as one script (bash with ``-euo pipefail``,
in its own process group, so a server a block started never outlives it) or one Python
program, with the environment's ``dotcat`` and ``python`` first on the PATH and the real
default model: these tests are marked slow. A ```toml block is an experiment file, checked by
``dotcat.experiment.load_config``.

A block that cannot run here (minutes of training, the network) is preceded by the line
``<!-- docs-test: skip, REASON -->``; the reason is required. docs/cli.md is generated
(``scripts/gen_cli_docs.py``) and checked against the CLI instead.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import typer
from tests.serve.conftest import free_port
from tests.timing import within

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The pages whose examples run, in reading order (the README's index is reused after it).
PAGES = [
    README,
    *sorted(p for p in (ROOT / "docs").glob("*.md") if p.name != "cli.md"),
]
README_MAX_LINES = 250
RUN_LANGUAGES = ("bash", "python")
#: How a page names a port (``--port 8766``, ``127.0.0.1:8766``). Every mention of such a port in
#: a page's examples (``${PORT:-8766}`` too) is replaced by a free one when they run, so a test
#: run never fails on a port the docs name being taken.
PORT = re.compile(r"(?:(?<=--port )|(?<=127\.0\.0\.1:)|(?<=localhost:))\d{4,5}\b")
NUMBER = re.compile(r"\b\d{4,5}\b")


def named_ports() -> set[str]:
    """The ports the pages' examples name."""
    return {port for page in PAGES for block in runnable(page) for port in PORT.findall(block.code)}


SKIP = re.compile(r"<!--\s*docs-test:\s*skip\s*,\s*(?P<reason>\S.*?)\s*-->")
FENCE = re.compile(r"^```(?P<lang>[\w-]*)\s*$")
BLOCK_TIMEOUT_S = within(600)  # one page's consecutive blocks of one language


@dataclass(frozen=True)
class Block:
    """One fenced code block of a page."""

    page: Path
    line: int  # of the opening fence, 1-based
    lang: str
    code: str
    skip: str | None  # the reason given in the skip comment, if any

    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    """Every fenced block of ``page`` with its language and skip reason."""
    lines = page.read_text(encoding="utf-8").splitlines()
    found, i = [], 0
    while i < len(lines):
        opening = FENCE.match(lines[i])
        if not opening:
            i += 1
            continue
        end = next(j for j in range(i + 1, len(lines)) if lines[j].startswith("```"))
        previous = lines[i - 1] if i > 0 else ""
        marker = SKIP.search(previous)
        found.append(
            Block(
                page, i + 1, opening["lang"], "\n".join(lines[i + 1 : end]) + "\n",
                marker["reason"] if marker else None,
            )
        )  # fmt: skip
        i = end + 1
    return found


def runnable(page: Path) -> list[Block]:
    return [b for b in blocks(page) if b.lang in RUN_LANGUAGES and b.skip is None]


# -- the sandbox -----------------------------------------------------------------------------

MY_DOCS = {
    "passwords.md": "# Resetting your password\n\nOpen Settings, choose Account, then Reset "
    "password. A link to choose a new password is emailed to the address on your account; it "
    "expires after one hour.\n",
    "holidays.txt": "Office hours and holidays. The office is closed on public holidays and "
    "between Christmas and New Year. Support answers e-mail within one working day.\n",
    "notes/coffee.html": "<!doctype html><html><head><title>The coffee machine</title></head>"
    "<body><main><h1>The coffee machine</h1><p>Descale the coffee machine every month with the "
    "blue tablets kept in the kitchen drawer, and empty the grounds container every evening."
    "</p></main></body></html>\n",
    "drafts/printer.md": "# Printer\n\nThe printer on the second floor jams on thick paper.\n",
}
TICKETS = (
    "ticket,subject,body\n"
    "T-1,Login,I cannot log in after changing my password.\n"
    "T-2,Printer,The printer on floor two jams on thick paper.\n"
)
QUESTIONS = "q1\treset my password\nq2\tdescaling the coffee machine\nq3\tpublic holidays\n"
QRELS = "q1 0 passwords.md 1\nq2 0 notes/coffee.html 1\nq3 0 holidays.txt 1\n"


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory, tiny_cat_dir) -> Path:
    """The folder the examples run in, with the files they name."""
    root = tmp_path_factory.mktemp("docs_sandbox")
    for name, text in MY_DOCS.items():
        (root / "my-docs" / name).parent.mkdir(parents=True, exist_ok=True)
        (root / "my-docs" / name).write_text(text, encoding="utf-8")
    (root / "tickets.csv").write_text(TICKETS, encoding="utf-8")
    (root / "questions.tsv").write_text(QUESTIONS, encoding="utf-8")
    (root / "questions-qrels.tsv").write_text(QRELS, encoding="utf-8")
    shutil.copytree(tiny_cat_dir, root / "runs" / "cat")
    (root / "data").symlink_to(ROOT / "data", target_is_directory=True)
    return root


def _environment() -> dict[str, str]:
    """This test's environment, with this interpreter's ``dotcat`` and ``python`` first."""
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT / "src"), env.get("PYTHONPATH")]))
    env["DOTCAT_QUIET"] = "1"  # no progress bars in the captured output
    return env


def run_script(lang: str, code: str, cwd: Path, where: str) -> None:
    """Run ``code`` as bash or Python in ``cwd``; fail with its output when it fails.

    The script runs in a process group of its own, killed afterwards: a server it started in
    the background stops with it, also when the script fails before its ``kill``.
    """
    argv = (
        ["bash", "-euo", "pipefail", "-c", code] if lang == "bash" else [sys.executable, "-c", code]
    )
    process = subprocess.Popen(
        argv, cwd=cwd, env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, start_new_session=True,
    )  # fmt: skip
    try:
        output, _ = process.communicate(timeout=BLOCK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"{where}: still running after {BLOCK_TIMEOUT_S} s\n{output[-4000:]}")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    assert process.returncode == 0, f"{where}: exit status {process.returncode}\n{output[-4000:]}"


def _groups(page_blocks: list[Block]) -> list[tuple[str, str, str]]:
    """Consecutive blocks of one language joined: ``(language, code, where)``, each port the
    page names replaced by one free port (the same one throughout the page)."""
    groups: list[tuple[str, str, str]] = []
    named, ports = named_ports(), {}

    def free(number: re.Match) -> str:
        return ports.setdefault(number[0], str(free_port())) if number[0] in named else number[0]

    for block in page_blocks:
        block = replace(block, code=NUMBER.sub(free, block.code))
        if groups and groups[-1][0] == block.lang:
            lang, code, where = groups[-1]
            groups[-1] = (lang, code + block.code, f"{where}, {block.line}")
        else:
            groups.append((block.lang, block.code, block.where()))
    return groups


# -- the examples run ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def named_ports_taken():
    """Every port a page names, held by a listening socket while the examples run (those that
    are free): an example that still used one would fail to listen, as on a busy machine."""
    held = []
    named = {int(port) for port in named_ports()}
    for port in sorted(named):
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
            s.listen()
            held.append(s)
        except OSError:  # taken already: as good
            s.close()
    yield named
    for s in held:
        s.close()


@pytest.mark.slow
@pytest.mark.parametrize(
    "page", [p for p in PAGES if runnable(p)], ids=lambda p: str(p.relative_to(ROOT))
)
def test_a_pages_examples_run(page, sandbox, named_ports_taken):
    page_blocks = runnable(page)
    if page != README and not (sandbox / "my-index").exists():
        run_script("bash", "dotcat index my-docs my-index\n", sandbox, "the README's index")
    for lang, code, where in _groups(page_blocks):
        run_script(lang, code, sandbox, where)


def test_every_port_a_page_names_is_replaced_by_a_free_one(named_ports_taken):
    assert {8765, 8766} <= named_ports_taken  # the pattern finds the ports the pages name
    for page in PAGES:
        for _, code, where in _groups(runnable(page)):
            assert not {int(n) for n in NUMBER.findall(code)} & named_ports_taken, where


@pytest.mark.slow
def test_the_documented_experiment_files_load(sandbox, monkeypatch):
    from dotcat.experiment import load_config

    monkeypatch.chdir(sandbox)
    checked = 0
    for page in PAGES:
        for block in blocks(page):
            if block.lang == "toml" and block.skip is None:
                path = sandbox / f"experiment-{page.stem}-{block.line}.toml"
                path.write_text(block.code, encoding="utf-8")
                config = load_config(path)
                assert config.systems, block.where()
                checked += 1
    assert checked >= 1


# -- the pages are well formed (fast) --------------------------------------------------------


def test_every_skipped_block_says_why_and_the_others_run():
    total = ran = 0
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        markers = re.findall(r"<!--\s*docs-test.*?-->", text)
        assert all(SKIP.fullmatch(m) for m in markers), (page, markers)
        for block in blocks(page):
            if block.lang in RUN_LANGUAGES:
                total += 1
                ran += block.skip is None
        assert len(markers) == sum(b.skip is not None for b in blocks(page)), page
    assert ran >= 15, f"only {ran} of {total} bash and python blocks run"


def test_the_readme_is_a_short_guide_with_the_two_set_up_commands():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= README_MAX_LINES
    install = next(b for b in blocks(README) if "make scifact" in b.code)
    commands = [line.split("#")[0].strip() for line in install.code.splitlines()]
    assert commands == ["make scifact", "make test"]  # .ci/run calls `make test`
    assert "make test " in (ROOT / ".ci" / "run").read_text(encoding="utf-8")


def _slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = page.read_text(encoding="utf-8")
    text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
    return {_slug(h) for h in re.findall(r"^#+\s+(.+)$", text, flags=re.MULTILINE)}


LINK = re.compile(r"\[[^\]]*\]\((?P<target>[^)\s]+)\)")


def test_every_relative_link_resolves():
    pages = [README, *sorted((ROOT / "docs").glob("*.md"))]
    broken = []
    for page in pages:
        text = page.read_text(encoding="utf-8")
        text = re.sub(r"^```.*?^```", "", text, flags=re.MULTILINE | re.DOTALL)
        for target in LINK.findall(text):
            if re.match(r"[a-z]+:", target):  # https:, mailto:
                continue
            path, _, anchor = target.partition("#")
            resolved = (page.parent / path).resolve() if path else page
            if not resolved.exists():
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such file)")
            elif anchor and resolved.suffix == ".md" and anchor not in _anchors(resolved):
                broken.append(f"{page.relative_to(ROOT)}: {target} (no such heading)")
    assert not broken, "\n".join(broken)


def test_the_cli_reference_is_current():
    spec = importlib.util.spec_from_file_location(
        "gen_cli_docs", ROOT / "scripts" / "gen_cli_docs.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    page = module.render()
    assert "## dotcat search" in page and "## dotcat train cat" in page
    written = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    made_by = re.search(r"with typer\s+(\S+);", written)
    if made_by is None or made_by.group(1) != typer.__version__:
        # Each typer/click release lays help out its own way (metavars, wrapping): the page
        # is compared under the typer it was rendered by (pyproject's floor is older).
        pytest.skip(f"docs/cli.md was rendered by another typer than {typer.__version__}")
    stale = "docs/cli.md is stale: run python scripts/gen_cli_docs.py"
    assert written == page, stale


def test_the_citation_names_the_packages_version_and_licence():
    citation = (ROOT / "CITATION.cff").read_text(encoding="utf-8")
    pyproject = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    version = re.search(r'^version = "(.+)"', pyproject, re.MULTILINE).group(1)
    assert re.search(rf"^version: {re.escape(version)}$", citation, re.MULTILINE), version
    assert "license: Apache-2.0" in citation and "Apache License" in (ROOT / "LICENSE").read_text()
