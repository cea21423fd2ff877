"""The public Python API: ``dotcat``'s top-level names, light to import, with the command
line's defaults, and short reprs."""

from __future__ import annotations

import ast
import dataclasses
import importlib
import importlib.metadata
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

import dotcat
from dotcat import options
from dotcat.cli import app
from dotcat.index.manifest import Manifest

QUERY = "alpha beta"  # two topic words of the toy corpus (tests/training/toy.py)

#: Names that load no model library (torch, transformers, FAISS) when first used.
LIGHT = ("IndexConfig", "PassageConfig", "PipelineConfig", "EncoderConfig",
         "CrossEncoderConfig", "Hit", "Document", "CorpusOptions", "load_queries", "load_qrels",
         "read_run", "write_run", "evaluate", "EvalReport", "DotcatError", "DotConfig",
         "CatConfig")  # fmt: skip


def _python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )


# -- exports ---------------------------------------------------------------------------------


def test_import_dotcat_loads_no_model_library():
    heavy = ("torch", "transformers", "sentence_transformers", "faiss", "datasets")
    names = ", ".join(f"dotcat.{n}" for n in LIGHT)
    result = _python(
        "import sys, dotcat\n"
        f"assert not [m for m in {heavy!r} if m in sys.modules], 'import dotcat'\n"
        f"{names}\n"
        "assert 'torch' not in sys.modules and 'faiss' not in sys.modules, 'a light name'\n"
        "print(dotcat.__version__)"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == dotcat.__version__


def test_every_public_name_resolves_and_is_documented():
    assert set(dotcat.__all__) == {"__version__", *dotcat._EXPORTS}
    for name in dotcat._EXPORTS:
        value = getattr(dotcat, name)
        module, _, attribute = dotcat._EXPORTS[name].partition(":")
        assert value is getattr(importlib.import_module(module), attribute or name), name
        doc = inspect.getdoc(value) or ""
        # a dataclass without a docstring gets its signature as one: not documentation
        assert len(doc) > 20 and not doc.startswith(f"{value.__name__}("), name
        assert name in dir(dotcat)
    # each public name means one function: the top-level name is the package's own
    assert dotcat.build_index is dotcat.index.build_index
    assert dotcat.build_and_tune is importlib.import_module("dotcat.tuning").build_and_tune
    with pytest.raises(AttributeError, match="no attribute 'nothing'"):
        dotcat.nothing  # noqa: B018


def test_type_checkers_see_every_public_name():
    """The ``if TYPE_CHECKING:`` imports name each export from its module (editors, mypy)."""
    tree = ast.parse(Path(dotcat.__file__).read_text())
    seen = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                for alias in stmt.names:
                    seen[alias.asname or alias.name] = (stmt.module, alias.name)
    exports = {
        n: (m.partition(":")[0], m.partition(":")[2] or n) for n, m in dotcat._EXPORTS.items()
    }
    assert seen == exports


def test_version_is_semantic_and_the_installed_packages():
    assert re.fullmatch(r"\d+\.\d+\.\d+([.+-].+)?", dotcat.__version__)
    assert dotcat.__version__ == importlib.metadata.version("dotcat")
    pyproject = (Path(__file__).parents[1] / "pyproject.toml").read_text()
    declared = re.search(r'^version = "(.+)"', pyproject, re.MULTILINE).group(1)
    assert tuple(map(int, declared.split("."))) >= (0, 2, 0)


def test_a_submodule_imports_as_before():
    result = _python("from dotcat import options, errors; print(options.SHOWN_K)")
    assert result.returncode == 0 and result.stdout.strip() == str(options.SHOWN_K)


# -- one set of defaults ---------------------------------------------------------------------


def _default(function, name):
    return inspect.signature(function).parameters[name].default


def test_python_defaults_are_the_command_lines():
    from dotcat.search.pipeline import SearchPipeline

    assert dotcat.IndexConfig().bm25 is True  # `dotcat index` builds BM25 (--no-bm25: not)
    assert _default(SearchPipeline.search, "k") == options.SHOWN_K  # `dotcat search QUERY`
    assert _default(SearchPipeline.run, "k") == options.RUN_K  # `dotcat search --queries`
    assert dotcat.PipelineConfig().depth == options.RERANK_DEPTH  # every --depth
    assert dotcat.PipelineConfig().first_stage == "auto"  # hybrid where the index has BM25
    assert _default(dotcat.build_and_tune, "config") is None  # IndexConfig()'s defaults


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """A BEIR dir whose train qrels give dev queries (the fusion is chosen on them)."""
    from tests.training.toy import make_training_beir

    return make_training_beir(tmp_path_factory.mktemp("api") / "beir")


@pytest.fixture(scope="module")
def built(data, tiny_bert_dir, tmp_path_factory):
    """The index as Python builds it by default, and the same by ``dotcat index``."""
    root = tmp_path_factory.mktemp("api_indexes")
    model = ["--model", str(tiny_bert_dir), "--device", "cpu", "--precision", "fp32"]
    result = CliRunner().invoke(app, ["-q", "index", str(data), str(root / "cli"), *model])
    assert result.exit_code == 0, result.output
    encoder = dotcat.EncoderConfig(model=str(tiny_bert_dir), device="cpu", precision="fp32")
    python = dotcat.build_and_tune(data, root / "python", encoder, show_progress=False)
    return python, root


def test_python_builds_and_searches_as_the_command_line_does(built):
    python, root = built
    by_cli = Manifest.read(root / "cli")
    assert python.manifest.bm25 and by_cli.bm25  # BM25 beside the dense index
    assert python.fusion is not None  # chosen on the dev queries, as the CLI's
    assert python.manifest.fusion["method"] == by_cli.fusion["method"]
    assert python.manifest.fusion["weight"] == by_cli.fusion["weight"]

    pipeline = dotcat.SearchPipeline(root / "python", device="cpu", precision="fp32")
    assert pipeline.first_stage == "hybrid"
    hits = pipeline.search(QUERY)
    answer = CliRunner().invoke(
        app, ["search", str(root / "cli"), QUERY, "--json", "--device", "cpu", "--precision",
              "fp32"],
    )  # fmt: skip
    assert answer.exit_code == 0, answer.output
    shown = json.loads(answer.stdout)
    assert len(hits) == len(shown) == options.SHOWN_K
    assert [h.doc_id for h in hits] == [h["doc_id"] for h in shown]
    assert [h.score for h in hits] == pytest.approx([h["score"] for h in shown], abs=1e-6)
    assert (
        {h.score_kind for h in hits} == {h["score_kind"] for h in shown} == {pipeline.score_kind()}
    )


def test_a_pipeline_takes_its_settings_as_keywords(built):
    _, root = built
    config = dotcat.PipelineConfig(first_stage="bm25", device="cpu")
    by_keywords = dotcat.SearchPipeline(root / "python", first_stage="bm25", device="cpu")
    assert by_keywords.config == config
    over = dotcat.SearchPipeline(root / "python", config, first_stage="dense")
    assert over.config == dataclasses.replace(config, first_stage="dense")
    assert [h.doc_id for h in by_keywords.search(QUERY, k=3)] == [
        h.doc_id for h in dotcat.SearchPipeline(root / "python", config).search(QUERY, k=3)
    ]


# -- reprs -----------------------------------------------------------------------------------

LONG_TEXT = "Dogs were domesticated from wolves long ago. " * 300


def test_print_hit_shows_rank_id_score_kind_title_and_a_snippet():
    hit = dotcat.Hit(1, "notes/dogs.md", 0.032786885, "Dogs", LONG_TEXT, "rrf")
    shown = repr(hit)
    assert shown.startswith("Hit(rank=1, doc_id='notes/dogs.md', score=0.0328, score_kind='rrf'")
    assert "title='Dogs'" in shown and "text='Dogs were domesticated from wolves" in shown
    assert len(shown) < 200 and shown.endswith("…')")
    assert str(hit) == shown
    document = dotcat.Document("d1", "Dogs", LONG_TEXT)
    assert len(repr(document)) < 150 and repr(document).startswith("Document(id='d1', title=")


def test_a_snippet_is_cut_at_a_word_and_cut_without_spaces_too():
    from dotcat.reprs import preview

    assert preview("short  text\n here") == "short text here"
    cut = preview("word " * 40, width=30)
    assert cut.endswith("word…") and len(cut) <= 30
    assert preview("字" * 100, width=20) == "字" * 19 + "…"


def test_configs_show_only_what_differs_from_the_defaults():
    assert repr(dotcat.IndexConfig()) == "IndexConfig()"
    assert repr(dotcat.PipelineConfig(rerank="my-cat", depth=20)) == (
        "PipelineConfig(rerank='my-cat', depth=20)"
    )
    assert repr(dotcat.EncoderConfig(model="m", device="cpu")) == (
        "EncoderConfig(model='m', device='cpu')"
    )
    assert "data=" in repr(dotcat.DotConfig(data="beir", out_dir="out"))  # required fields


def test_every_settings_class_keeps_the_short_repr():
    from dotcat.options import Settings

    importlib.import_module("dotcat.cli")  # imports every config module
    classes, queue = [], list(Settings.__subclasses__())
    while queue:
        cls = queue.pop()
        classes.append(cls)
        queue += cls.__subclasses__()
    assert len(classes) >= 14
    for cls in classes:
        assert cls.__repr__ is Settings.__repr__, f"{cls.__name__}: @dataclass(repr=False)"


def test_pipeline_index_and_report_reprs_are_one_line(built):
    python, root = built
    shown = repr(python)
    assert shown.startswith("BuiltIndex(documents=") and "bm25=True" in shown
    pipeline = dotcat.SearchPipeline(root / "python", device="cpu", precision="fp32")
    assert repr(pipeline) == (
        f"SearchPipeline({str(root / 'python')!r}, documents={len(pipeline.index)}, "
        f"first_stage='hybrid', fusion={pipeline.fusion.describe()!r}, "
        f"encoder={pipeline.manifest.encoder['name']!r}, rerank=None)"
    )
    report = dotcat.evaluate({"q1": [("d1", 2.0), ("d2", 1.0)]}, {"q1": {"d1": 1}, "q2": {"d2": 1}})
    assert repr(report) == (
        "EvalReport(queries=2, missing=1, nDCG@10=0.5000, RR@10=0.5000, R@100=0.5000, "
        "AP@100=0.5000)"
    )


def test_every_package_exports_its_names_lazily_by_one_rule():
    """Each package's __init__ holds its docstring and one _EXPORTS mapping loaded on first
    use (dotcat.exports.lazy_exports): importing every package imports none of their modules
    (but the two leaves the facade needs: the rule and the version),
    and every exported name then resolves."""
    root = Path(dotcat.__file__).parent
    names = []
    for init in sorted(root.rglob("__init__.py")):
        name = ".".join(("dotcat", *init.parent.relative_to(root).parts))
        assert "lazy_exports(__name__, _EXPORTS)" in init.read_text(encoding="utf-8"), name
        names.append(name)
    assert len(names) >= 13
    result = _python(
        "import importlib, sys\n"
        f"packages = [importlib.import_module(n) for n in {names!r}]\n"
        f"modules = [m for m in sys.modules if m.startswith('dotcat.') and m not in {names!r}]\n"
        "assert sorted(modules) == ['dotcat.exports', 'dotcat.version'], modules\n"
        "for p in packages:\n"
        "    for n in p.__all__:\n"
        "        assert getattr(p, n) is not None, (p.__name__, n)\n"
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_no_exported_name_is_shadowed_by_a_submodule():
    """Importing a submodule sets it as an attribute of its package, which hides a lazily
    exported name spelled the same: ``from dotcat.judging import agreement`` once returned the
    module or the function depending on what a test had imported first."""
    root = Path(dotcat.__file__).parent
    clashes = []
    for init in sorted(root.rglob("__init__.py")):
        package = ".".join(("dotcat", *init.parent.relative_to(root).parts))
        submodules = {p.stem for p in init.parent.glob("*.py")} | {
            p.name for p in init.parent.iterdir() if (p / "__init__.py").exists()
        }
        exports = importlib.import_module(package).__all__
        clashes += [f"{package}.{name}" for name in exports if name in submodules]
    assert clashes == []
