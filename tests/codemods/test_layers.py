"""The conversion side's layout: three layers that import one way, rules that never import each other, no
module name used twice, and no import cycle anywhere in the tool, deferred and type-checking imports included.

The graph is read from the source (every ``import`` statement, at any depth), so a cycle hidden behind an import
inside a function or under ``if TYPE_CHECKING:`` is found and named.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"accelify.codemods": ROOT / "codemods", "accelify": ROOT / "accelify"}  # accelify.runtime: its own test


@functools.cache
def modules() -> dict[str, Path]:
    """Every module of the tool and of the codemods, by dotted name."""
    found: dict[str, Path] = {}
    for package, folder in PACKAGES.items():
        for path in sorted(folder.rglob("*.py")):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join([package, *parts])] = path
    return found


@functools.cache
def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of the tool it imports, wherever the import statement is."""
    names = modules()

    def known(name: str) -> str | None:
        while name and name not in names:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package
                    for _ in range(node.level - 1):
                        anchor = anchor.rpartition(".")[0]
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in names else base for alias in node.names]
            found.update(t for t in (known(target) for target in targets) if t is not None)
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


def layer(module: str) -> str | None:
    """``analysis``, ``engine`` or ``rules`` for a module of those folders of the codemods (``codes`` for the
    table of warning codes), else None."""
    parts = module.split(".")
    if parts[:2] != ["accelify", "codemods"] or len(parts) < 3:
        return None
    return parts[2]


def test_the_cycle_finder_finds_a_deferred_cycle() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_the_graph_counts_imports_inside_functions_and_type_checking_blocks() -> None:
    graph = import_graph()
    assert "accelify.codemods.engine.transform" in graph["accelify.pipeline"]  # imported inside convert_source
    assert "accelify.codemods.rules.accelerator" in graph["accelify.codemods.rules"]


def test_no_import_cycle_anywhere_in_the_tool() -> None:
    assert cycles(import_graph()) == []


def test_layers_import_downwards_only() -> None:
    """analysis <- engine <- rules: the analysis knows nothing of edits, codes or rules; the engine nothing of a
    rule but the ordered list it runs (``engine/transform.py`` imports ``rules``)."""
    allowed = {
        "analysis": {"analysis"},
        "codes": set(),
        "engine": {"analysis", "engine", "codes"},
        "rules": {"analysis", "engine", "codes", "rules"},
    }
    wrong = []
    for module, targets in import_graph().items():
        here = layer(module)
        if here is None:
            continue
        for target in targets:
            there = layer(target)
            if there is not None and there not in allowed[here] and module != "accelify.codemods.engine.transform":
                wrong.append(f"{module} -> {target}")
    assert wrong == []


def test_no_rule_imports_another_rule() -> None:
    rules = {m for m in modules() if layer(m) == "rules" and m != "accelify.codemods.rules"}  # the list imports them all
    imports = {m: t & rules for m, t in import_graph().items() if m in rules and t & rules}
    assert imports == {}, "a rule asks the plan or reads the edits; it never imports another rule"


def test_no_two_codemods_modules_share_a_name() -> None:
    seen: dict[str, list[str]] = {}
    for module in modules():
        if module.startswith("accelify.codemods."):
            seen.setdefault(module.rsplit(".", 1)[1], []).append(module)
    assert {name: where for name, where in seen.items() if len(where) > 1} == {}
