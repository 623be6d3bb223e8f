"""Roles from the collected facts: which names are models, optimizers, loaders, schedulers and
devices, where they come from (through helper parameters), and which function builds them.

Rules read the plan; none of them walks the tree again.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis import target_names
from accelify.codemods.facts import Binding, CallSite, Facts, Loop, Scope
from accelify.codemods.names import ImportMap, dotted
from accelify.codemods.roles import classify, is_cuda_string, parameter_owners, strip_placement

PREPARED_ROLES = ("model", "optimizer", "loader", "scheduler")
ITERATION_WRAPPERS = {"enumerate", "iter", "tqdm.tqdm"}


class Plan:
    """The roles of names and the builder, derived once from ``Facts``."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.imports = facts.imports
        self._param_cache: dict[tuple[int, str], Binding | None] = {}
        self._callees: dict[CallSite, Scope | None] = {}
        self._sites: dict[Scope, list[CallSite]] = {}
        for site in facts.calls:
            function = self._resolve_callee(site)
            self._callees[site] = function
            if function is not None:
                self._sites.setdefault(function, []).append(site)
        self._assign_roles()
        self.builder = self._find_builder()
        self.prepared: list[Binding] = self._find_prepared() if self.builder is not None else []

    # roles ------------------------------------------------------------------------------------
    def _assign_roles(self) -> None:
        stepped = {
            dotted(site.node.func.value)
            for site in self.facts.calls
            if site.method in ("step", "zero_grad") and isinstance(site.node.func, cst.Attribute)
        }
        for binding in self.facts.bindings():
            binding.role = classify(binding.value, self.imports, self.facts.classes)
            if binding.role == "optimizer" and binding.key not in stepped and not _from_torch_optim(binding, self.imports):
                binding.role = None  # ``OrderedSet(m.named_parameters())`` is no optimizer unless it steps
        for binding in self.facts.bindings():  # whatever an optimizer trains is a model
            if binding.role == "optimizer" and isinstance(binding.value, cst.Call):
                for owner in parameter_owners(binding.value):
                    found = self.origin(binding.where, owner)
                    if found is not None and found.role is None and found.value is not None:
                        found.role = "model"

    def bindings_with_role(self, role: str) -> list[Binding]:
        return [b for b in self.facts.bindings() if b.role == role]

    def _find_builder(self) -> Scope | None:
        optimizers = self.bindings_with_role("optimizer")
        return optimizers[0].where if optimizers else None

    def _find_prepared(self) -> list[Binding]:
        assert self.builder is not None
        chosen: dict[str, Binding] = {}
        for b in self.facts.bindings():
            if b.where is self.builder and b.role in PREPARED_ROLES and b.key not in chosen:
                chosen[b.key] = b
        body = self.builder.body
        order = {role: i for i, role in enumerate(PREPARED_ROLES)}

        def position(b: Binding) -> tuple[int, int]:
            top = self.facts.top_stmt(b.stmt, self.builder)  # type: ignore[arg-type]
            return order[b.role or ""], body.index(top) if top in body else len(body)

        return sorted(chosen.values(), key=position)

    # origins ----------------------------------------------------------------------------------
    def binding_of(self, scope: Scope, key: str) -> Binding | None:
        """The binding a load of ``key`` (``name`` or ``obj.attr``) in ``scope`` sees, without parameters."""
        head = key.split(".")[0]
        if head == "self" and scope.class_scope is not None:
            owner: Scope | None = scope.class_scope
        else:
            owner = scope.resolve(head)
        if owner is None:
            return None
        bindings = owner.bindings.get(key)
        if not bindings:
            return None
        return next((b for b in bindings if b.role is not None), bindings[0])

    def origin(self, scope: Scope, expr: cst.BaseExpression) -> Binding | None:
        """Where the object ``expr`` (a name, ``self.x`` or ``args.x``) was created, following helper
        parameters back to their call sites when every call site agrees."""
        key = dotted(expr)
        if key is None or key.count(".") > 1:
            return None
        head, _, attr = key.partition(".")
        if head == "self" or (attr and scope.resolve(head) is not None and key in scope.resolve(head).bindings):  # type: ignore[union-attr]
            return self.binding_of(scope, key)
        owner = scope.resolve(head)
        if owner is None or owner.kind != "function" or head not in owner.param_names or head in owner.bindings:
            return self.binding_of(scope, key)
        if not attr:
            return self.param_origin(owner, head)
        home = self._attr_home(owner, head)
        if home is None:
            return None
        home_scope, name = home
        bindings = home_scope.bindings.get(f"{name}.{attr}")
        if not bindings:
            return None
        return next((b for b in bindings if b.role is not None), bindings[0])

    def _attr_home(self, owner: Scope, name: str) -> tuple[Scope, str] | None:
        """Where ``name.attr`` is stored when ``name`` is a parameter: follow the call sites back while
        every one passes the same outer name (``fit(args, ...)`` called with ``main``'s ``args``)."""
        seen: set[int] = set()
        while owner.kind == "function" and name in owner.param_names and name not in owner.bindings:
            if id(owner) in seen:
                return None
            seen.add(id(owner))
            homes = set()
            for site in self.call_sites(owner):
                arg = self.arg_for(site, owner, name)
                if arg is None or not isinstance(arg.value, cst.Name):
                    return None
                outer = site.scope.resolve(arg.value.value)
                if outer is None:
                    return None
                homes.add((outer, arg.value.value))
            if len(homes) != 1:
                return (owner, name) if not homes else None
            owner, name = homes.pop()
        return owner, name

    def role(self, scope: Scope, expr: cst.BaseExpression) -> str | None:
        found = self.origin(scope, expr)
        return found.role if found is not None else None

    def is_prepared(self, binding: Binding | None) -> bool:
        return binding is not None and binding in self.prepared

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
        if func.attr.value == "cuda":
            return True if not positional else None
        if func.attr.value != "to" or len(positional) != 1:
            return None
        value = positional[0].value
        return value if self.is_device_like(scope, value) else None

    def is_device_like(self, scope: Scope, value: cst.BaseExpression) -> bool:
        """``device`` (a device variable, also through helper parameters), ``"cuda"``, ``torch.device("cuda")``."""
        if is_cuda_string(value):
            return True
        if isinstance(value, cst.Call) and self.imports.qualname(value.func) == "torch.device":
            return bool(value.args) and is_cuda_string(value.args[0].value)
        return self.role(scope, value) == "device"

    # helpers and their call sites -------------------------------------------------------------
    def callee(self, site: CallSite) -> Scope | None:
        """The function defined in this file that ``site`` calls (a module function or ``self.method``)."""
        return self._callees.get(site)

    def _resolve_callee(self, site: CallSite) -> Scope | None:
        func = site.node.func
        if isinstance(func, cst.Name):
            owner = site.scope.resolve(func.value)
            if owner is None:
                return None
            return self.facts.function(func.value, owner)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and func.value.value == "self":
            cls = site.scope.class_scope
            return self.facts.function(func.attr.value, cls) if cls is not None else None
        return None

    def call_sites(self, function: Scope) -> list[CallSite]:
        return self._sites.get(function, [])

    def arg_for(self, site: CallSite, function: Scope, param: str) -> cst.Arg | None:
        """The argument ``site`` passes for ``function``'s parameter ``param``."""
        node = function.node
        assert isinstance(node, cst.FunctionDef)
        positional = [p.name.value for p in (*node.params.posonly_params, *node.params.params)]
        if site.scope.class_scope is not None and positional and positional[0] == "self" and isinstance(site.node.func, cst.Attribute):
            positional = positional[1:]
        index = 0
        for arg in site.node.args:
            if arg.star:
                return None
            if arg.keyword is not None:
                if arg.keyword.value == param:
                    return arg
                continue
            if index < len(positional) and positional[index] == param:
                return arg
            index += 1
        return None

    def param_origin(self, function: Scope, param: str) -> Binding | None:
        cache_key = (id(function), param)
        if cache_key in self._param_cache:
            return self._param_cache[cache_key]
        self._param_cache[cache_key] = None  # recursion guard
        found: set[int] = set()
        result: Binding | None = None
        sites = self.call_sites(function)
        for site in sites:
            arg = self.arg_for(site, function, param)
            origin = self.origin(site.scope, arg.value) if arg is not None else None
            if origin is None:
                result = None
                found.add(0)
                break
            found.add(id(origin))
            result = origin
        if len(found) != 1 or 0 in found:
            result = None
        self._param_cache[cache_key] = result
        return result

    # loops ------------------------------------------------------------------------------------
    def loop_source(self, loop: Loop) -> cst.BaseExpression:
        """The iterable a loop walks, under ``enumerate``/``tqdm``/``iter``."""
        expr = loop.node.iter
        if isinstance(expr, cst.Name):  # progress = tqdm(loader); for batch in progress
            bound = self.binding_of(loop.scope, expr.value)
            if (
                bound is not None
                and isinstance(bound.value, cst.Call)
                and self.imports.qualname(bound.value.func) in ITERATION_WRAPPERS
            ):
                expr = bound.value
        while isinstance(expr, cst.Call) and self.imports.qualname(expr.func) in ITERATION_WRAPPERS and expr.args:
            expr = expr.args[0].value
        return expr

    def loader_of(self, loop: Loop) -> Binding | None:
        """The prepared data loader a loop walks, if any."""
        found = self.origin(loop.scope, self.loop_source(loop))
        return found if found is not None and found.role == "loader" and self.is_prepared(found) else None

    def batch_names(self, loop: Loop) -> set[str]:
        """Names bound to batches of a prepared loader in this loop (loop targets and their unpacking)."""
        if self.loader_of(loop) is None:
            return set()
        target = loop.node.target
        iterable = loop.node.iter
        if (
            isinstance(iterable, cst.Call)
            and self.imports.qualname(iterable.func) == "enumerate"
            and isinstance(target, cst.Tuple)
            and len(target.elements) == 2
        ):
            target = target.elements[1].value
        names = set(target_names(target))
        for stmt in loop.stmts:
            if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
                small = stmt.body[0]
                if isinstance(small, cst.Assign) and isinstance(small.value, cst.Name) and small.value.value in names:
                    for t in small.targets:
                        names |= set(target_names(t.target))
        return names

    def training_loops(self, scope: Scope) -> list[Loop]:
        """Loops of ``scope`` that call ``backward`` (directly or through a helper)."""
        return [loop for loop in scope.loops if any(self.reaches_backward(site) for site in loop.calls)]

    def trains(self, builder: Scope) -> bool:
        """Whether training (a ``backward``) runs in the builder, in what it calls, or, for a trainer
        class built in ``__init__``, in one of the class's methods."""
        owner = builder.class_scope
        scopes = [s for s in self.facts.scopes if s.parent is owner] if owner is not None else [builder]
        return any(self.reaches_backward(site) for scope in scopes for site in scope.calls)

    def reaches_backward(self, site: CallSite, seen: frozenset[int] = frozenset()) -> bool:
        if site.method == "backward":
            return True
        function = self.callee(site)
        if function is None or id(function) in seen:
            return False
        return any(self.reaches_backward(s, seen | {id(function)}) for s in function.calls)


def _from_torch_optim(binding: Binding, imports: ImportMap) -> bool:
    """Whether ``binding`` holds a ``torch.optim`` optimizer (not just a call that takes parameters)."""
    core = strip_placement(binding.value) if binding.value is not None else None
    return isinstance(core, cst.Call) and (imports.qualname(core.func) or "").startswith("torch.optim.")
