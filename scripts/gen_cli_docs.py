"""Write docs/cli.md, the command-line reference, from the `dotcat` application itself.

Every command's ``--help`` (the typer app's click commands, groups walked in order) is
rendered at a fixed width of 100 columns, so the page is the same on every terminal and only
changes when the CLI does. ``--check`` writes nothing and exits 1 when docs/cli.md differs
from what the CLI gives now (tests/test_docs.py runs it)::

    python scripts/gen_cli_docs.py          # rewrite docs/cli.md
    python scripts/gen_cli_docs.py --check  # is it current?
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import typer

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "cli.md"
WIDTH = 100

HEADER = """# Command-line reference

Generated from the `dotcat` application by `python scripts/gen_cli_docs.py` with typer
{typer_version}; do not edit by hand (`tests/test_docs.py` fails when this page and the CLI
differ). Every command accepts `-q` (no progress bars), `--progress` (bars also where stderr
is not a terminal: a log) and `-v` (log details) anywhere on its line; a bad argument is one
line naming it, exit status 2.
"""


def context(command: Any, name: str, parent: Any = None) -> Any:
    """A click context for ``command`` at the page's width (typer's own click classes)."""
    return command.context_class(
        command, info_name=name, parent=parent, terminal_width=WIDTH, max_content_width=WIDTH
    )


def commands(command: Any, ctx: Any) -> list[tuple[str, Any, Any]]:
    """``command`` and every command under it, depth first in the group's order."""
    found = [(ctx.command_path, command, ctx)]
    if hasattr(command, "list_commands"):  # a group
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is None or sub.hidden:
                continue
            found += commands(sub, context(sub, name, ctx))
    return found


def render() -> str:
    """The whole page: a list of the commands, then each one's help in a text block."""
    from dotcat.cli import app

    top = typer.main.get_command(app)
    found = commands(top, context(top, "dotcat"))
    lines = [HEADER.format(typer_version=typer.__version__), "## Commands", ""]
    for path, command, _ in found[1:]:
        anchor = path.replace(" ", "-")
        summary = command.get_short_help_str(limit=WIDTH)
        lines.append(f"- [`{path}`](#{anchor}): {summary}")
    for path, command, sub_ctx in found:
        lines += ["", f"## {path}", "", "```text", command.get_help(sub_ctx).rstrip(), "```"]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/cli.md is stale")
    args = parser.parse_args(argv)
    page = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text(encoding="utf-8") != page:
            print(f"{PAGE.relative_to(ROOT)} is stale: run python scripts/gen_cli_docs.py")
            return 1
        return 0
    PAGE.write_text(page, encoding="utf-8")
    print(f"wrote {PAGE.relative_to(ROOT)} ({len(page.splitlines())} lines)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
