"""One pass over the module that records everything the rules read.

The collector walks the tree once and records scopes (module, functions, classes), bindings
(``name = value``, ``self.x = value``, ``args.x = value``, loop targets, parameters), name and
attribute loads, every call with its enclosing statement and loop, loops, and the statement tree
(for inserting and removing statements). ``plan.Plan`` turns these facts into roles.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Loop, Scope
from accelify.codemods.analysis.names import PROGRESS_BARS, ImportMap, dotted
from accelify.codemods.analysis.exports import Exports
from accelify.codemods.analysis.statement_shapes import target_names
from accelify.codemods.analysis.tree_walk import child_fields

NO_GRAD = {"torch.no_grad", "torch.inference_mode", "torch.autograd.no_grad", "torch.autograd.grad_mode.no_grad"}
_HANDLERS: dict[type, tuple] = {}


def _handlers(cls: type) -> tuple:
    """``(visit, leave, child fields, is a statement)`` for a node class, computed once per class."""
    name = cls.__name__
    return (
        getattr(_Collector, f"visit_{name}", None),
        getattr(_Collector, f"leave_{name}", None),
        child_fields(cls),
        issubclass(cls, cst.BaseStatement),
    )


def _is_main_guard(test: cst.BaseExpression) -> bool:
    """``__name__ == "__main__"`` (either way round)."""
    if not (isinstance(test, cst.Comparison) and len(test.comparisons) == 1
            and isinstance(test.comparisons[0].operator, cst.Equal)):
        return False
    sides = [test.left, test.comparisons[0].comparator]
    names = [s for s in sides if isinstance(s, cst.Name) and s.value == "__name__"]
    strings = [s for s in sides if isinstance(s, cst.SimpleString) and s.evaluated_value == "__main__"]
    return len(names) == 1 and len(strings) == 1


SKIP_MARK = "accelify: skip"


def _has_skip(comment: cst.Comment | None) -> bool:
    return comment is not None and SKIP_MARK in comment.value and "skip-file" not in comment.value


def _ends_block(node: object) -> bool:
    """A statement line whose last statement leaves its block (``return``, ``raise``, ``continue``, ``break``)."""
    return isinstance(node, cst.SimpleStatementLine) and bool(node.body) \
        and isinstance(node.body[-1], (cst.Return, cst.Raise, cst.Continue, cst.Break))


def _statement_skipped(node: cst.BaseStatement) -> bool:
    if any(_has_skip(line.comment) for line in node.leading_lines[-1:]):
        return True
    if isinstance(node, cst.SimpleStatementLine):
        return _has_skip(node.trailing_whitespace.comment)
    body = getattr(node, "body", None)
    header = getattr(body, "header", None)
    return isinstance(header, cst.TrailingWhitespace) and _has_skip(header.comment)


class _Collector:
    def __init__(self, module: cst.Module, unit: str) -> None:
        self.imports = ImportMap()
        self.unit = unit
        self.module_scope = Scope(module, "module", None, "<module>", unit=unit, imports=self.imports)
        self.scope = self.module_scope
        self.scopes = [self.module_scope]
        self.stmts: list[cst.BaseStatement] = []
        self.parent_stmt: dict[cst.BaseStatement, cst.BaseStatement | None] = {}
        self.loops: list[Loop] = []
        self.left_early: set[cst.For] = set()  # loops whose ``else:`` clause is being walked: already left
        self.saved_loops: list[list[Loop]] = []  # the loops of enclosing functions
        self.all_loops: list[Loop] = []
        self.calls: list[CallSite] = []
        self.no_grad = 0
        self.with_flags: list[bool] = []
        self.not_loads: set[cst.CSTNode] = set()
        self.classes: dict[str, list[str]] = {}
        self.skipped: set[cst.BaseStatement] = set()
        self.dead: set[cst.BaseStatement] = set()  # statements no path reaches (after a return in their block)
        self.order: dict[cst.BaseStatement, tuple[int, int]] = {}  # pre-order index, index of the last statement inside
        self.definitions: list[str] = []  # functions and classes defined at module level
        self.count = 0

    # the walk -------------------------------------------------------------------------------------
    def walk(self, node: cst.CSTNode) -> None:
        """Visit ``node`` and its non-trivia children, depth first, calling ``visit_<Type>`` before the
        children (``False`` skips them) and ``leave_<Type>`` after."""
        cls = type(node)
        handlers = _HANDLERS.get(cls)
        if handlers is None:
            handlers = _HANDLERS[cls] = _handlers(cls)
        visit, leave, fields, is_statement = handlers
        if is_statement:
            assert isinstance(node, cst.BaseStatement)
            self.parent_stmt[node] = self.stmts[-1] if self.stmts else None
            self.stmts.append(node)
            start = self.count
            self.count += 1
            if self.loops:
                self.loops[-1].stmts.append(node)
            if _statement_skipped(node):
                self.skipped.add(node)
        if visit is None or visit(self, node) is not False:
            for name in fields:
                child = getattr(node, name)
                if name == "orelse" and isinstance(node, cst.For) and child is not None:
                    self.loops.pop()  # the ``else:`` clause runs once, after the loop: its statements are not in it
                    self.left_early.add(node)
                if isinstance(child, cst.CSTNode):
                    self.walk(child)
                elif isinstance(child, (list, tuple)):
                    ended = False
                    for item in child:
                        if ended and isinstance(item, cst.BaseStatement):
                            self.dead.add(item)  # after a ``return``/``raise``/``continue``/``break`` of its block
                        if isinstance(item, cst.CSTNode):
                            self.walk(item)
                        ended = ended or _ends_block(item)
        if leave is not None:
            leave(self, node)
        if is_statement:
            self.stmts.pop()
            self.order[node] = (start, self.count - 1)

    # scopes -----------------------------------------------------------------------------------
    def _bind(
        self,
        key: str,
        value: cst.BaseExpression | None,
        target: cst.BaseExpression,
        unpacked: tuple[cst.BaseExpression, int] | None = None,
    ) -> None:
        where = self.scope
        scope = where
        if key.startswith("self.") and where.class_scope is not None:
            scope = where.class_scope
        binding = Binding(key, value, self.stmts[-1], scope, where, target, self.loops[-1] if self.loops else None)
        binding.unpacked = unpacked
        scope.bindings.setdefault(key, []).append(binding)

    def _bind_target(
        self,
        target: cst.BaseExpression,
        value: cst.BaseExpression | None,
        unpacked: tuple[cst.BaseExpression, int] | None = None,
    ) -> None:
        if isinstance(target, (cst.Tuple, cst.List)):
            elements = [e.value for e in target.elements]
            values: list[cst.BaseExpression | None] = [None] * len(elements)
            if isinstance(value, (cst.Tuple, cst.List)) and len(value.elements) == len(elements):
                values = [e.value for e in value.elements]
                for element, element_value in zip(elements, values):
                    self._bind_target(element, element_value)
                return
            starred = any(isinstance(e, cst.StarredElement) for e in elements)
            for index, element in enumerate(elements):
                # ``a, b = make()``: each name is element ``index`` of the call's result
                source = (value, index) if value is not None and not starred else None
                self._bind_target(element, None, source)
            return
        if isinstance(target, cst.StarredElement):
            self._bind_target(target.value, None)
            return
        key = dotted(target)
        if key is not None and key.count(".") <= 1:
            self.not_loads.add(target)
            self._bind(key, value, target, unpacked)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> None:
        if self.scope is self.module_scope:
            self.definitions.append(node.name.value)
        self._bind(node.name.value, None, node.name)
        self.not_loads.add(node.name)
        params = [*node.params.posonly_params, *node.params.params, *node.params.kwonly_params]
        for star in (node.params.star_arg, node.params.star_kwarg):
            if isinstance(star, cst.Param):
                params.append(star)
        for param in params:
            self.not_loads.add(param.name)
        decorated_no_grad = any(
            self.imports.qualname(d.decorator.func if isinstance(d.decorator, cst.Call) else d.decorator) in NO_GRAD
            for d in node.decorators
        )
        scope = Scope(
            node, "function", self.scope, node.name.value, params=params, no_grad=decorated_no_grad,
            unit=self.unit, imports=self.imports,
        )
        self.scopes.append(scope)
        self.scope = scope
        self.saved_loops.append(self.loops)
        self.loops = []
        self.no_grad += decorated_no_grad

    def leave_FunctionDef(self, original_node: cst.FunctionDef) -> None:
        self.no_grad -= self.scope.no_grad
        assert self.scope.parent is not None
        self.scope = self.scope.parent
        self.loops = self.saved_loops.pop()

    def visit_Lambda(self, node: cst.Lambda) -> None:
        params = node.params
        for param in (*params.posonly_params, *params.params, *params.kwonly_params):
            self.not_loads.add(param.name)

    def visit_ClassDef(self, node: cst.ClassDef) -> None:
        if self.scope is self.module_scope:
            self.definitions.append(node.name.value)
        self._bind(node.name.value, None, node.name)
        self.not_loads.add(node.name)
        self.classes[node.name.value] = [self.imports.qualname(b.value) or "" for b in node.bases]
        scope = Scope(node, "class", self.scope, node.name.value, unit=self.unit, imports=self.imports)
        self.scopes.append(scope)
        self.scope = scope

    def leave_ClassDef(self, original_node: cst.ClassDef) -> None:
        assert self.scope.parent is not None
        self.scope = self.scope.parent

    def visit_If(self, node: cst.If) -> bool:
        """An imported module's ``if __name__ == "__main__":`` block never runs in the program (a module's own
        self-test or demo): it is not walked, so nothing in it decides how the program converts."""
        return not (self.unit != "__main__" and self.scope is self.module_scope and _is_main_guard(node.test))

    def visit_Import(self, node: cst.Import) -> bool:
        for name in self.imports.add(node):
            self._bind(name, None, cst.Name(name))
        return False

    def visit_ImportFrom(self, node: cst.ImportFrom) -> bool:
        for name in self.imports.add(node):
            self._bind(name, None, cst.Name(name))
        return False

    # bindings ---------------------------------------------------------------------------------
    def visit_Assign(self, node: cst.Assign) -> None:
        for target in node.targets:
            self._bind_target(target.target, node.value)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._bind_target(node.target, node.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        key = dotted(node.target)
        if key is not None and key.count(".") <= 1:
            self.not_loads.discard(node.target)  # ``total += n`` reads ``total`` too
            where = self.scope
            scope = where.class_scope if key.startswith("self.") and where.class_scope is not None else where
            binding = Binding(key, node.value, self.stmts[-1], scope, where, node.target, self.loops[-1] if self.loops else None)
            binding.aug = True
            scope.bindings.setdefault(key, []).append(binding)

    def visit_With(self, node: cst.With) -> None:
        flag = False
        for item in node.items:
            call = item.item
            if isinstance(call, cst.Call) and self.imports.qualname(call.func) in NO_GRAD:
                flag = True
            if item.asname is not None:  # ``with tqdm(loader) as bar:``: a progress bar enters as itself
                bar = isinstance(call, cst.Call) and self.imports.qualname(call.func) in PROGRESS_BARS
                self._bind_target(item.asname.name, call if bar else None)
        self.with_flags.append(flag)
        self.no_grad += flag

    def leave_With(self, original_node: cst.With) -> None:
        self.no_grad -= self.with_flags.pop()

    def visit_For(self, node: cst.For) -> None:
        targets = target_names(node.target)
        loop = Loop(node, self.scope, self.loops[-1] if self.loops else None, self.no_grad > 0, targets)
        self._bind_target(node.target, None)
        self.loops.append(loop)
        self.all_loops.append(loop)
        self.scope.loops.append(loop)

    def leave_For(self, original_node: cst.For) -> None:
        if original_node in self.left_early:
            self.left_early.discard(original_node)
        else:
            self.loops.pop()

    def visit_Return(self, node: cst.Return) -> None:
        self.scope.returns.append(node)

    # loads and calls --------------------------------------------------------------------------
    def visit_Attribute(self, node: cst.Attribute) -> None:
        self.not_loads.add(node.attr)
        if isinstance(node.value, cst.Name) and node not in self.not_loads:
            self.scope.refs.setdefault(f"{node.value.value}.{node.attr.value}", []).append(node)
            if self.stmts:
                self.scope.holders[id(node)] = self.stmts[-1]
        if isinstance(node.value, (cst.Name, cst.Attribute)) and self.stmts:
            self.scope.attributes.append((node, self.stmts[-1]))

    def visit_Name(self, node: cst.Name) -> None:
        if node not in self.not_loads:
            self.scope.refs.setdefault(node.value, []).append(node)
            if self.stmts:
                self.scope.holders[id(node)] = self.stmts[-1]

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.not_loads.add(node.keyword)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        method = func.attr.value if isinstance(func, cst.Attribute) else None
        if method == "backward" and self.stmts and _value_kept(self.stmts[-1], node):
            method = None  # ``z = flow.backward(z)``: a model's own method (a flow's inverse); autograd's gives None
        site = CallSite(
            node,
            self.imports.qualname(func),
            method,
            self.stmts[-1],
            self.scope,
            self.loops[-1] if self.loops else None,
            self.no_grad > 0,
        )
        self.calls.append(site)
        self.scope.calls.append(site)
        for loop in self.loops:
            loop.calls.append(site)


def collect(module: cst.Module, unit: str = "__main__", package: str | None = None, exports: Exports | None = None) -> Facts:
    """Walk ``module`` once and return the facts the rules read; ``unit`` names the module in a program
    (``__main__`` for the script, the import name for a local module it uses); ``package`` is the package its
    relative imports start from (``trainer`` for ``trainer/__init__.py`` and ``trainer/trainer.py``); ``exports``
    what ``from X import *`` binds for the local modules X (``exports.star_exports``)."""
    collector = _Collector(module, unit)
    collector.imports.package = package
    collector.imports.exports = exports or {}
    collector.walk(module)
    collector.imports.define(unit, collector.definitions)
    qualify = collector.imports.qualname
    classes = {
        qualify(cst.Name(name)) or name: [qualify(cst.Name(b)) or b if b in collector.definitions else b for b in bases]
        for name, bases in collector.classes.items()
    }
    return Facts(
        module=module,
        imports=collector.imports,
        module_scope=collector.module_scope,
        scopes=collector.scopes,
        calls=collector.calls,
        loops=collector.all_loops,
        parent_stmt=collector.parent_stmt,
        classes=classes,
        skipped=collector.skipped,
        dead=collector.dead,
        order=collector.order,
        unit=unit,
    )


def _value_kept(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    """Whether ``stmt`` assigns the value of ``call`` (or an item or attribute of it). Not ``return``: a wrapper's
    ``return loss.backward()`` hands on autograd's None."""
    if not isinstance(stmt, cst.SimpleStatementLine):
        return False
    for small in stmt.body:
        if isinstance(small, (cst.Assign, cst.AnnAssign, cst.AugAssign)):
            value = small.value
            while isinstance(value, (cst.Subscript, cst.Attribute)):
                value = value.value
            if value is call:
                return True
    return False
