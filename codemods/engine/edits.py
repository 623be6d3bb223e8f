"""Edits proposed by rules, applied by one transformer in one pass.

Rules never rebuild the tree themselves (Fixit's model): they register replacements for nodes and
statement insertions/removals; ``apply`` visits only the statements that contain an edit.
Replacements compose: each is a function of the node as already updated by edits inside it.

What is already handled is read from the edits themselves, never kept on the side: ``replaced(node)``
(some rule replaces it), ``dropped(node)`` (nothing of it is left once the edits apply: its statement is
removed, or an edit around it does not keep it), ``rewritten(node)`` (either), ``readers`` (the scopes
whose edits read the accelerator, resolved when the edits apply), ``accelerators`` (the scopes where an
edit creates the accelerator or passes it in, and the name it has there).
"""

from __future__ import annotations

from typing import Callable, Hashable, Iterable, Sequence

import libcst as cst

from accelify.codemods.analysis.tree_walk import descendants
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.statement_shapes import is_import
from accelify.codemods.engine.guards import join_main_guards

Replacement = Callable[[cst.CSTNode], cst.CSTNode]
Regroup = Callable[[list[cst.BaseStatement]], list[cst.BaseStatement]]


class Edits:
    """The pending edits of one conversion."""

    def __init__(self, parent_stmt: dict[cst.BaseStatement, cst.BaseStatement | None]) -> None:
        self._parent = parent_stmt
        self.replacements: dict[cst.CSTNode, list[Replacement]] = {}
        self.holders: dict[cst.CSTNode, cst.BaseStatement] = {}  # replaced node -> the statement that holds it
        self.before: dict[cst.BaseStatement, list[cst.BaseStatement]] = {}
        self.after: dict[cst.BaseStatement, list[cst.BaseStatement]] = {}
        self.removed: set[cst.BaseStatement] = set()
        self.groups: list[tuple[list[cst.BaseStatement], Regroup]] = []
        self.ungrouped: set[int] = set()  # ids of inserted statements no group takes in (the accelerator's creation)
        self.dirty: set[cst.BaseStatement] = set()
        self.readers: dict[Hashable, list[cst.CSTNode]] = {}  # scope -> what its edits write with the accelerator
        self.accelerators: dict[Hashable, str] = {}  # scope -> the accelerator's name there, once the edits apply
        self.version = 0  # counts the edits proposed; ``apply`` reuses its last result while it is unchanged
        self._applied: dict[int, tuple[int, cst.Module, cst.Module]] = {}
        self._gone: set[int] = set()  # ids of original nodes the edits so far leave out
        self._results: dict[cst.CSTNode, tuple[int, cst.CSTNode]] = {}  # replaced node -> (fns applied, result)
        self._pending: list[cst.CSTNode] = []  # removed statements, replaced nodes and regrouped statements not yet read
        self._groups_seen = 0

    def __bool__(self) -> bool:
        return bool(self.replacements or self.before or self.after or self.removed or self.groups)

    def _touch(self, stmt: cst.BaseStatement | None) -> None:
        self.version += 1
        while stmt is not None and stmt not in self.dirty:
            self.dirty.add(stmt)
            stmt = self._parent.get(stmt)

    def replace(self, node: cst.CSTNode, stmt: cst.BaseStatement, fn: Replacement, *, reader: Hashable | None = None) -> None:
        """Replace ``node`` (inside ``stmt``) by ``fn(updated node)``; ``reader``: the scope whose accelerator
        ``fn`` writes (the name is read when the edits apply)."""
        self.replacements.setdefault(node, []).append(fn)
        self.holders[node] = stmt
        self._pending.append(node)
        if reader is not None:
            self.readers.setdefault(reader, []).append(node)
        self._touch(stmt)

    def insert_before(self, stmt: cst.BaseStatement, new: Sequence[cst.BaseStatement], *, ungrouped: bool = False,
                      first: bool = False) -> None:
        """Insert ``new`` right before ``stmt``; ``ungrouped``: a group that starts at ``stmt`` (a main-process
        guard around it) does not take ``new`` in when ``new`` comes first (the accelerator it reads); ``first``:
        ahead of what other edits insert there, whichever came first."""
        inserted = self.before.setdefault(stmt, [])
        at = 0 if first else len(inserted)
        inserted[at:at] = new
        if ungrouped:
            self.ungrouped.update(id(n) for n in new)
        self._touch(self._parent.get(stmt))

    def insert_after(self, stmt: cst.BaseStatement, new: Sequence[cst.BaseStatement], *, ungrouped: bool = False,
                     first: bool = False) -> None:
        """Insert ``new`` right after ``stmt``; ``ungrouped``, ``first``: as for ``insert_before``, for a group that
        ends at ``stmt``."""
        inserted = self.after.setdefault(stmt, [])
        at = 0 if first else len(inserted)
        inserted[at:at] = new
        if ungrouped:
            self.ungrouped.update(id(n) for n in new)
        self._touch(self._parent.get(stmt))

    def remove(self, stmt: cst.BaseStatement) -> None:
        self.removed.add(stmt)
        self._pending.append(stmt)
        self._touch(self._parent.get(stmt))

    def bind(self, scope: Hashable, name: str) -> None:
        """Declare that the edits make the accelerator readable in ``scope`` as ``name`` (the statement that
        creates it, the parameter or attribute that passes it in: the rule that writes it declares it)."""
        self.accelerators[scope] = name
        self.version += 1

    def vanishes(self, stmt: cst.BaseStatement) -> bool:
        """Whether nothing of ``stmt`` is left: it is removed, or it is an ``if`` (side-effect-free test, no ``else``)
        whose statements all vanish (``if ddp: model = DDP(model)``)."""
        if stmt in self.removed:
            return True
        if isinstance(stmt, cst.If) and stmt.orelse is None and is_pure(stmt.test) and isinstance(stmt.body, cst.IndentedBlock):
            return all(self.vanishes(s) for s in stmt.body.body)
        return False

    def regroup(self, stmts: Sequence[cst.BaseStatement], make: "Regroup", *, reader: Hashable | None = None) -> None:
        """Replace the consecutive statements ``stmts`` of one block, as updated by every other edit (the
        statements inserted around them included, but for ``ungrouped`` ones at its edges), by
        ``make(those statements)`` (to wrap them in a ``with``, say); ``reader`` as for ``replace``."""
        self.groups.append((list(stmts), make))
        if reader is not None:
            self.readers.setdefault(reader, []).extend(stmts)
        self._touch(self._parent.get(stmts[0]))

    # what the edits so far do to a node of the original code ----------------------------------------
    def replaced(self, node: cst.CSTNode) -> bool:
        """Whether some edit replaces ``node`` itself."""
        return node in self.replacements

    def dropped(self, node: cst.CSTNode) -> bool:
        """Whether nothing of ``node`` is left once the edits apply: a removed statement holds it, or an edit
        of a node around it (or of itself) gives a node without it (``x.to(device)`` -> ``x`` drops ``device``)."""
        self._read()
        return id(node) in self._gone

    def rewritten(self, node: cst.CSTNode) -> bool:
        """Whether an edit already takes care of ``node``: it is replaced, or dropped."""
        return node in self.replacements or self.dropped(node)

    def replacement_of(self, node: cst.CSTNode) -> cst.CSTNode | None:
        """What the replacements of ``node`` make of it (computed on the original node), or None."""
        fns = self.replacements.get(node)
        if not fns:
            return None
        count, result = self._results.get(node, (0, node))
        for fn in fns[count:]:
            result = fn(result)
        self._results[node] = (len(fns), result)
        return result

    def inserted(self) -> Iterable[tuple[cst.BaseStatement, bool, cst.BaseStatement]]:
        """Every inserted statement: ``(anchor, before, statement)``, ``before`` True for one inserted before ``anchor``."""
        for before, table in ((True, self.before), (False, self.after)):
            for anchor, new in table.items():
                for stmt in new:
                    yield anchor, before, stmt

    def _read(self) -> None:
        """Account for the edits proposed since the last question (each is read once)."""
        pending, self._pending = self._pending, []
        for node in pending:
            if node in self.removed:
                self._gone.update(id(n) for n in descendants(node))
            else:
                self._leave_out([node], [self.replacement_of(node)])  # type: ignore[list-item]
        for stmts, make in self.groups[self._groups_seen:]:
            self._leave_out(stmts, make(list(stmts)))
        self._groups_seen = len(self.groups)

    def _leave_out(self, originals: Sequence[cst.CSTNode], results: Sequence[cst.CSTNode]) -> None:
        """Mark what of ``originals`` is not in ``results`` (nodes are kept by identity)."""
        inside = {id(n) for original in originals for n in descendants(original)}
        kept: set[int] = set()
        for result in results:
            for n in descendants(result, lambda n: id(n) not in inside):
                if id(n) in inside:
                    kept.add(id(n))
        for original in originals:
            for n in descendants(original, lambda n: id(n) not in kept):
                if id(n) not in kept:
                    self._gone.add(id(n))


