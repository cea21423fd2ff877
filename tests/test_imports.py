"""No import cycle between dotcat's modules, counting the imports inside functions too.

``make lint`` checks the same and the layers with import-linter; this test keeps the suite
itself from passing on a tree where a lazy import hides a cycle. The graph is read from the
source (``ast``), module by module: ``from dotcat.x import y`` is an edge to ``dotcat.x.y``
when that is a module, else to ``dotcat.x``. Imports under ``if TYPE_CHECKING:`` are left out,
as import-linter leaves them (annotations only: they never run).
"""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import dotcat

SRC = Path(dotcat.__file__).parent


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package's ``__init__``)."""
    modules = {}
    for path in sorted(SRC.rglob("*.py")):
        parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
        package = parts[-1] == "__init__"
        modules[".".join(parts[:-1] if package else parts)] = (path, package)
    return modules


def _targets(node: ast.Import | ast.ImportFrom, name: str, package: bool, known: set[str]):
    """The dotcat modules an import statement in module ``name`` loads by name."""
    if isinstance(node, ast.Import):
        wanted = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:  # relative: resolved against the importing module's package
            anchor = name.split(".")[: None if package else -1]
            anchor = anchor[: len(anchor) - node.level + 1]
            base = ".".join([*anchor, base] if base else anchor)
        # ``from x import y``: the module x.y if there is one, else x.
        wanted = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
    for target in wanted:
        while target and target not in known:
            target = target.rpartition(".")[0]
        if target:
            yield target


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    known = set(modules)
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, package) in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in _imports(tree):
            graph[name] |= set(_targets(node, name, package, known)) - {name}
    return graph


def _imports(tree: ast.AST):
    """Every import statement of a module, at any depth, except under ``if TYPE_CHECKING:``."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            continue
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            yield node
        yield from _imports(node)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_the_graph_sees_imports_inside_functions():
    graph = import_graph()
    # the command line imports the pipeline inside its command (after the argument checks).
    assert "dotcat.index.bm25" in graph["dotcat.index.build"]
    assert "dotcat.search.pipeline" in graph["dotcat.cli.search"]  # inside the command
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_imports_one_that_imports_it_back():
    assert cycles(import_graph()) == []


def test_no_module_reads_through_the_package_facade():
    # dotcat/__init__.py sits above every layer (it re-exports from all of them): a module that
    # imports it runs up (its version is the leaf dotcat.version).
    assert not [name for name, imported in import_graph().items() if "dotcat" in imported]


# -- the query path: `dotcat search INDEX "query"` without PyTorch (issue 66) -----------------

#: Where a search starts (the first stages are loaded by name, from the stage registry).
QUERY_PATH = (
    "dotcat.cli.search",
    "dotcat.search.pipeline",
    "dotcat.search.dense",
    "dotcat.search.hybrid",
    "dotcat.search.lexical",
    "dotcat.index.encoder",
    "dotcat.models.exported_encoder",
)
#: Packages a search must not load: importing PyTorch alone takes longer than the search.
MODEL_LIBRARIES = {"torch", "transformers", "sentence_transformers"}
#: The doors to them the query path keeps (not followed): each opens only where it must.
DOORS = {
    ("dotcat.index.encoder", "dotcat.models.bi_encoder"): "no export gives the vectors (GPU, bf16)",
    ("dotcat.search.reranker", "dotcat.models.cross_encoder"): "re-ranking (--rerank)",
    ("dotcat.models.onnx_backend", "torch"): "the export, made once when missing",
    ("dotcat.models.onnx_backend", "transformers"): "the export, made once when missing",
    ("dotcat.models.smoothquant", "transformers"): "the AVX2 re-ranker export's calibration",
    ("dotcat.models.runtime", "torch"): "functions of the PyTorch paths",
    ("dotcat.models.runtime", "transformers"): "quiet_transformers, around a model load",
    ("dotcat.models.batching", "torch"): "batches that PyTorch runs",
}


def external_imports() -> dict[str, set[str]]:
    """Module -> the top-level packages outside dotcat it imports (at any depth, as
    :func:`import_graph` reads them)."""
    out = {}
    for name, (path, _) in _modules().items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        found = set()
        for node in _imports(tree):
            if isinstance(node, ast.Import):
                found |= {alias.name.split(".")[0] for alias in node.names}
            elif not node.level and node.module:
                found.add(node.module.split(".")[0])
        out[name] = found - {"dotcat"}
    return out


def test_the_query_path_imports_no_model_library_but_through_its_doors():
    graph, external = import_graph(), external_imports()
    seen, todo = set(), list(QUERY_PATH)
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo += [m for m in graph[module] if (module, m) not in DOORS]
    reached = {
        (module, package)
        for module in seen
        for package in external[module] & MODEL_LIBRARIES
        if (module, package) not in DOORS
    }
    assert reached == set()
    assert {m for m, _ in DOORS} <= seen  # every door is on the path (none left stale)


@pytest.mark.kernels  # the path auto picks (OpenVINO int8 on a Zen 4, ONNX Runtime elsewhere)
def test_a_search_from_the_shell_loads_no_pytorch(tiny_bert_dir, tiny_beir_dir, tmp_path):
    import subprocess
    import sys

    from typer.testing import CliRunner

    from dotcat.cli import app

    index = tmp_path / "index"
    model = ["--model", str(tiny_bert_dir), "--device", "cpu"]  # auto: this CPU's default path
    done = CliRunner().invoke(app, ["-q", "index", str(tiny_beir_dir), str(index), *model])
    assert done.exit_code == 0, done.output  # (and the query export made: the first search)
    query = [str(index), "blood sugar", "--device", "cpu", "--json"]
    # As the console script runs it (dotcat.cli:run), with a thread, an idle thread pool and an
    # atexit handler of the process's own: the quick exit waits for the thread, stops the
    # pool's worker (which waits for work until the interpreter's shutdown says stop) and
    # runs the handler.
    code = (
        "import atexit, sys, threading, time\n"
        "from concurrent.futures import ThreadPoolExecutor\n"
        "ThreadPoolExecutor(1).submit(time.sleep, 0)\n"
        "from dotcat.cli import run\n"
        "heavy = {'torch', 'transformers'}\n"
        "loaded = lambda: print('loaded:', sorted(heavy & set(sys.modules)), file=sys.stderr)\n"
        "atexit.register(loaded)\n"
        "late = lambda: (time.sleep(1), print('joined', file=sys.stderr))\n"
        "threading.Thread(target=late).start()\n"
        f"sys.argv = ['dotcat', 'search', *{query!r}]\n"
        "run()\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stderr.splitlines()[-2:] == ["joined", "loaded: []"]
    again = CliRunner().invoke(app, ["search", *query])
    assert json.loads(run.stdout) == json.loads(again.stdout)  # the same hits
    code = code.replace(repr(query), repr([str(tmp_path / "none"), "blood sugar"]))
    failed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert failed.returncode == 2  # an error's status through the quick exit
    assert "dotcat: error: " in failed.stderr and "Traceback" not in failed.stderr
