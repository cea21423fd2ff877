"""`dotcat experiment` over several datasets ([[datasets]]): every system on every dataset
(one given by name, fetched from a local HTTP server), the systems x datasets table with
means, tests Holm-corrected over the whole table, one plot, every run reused the second time,
and `--only DATASET` re-running one column."""

from __future__ import annotations

import json
import re
import shutil
import textwrap
from pathlib import Path

import pytest
from PIL import Image
from tests.data.archive_server import ArchiveServer, Served, beir_files, make_zip, md5
from typer.testing import CliRunner

from dotcat.cli import app
from dotcat.data import load_qrels, read_run
from dotcat.data.catalog import CATALOG_ENV, URL_ENV
from dotcat.errors import DotcatError
from dotcat.evaluation import evaluate, holm_bonferroni
from dotcat.experiment import load_config
from dotcat.experiment.config import parse_config

runner = CliRunner()
ARCHIVE = make_zip(beir_files())


def _experiment(first: Path, second: Path, bert: Path, out: Path, k1: float = 0.9) -> str:
    return textwrap.dedent(
        f"""\
        name = "tiny collections"
        output = "{out}"
        baseline = "BM25"
        measures = ["nDCG@10", "R@100"]
        k = 5
        precision = "fp32"
        device = "cpu"

        [[datasets]]
        path = "{first}"
        name = "first"

        [[datasets]]
        path = "{second}"

        [[datasets]]
        path = "beir/tiny"

        [[systems]]
        name = "BM25"
        first_stage = "bm25"
        k1 = {k1}

        [[systems]]
        name = "dense"
        first_stage = "dense"
        model = "{bert}"
        pooling = "mean"

        [[systems]]
        name = "hybrid"
        first_stage = "hybrid"
        model = "{bert}"
        pooling = "mean"
        """
    )