class _Applier(cst.CSTTransformer):
    def __init__(self, edits: Edits) -> None:
        super().__init__()
        self.edits = edits
        self.emptied: set[cst.BaseStatement] = set()  # ``pass`` put in blocks whose statements were all removed
        self.trailing: dict[int, list[cst.EmptyLine]] = {}  # an ``if`` whose emptied branches went -> their comments

    def on_visit(self, node: cst.CSTNode) -> bool:
        if isinstance(node, cst.BaseStatement) and node not in self.edits.dirty:
            return False
        return True

    def on_leave(self, original_node: cst.CSTNode, updated_node: cst.CSTNode) -> cst.CSTNode:  # type: ignore[override]
        for fn in self.edits.replacements.get(original_node, ()):
            updated_node = fn(updated_node)
        if isinstance(updated_node, cst.If) and isinstance(original_node, cst.If):
            updated_node = self._prune_branches(original_node, updated_node)
        if isinstance(updated_node, (cst.IndentedBlock, cst.Module)) and type(original_node) is type(updated_node):
            indented = isinstance(updated_node, cst.IndentedBlock)
            body, leftover = self._body(original_node.body, updated_node.body, indented)  # type: ignore[attr-defined]
            if not body and original_node.body:  # type: ignore[attr-defined]  # an empty module stays empty
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
        aside: dict[int, tuple[int, int]] = {}  # original statement -> its leading / trailing ungrouped insertions
        own: set[int] = set()
        for original, new in zip(originals, updated):
            start = len(out)
            inserted = list(self.edits.before.get(original, ()))
            after = list(self.edits.after.get(original, ()))
            aside[id(original)] = (self._ungrouped(inserted), self._ungrouped(after[::-1]))
            if original in self.edits.removed or self._emptied_if(new):
                removed_first = removed_first or not out
                carried = _merge(carried, original.leading_lines) + _trailing_comment(original) + _inner_comments(original)
                if inserted or after:
                    out.extend(_lead([*inserted, *after], carried))
                    carried = []
                spans[id(original)] = (start, len(out))
                continue
            if inserted and isinstance(new, (cst.FunctionDef, cst.ClassDef)):
                # a definition keeps its blank lines and comments (PEP 8); the inserted code gets the blank lines too
                blank = [line for line in new.leading_lines if line.comment is None][:2]
                if out and is_import(out[-1]) and all(is_import(s) for s in inserted):
                    blank = []  # an import after the imports: no blank lines between them
                out.extend(_lead(inserted, _merge(carried, blank)))
            elif inserted:
                out.extend(_lead(inserted, _merge(carried, new.leading_lines)))
                new = new.with_changes(leading_lines=[])
            elif carried:
                new = new.with_changes(leading_lines=_merge(carried, new.leading_lines))
            carried = list(self.trailing.pop(id(new), []))  # comments of branches pruned from this ``if``
            if isinstance(original, cst.If):
                own.add(id(new))  # the script's own ``if`` (``if rank == 0:`` rewritten): never joined
            out.append(new)
            out.extend(after)
            spans[id(original)] = (start, len(out))
        here = [
            (spans[id(g[0])][0] + aside[id(g[0])][0], spans[id(g[-1])][1] - aside[id(g[-1])][1], make)
            for g, make in self.edits.groups
            if id(g[0]) in spans
        ]
        for first, last, make in sorted(here, key=lambda group: group[0], reverse=True):
            out[first:last] = make(out[first:last])
        out = join_main_guards(out, own)  # neighbouring statements the conversion kept to the main process
        if indented and removed_first and out:  # a block never starts with a blank line
            lines = list(out[0].leading_lines)
            while lines and lines[0].comment is None:
                lines.pop(0)
            out[0] = out[0].with_changes(leading_lines=lines)
        return out, [line for line in carried if line.comment is not None]

    def _ungrouped(self, inserted: Sequence[cst.BaseStatement]) -> int:
        """How many of ``inserted`` (from its end nearest the block's edge) no group takes in."""
        count = 0
        while count < len(inserted) and id(inserted[count]) in self.edits.ungrouped:
            count += 1
        return count

    def _prune_branches(self, original: cst.If, updated: cst.If) -> cst.If:
        """Drop an ``else:`` whose statements were all removed, and an ``elif`` with a side-effect-free test whose
        statements were (``elif args.distributed: model = DDP(model)``); their comments follow the ``if``."""
        comments = list(self.trailing.pop(id(updated.orelse), [])) if updated.orelse is not None else []
        orelse, kept = updated.orelse, updated.orelse
        if isinstance(orelse, cst.Else) and self._emptied_block(orelse.body):
            comments += _line_comments(orelse.leading_lines) + _inner_comments(original.orelse)  # type: ignore[arg-type]
            kept = None
        elif isinstance(orelse, cst.If) and self._emptied_block(orelse.body) and is_pure(orelse.test):
            dropped = original.orelse
            comments += _line_comments(orelse.leading_lines) + _comments_of_branch(dropped)  # type: ignore[arg-type]
            kept = orelse.orelse
        if kept is orelse and not comments:
            return updated
        result = updated.with_changes(orelse=kept)
        if comments:
            self.trailing[id(result)] = comments
        return result

    def _emptied_block(self, block: cst.BaseSuite) -> bool:
        return isinstance(block, cst.IndentedBlock) and len(block.body) == 1 and block.body[0] in self.emptied


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


