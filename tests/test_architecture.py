"""The architecture rules, in one place: which package may import which, that no import circle
exists, where SQL and file replacement live, which packages stay free of the web stack, how long a
module (and an engine function) may grow."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# the project's packages, plus the benchmark and helper scripts
PACKAGES = (
    "core",
    "models",
    "indexer",
    "engine",
    "service",
    "training",
    "qaslr",
    "world",
    "benchmarks",
    "scripts",
)
MAX_MODULE_LINES = 600
MAX_ENGINE_FUNCTION_LINES = 80
WEB_STACK = ("fastapi", "starlette", "pydantic_settings")
# packages that must import none of WEB_STACK (the web service is service/'s alone)
WEB_FREE = ("core", "models", "indexer", "engine", "training", "world")


def _modules(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def _imported(path: Path) -> set[str]:
    """Every module name ``path`` imports anywhere (top level or inside functions), dotted."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return names


def _module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages=PACKAGES) -> dict[str, set[str]]:
    """Module -> the project modules it imports (anywhere in it: at the top, inside a function or a
    TYPE_CHECKING block; ``from pkg import name`` counts ``pkg.name`` when that is a module)."""
    paths = {_module_name(root, p): p for package in packages for p in sorted((root / package).rglob("*.py"))}

    def known(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph = {}
    for name, path in paths.items():
        edges = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                edges.update(known(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:  # relative: from the importing module's package
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([base] if base else []))
                for alias in node.names:
                    full = f"{base}.{alias.name}"
                    edges.add(full if full in paths else known(base))
        graph[name] = {e for e in edges if e and e != name}
    return graph


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index, low, stack, on_stack, cycles = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return cycles


def test_no_import_circle_anywhere_in_the_project():
    """No module of the project's packages reaches itself through imports (not even through an import
    inside a function): each package is a stack of modules, and engine/'s result types and errors
    are leaves."""
    assert import_cycles(import_graph(ROOT)) == []


def test_the_result_types_and_errors_are_leaves_of_the_engine():
    graph = import_graph(ROOT)
    for leaf in ("engine.results", "engine.errors"):
        assert {m for m in graph[leaf] if m.startswith("engine")} == set(), leaf


def test_the_cycle_check_sees_a_circle(tmp_path):
    """The import graph follows absolute, relative and function-level imports, and the check finds
    the circle they close."""
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text("")
    (tmp_path / "pkg" / "a.py").write_text("from pkg.b import thing\n")
    (tmp_path / "pkg" / "b.py").write_text("def f():\n    from . import c\n")
    (tmp_path / "pkg" / "c.py").write_text("import pkg.a\n")
    (tmp_path / "pkg" / "d.py").write_text("from pkg import a\n")
    graph = import_graph(tmp_path, ("pkg",))
    assert graph["pkg.d"] == {"pkg.a"}
    assert import_cycles(graph) == [["pkg.a", "pkg.b", "pkg.c"]]


def test_no_engine_function_is_over_the_line_limit():
    """A function of engine/ over MAX_ENGINE_FUNCTION_LINES lines is split into steps."""
    long = {}
    for path in _modules("engine"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_ENGINE_FUNCTION_LINES:
                    long[f"{path.relative_to(ROOT)}:{node.name}"] = lines
    assert long == {}, f"over {MAX_ENGINE_FUNCTION_LINES} lines: {long}"


def test_indexer_does_not_import_the_command_line_or_service():
    """Layering: nothing below the CLI imports it; training does not import service; core imports
    nothing of the project."""
    bad = []
    rules = {
        "core": ("models", "indexer", "engine", "service", "training", "qaslr", "world"),
        "models": ("indexer", "engine", "service", "training", "qaslr", "argparse"),
        "indexer": ("engine", "service", "training", "qaslr"),
        "engine": ("service", "training", "qaslr"),
        "training": ("engine", "service", "qaslr"),
        "service": ("training", "qaslr"),
    }
    for package, forbidden in rules.items():
        for path in (ROOT / package).rglob("*.py"):
            text = path.read_text(encoding="utf-8")
            for name in forbidden:
                if re.search(rf"^\s*(from|import) {name}(\.|\s|$)", text, re.M):
                    bad.append(f"{path.relative_to(ROOT)} imports {name}")
    assert bad == []


def test_one_home_for_sql_and_for_atomic_writes():
    """All SQL lives in indexer/store/db.py; every file replacement goes through core/files.py
    (publish's symlink swap is a rename of a link, not a file write)."""
    sql = re.compile(r"\"(SELECT|INSERT|UPDATE|DELETE|PRAGMA|CREATE) ")
    replace = re.compile(r"os\.replace\(|\.replace\(state_file\)|mkstemp\(")
    sql_outside, replace_outside = [], []
    for package in ("core", "models", "indexer", "service", "training", "qaslr"):
        for path in (ROOT / package).rglob("*.py"):
            rel = str(path.relative_to(ROOT))
            text = path.read_text(encoding="utf-8")
            if sql.search(text) and rel != "indexer/store/db.py":
                sql_outside.append(rel)
            if replace.search(text) and rel not in (
                "core/files.py",
                "indexer/publish.py",
            ):
                replace_outside.append(rel)
    assert sql_outside == [] and replace_outside == []


@pytest.mark.parametrize("package", WEB_FREE)
def test_package_imports_no_web_stack(package):
    """Only service/ serves HTTP: the other packages import none of fastapi, starlette or
    pydantic_settings (not even inside a function), so they load and test without the web stack."""
    bad = [
        f"{path.relative_to(ROOT)} imports {name}"
        for path in _modules(package)
        for name in sorted(_imported(path))
        if name.split(".")[0] in WEB_STACK
    ]
    assert bad == []


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_is_over_the_line_limit(package):
    """A module over MAX_MODULE_LINES lines is split by what its parts do."""
    long = {
        str(path.relative_to(ROOT)): n
        for path in _modules(package)
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert long == {}, f"over {MAX_MODULE_LINES} lines: {long}"


def test_the_rules_see_what_they_forbid(tmp_path):
    """The web-stack rule's import scanner finds every spelling of an import."""
    module = tmp_path / "m.py"
    module.write_text(
        "import os, fastapi\nfrom starlette.responses import Response\n"
        "def f():\n    import pydantic_settings as ps\nfrom . import sibling\n"
    )
    assert {n.split(".")[0] for n in _imported(module)} >= set(WEB_STACK)
    assert "sibling" not in _imported(module)


@pytest.mark.slow  # a fresh interpreter imports torch and every engine module (about 15 s)
def test_the_engine_loads_and_searches_without_the_web_stack():
    """Importing every engine module in a fresh interpreter loads none of the web stack (nor pydantic):
    the engine is usable without HTTP (tests/engine/ searches an index through it alone)."""
    import subprocess
    import sys

    code = (
        "import sys, pkgutil, importlib, engine, engine.tiers\n"
        "for m in pkgutil.walk_packages(engine.__path__, 'engine.'): importlib.import_module(m.name)\n"
        "print(sorted({n.split('.')[0] for n in sys.modules} & {'fastapi', 'starlette', 'pydantic', "
        "'pydantic_settings', 'uvicorn', 'service'}))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"
