"""The runtime's modules import each other without a cycle, counting imports inside functions too.

A deferred import hides a cycle from Python but not from a reader: ``state -> ops -> debug -> state``
made each of the three depend on the others. The graph below is read from the source, so the test
names the modules of any cycle that comes back.
"""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"


def _module_name(path: Path) -> str:
    """``runtime/checkpoint/load.py`` -> ``checkpoint.load``; a package's ``__init__.py`` -> the package."""
    parts = list(path.relative_to(RUNTIME).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def runtime_imports() -> dict[str, set[str]]:
    """Module name -> the runtime modules it imports anywhere in its source (relative imports).

    Subpackages count too: ``checkpoint.load`` imports ``errors`` through ``from ..errors import ...``.
    """
    paths = {_module_name(path): path for path in sorted(RUNTIME.rglob("*.py")) if _module_name(path)}
    names = set(paths)

    def known(dotted: list[str]) -> str | None:  # the longest prefix that is a runtime module
        for end in range(len(dotted), 0, -1):
            if ".".join(dotted[:end]) in names:
                return ".".join(dotted[:end])
        return None

    graph: dict[str, set[str]] = {}
    for name, path in paths.items():
        package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ImportFrom) and node.level >= 1:
                base = package[: len(package) - (node.level - 1)]
                if node.module:
                    targets = [known(base + node.module.split("."))]
                else:
                    targets = [known(base + [alias.name]) for alias in node.names]
                found.update(t for t in targets if t)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith(
                    "accelify.runtime."):
                target = known(node.module.split(".")[2:])
                if target:
                    found.add(target)
        graph[name] = found - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_cycle_finder_finds_a_deferred_cycle() -> None:
    assert cycles({"state": {"ops"}, "ops": {"debug"}, "debug": {"state"}, "errors": set()}) == [
        ["debug", "ops", "state"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_runtime_modules_import_each_other_without_a_cycle() -> None:
    graph = runtime_imports()
    assert {"state", "debug", "ops", "accelerator"} <= set(graph)  # the walk found the package
    assert "debug" in graph["state"] and "state" not in graph["debug"]  # the direction that broke the old cycle
    assert cycles(graph) == []