def _line_comments(lines: Sequence[cst.EmptyLine]) -> list[cst.EmptyLine]:
    return [line for line in lines if line.comment is not None]


def _inner_comments(node: cst.CSTNode) -> list[cst.EmptyLine]:
    """The comments inside a compound statement (its statements', its blocks' and its branches'), in source order,
    as lines: removed code keeps its comments."""
    if isinstance(node, cst.SimpleStatementLine):
        return []
    out: list[cst.EmptyLine] = []
    for child in node.children:
        if isinstance(child, cst.TrailingWhitespace) and child.comment is not None:
            out.append(cst.EmptyLine(comment=child.comment))
        elif isinstance(child, cst.IndentedBlock):
            out += _block_comments(child)
        elif isinstance(child, (cst.If, cst.Else, cst.ExceptHandler, cst.Finally)):
            out += _line_comments(child.leading_lines) + _inner_comments(child)
    return out


def _block_comments(block: cst.IndentedBlock) -> list[cst.EmptyLine]:
    """The comments of a block: its header's, its statements' (and theirs), its footer's."""
    out = [cst.EmptyLine(comment=block.header.comment)] if block.header.comment is not None else []
    for stmt in block.body:
        out += _line_comments(stmt.leading_lines) + _trailing_comment(stmt) + _inner_comments(stmt)
    return out + _line_comments(block.footer)


def _comments_of_branch(branch: cst.If) -> list[cst.EmptyLine]:
    """The comments of an ``elif`` and its block, not of the branches after it (they stay)."""
    return _block_comments(branch.body) if isinstance(branch.body, cst.IndentedBlock) else []


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
    """The module with every edit applied (computed once per module while no edit is added: a rule that looks at
    the converted code and the engine's final pass share it)."""
    if not edits:
        return module
    cached = edits._applied.get(id(module))
    if cached is not None and cached[0] == edits.version and cached[1] is module:
        return cached[2]
    result = module.visit(_Applier(edits))
    assert isinstance(result, cst.Module)
    edits._applied[id(module)] = (edits.version, module, result)
    return result
