"""Loaders the training reaches through something that holds them rather than through their own name.

Three shapes many authors write, each of which captures the loader object when its statement runs:

- a container of loaders: ``loaders = {"train": loader_train, "valid": loader_valid}`` walked as ``loaders[phase]``
  (also a list or tuple of them);
- a wrapper: ``data = iter(loader)``, ``itertools.cycle(loader)``, or a generator function of the program
  (``def cycle(dl): while True: for x in dl: yield x``) drawn from with ``next(data)`` or walked;
- a loader built right where it is wrapped: ``train_loader = cycle(DataLoader(...))``.

A holder made before ``prepare`` keeps the loader as it was: every process would walk all of its data. The plan
asks ``check_holders`` for each loop that trains; the answer is one of: fine (the holder is made after ``prepare``),
rebuilt (its statement is made again right after ``prepare``: ``rebuilt``), wrapped in place (the inline loader
becomes ``accelerator.prepare(DataLoader(...))`` where it is built: ``wrapped``), or a ``Problem`` naming the holder.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.prepared_uses import SOURCE_WRAPPERS, PreparedUses
from accelify.codemods.analysis.problems import UNSHARDED
from accelify.codemods.analysis.roles import classify

WRAPPERS = frozenset({"iter", "itertools.cycle"})
# wrappers that take nothing from the loader when they are made (``iter`` draws the shuffle's seed, ``list`` walks it):
# their statement can run again after ``prepare`` and mean the same
LAZY = frozenset({"enumerate"})
_PURE = (cst.Name, cst.Attribute, cst.SimpleString, cst.Integer)


@dataclass(frozen=True)
class Holder:
    """``binding`` holds loaders: the loader expressions it captured (``loaders``), or one built inline (``inline``)."""

    binding: Binding
    loaders: tuple[cst.BaseExpression, ...]
    inline: cst.Call | None


@dataclass(frozen=True)
class Inline:
    """A loader built where it is used (``cycle(DataLoader(...))``, ``for x in DataLoader(...)``): ``call``, in the
    statement ``stmt`` of ``scope``; ``name`` is what the refusal names if it cannot be prepared there."""

    scope: Scope
    stmt: cst.BaseStatement
    call: cst.Call
    name: str
    binding: Binding | None = None


class LoaderHolders(PreparedUses):
    """The plan's view of loaders held by containers and wrappers (``Plan`` mixes it in)."""

    rebuilt: list[Binding]  # holders made again right after prepare
    wrapped: list["Inline"]  # loaders built inline (in a wrapper, or as a loop's iterable): prepared where built
    prepare_block: list[cst.BaseStatement]

    def holder(self, scope: Scope, expr: cst.BaseExpression, depth: int = 0, at: cst.BaseStatement | None = None
               ) -> Holder | None:
        """What holds the loaders ``expr`` (``loaders[phase]``, ``data`` of ``next(data)``) reads, followed through
        the parameters of helpers when every caller passes the same holder; None when it is no holder. Read at
        ``at``, it is the holder bound last before it (a converted program makes ``loaders = {...}`` again right
        after ``prepare``: the loop walks that one's loaders)."""
        subscript = isinstance(expr, cst.Subscript)
        base = expr.value if isinstance(expr, cst.Subscript) else expr
        key = dotted(base)
        if key is None or "." in key or depth > 4:
            return None
        owner = scope.resolve(key)
        if owner is not None and owner.kind == "function" and key in owner.param_names and key not in owner.bindings:
            found = {id(h.binding): h for site in self.call_sites(owner)
                     if (arg := self.arg_for(site, owner, key)) is not None and isinstance(arg.value, cst.Name)
                     and (h := self.holder(site.scope, _like(expr, arg.value), depth + 1)) is not None}
            return next(iter(found.values())) if len(found) == 1 else None
        binding = self._reaching(scope, key, at) if at is not None and key in scope.bindings else self.binding_of(scope, key)
        if binding is None or binding.role is not None or binding.value is None or binding.unpacked is not None:
            return None
        value, where = binding.value, binding.where
        if subscript and isinstance(value, (cst.Dict, cst.List, cst.Tuple)):
            elements = [e.value for e in value.elements if isinstance(e, (cst.DictElement, cst.Element))]
            loaders = tuple(e for e in elements if self._is_loader(where, e))
            return Holder(binding, loaders, None) if loaders else None
        if not subscript and isinstance(value, cst.Call) and value.args and self._wrapper(where, value):
            inner = value.args[0].value
            if isinstance(inner, cst.Call) and classify(inner, where.imports, self.facts.classes) == "loader":
                return Holder(binding, (), inner)
            if self._is_loader(where, inner):
                return Holder(binding, (inner,), None)
        return None

    def _is_loader(self, scope: Scope, expr: cst.BaseExpression) -> bool:
        found = super().origin(scope, expr)
        return found is not None and found.role == "loader"

    def _wrapper(self, scope: Scope, call: cst.Call) -> bool:
        """``iter(x)``, ``itertools.cycle(x)``, or a generator function of the program (it yields)."""
        if (scope.imports.qualname(call.func) or dotted(call.func)) in WRAPPERS:
            return True
        site = self.facts.sites.get(call)
        function = self.callee(site) if site is not None else None
        return function is not None and bool(m.findall(function.node, m.Yield()))

    def origin(self, scope: Scope, expr: cst.BaseExpression) -> Binding | None:
        """As ``Flow.origin``; ``loaders[phase]`` of a container of loaders is (the first of) its loaders."""
        if isinstance(expr, cst.Subscript):
            found = self.holder(scope, expr)
            if found is not None and found.loaders:
                return super().origin(found.binding.where, found.loaders[0])
        return super().origin(scope, expr)

    def prepared(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement | None = None) -> Binding | None:
        """As ``PreparedUses.prepared``; ``loaders[phase]`` is prepared when its container holds prepared loaders."""
        found = super().prepared(scope, expr, at)
        if found is None or not isinstance(expr, cst.Subscript):
            return found
        held = self.holder(scope, expr, at=at)
        return found if held is None or self.holder_sees_prepared(held, scope, at) else None

    def loader_of(self, loop: Loop) -> Binding | None:
        """As ``PreparedUses.loader_of``; also ``for x, y in loader`` in ``for phase, loader in loaders.items()``
        (``.values()``, a list or tuple of loaders, a display of them) when every loader the holder holds there is
        prepared: each batch is then one process's own, whichever loader the pass walks."""
        found = super().loader_of(loop)
        return found if found is not None else self._walked_from_holder(loop)

    def _walked_from_holder(self, loop: Loop) -> Binding | None:
        source = self.loop_source(loop)
        outer = loop.parent
        while isinstance(source, cst.Name) and outer is not None and source.value not in outer.targets:
            outer = outer.parent
        if not isinstance(source, cst.Name) or outer is None \
                or [b.stmt for b in loop.scope.bindings.get(source.value, [])] != [outer.node]:
            return None  # (a name the outer loop does not bind, or bound again elsewhere)
        walked, target = outer.node.iter, outer.node.target
        if m.matches(walked, m.Call(func=m.Attribute(attr=m.Name("items")), args=[])) and isinstance(target, cst.Tuple) \
                and len(target.elements) == 2 and m.matches(target.elements[1].value, m.Name(source.value)):
            walked = walked.func.value  # type: ignore[attr-defined]
        elif m.matches(walked, m.Call(func=m.Attribute(attr=m.Name("values")), args=[])) and m.matches(target, m.Name(source.value)):
            walked = walked.func.value  # type: ignore[attr-defined]
        elif not m.matches(target, m.Name(source.value)):
            return None
        where, stmt, value = loop.scope, outer.node, walked
        if isinstance(walked, cst.Name) and walked.value in loop.scope.bindings:
            binding = self._reaching(loop.scope, walked.value, outer.node)
            if binding is None or binding.value is None:
                return None
            where, stmt, value = binding.where, binding.stmt, binding.value
            if binding in self.rebuilt:
                stmt = outer.node  # made again after ``prepare``: its loaders are the prepared ones there
        if not isinstance(value, (cst.Dict, cst.List, cst.Tuple)):
            return None
        elements = [e.value for e in value.elements if isinstance(e, (cst.DictElement, cst.Element))]
        found = [super(LoaderHolders, self).prepared(where, e, stmt) for e in elements]
        if not elements or any(f is None or f.role != "loader" for f in found):
            return None
        return found[0]

    def feeds_training(self) -> bool:
        """As ``PreparedUses.feeds_training``; a loader prepared where it is built (``for x in DataLoader(...)``,
        ``cycle(DataLoader(...))``) feeds the training too."""
        return bool(self.wrapped) or super().feeds_training()

    def holder_sees_prepared(self, held: Holder, scope: Scope, at: cst.BaseStatement | None) -> bool:
        """Whether ``held``'s loaders are the prepared ones where ``scope`` reads it at ``at``."""
        binding = held.binding
        if binding in self.rebuilt:
            return at is None or scope is not binding.where or self.prepare_after is None \
                or self.facts.after(at, self.prepare_after)
        if any(w.binding is binding for w in self.wrapped):
            return True
        return all(super(LoaderHolders, self).prepared(binding.where, e, binding.stmt) is not None for e in held.loaders)

    def check_holders(self, loop_scope: Scope, sources: list[cst.BaseExpression], node: cst.CSTNode) -> bool:
        """Settle every holder the training loop reads in ``sources``; False when one is refused (a problem)."""
        for source in sources:
            self._returned_inline(loop_scope, source)
            held = self.holder(loop_scope, source)
            if held is None:
                continue
            binding = held.binding
            if held.inline is not None:
                if all(w.binding is not binding for w in self.wrapped):
                    self.wrapped.append(Inline(binding.where, binding.stmt, held.inline, binding.key, binding))
                continue
            if not any(self._is_prepared_loader(binding.where, e) for e in held.loaders):
                continue
            if binding in self.rebuilt or self.holder_sees_prepared(held, binding.where, binding.stmt):
                continue
            if self._rebuildable(binding) and not self._eager(binding):
                self.rebuilt.append(binding)
                continue
            if self._read_without_grad(binding):
                continue  # batches for a look (set P's P10: a few reconstructions each epoch): every process its own
            self._problem(UNSHARDED, node, name=binding.key, line=binding.key)  # type: ignore[attr-defined]
            return False
        return True

    def _read_without_grad(self, binding: Binding) -> bool:
        """Whether every read of the holder is a statement under ``no_grad`` (``samples, _ = next(visualizer)`` in
        ``with torch.no_grad():``): no backward sees its batches, so a process walking all of it trains on nothing
        more; left as it is."""
        refs = binding.where.refs.get(binding.key, [])
        holders = [binding.where.holders.get(id(ref)) for ref in refs]
        if not holders or any(h is None for h in holders):
            return False
        return all(any(site.no_grad for site in self.facts.calls if site.stmt is h) for h in holders)

    def _returned_inline(self, scope: Scope, source: cst.BaseExpression) -> None:
        """``data = make_iter()`` where ``make_iter`` returns ``iter(DataLoader(...))``: the loader is prepared where
        the function builds it."""
        key = dotted(source)
        binding = self.binding_of(scope, key) if key is not None and "." not in key else None
        call = binding.value if binding is not None else None
        site = self.facts.sites.get(call) if isinstance(call, cst.Call) else None
        function = self.callee(site) if site is not None else None
        if function is None or function.node.name.value == "__init__" or m.findall(function.node, m.Yield()):  # type: ignore[union-attr]
            return
        for ret in function.returns:
            value = ret.value
            if not (isinstance(value, cst.Call) and value.args and self._wrapper(function, value)):
                continue  # (a loader returned as it is is followed to where it is built, and prepared with the others)
            value = value.args[0].value
            made = self.facts.sites.get(value) if isinstance(value, cst.Call) else None
            if made is not None and classify(value, function.imports, self.facts.classes) == "loader" \
                    and all(w.call is not value for w in self.wrapped):
                self.wrapped.append(Inline(function, made.stmt, value, key or "the loader"))  # type: ignore[arg-type]

    def check_inline(self, loop: Loop) -> None:
        """``for x, y in DataLoader(ds, ...)`` (also in a generator that feeds the training): the loader is built
        where it is walked, so it is prepared right there."""
        source = self.loop_source(loop)
        if isinstance(source, cst.Call) and classify(source, loop.scope.imports, self.facts.classes) == "loader" \
                and all(w.call is not source for w in self.wrapped):
            name = (dotted(source.func) or "DataLoader") + "(...)"
            self.wrapped.append(Inline(loop.scope, loop.node, source, name))

    def check_captured(self, loop: Loop) -> bool:
        """``steps = list(enumerate(loader))`` / ``pbar = tqdm(loader)`` then ``for i, (x, y) in pbar``: the statement
        that wraps the loader must see the prepared one. Made before ``prepare``: an ``enumerate`` is made again after
        it; anything else is refused naming it (a ``Problem``), False then."""
        imports = loop.scope.imports
        expr: cst.BaseExpression = loop.node.iter
        chain: list[Binding] = []
        for _ in range(3):
            while isinstance(expr, cst.Call) and imports.qualname(expr.func) in SOURCE_WRAPPERS and expr.args:
                expr = expr.args[0].value
            bound = self._reaching(loop.scope, expr.value, chain[-1].stmt if chain else loop.node) \
                if isinstance(expr, cst.Name) else None
            if bound is None or not isinstance(bound.value, cst.Call) or imports.qualname(bound.value.func) not in SOURCE_WRAPPERS:
                break
            chain.append(bound)
            expr = bound.value
        if not chain or not self._is_prepared_loader(loop.scope, expr):
            return True
        for binding in chain:
            if binding.where is not loop.scope or binding in self.rebuilt or \
                    super(LoaderHolders, self).prepared(binding.where, expr, binding.stmt) is not None:
                continue
            value = binding.value
            if isinstance(value, cst.Call) and imports.qualname(value.func) in LAZY and self._rebuildable(binding):
                self.rebuilt.append(binding)
                continue
            self._problem(UNSHARDED, loop.node.iter, name=binding.key, line=binding.key)  # type: ignore[attr-defined]
            return False
        return True

    def _reaching(self, scope: Scope, key: str, before: cst.BaseStatement) -> Binding | None:
        """The binding of ``key`` in ``scope`` last made before ``before`` (a notebook's second experiment binds
        ``pbar`` again), else what ``binding_of`` says."""
        order = self.facts.order
        earlier = [b for b in scope.bindings.get(key, []) if order[b.stmt][0] < order[before][0]]
        return max(earlier, key=lambda b: order[b.stmt][0]) if earlier else self.binding_of(scope, key)

    def _is_prepared_loader(self, scope: Scope, expr: cst.BaseExpression) -> bool:
        found = super().origin(scope, expr)
        return found is not None and found.role == "loader" and found in self.objects

    def _eager(self, binding: Binding) -> bool:
        """``iter(loader)``, ``itertools.cycle(loader)``: made, they start walking the loader (its shuffle draws a
        seed), so made again after ``prepare`` the one-process run would draw differently from the original."""
        value = binding.value
        return isinstance(value, cst.Call) and (binding.where.imports.qualname(value.func) or dotted(value.func)) in WRAPPERS

    def _rebuildable(self, binding: Binding) -> bool:
        """Whether the holder's statement can run again right after ``prepare`` and mean the same: a plain
        ``name = <display or wrapper of names>`` directly in the block ``prepare`` goes in, before it, its name
        neither bound again nor read between the two (nothing else captured the old holder)."""
        stmt, after = binding.stmt, self.prepare_after
        if binding.where is not self.prepare_scope or after is None or stmt not in self.prepare_block \
                or after not in self.prepare_block or self.prepare_block.index(stmt) >= self.prepare_block.index(after):
            return False
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)
                and len(stmt.body[0].targets) == 1 and isinstance(stmt.body[0].targets[0].target, cst.Name)):
            return False
        if not _pure(binding.value):
            return False
        if len(binding.where.bindings.get(binding.key, [])) != 1:
            return False
        start, end = self.facts.order[stmt][1], self.facts.order[after][1]
        for ref in binding.where.refs.get(binding.key, []):
            holder = binding.where.holders.get(id(ref))
            if holder is not None and holder is not stmt and start < self.facts.order[holder][0] <= end:
                return False
        return True


def _pure(value: cst.BaseExpression | None) -> bool:
    """A display or a wrapper call whose parts are names, attributes and literals: made again, it means the same."""
    if isinstance(value, _PURE):
        return True
    if isinstance(value, (cst.List, cst.Tuple)):
        return all(isinstance(e, cst.Element) and _pure(e.value) for e in value.elements)
    if isinstance(value, cst.Dict):
        return all(isinstance(e, cst.DictElement) and _pure(e.key) and _pure(e.value) for e in value.elements)
    if isinstance(value, cst.Call):
        return all(a.keyword is None and not a.star and _pure(a.value) for a in value.args)
    return False


def _like(expr: cst.BaseExpression, name: cst.Name) -> cst.BaseExpression:
    """``expr`` with its base (``loaders`` of ``loaders[phase]``) replaced by the caller's ``name``."""
    return expr.with_changes(value=name) if isinstance(expr, cst.Subscript) else name
