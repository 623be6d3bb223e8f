"""Edits proposed by rules, applied by one transformer in one pass.

Rules never rebuild the tree themselves (Fixit's model): they register replacements for nodes and
statement insertions/removals; ``apply`` visits only the statements that contain an edit.
Replacements compose: each is a function of the node as already updated by edits inside it.
"""

from __future__ import annotations

from typing import Callable, Iterable, Sequence

import libcst as cst

from accelify.codemods.names import dotted

Replacement = Callable[[cst.CSTNode], cst.CSTNode]
Regroup = Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]]


class Edits:
    """The pending edits of one conversion."""

    def __init__(self, parent_stmt: dict[cst.BaseStatement, cst.BaseStatement | None]) -> None:
        self._parent = parent_stmt
        self.replacements: dict[cst.CSTNode, list[Replacement]] = {}
        self.before: dict[cst.BaseStatement, list[cst.BaseStatement]] = {}
        self.after: dict[cst.BaseStatement, list[cst.BaseStatement]] = {}
        self.removed: set[cst.BaseStatement] = set()
        self.groups: list[tuple[list[cst.BaseStatement], Regroup]] = []
        self.dirty: set[cst.BaseStatement] = set()

    def __bool__(self) -> bool:
        return bool(self.replacements or self.before or self.after or self.removed or self.groups)

    def _touch(self, stmt: cst.BaseStatement | None) -> None:
        while stmt is not None and stmt not in self.dirty:
            self.dirty.add(stmt)
            stmt = self._parent.get(stmt)

    def replace(self, node: cst.CSTNode, stmt: cst.BaseStatement, fn: Replacement) -> None:
        """Replace ``node`` (inside ``stmt``) by ``fn(updated node)``."""
        self.replacements.setdefault(node, []).append(fn)
        self._touch(stmt)

    def insert_before(self, stmt: cst.BaseStatement, new: Sequence[cst.BaseStatement]) -> None:
        self.before.setdefault(stmt, []).extend(new)
        self._touch(self._parent.get(stmt))

    def insert_after(self, stmt: cst.BaseStatement, new: Sequence[cst.BaseStatement]) -> None:
        self.after.setdefault(stmt, []).extend(new)
        self._touch(self._parent.get(stmt))

    def remove(self, stmt: cst.BaseStatement) -> None:
        self.removed.add(stmt)
        self._touch(self._parent.get(stmt))

    def regroup(self, stmts: Sequence[cst.BaseStatement], make: "Regroup") -> None:
        """Replace the consecutive statements ``stmts`` of one block, as updated by every other edit (the
        statements inserted around them included), by ``make(those statements)`` (to wrap them in a
        ``with``, say)."""
        self.groups.append((list(stmts), make))
        self._touch(self._parent.get(stmts[0]))


