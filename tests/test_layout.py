"""The package's shape holds: one package per layer, each saying what it owns; no module
imports streamkit through a string (an edge the import linter cannot see); no import cycle
(function-level imports count, type-only ones do not); the layers contract names every
package."""

from __future__ import annotations

import ast
import sys
import tomllib
from pathlib import Path

import grimp

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "streamkit"
# Imports a user's module by the reference the user gave ("module:attr"), never ours.
USER_REFERENCES = {PACKAGE / "_core" / "refs.py"}


def _packages() -> list[str]:
    return sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())


def _dynamic_imports(path: Path) -> list[str]:
    """Calls that import by a computed name: ``importlib.import_module(...)``, ``__import__``."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
        if name in ("import_module", "__import__"):
            found.append(f"{path}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_no_module_sits_loose_and_every_package_says_what_it_owns() -> None:
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside any layer's package: {loose}"
    for name in _packages():
        # read, not imported: a package of an extra (spark) imports what may not be installed
        doc = ast.get_docstring(ast.parse((PACKAGE / name / "__init__.py").read_text())) or ""
        assert "Owns:" in doc and "May import:" in doc, f"streamkit.{name}'s docstring does not say what it owns and imports"


def test_no_module_imports_by_a_computed_name() -> None:
    found = [hit for path in sorted(PACKAGE.rglob("*.py")) if path not in USER_REFERENCES for hit in _dynamic_imports(path)]
    assert not found, "imports the import linter cannot see (use a plain import, or a port):\n" + "\n".join(found)


def test_the_checker_finds_a_computed_import(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text("import importlib\n\ndef f():\n    return importlib.import_module('streamkit.runtime')\n")
    assert len(_dynamic_imports(sample)) == 1  # the check above can fail


def _cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The import graph's strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v) & modules:
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
                found.append(sorted(component))

    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 10_000))
    try:
        for module in sorted(modules):
            if module not in index:
                visit(module)
    finally:
        sys.setrecursionlimit(limit)
    return found


def test_no_import_cycle() -> None:
    graph = grimp.build_graph("streamkit", exclude_type_checking_imports=True, cache_dir=None)
    modules = {m for m in graph.modules if m.startswith("streamkit")}
    assert not _cycles(graph, modules)


def test_the_cycle_finder_finds_one() -> None:
    graph = grimp.ImportGraph()
    for module in ("a", "b", "c"):
        graph.add_module(module)
    graph.add_import(importer="a", imported="b")
    graph.add_import(importer="b", imported="a")
    graph.add_import(importer="b", imported="c")
    assert _cycles(graph, {"a", "b", "c"}) == [["a", "b"]]


def test_the_layers_contract_names_every_package() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    layers = next(c for c in config["contracts"] if c["type"] == "layers")["layers"]
    named = {part.strip().removeprefix("streamkit.") for layer in layers for part in layer.replace("|", ":").split(":")}
    assert named == set(_packages())


def test_the_tests_mirror_the_package() -> None:
    """``tests/<package>/`` for each package's tests; besides them only the shared fixtures
    (``support``), the example apps' tests (``apps``, after the top-level ``apps/``) and the
    tests against Kafka Streams (``interop``, after the top-level ``interop/``)."""
    tests = ROOT / "tests"
    dirs = {p.name for p in tests.iterdir() if p.is_dir() and not p.name.startswith((".", "__"))}
    others = {"support", "apps", "interop"}
    assert dirs - others <= set(_packages()), sorted(dirs - others - set(_packages()))
