"""Small questions about one statement's or target's shape: a docstring, an import line, the names a target binds."""

from __future__ import annotations

import libcst as cst


def is_docstring(stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` is a bare string (a docstring when it comes first)."""
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and isinstance(stmt.body[0], cst.Expr)
        and isinstance(stmt.body[0].value, (cst.SimpleString, cst.ConcatenatedString))
    )


def target_names(target: cst.BaseExpression) -> list[str]:
    """The plain names an assignment or loop target binds, in order (``i, (x, y)`` -> i, x, y)."""
    if isinstance(target, cst.Name):
        return [target.value]
    if isinstance(target, (cst.Tuple, cst.List)):
        return [name for element in target.elements for name in target_names(element.value)]
    return []


def is_import(stmt: cst.BaseStatement) -> bool:
    """An import line, or a ``try:`` block of imports (``try: import x / except ImportError: ...``)."""
    if isinstance(stmt, cst.SimpleStatementLine):
        return all(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
    if isinstance(stmt, cst.Try) and isinstance(stmt.body, cst.IndentedBlock):
        return all(is_import(s) for s in stmt.body.body)
    return False


def comprehension_fors(node: cst.CompFor) -> list[cst.CompFor]:
    """``for`` clauses of one comprehension, outermost first."""
    out = [node]
    while node.inner_for_in is not None:
        node = node.inner_for_in
        out.append(node)
    return out
