"""The questions the rules ask of a settled plan: which uses see a prepared object, which loops train on a
prepared loader and which names hold its batches, which calls only place a value on a device.

``PreparedUses`` sits between ``Flow`` (call graph, origins) and ``Plan`` (the decisions): ``Plan`` sets the
attributes declared here once it has chosen the prepare site; these methods only read them.
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.statement_shapes import target_names
from accelify.codemods.analysis.distributed import Distributed
from accelify.codemods.analysis.facts import Binding, CallSite, Loop, Scope
from accelify.codemods.analysis.flow import Flow
from accelify.codemods.analysis.names import PROGRESS_BARS, dotted
from accelify.codemods.analysis.roles import is_cuda_string, mode_switched, rewraps, same_module, strip_placement

ITERATION_WRAPPERS = {"enumerate", "iter", *PROGRESS_BARS}
# what a loop's iterable may wrap its loader in and still walk it once per pass: ``tqdm(list(enumerate(loader)))``
SOURCE_WRAPPERS = ITERATION_WRAPPERS | {"list", "tuple", "tqdm.auto.tqdm", "tqdm.notebook.tqdm"}


@dataclass(frozen=True)
class Alias:
    """A name through which a scope holds a prepared object: a binding, or a parameter (``stmt`` None)."""

    key: str
    obj: Binding
    stmt: cst.BaseStatement | None
    many: bool = False  # a list of them: ``*optimizers`` in prepare

    @property
    def spelled(self) -> str:
        return f"*{self.key}" if self.many else self.key


class PreparedUses(Flow):
    """Reads of the plan's decisions (set by ``Plan``)."""

    distributed: Distributed
    objects: list[Binding]  # what prepare prepares
    in_place: list[Binding]  # loaders prepared right after they are built, inside a loop
    prepare_scope: Scope | None
    prepare_after: cst.BaseStatement | None
    aliases: list[Alias]  # what prepare passes and rebinds, in order
    function_sites: list  # other training functions preparing their own (``training_functions.FunctionSite``)
    _prepared_memo: dict[tuple[int, str, int], bool]

    # prepared uses ------------------------------------------------------------------------------
    def prepared(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement | None = None) -> Binding | None:
        """The prepared object ``expr`` holds in ``scope`` at statement ``at``, or None when it holds
        none, or holds the object as it was before ``prepare`` (raw)."""
        found = self.origin(scope, expr)
        if found is None or found not in self.objects:
            return None
        key = dotted(same_module(strip_placement(expr)))
        if key is None:
            return found
        return found if self._sees_prepared(scope, key, at, frozenset()) else None

    def _sees_prepared(self, scope: Scope, key: str, at: cst.BaseStatement | None, seen: frozenset) -> bool:
        memo = (id(scope), key, id(at))
        if memo in self._prepared_memo:
            return self._prepared_memo[memo]
        if (id(scope), key) in seen:
            return False
        result = self._sees(scope, key, at, seen | {(id(scope), key)})
        self._prepared_memo[memo] = result
        return result

    def _sees(self, scope: Scope, key: str, at: cst.BaseStatement | None, seen: frozenset) -> bool:
        target = self.prepare_scope
        names = {a.key for a in self.aliases}
        if target is None:
            return False
        head = key.split(".")[0]
        if head == "self" and scope.class_scope is not None and scope.name != "__init__" and any(
                obj.key == key and obj.where.class_scope is scope.class_scope and obj.where.name == "__init__"
                for obj in self.in_place):
            return True  # ``self.test_loader = self.accelerator.prepare(self.test_loader)`` under a test in ``__init__``
        placed = [obj for obj in self.in_place if obj.key == key and obj.where is scope]
        if placed:
            if at is None or any(self.facts.after(at, obj.stmt) for obj in placed):
                return True
            if key not in names:
                return False  # (a notebook's first experiment reads the name the main prepare rebinds: checked below)
        for where, aliases, anchor in self.prepare_sites():
            if any(a.key == key for a in aliases) and (scope is where or scope.inside(where)):
                if scope is not where or at is None or anchor is None:
                    return True
                return self.facts.after(at, anchor) and not self._rebound(scope, key, anchor, at)
        if head == "self" and key in names and target.class_scope is not None and scope.class_scope is target.class_scope:
            site = self.builder_call(scope)
            if site is not None and site.scope is target and self.prepare_after is not None:
                return self.facts.after(site.stmt, self.prepare_after)  # ``self.build_model()`` runs before prepare
            if target.name != "__init__" and (scope.name == "__init__" or site is not None):
                return False  # the constructor (and what it calls) runs before ``train(self, loader)`` prepares
            return True  # another method of the class: it runs after __init__ prepared it
        if key in names and target.kind == "module" and scope.resolve(head) is target:
            return True  # a module global, read by a function that runs after the prepare
        owner = scope.resolve(head) if head != "self" else None
        if owner is not None and owner.kind == "function" and head in owner.param_names and head not in owner.bindings:
            if "." in key:
                return False
            return self._passed_prepared(owner, head, seen)
        binding = self._last_before(scope, key, at) or self.binding_of(scope, key) or self.instance_attr(scope, key)
        if binding is not None:
            call, index = binding.unpacked if binding.unpacked is not None else (binding.value, None)
            if isinstance(call, cst.Call) and self._local_call(call):  # ``model_best = train(..., model, ...)``
                return self._hands_back_prepared(binding.where, call, index, binding.stmt, seen)
        if binding is not None and binding.value is not None:
            value = same_module(strip_placement(binding.value))
            read = self.kwargs_read(binding.where, value)
            if read is not None:  # ``self.model = kwargs["model"]``: what every caller passes as ``model=``
                return self._passed_prepared(*read, seen)
            inner = dotted(value)
            if inner is not None and (inner != key or binding.where is not scope):
                return self._sees_expr(binding.where, value, binding.stmt, seen)
            if inner == key and owner is not None and owner.kind == "function" and head in owner.param_names \
                    and all(dotted(same_module(strip_placement(b.value))) == key for b in owner.bindings.get(head, [])
                            if b.value is not None):
                # ``student = student.to(device).train()`` in a function handed ``student``: the same object
                return self._passed_prepared(owner, head, seen)
        return False

    def _passed_prepared(self, function: Scope, param: str, seen: frozenset) -> bool:
        """Whether every call of ``function`` passes a prepared object for ``param``, at the call."""
        sites = self.call_sites(function)
        args = [self.arg_for(site, function, param) for site in sites]
        return bool(sites) and all(
            arg is not None and self._sees_expr(site.scope, arg.value, site.stmt, seen) for site, arg in zip(sites, args)
        )

    def _last_before(self, scope: Scope, key: str, at: cst.BaseStatement | None) -> Binding | None:
        """The last binding of ``key`` in ``scope`` before ``at``, where the name is bound there more than once and
        the last one takes what a function of the program hands back (``model_best = model`` then ``model_best, losses
        = train(..., model, ...)``): that call, not the first alias, says what the name holds at ``at``."""
        if at is None or len(scope.bindings.get(key, [])) < 2 or at not in self.facts.order:
            return None
        last = self.facts.last_binding_before(scope, key, at)
        call = (last.unpacked[0] if last.unpacked is not None else last.value) if last is not None else None
        return last if isinstance(call, cst.Call) and self._local_call(call) else None

    def _hands_back_prepared(self, scope: Scope, call: cst.Call, index: int | None, at: cst.BaseStatement,
                             seen: frozenset) -> bool:
        """Whether a function of the program called at ``at`` returns (element ``index`` of) a parameter it is
        handed, unchanged, on every ``return``, and this call hands it a prepared object there (the Udacity-course
        ``model_transfer, losses = train(n_epochs, loaders, model, ...)`` ending in ``return model``)."""
        site = self.facts.sites.get(call)
        returned = self.returned_values(call, index)
        if site is None or returned is None:
            return False
        function, values = returned
        for value in values:
            value = mode_switched(value) if value is not None else None  # ``return model.eval(), h``: the module
            name = value.value if isinstance(value, cst.Name) else None
            if name is None or name not in function.param_names or any(
                    b.unpacked is not None or b.value is None or dotted(mode_switched(b.value)) != name
                    for b in function.bindings.get(name, [])):  # (``model = model.train()`` holds it still)
                return False
            if self._prepares_param(function, name):
                continue  # the function prepares what it is handed, and hands back the prepared one
            arg = self.arg_for(site, function, name)
            if arg is None or not self._sees_expr(scope, arg.value, at, seen):
                return False
        return True

    def _prepares_param(self, function: Scope, param: str) -> bool:
        """Whether ``function`` prepares what it is handed as ``param`` (where it trains it), before any ``return``."""
        if getattr(self, "prepare_scope", None) is None:
            return False  # (asked while the plan is still choosing)
        return any(where is function and any(a.key == param and a.stmt is None for a in aliases)
                   for where, aliases, _ in self.prepare_sites())

    def prepare_sites(self) -> list[tuple[Scope, list[Alias], cst.BaseStatement | None]]:
        """Each scope that prepares, with what it prepares and the statement prepare follows (None: first thing): the
        plan's prepare site, then the other training functions (``training_functions.py``)."""
        assert self.prepare_scope is not None
        return [(self.prepare_scope, self.aliases, self.prepare_after),
                *((site.scope, site.aliases, site.after) for site in self.function_sites)]

    def builder_call(self, scope: Scope) -> CallSite | None:
        """For a method ``__init__`` runs once before anything else can (``self.build_model()``, a statement of its
        own in ``__init__``'s body, directly or through another such method), nothing else calling it: that statement's
        call in ``__init__``. None for any other scope (a method called again later rebuilds what it binds)."""
        seen: set[int] = set()
        site: CallSite | None = None
        while scope.class_scope is not None and scope.name != "__init__" and id(scope) not in seen:
            seen.add(id(scope))
            sites = self.call_sites(scope)
            if len(sites) != 1 or sites[0].scope.class_scope is not scope.class_scope or sites[0].loop is not None:
                return None
            site = sites[0]
            stmt = site.stmt
            if stmt not in site.scope.body or not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 \
                    or not isinstance(stmt.body[0], cst.Expr) or stmt.body[0].value is not site.node:
                return None  # (under an ``if``, in a loop, or a value used: not a plain, once-only build)
            scope = site.scope
        return site if site is not None and scope.name == "__init__" and scope.class_scope is not None else None

    def prepared_model(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement | None = None) -> Binding | None:
        """The prepared model ``expr`` holds at ``at`` (as ``prepared`` says), or None for anything else."""
        found = self.prepared(scope, expr, at)
        return found if found is not None and found.role == "model" else None

    def model_object(self, scope: Scope, expr: cst.BaseExpression) -> Binding | None:
        """The model ``prepare`` receives that ``expr`` holds, before or after ``prepare``, or None."""
        found = self.origin(scope, expr)
        return found if found is not None and found.role == "model" and found in self.objects else None

    def _rebound(self, scope: Scope, key: str, anchor: cst.BaseStatement, at: cst.BaseStatement) -> bool:
        """Whether ``key`` is assigned again between ``prepare`` (after ``anchor``) and ``at``
        (``model = torch.load(f)`` after training: that model is not the prepared one)."""
        order = self.facts.order
        owner = scope.class_scope if key.startswith("self.") and scope.class_scope is not None else scope
        return any(
            order[anchor][1] < order[b.stmt][0] < order[at][0] and not rewraps(b, b.where.imports)
            and self.holds(b) not in self.objects  # ``model = train_model(model, ...)`` hands the prepared one back
            for b in owner.bindings.get(key, [])
        )

    def _sees_expr(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement, seen: frozenset) -> bool:
        key = dotted(same_module(strip_placement(expr)))
        return key is not None and self._sees_prepared(scope, key, at, seen)

    # placement ----------------------------------------------------------------------------------
    def placement_device(self, scope: Scope, call: cst.Call) -> cst.BaseExpression | None | bool:
        """For a pure placement call (``x.to(device)``, ``x.cuda()``), the device expression it names
        (``device``, ``"cuda"``), ``True`` for ``.cuda()``; ``None`` when the call does more than place
        (a dtype, a tensor, a device index)."""
        func = call.func
        if not isinstance(func, cst.Attribute):
            return None
        positional = [a for a in call.args if a.keyword is None]
        keywords = [a for a in call.args if a.keyword is not None]
        if any(a.star for a in call.args) or any(a.keyword.value != "non_blocking" for a in keywords):  # type: ignore[union-attr]
            only_device = len(call.args) == 1 and call.args[0].keyword is not None and call.args[0].keyword.value == "device"
            if not (func.attr.value == "to" and only_device):
                return None
            positional = [call.args[0]]
        own = len(positional) == 1 and dotted(positional[0].value) in self.distributed.device_indexes
        if func.attr.value == "cuda":
            return True if not positional or own else None  # ``.cuda(args.gpu)``: this process's own device
        if func.attr.value != "to" or len(positional) != 1:
            return None
        value = positional[0].value
        return value if own or self.is_device_like(scope, value) else None

    def is_device_like(self, scope: Scope, value: cst.BaseExpression) -> bool:
        """``device`` (a device variable, also through helper parameters), ``"cuda"``, ``torch.device("cuda")``."""
        if is_cuda_string(value):
            return True
        if isinstance(value, cst.Call) and scope.imports.qualname(value.func) == "torch.device":
            return bool(value.args) and is_cuda_string(value.args[0].value)
        return self.role(scope, value) == "device"

    # loops --------------------------------------------------------------------------------------
    def loop_source(self, loop: Loop) -> cst.BaseExpression:
        """The iterable a loop walks, under ``enumerate``/``tqdm``/``iter``/``list``."""
        imports = loop.scope.imports
        expr = loop.node.iter
        for _ in range(3):  # progress = tqdm(loader); for step, batch in enumerate(progress)
            while isinstance(expr, cst.Call) and imports.qualname(expr.func) in SOURCE_WRAPPERS and expr.args:
                expr = expr.args[0].value
            bound = self.binding_of(loop.scope, expr.value) if isinstance(expr, cst.Name) else None
            if bound is None or not isinstance(bound.value, cst.Call) or imports.qualname(bound.value.func) not in SOURCE_WRAPPERS:
                break
            expr = bound.value
        return expr

    def walked_sources(self, loop: Loop) -> list[cst.BaseExpression]:
        """Every iterable a loop takes its items from: what it walks, and what it draws from with ``next``, each
        name bound in more than one place taken for every value it is bound to (``data_loader = self.a`` in one
        branch, ``= self.b`` in another)."""
        sources = [self.loop_source(loop), *(source for _, source in self.drawn_sources(loop))]
        return [value for source in sources for value in self.alternatives(loop.scope, source)]

    def alternatives(self, scope: Scope, expr: cst.BaseExpression) -> list[cst.BaseExpression]:
        """The values a plain name of ``scope`` may hold when it is bound in several places (``None`` left out);
        ``[expr]`` otherwise."""
        if not isinstance(expr, cst.Name) or scope.kind != "function":
            return [expr]
        values = [b.value for b in scope.bindings.get(expr.value, []) if b.value is not None
                  and not (isinstance(b.value, cst.Name) and b.value.value == "None")]
        return values if len(values) > 1 and all(dotted(v) is not None for v in values) else [expr]

    def loader_of(self, loop: Loop) -> Binding | None:
        """The prepared data loader a loop walks, if it walks one as prepared."""
        found = self.prepared(loop.scope, self.loop_source(loop), loop.node)
        return found if found is not None and found.role == "loader" else None

    def batch_names(self, loop: Loop) -> set[str]:
        """Names bound to batches of a prepared loader in this loop (loop targets and their unpacking)."""
        if self.loader_of(loop) is None:
            return set()
        target = loop.node.target
        iterable = loop.node.iter
        while isinstance(iterable, cst.Call) and iterable.args and loop.scope.imports.qualname(iterable.func) in PROGRESS_BARS:
            iterable = iterable.args[0].value  # ``tqdm(enumerate(loader))``: the index is enumerate's, not a batch
        if (
            isinstance(iterable, cst.Call)
            and loop.scope.imports.qualname(iterable.func) == "enumerate"
            and isinstance(target, cst.Tuple)
            and len(target.elements) == 2
        ):
            target = target.elements[1].value
        names = set(target_names(target))
        for stmt in loop.stmts:
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                small = stmt.body[0]
                if isinstance(small, cst.Assign):
                    for t in small.targets:
                        names |= _unpacked_batch(t.target, small.value, names)
        return names

    def is_batch(self, scope: Scope, name: str, loop: Loop | None, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``name`` holds (part of) a batch of a prepared loader: a target of an enclosing loop over
        one, or a parameter every call site passes such a batch (``self.step(data[0])``)."""
        inner = loop
        while inner is not None:
            if name in self.batch_names(inner):
                return True
            inner = inner.parent
        if scope.kind != "function" or name not in scope.param_names or id(scope) in seen:
            return False
        if any(dotted(strip_placement(b.value)) != name for b in scope.bindings.get(name, []) if b.value is not None):
            return False  # rebound to something else than itself placed on a device
        sites = self.call_sites(scope)
        for site in sites:
            arg = self.arg_for(site, scope, name)
            root = arg.value if arg is not None else None
            while isinstance(root, (cst.Subscript, cst.Attribute)):
                root = root.value
            if not isinstance(root, cst.Name) or not self.is_batch(site.scope, root.value, site.loop, seen | {id(scope)}):
                return False
        return bool(sites)

    def training_loops(self, scope: Scope) -> list[Loop]:
        """Loops of ``scope`` that call ``backward`` (directly or through a helper)."""
        return [loop for loop in scope.loops if any(self.reaches_backward(site) for site in loop.calls)]

    def feeds_training(self) -> bool:
        """Whether a training loop walks a prepared loader (whose batches the runtime places on the device), or
        draws its batches from one (``data, _ = next(iter(training_loader))`` at every step)."""
        return any(
            self.loader_of(loop) is not None or self._draws_batches(loop)
            for loop in self.facts.loops if any(self.reaches_backward(s) for s in loop.calls)
        )

    def _draws_batches(self, loop: Loop) -> bool:
        """``next(iter(loader))`` / ``next(it)`` with ``it = iter(loader)``, of a prepared loader, in the loop."""
        for site, source in self.drawn_sources(loop):
            found = self.prepared(loop.scope, source, site.stmt)
            if found is not None and found.role == "loader":
                return True
        return False

    def drawn_sources(self, loop: Loop) -> list[tuple[CallSite, cst.BaseExpression]]:
        """What a loop draws its batches from with ``next``: ``X`` of ``next(iter(X))``, or of ``next(it)`` where
        ``it = iter(X)`` (bound before the loop or again in it, as a ``StopIteration`` handler restarts it)."""
        found: list[tuple[CallSite, cst.BaseExpression]] = []
        for site in loop.calls:
            if not (isinstance(site.node.func, cst.Name) and site.node.func.value == "next" and site.node.args):
                continue
            source = site.node.args[0].value
            candidates = [source]
            if isinstance(source, cst.Name):
                candidates = [b.value for b in loop.scope.bindings.get(source.value, []) if b.value is not None]
            for value in candidates:
                if (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "iter"
                        and value.args and not any(dotted(value.args[0].value) == dotted(s) for _, s in found)):
                    found.append((site, value.args[0].value))
        return found

    def trains(self, builder: Scope) -> bool:
        """Whether training (a ``backward``) runs in the builder, in what it calls, or, for a trainer
        class built in ``__init__``, in one of the class's methods."""
        owner = builder.class_scope
        scopes = [s for s in self.facts.scopes if s.parent is owner] if owner is not None else [builder]
        return any(self.reaches_backward(site) for scope in scopes for site in scope.calls)


# methods that reshape or cast a batch's tensor and keep one row block per sample: ``batch["y"].view(-1, 1)``
_RESHAPES = ("view", "reshape", "float", "long", "int", "double", "half", "bool", "squeeze", "unsqueeze", "contiguous")


def _batch_part(expr: cst.BaseExpression, names: set[str]) -> bool:
    """``data``, ``data[0]``, ``batch["image"]`` (placed or not, reshaped or cast: ``batch["y"].view(-1, 1)``) for a
    batch name ``data``/``batch``."""
    expr = strip_placement(expr)
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _RESHAPES:
        expr = strip_placement(expr.func.value)
    if isinstance(expr, cst.Subscript):
        expr = expr.value
    return isinstance(expr, cst.Name) and expr.value in names


def _unpacked_batch(target: cst.BaseExpression, value: cst.BaseExpression, names: set[str]) -> set[str]:
    """The names an assignment binds to parts of a batch: ``images, labels = data``, ``x = data[0]``,
    ``inputs, labels = data[0].to(device), data[1].to(device)``."""
    if _batch_part(value, names):
        return set(target_names(target))
    if (
        isinstance(target, (cst.Tuple, cst.List))
        and isinstance(value, (cst.Tuple, cst.List))
        and len(target.elements) == len(value.elements)
    ):
        bound: set[str] = set()
        for t, v in zip(target.elements, value.elements):
            if not isinstance(t.value, cst.StarredElement) and _batch_part(v.value, names):
                bound |= set(target_names(t.value))
        return bound
    return set()

