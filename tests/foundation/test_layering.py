"""The layering, read from the code's imports (every import, those inside functions included):

- the core (tune, cache, bench, report, export, cli, backends, doctor) imports nothing from an op's folder
  (tracea_cli/ops/<op>/): it asks the registry;
- ops import no backend, tuner, cache, bench, report, export or CLI module (an op is pure description);
- the cache imports no op at all;
- no import circle among tracea_cli's modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tracea_cli"
CORE = ("tune", "cache", "bench", "report", "export", "cli", "backends", "doctor", "api")
ABOVE_OPS = ("backends", "tune", "cache", "bench", "report", "export", "cli", "doctor", "api")


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


MODULES = _modules()


def _imports(path: Path) -> set[str]:
    """The tracea_cli modules `path` imports (the module itself where `from M import name` names a module)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [f"{node.module}.{a.name}" if f"{node.module}.{a.name}" in MODULES else node.module for a in node.names]
        else:
            continue
        found |= {n for n in names if n == "tracea_cli" or n.startswith("tracea_cli.")}
    return found


def _resolve(name: str) -> str:
    while name not in MODULES and "." in name:
        name = name.rsplit(".", 1)[0]
    return name


GRAPH = {m: {_resolve(t) for t in _imports(p)} - {m} for m, p in MODULES.items()}
OP_FOLDERS = sorted(p.parent.name for p in (PACKAGE / "ops").glob("*/__init__.py"))


def _in(module: str, package: str) -> bool:
    return module == f"tracea_cli.{package}" or module.startswith(f"tracea_cli.{package}.")


def test_there_is_an_op_folder_to_check():
    assert "gemm" in OP_FOLDERS


@pytest.mark.parametrize("layer", CORE)
def test_the_core_imports_no_op_folder(layer):
    bad = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() if _in(m, layer)
                 for t in targets if any(_in(t, f"ops.{op}") for op in OP_FOLDERS))
    assert not bad, "the core must ask the op registry instead: " + "; ".join(bad)


def test_ops_import_nothing_above_them():
    bad = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() if _in(m, "ops")
                 for t in targets if any(_in(t, layer) for layer in ABOVE_OPS))
    assert not bad, "; ".join(bad)


def test_the_cache_imports_no_op():
    bad = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() if _in(m, "cache") for t in targets if _in(t, "ops"))
    assert not bad, "; ".join(bad)


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in graph:
                continue
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for module in sorted(graph):
        if module not in index:
            visit(module)
    return found


def test_no_import_circles():
    assert not circles(GRAPH)


def test_the_checks_can_fail():
    """A made-up circle is found, and the graph holds the arrows it should."""
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert "tracea_cli.ops.registry" in GRAPH["tracea_cli.cli.op_commands"]
    assert _resolve("tracea_cli.ops.gemm.problem.GemmProblem") == "tracea_cli.ops.gemm.problem"


def test_only_the_public_package_uses_the_python_api():
    """api/ is a top layer beside cli/: nothing in tracea_cli imports it (the `tracea` package re-exports it)."""
    bad = sorted(f"{m} -> {t}" for m, targets in GRAPH.items() if not _in(m, "api")
                 for t in targets if _in(t, "api"))
    assert not bad, "; ".join(bad)
