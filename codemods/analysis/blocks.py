"""Where a statement sits among its neighbours: the block of a compound statement, the statement before it,
the ``with open(...)`` around it, the innermost block that holds several statements."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Facts


def block_of(stmt: cst.BaseStatement) -> list[cst.BaseStatement] | None:
    """The statements of a compound statement's first block (``if``/``with``/``try`` bodies), or None."""
    body = getattr(stmt, "body", None)
    return list(body.body) if isinstance(body, cst.IndentedBlock) else None


def previous(facts: Facts, stmt: cst.BaseStatement, module: cst.Module) -> cst.BaseStatement | None:
    """The statement right before ``stmt`` in its block (``module``'s body for a top-level one), or None: the
    first of its block, or in a block other than its parent's first (an ``else``)."""
    parent = facts.parent_stmt.get(stmt)
    body = list(module.body if parent is None else getattr(getattr(parent, "body", None), "body", ()))
    if stmt not in body:
        return None
    index = body.index(stmt)
    return body[index - 1] if index > 0 else None


def outside_open(facts: Facts, stmt: cst.BaseStatement) -> cst.BaseStatement:
    """``stmt``, or the outermost ``with open(...)`` statement whose body holds it (``with open(p, "wb") as f: save(f)``)."""
    parent = facts.parent_stmt.get(stmt)
    while isinstance(parent, cst.With) and any(_opens(item.item) for item in parent.items):
        stmt, parent = parent, facts.parent_stmt.get(parent)
    return stmt


def opening_with(facts: Facts, stmt: cst.BaseStatement, handle: cst.BaseExpression) -> cst.With | None:
    """The ``with open(path) as handle:`` around ``stmt`` (other ``with``s, ``if``s between) that opened the file
    ``handle`` names; ``None`` where ``handle`` is no such name (a path, or a file opened elsewhere)."""
    if not isinstance(handle, cst.Name):
        return None
    for outer in facts.chain(stmt)[1:]:
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
            return None
        if isinstance(outer, cst.With) and any(
            _opens(item.item) and item.asname is not None and isinstance(item.asname.name, cst.Name)
            and item.asname.name.value == handle.value for item in outer.items
        ):
            return outer
    return None


def opened_path(with_: cst.With, handle: cst.Name) -> cst.BaseExpression | None:
    """The path ``with open(path) as handle:`` opens (its first argument)."""
    for item in with_.items:
        name = item.asname.name if item.asname is not None else None
        if isinstance(name, cst.Name) and name.value == handle.value and isinstance(item.item, cst.Call) and item.item.args:
            return item.item.args[0].value
    return None


def _opens(expr: cst.BaseExpression) -> bool:
    """``open(...)`` / ``path.open(...)``: a file the statements under the ``with`` read or write."""
    if not isinstance(expr, cst.Call):
        return False
    func = expr.func
    return (isinstance(func, cst.Name) and func.value == "open") or (isinstance(func, cst.Attribute) and func.attr.value == "open")


def under_main_process(facts: Facts, stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` is in the body of an ``if accelerator.is_main_process:`` (or ``is_local_main_process``)
    test: converted code that runs on one process only."""
    inner = stmt
    for outer in facts.chain(stmt)[1:]:
        if isinstance(outer, cst.If) and _main_test(outer.test) and isinstance(outer.body, cst.IndentedBlock):
            if inner in outer.body.body:
                return True
        inner = outer
    return False


def _main_test(test: cst.BaseExpression) -> bool:
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _main_test(test.left) or _main_test(test.right)
    return isinstance(test, cst.Attribute) and test.attr.value in ("is_main_process", "is_local_main_process")


def binds_on_every_path(facts: Facts, branch: cst.If, binders: list[cst.BaseStatement]) -> bool:
    """Whether every way through ``branch`` (its body, each ``elif``, its ``else``) runs one of ``binders``: a name
    bound only ``if args.use_optimizer:`` is unbound after it when the test is false."""
    def block_binds(block: list[cst.BaseStatement]) -> bool:
        for binder in binders:
            top = facts.top_in(binder, block)
            if top is binder or (isinstance(top, cst.If) and binds_on_every_path(facts, top, binders)):
                return True
            if isinstance(top, cst.With) and block_binds(block_of(top) or []):
                return True
        return False

    body = block_of(branch) or []
    other = branch.orelse
    if other is None or not block_binds(body):
        return False
    if isinstance(other, cst.If):
        return binds_on_every_path(facts, other, binders)
    return isinstance(other.body, cst.IndentedBlock) and block_binds(list(other.body.body))


def unconditional(facts: Facts, stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` runs whenever its function (or module) does: no ``if``, loop or ``try`` around it there."""
    for outer in facts.chain(stmt)[1:]:
        if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
            return True
        if isinstance(outer, (cst.If, cst.For, cst.While, cst.Try)):
            return False
    return True


def common_block(facts: Facts, scope: Scope, stmts: list[cst.BaseStatement],
                 loops: set[int] = frozenset()) -> list[cst.BaseStatement]:  # type: ignore[assignment]
    """The innermost block of ``scope`` (its body, or the body of an ``if``/``with``/``try`` in it, never
    a loop's but for the ``for`` statements ``loops`` names by id) that contains every statement of ``stmts``;
    ``scope.body`` when there are none."""
    block = scope.body
    if not stmts:
        return block
    while True:
        tops = {id(facts.top_in(s, block)) for s in stmts}
        if len(tops) != 1 or None in tops:
            return block
        top = facts.top_in(stmts[0], block)
        entered = isinstance(top, (cst.If, cst.With, cst.Try)) or (isinstance(top, cst.For) and id(top) in loops)
        inner = block_of(top) if entered else None  # type: ignore[arg-type]
        if inner is None or any(facts.top_in(s, inner) is None for s in stmts):
            return block
        block = inner