class _Applier(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        super().__init__()
        self.edits = edits
        self.emptied: set[cst.BaseStatement] = set()  # ``pass`` put in blocks whose statements were all removed

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseStatement) and node not in self.edits.dirty:
            return False
        return True

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        for fn in self.edits.replacements.get(original_node, ()):
            updated_node = fn(updated_node)
        if isinstance(updated_node, (cst.IndentedBlock, cst.Module)) and type(original_node) is type(updated_node):
            indented = isinstance(updated_node, cst.IndentedBlock)
            body, leftover = self._body(original_node.body, updated_node.body, indented)  # type: ignore[attr-defined]
            if not body:
                body = [cst.SimpleStatementLine([cst.Pass()], leading_lines=leftover)]
                leftover = []
                self.emptied.add(body[0])
            return updated_node.with_changes(body=body, footer=[*leftover, *updated_node.footer])
        return updated_node

    def _body(
        self, originals: Sequence[cst.BaseStatement], updated: Sequence[cst.BaseStatement], indented: bool = True
    ) -> tuple[list[cst.BaseStatement], list[cst.EmptyLine]]:
        """The new statements of a block, and the comments of removed trailing statements. An indented block
        whose first statements were removed does not start with the blank lines that followed them."""
        out: list[cst.BaseStatement] = []
        carried: list[cst.EmptyLine] = []  # blank lines and comments of removed statements
        removed_first = False
        spans: dict[int, tuple[int, int]] = {}  # original statement -> the slice of ``out`` made from it
        for original, new in zip(originals, updated):
            start = len(out)
            if indented and not out and removed_first and not carried and new.leading_lines:
                lines = list(new.leading_lines)
                while lines and lines[0].comment is None:
                    lines.pop(0)
                new = new.with_changes(leading_lines=lines)
            inserted = list(self.edits.before.get(original, ()))
            after = list(self.edits.after.get(original, ()))
            if original in self.edits.removed or self._emptied_if(new):
                removed_first = removed_first or not out
                carried = _merge(carried, original.leading_lines) + _trailing_comment(original)
                if inserted or after:
                    out.extend(_lead([*inserted, *after], carried))
                    carried = []
                spans[id(original)] = (start, len(out))
                continue
            if inserted and isinstance(new, (cst.FunctionDef, cst.ClassDef)):
                # a definition keeps its blank lines and comments (PEP 8); the inserted code gets the blank lines too
                blank = [line for line in new.leading_lines if line.comment is None][:2]
                out.extend(_lead(inserted, _merge(carried, blank)))
            elif inserted:
                out.extend(_lead(inserted, _merge(carried, new.leading_lines)))
                new = new.with_changes(leading_lines=[])
            elif carried:
                new = new.with_changes(leading_lines=_merge(carried, new.leading_lines))
            carried = []
            out.append(new)
            out.extend(after)
            spans[id(original)] = (start, len(out))
        here = [(spans[id(g[0])][0], spans[id(g[-1])][1], make) for g, make in self.edits.groups if id(g[0]) in spans]
        for first, last, make in sorted(here, key=lambda group: group[0], reverse=True):
            out[first:last] = make(out[first:last])
        return out, [line for line in carried if line.comment is not None]


    def _emptied_if(self, stmt: cst.BaseStatement) -> bool:
        """An ``if`` with a side-effect-free test whose whole body was removed (``if args.cuda: model.cuda()``)."""
        return (
            isinstance(stmt, cst.If)
            and stmt.orelse is None
            and isinstance(stmt.body, cst.IndentedBlock)
            and len(stmt.body.body) == 1
            and stmt.body.body[0] in self.emptied
            and is_pure(stmt.test)
        )


def is_pure(expr: cst.BaseExpression) -> bool:
    """Whether evaluating ``expr`` cannot have a side effect (names, attributes, not/and/or/compare)."""
    if isinstance(expr, (cst.Name, cst.SimpleString, cst.Integer)):
        return True
    if isinstance(expr, cst.Attribute):
        return is_pure(expr.value)
    if isinstance(expr, cst.UnaryOperation):
        return is_pure(expr.expression)
    if isinstance(expr, cst.BooleanOperation):
        return is_pure(expr.left) and is_pure(expr.right)
    if isinstance(expr, cst.Comparison):
        return is_pure(expr.left) and all(is_pure(c.comparator) for c in expr.comparisons)
    if isinstance(expr, cst.Call) and not expr.args:  # torch.cuda.is_available(), torch.cuda.device_count()
        return (dotted(expr.func) or "").endswith(_QUERIES)
    return False


_QUERIES = ("cuda.is_available", "mps.is_available", "accelerator.is_available", "cuda.device_count")


def _trailing_comment(stmt: cst.BaseStatement) -> list[cst.EmptyLine]:
    if isinstance(stmt, cst.SimpleStatementLine) and stmt.trailing_whitespace.comment is not None:
        return [cst.EmptyLine(comment=stmt.trailing_whitespace.comment)]
    return []


def _merge(first: Sequence[cst.EmptyLine], second: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    """Leading lines for a statement that takes over ``first`` (from removed statements) before its own
    ``second``: every comment kept, in order, and the larger run of leading blank lines."""
    if not first:
        return list(second)

    def split(lines: Sequence[cst.EmptyLine]) -> tuple[list[cst.EmptyLine], list[cst.EmptyLine]]:
        n = 0
        while n < len(lines) and lines[n].comment is None:
            n += 1
        return list(lines[:n]), list(lines[n:])

    blank_a, rest_a = split(first)
    blank_b, rest_b = split(second)
    return (blank_a if len(blank_a) > len(blank_b) else blank_b) + rest_a + rest_b


def _lead(stmts: Iterable[cst.BaseStatement], lines: Sequence[cst.EmptyLine]) -> list[cst.BaseStatement]:
    stmts = list(stmts)
    if stmts and lines:
        stmts[0] = stmts[0].with_changes(leading_lines=[*lines, *stmts[0].leading_lines])
    return stmts


def apply(module: cst.Module, edits: Edits) -> cst.Module:
    """The module with every edit applied."""
    if not edits:
        return module
    result = module.visit(_Applier(edits))
    assert isinstance(result, cst.Module)
    return result
