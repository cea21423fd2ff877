"""``dotcat datasets list|get``: the collections dotcat fetches by name.

The work is in :mod:`dotcat.data.catalog`. Names work wherever a data path does (``dotcat
index beir/nfcorpus ...``); ``get`` puts a copy where the user wants it (to carry to a machine
without network, say).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from dotcat.cli.main import sub_app

datasets_app = sub_app(
    "datasets", "BEIR datasets by name (beir/NAME) and ir_datasets ids (irds:ID): list, get."
)


@datasets_app.command("list")
def list_datasets() -> None:
    """The BEIR datasets dotcat knows, their published md5, and whether they are cached."""
    from dotcat.data.catalog import describe_catalog

    typer.echo(describe_catalog())


@datasets_app.command("get")
def get(
    name: Annotated[str, typer.Argument(help="beir/NAME (see `dotcat datasets list`) or irds:ID.")],
    directory: Annotated[
        Path, typer.Argument(help="Where to write it (BEIR layout); absent or empty.")
    ],
) -> None:
    """Download a dataset (checksum verified) or convert an ir_datasets one into DIR, in BEIR
    layout: corpus.jsonl, queries.jsonl, qrels/<split>.tsv. An interrupted download resumes
    when the command runs again; DIR is written whole or not at all."""
    from dotcat.data import available_splits
    from dotcat.data.catalog import RECORD_NAME, fetch
    from dotcat.files import check_can_create_in, read_json_or_none

    check_can_create_in(directory)
    start = time.perf_counter()
    fetch(name, directory)
    seconds = time.perf_counter() - start
    record = read_json_or_none(directory / RECORD_NAME) or {}
    splits = ", ".join(available_splits(directory)) or "none"
    checked = ""
    if record.get("md5"):
        verified = (
            "verified: the published one"
            if record.get("md5_published")
            else "none published: size and sha256 checked against the first download"
        )
        checked = (
            f"; zip {record['size']} bytes, md5 {record['md5']} ({verified}), "
            f"sha256 {record['sha256']}"
        )
    typer.echo(f"{name} in {directory} ({seconds:.1f} s): qrels splits {splits}{checked}")