@pytest.fixture()
def setup(tmp_path, tiny_beir_dir, tiny_bert_dir, monkeypatch):
    server = ArchiveServer()
    server.files["/tiny.zip"] = Served(ARCHIVE)
    (tmp_path / "catalog.json").write_text(
        json.dumps({"beir/tiny": {"file": "tiny.zip", "md5": md5(ARCHIVE)}})
    )
    monkeypatch.setenv(CATALOG_ENV, str(tmp_path / "catalog.json"))
    monkeypatch.setenv(URL_ENV, server.url)
    monkeypatch.setenv("no_proxy", "127.0.0.1")  # a proxy of the machine must not take it
    monkeypatch.setenv("DOTCAT_CACHE", str(tmp_path / "cache"))
    second = tmp_path / "other"  # the same documents, another query judged
    shutil.copytree(tiny_beir_dir, second)
    (second / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td4\t1\n")
    out = tmp_path / "report"
    config = tmp_path / "collections.toml"

    def run(*options: str, **changes) -> dict:
        config.write_text(_experiment(tiny_beir_dir, second, tiny_bert_dir, out, **changes))
        result = runner.invoke(app, ["-q", "experiment", str(config), *options])
        assert result.exit_code == 0, result.output
        return json.loads((out / "results.json").read_text())

    yield {"run": run, "out": out, "config": config, "dirs": [tiny_beir_dir, second]}
    server.close()


@pytest.mark.kernels
def test_every_system_on_every_dataset_then_every_run_reused(setup):
    first = setup["run"]()
    out = setup["out"]
    assert list(first["datasets"]) == ["first", "other", "tiny"]
    assert first["datasets"]["tiny"]["path"] == "beir/tiny"
    # Per dataset BM25, dense and hybrid runs, and an index: other's is first's (same corpus).
    assert len(first["computed"]) == 3 * 3 + 2
    for name, directory in zip(["first", "other"], setup["dirs"], strict=True):
        qrels = load_qrels(directory, "test")
        for system, record in first["datasets"][name]["systems"].items():
            report = evaluate(read_run(out / record["run"]), qrels, ["nDCG@10", "R@100"])
            assert first["table"]["nDCG@10"][system][name] == pytest.approx(
                report.aggregate["nDCG@10"]
            )
    table = first["table"]["nDCG@10"]
    for row in table.values():
        assert row["mean"] == pytest.approx(sum(row[d] for d in ("first", "other", "tiny")) / 3)

    # Holm over the whole table, per measure: 2 systems x 3 datasets = 6 p-values together.
    cells = [
        first["datasets"][d]["systems"][s]["vs_baseline"]["measures"]["nDCG@10"]
        for d in ("first", "other", "tiny")
        for s in ("dense", "hybrid")
    ]
    corrected = holm_bonferroni([c["pvalue"] for c in cells])
    assert [c["pvalue_holm"] for c in cells] == pytest.approx(corrected)

    report = (out / "report.md").read_text()
    assert re.search(r"\| system +\| +first \| +other \| +tiny \| +mean \|", report)
    assert "| BM25 (baseline) |" in report
    assert re.search(r"^- hybrid vs BM25 on other: nDCG@10 [+-]\d\.\d{4} \[", report, re.MULTILINE)
    assert "Holm's correction over the 6 system x dataset cells" in report
    assert "![summary_nDCG-10](summary_nDCG-10.png)" in report
    with Image.open(out / "summary_nDCG-10.png") as image:
        assert image.format == "PNG" and image.size[0] >= 900
    assert sorted(p.name for p in (out / "runs").iterdir()) == ["first", "other", "tiny"]

    second = setup["run"]()
    assert second["computed"] == []
    assert second["table"] == first["table"]


@pytest.mark.kernels
def test_only_reruns_one_column_and_the_others_come_from_the_cache(setup):
    setup["run"]()
    changed = setup["run"]("--only", "other", k1=1.2)
    assert [c.split()[0] for c in changed["computed"]] == ["first_stage"]  # other's BM25
    assert changed["datasets"]["other"]["computed_here"]
    assert not changed["datasets"]["first"]["complete"]  # its BM25 at k1 1.2 is not cached
    assert changed["table"]["nDCG@10"]["BM25"]["first"] is None
    report = (setup["out"] / "report.md").read_text()
    assert "not run: some run is not in the cache" in report and "(1 of 3)" in report
    again = setup["run"](k1=1.2)
    assert len(again["computed"]) == 2 and all(d["complete"] for d in again["datasets"].values())
    result = runner.invoke(app, ["experiment", str(setup["config"]), "--only", "nope"])
    assert result.exit_code == 2
    assert "--only 'nope': the experiment's datasets are first, other, tiny" in result.stderr


def test_the_file_takes_one_form_and_distinct_names(tmp_path):
    base = {"output": "o", "baseline": "b", "systems": [{"name": "b", "first_stage": "bm25"}]}
    both = {**base, "dataset": {"path": "a"}, "datasets": [{"path": "b"}]}
    with pytest.raises(DotcatError, match="dataset: give either a \\[dataset\\] table or"):
        parse_config(both, "x.toml")
    twice = {**base, "datasets": [{"path": "a/pydoc"}, {"path": "b/pydoc"}]}
    with pytest.raises(DotcatError, match="datasets\\[1\\].name: 'pydoc' names another dataset"):
        parse_config(twice, "x.toml")
    slugs = {**base, "datasets": [{"path": "a", "name": "set+1"}, {"path": "b", "name": "set-1"}]}
    with pytest.raises(DotcatError, match="'set-1' names another dataset too .*runs/set-1"):
        parse_config(slugs, "x.toml")  # once: one run folder, the second's runs over the first's
    named = parse_config({**base, "datasets": [{"path": "irds:beir/nfcorpus/dev"}]})
    assert named.dataset_list[0].label == "beir/nfcorpus/dev"


def test_the_example_file_covers_five_collections():
    config = load_config(Path(__file__).parents[2] / "eval" / "experiments" / "collections.toml")
    labels = [d.label for d in config.datasets]
    assert labels == ["scifact", "pylib", "faq", "pydoc", "debian"]
    assert {s.first_stage for s in config.systems} == {"bm25", "dense", "hybrid"}
