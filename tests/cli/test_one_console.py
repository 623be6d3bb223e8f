"""rich is imported by one package of the tool, accelify/console/ (STYLE: one console/report module): the shared
pieces in its __init__, one module per command that draws more than them (verify's table)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def rich_importers(folder: Path) -> set[str]:
    """Paths (relative to the repository) of the modules under ``folder`` that import rich anywhere."""
    found = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else (
                [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else [])
            if any(name == "rich" or name.startswith("rich.") for name in names):
                found.add(path.relative_to(ROOT).as_posix())
    return found


def test_only_the_console_module_imports_rich() -> None:
    found = rich_importers(ROOT / "accelify")
    assert "accelify/console/__init__.py" in found
    assert all(path.startswith("accelify/console/") for path in found), sorted(found)
    assert rich_importers(ROOT / "runtime") == set()
