"""Where values come from, across functions and modules: the call graph, and the origin of a name.

``Flow`` answers two questions the plan and the rules ask about an expression at some place:

- ``callee(site)``: the function of the program a call runs (a function in scope, ``self.method``, a
  class's ``__init__`` for ``Trainer(...)``, a function of a local module: ``loops.fit``, ``from
  data import make_loaders``), and the reverse, ``call_sites(function)``: ``analysis/call_graph.py``, which
  ``Flow`` extends;
- ``origin(scope, expr)``: the binding that created the object ``expr`` holds, following plain
  aliases (``net = model``), placement (``model = model.to(device)``), helper parameters back to
  their call sites (when every call site agrees; also a key of ``**kwargs``: ``kwargs["model"]`` is the
  ``model=`` they pass), ``self.x`` attributes, and return values
  (``train_dl, test_dl = make_loaders()``, ``return model``).

Roles (``Binding.role``) must be assigned before origins are asked for (``Plan`` does it).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.call_graph import CallGraph
from accelify.codemods.analysis.facts import Binding, Facts, Scope
from accelify.codemods.analysis.filled_dicts import FilledDict, empty_dict
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.roles import PASS_THROUGH, parameter_owners_in, same_module, strip_placement, strip_wrapper

_MISSING = object()


class Flow(CallGraph):
    """The call graph (``analysis/call_graph.py``) and the origin of values over one program (``Facts.program``)."""

    def __init__(self, facts: Facts, elsewhere: frozenset[int] = frozenset()) -> None:
        self._origins: dict[tuple[int, str], Binding | None] = {}
        self._params: dict[tuple[int, str], Binding | None] = {}
        self.filled: dict[int, FilledDict] = {}  # ``loaders = {}`` filled with loaders under known keys, by binding id
        super().__init__(facts, elsewhere)

    # origins ------------------------------------------------------------------------------------
    def binding_of(self, scope: Scope, key: str) -> Binding | None:
        """The binding a load of ``key`` (``name`` or ``obj.attr``) in ``scope`` sees, without parameters:
        the one that creates an object with a role if there is one, else the first that is not ``None``."""
        head = key.split(".")[0]
        if head == "self" and scope.class_scope is not None:
            owner: Scope | None = scope.class_scope
        else:
            owner = scope.resolve(head)
        if owner is None:
            return None
        bindings = owner.bindings.get(key)
        if not bindings and head == "self" and owner.kind == "class":
            bindings = self._inherited(owner, key)  # ``self.model`` set by the base class's ``__init__`` (set Q's Q2)
        if not bindings:
            return None
        # ``loader = None`` then ``if ...: loader = get_loader(...)``: the placeholder holds no object
        placeholder = [b for b in bindings if isinstance(b.value, cst.Name) and b.value.value == "None"]
        return next((b for b in bindings if b.role is not None),
                    next((b for b in bindings if b not in placeholder), bindings[0]))

    def _inherited(self, cls: Scope, key: str) -> list[Binding]:
        """The bindings of ``self.<attr>`` (``key``) the program's base classes of ``cls`` make, nearest first."""
        seen: set[int] = set()
        todo = list(self.classes.bases(cls))  # type: ignore[attr-defined]
        while todo:
            base = todo.pop(0)
            if id(base) in seen:
                continue
            seen.add(id(base))
            if base.bindings.get(key):
                return base.bindings[key]
            todo += self.classes.bases(base)  # type: ignore[attr-defined]
        return []

    def origin(self, scope: Scope, expr: cst.BaseExpression) -> Binding | None:
        """Where the object ``expr`` (a name, ``self.x``, ``args.x``, or a call of a local function)
        was created; None when it cannot be followed."""
        expr = same_module(strip_placement(expr))
        read = self.kwargs_read(scope, expr)
        if read is not None:  # ``kwargs["model"]``: what the callers pass as ``model=``
            return self.param_origin(*read)
        if isinstance(expr, cst.Call):
            return self._returned(scope, expr, None)
        if isinstance(expr, cst.Subscript):  # ``dataloaders[phase]``: one of a dict's loaders
            found = self.origin(scope, expr.value)
            filled = self.filled.get(id(found))
            if filled is not None and not filled.holds(expr):
                return None  # ``loaders["test"]`` of a dict whose known items are train and valid: stored elsewhere
            return found if found is not None and loader_mapping(found) else None
        key = dotted(expr)
        if key is None or key.count(".") > 2:
            return None
        if key.count(".") == 2:  # ``self.data_loader.train_loader``: an attribute of a helper object the program builds
            held = self.held_by_object(scope, key)
            return self.holds(held) if held is not None else None
        cache_key = (id(scope), key)
        cached = self._origins.get(cache_key, _MISSING)
        if cached is not _MISSING:
            return cached  # type: ignore[return-value]
        self._origins[cache_key] = None  # recursion guard
        found = self._origin(scope, key)
        self._origins[cache_key] = found
        return found

    def _origin(self, scope: Scope, key: str) -> Binding | None:
        head, _, attr = key.partition(".")
        owner = scope.resolve(head)
        if head != "self" and owner is not None and owner.kind == "function" and head in owner.param_names and head not in owner.bindings:
            if not attr:
                return self.param_origin(owner, head)
            home = self._attr_home(owner, head)
            if home is None:
                return None
            bindings = home[0].bindings.get(f"{home[1]}.{attr}")
            binding = next((b for b in bindings if b.role is not None), bindings[0]) if bindings else None
        else:
            binding = self.binding_of(scope, key) or (self.instance_attr(scope, key) if attr else None)
        return self.holds(binding) if binding is not None else None

    def instance_attr(self, scope: Scope, key: str) -> Binding | None:
        """``trainer.G`` where ``trainer = Trainer(...)`` and the class sets ``self.G``: that binding."""
        head, _, attr = key.partition(".")
        if not attr or "." in attr or head == "self":
            return None
        bound = self.binding_of(scope, head)
        if bound is None or not isinstance(bound.value, cst.Call):
            return None
        site = self.facts.sites.get(bound.value)
        init = self.callee(site) if site is not None else None
        if init is None or init.node.name.value != "__init__" or init.class_scope is None:  # type: ignore[union-attr]
            return None
        bindings = init.class_scope.bindings.get(f"self.{attr}")
        return next((b for b in bindings if b.role is not None), bindings[0]) if bindings else None

    def held_by_object(self, scope: Scope, key: str) -> Binding | None:
        """``self.data_loader.train_loader`` where ``self.data_loader = MnistDataLoader(config)`` and that class's
        ``__init__`` sets ``self.train_loader``: that binding (the first that makes an object with a role)."""
        holder, _, attr = key.rpartition(".")
        bound = self.binding_of(scope, holder)
        init = self.constructed_init(bound.value) if bound is not None and bound.value is not None else None
        if init is None:
            return None
        bindings = init.class_scope.bindings.get(f"self.{attr}")  # type: ignore[union-attr]
        return next((b for b in bindings if b.role is not None), bindings[0]) if bindings else None

    def constructed_init(self, value: cst.BaseExpression) -> Scope | None:
        """The ``__init__`` of a class of the program that ``value`` (``MnistDataLoader(config)``) constructs, or None."""
        site = self.facts.sites.get(value) if isinstance(value, cst.Call) else None
        init = self.callee(site) if site is not None else None
        if init is None or init.node.name.value != "__init__" or init.class_scope is None:  # type: ignore[union-attr]
            return None
        return init

    def holds(self, binding: Binding) -> Binding | None:
        """The creation binding of the object ``binding`` stores: itself when it creates one, else
        what its value (an alias, a placement, a call of a local function) holds."""
        if binding.role is not None:
            return binding
        if binding.unpacked is not None:
            call, index = binding.unpacked
            if not isinstance(call, cst.Call):
                return None
            if (binding.where.imports.qualname(call.func) in PASS_THROUGH or self._prepares(binding.where, call)) and index < len(call.args):
                passed = call.args[index].value  # ``model, optimizer = amp.initialize(model, optimizer)``
                return self._held_before(binding) if dotted(passed) == binding.key else self.origin(binding.where, passed)
            # what a function of the program returns, or, when that cannot be followed, an object made here
            return (self._returned(binding.where, call, index) or binding) if self._local_call(call) else binding
        if binding.value is None:
            return self._imported_value(binding) if _is_import(binding.stmt) else None
        value = same_module(strip_placement(strip_wrapper(binding.value, binding.where.imports)))
        if isinstance(value, cst.Call) and len(value.args) == 1 and self._prepares(binding.where, value):
            value = value.args[0].value  # ``model = accelerator.prepare(model)`` in a converted program
        read = self.kwargs_read(binding.where, value)
        if read is not None:  # ``self.model = kwargs["model"]``: what the callers pass as ``model=``, as for a parameter
            return self.param_origin(*read)
        if isinstance(value, cst.Call):
            # a call of a function of the program gives what it returns; any other call creates the object here
            return (self._returned(binding.where, value, None) or binding) if self._local_call(value) else binding
        key = dotted(value)
        if key is None:
            return None
        if key != binding.key:
            return self.origin(binding.where, value)
        return self._held_before(binding)

    def built_by(self, binding: Binding) -> Binding:
        """Where the object ``binding`` holds is built: ``binding`` itself, or, when it takes what a function of the
        program returns (``train_loader, test_loader = create_datasets(64)``, roles or not), the binding in that
        function whose value is returned, followed the same way."""
        for _ in range(4):  # a builder calling a builder
            call, index = binding.unpacked if binding.unpacked is not None else (binding.value, None)
            if not isinstance(call, cst.Call) or not self._local_call(call):
                return binding
            found = self._returned(binding.where, call, index)
            if found is None or found is binding:
                return binding
            binding = found
        return binding

    def _imported_value(self, binding: Binding) -> Binding | None:
        """``from data import loader`` (or ``from data import *``): the object the local module ``data`` binds to
        ``loader`` at import time, when it binds it once; None for a library's name."""
        qualname = binding.where.imports.aliases.get(binding.key)
        for _ in range(8):  # re-exports of re-exports, never a cycle
            unit, _, name = (qualname or "").rpartition(".")
            module = self._units.get(unit)
            if module is None or unit == "__main__":
                return None
            found = module.bindings.get(name, [])
            if len(found) != 1:
                return None
            if not _is_import(found[0].stmt):
                return self.holds(found[0])
            qualname = module.imports.aliases.get(name)
        return None

    def _prepares(self, scope: Scope, call: cst.Call) -> bool:
        """Whether ``call`` is ``accelerator.prepare(...)`` on an ``Accelerator`` made in the program: in a converted
        program (which ``accelify verify`` checks) the objects it returns are the ones it is given."""
        if not (isinstance(call.func, cst.Attribute) and call.func.attr.value == "prepare"):
            return False
        return self.made_accelerator(scope, call.func.value)

    def made_accelerator(self, scope: Scope, expr: cst.BaseExpression) -> bool:
        """Whether ``expr`` (``accelerator``, ``self.accelerator``) is bound in ``scope`` to an ``Accelerator(...)``."""
        key = dotted(expr)
        bound = self.binding_of(scope, key) if key is not None and key.count(".") <= 1 else None
        made = bound.value if bound is not None else None
        return isinstance(made, cst.Call) and (bound.where.imports.qualname(made.func) or "").rsplit(".", 1)[-1] == "Accelerator"

    def _held_before(self, binding: Binding) -> Binding | None:
        """``model = model.to(device)``: what the name held before this statement."""
        key = binding.key
        owner = binding.scope
        earlier = [b for b in owner.bindings.get(key, []) if b is not binding and self.facts.order[b.stmt] < self.facts.order[binding.stmt]]
        if earlier:
            return self.holds(earlier[-1])
        function = binding.where
        if function.kind == "function" and key in function.param_names:
            return self.param_origin(function, key)
        return None

    def _local_call(self, call: cst.Call) -> bool:
        """Whether ``call`` runs a function of the program that returns something (not a constructor)."""
        site = self.facts.sites.get(call)
        function = self.callee(site) if site is not None else None
        return function is not None and function.node.name.value != "__init__"  # type: ignore[union-attr]

    def returned_values(self, call: cst.Call, index: int | None) -> tuple[Scope, list[cst.BaseExpression | None]] | None:
        """The function of the program ``call`` runs, and what each of its ``return`` statements gives (element
        ``index`` of a returned tuple); None when it is not such a function or a return has no such element."""
        site = self.facts.sites.get(call)
        function = self.callee(site) if site is not None else None
        if function is None or function.node.name.value == "__init__" or not function.returns:  # type: ignore[union-attr]
            return None
        values: list[cst.BaseExpression | None] = []
        for ret in function.returns:
            value = ret.value
            if index is not None:
                if not isinstance(value, (cst.Tuple, cst.List)) or index >= len(value.elements):
                    return None
                value = value.elements[index].value
            values.append(value)
        return function, values

    def _returned(self, scope: Scope, call: cst.Call, index: int | None) -> Binding | None:
        """What a call of a local function returns (element ``index`` of a returned tuple), when every
        ``return`` of it agrees."""
        returned = self.returned_values(call, index)
        if returned is None:
            return None
        function, values = returned
        found: set[int] = set()
        result: Binding | None = None
        for value in values:
            if isinstance(value, cst.Name) and value.value == "None" and len(values) > 1:
                continue  # ``if dataset is None: return None``: the caller tests for it; the other returns decide
            origin = self.origin(function, value) if value is not None else None
            if origin is None:
                return None
            found.add(id(origin))
            result = origin
        return result if len(found) == 1 else None

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

    def param_origin(self, function: Scope, param: str) -> Binding | None:
        """The creation binding every call site passes for ``param``, or None if they differ; where they differ
        but every one is a data loader (``evaluate(model, train_loader)`` then ``evaluate(model, val_loader)``),
        the first: the parameter holds a loader either way (whether it is prepared is checked at each site); so where
        every one is a model the function builds its own optimizer for (``_one_kind_of_model``)."""
        cache_key = (id(function), param)
        if cache_key in self._params:
            return self._params[cache_key]
        self._params[cache_key] = None  # recursion guard
        found: set[int] = set()
        origins: list[Binding] = []
        built_in_call = False  # ``train(Net(), data)``: an object built in the call, bound nowhere
        for site in self.run_sites(function):  # (a caller nothing runs, a kept experiment, says nothing of a run)
            arg = self.arg_for(site, function, param)
            origin = self.origin(site.scope, arg.value) if arg is not None else None
            if origin is None:
                if arg is not None and isinstance(arg.value, cst.Call):
                    built_in_call = True
                    continue
                found.add(0)
                break
            found.add(id(origin))
            origins.append(origin)
        result: Binding | None = origins[0] if origins and 0 not in found else None
        if result is not None and (len(found) != 1 or built_in_call) and not (
                (all(o.role == "loader" for o in origins) and not built_in_call)
                or self._one_kind_of_model(function, param, origins)):
            result = None
        self._params[cache_key] = result
        return result

    def _one_kind_of_model(self, function: Scope, param: str, origins: list[Binding]) -> bool:
        """Every call hands ``param`` a model, and ``function`` builds an optimizer over its parameters (``def
        train(model, data)`` called for a flow, then for a RealNVP): each call trains the model it is handed, with an
        optimizer of its own, so the parameter holds a model either way and is prepared where the function prepares."""
        if not all(o.role == "model" for o in origins):
            return False
        return any(
            b.role == "optimizer" and b.value is not None and b.where is function
            and any(dotted(owner) == param for owner in parameter_owners_in(b.value))
            for bindings in function.bindings.values() for b in bindings
        )

    def role(self, scope: Scope, expr: cst.BaseExpression) -> str | None:
        found = self.origin(scope, expr)
        return found.role if found is not None else None


def loader_mapping(binding: Binding) -> bool:
    """``dataloaders = {"train": DataLoader(...), ...}``: loaders kept in a dict, prepared one by one; also
    ``loaders = {}`` (or ``dict()``) filled item by item under known keys (``analysis/filled_dicts.py``)."""
    return binding.role == "loader" and (isinstance(binding.value, (cst.Dict, cst.DictComp)) or empty_dict(binding.value))


def _is_import(stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` is an import line (its bindings hold what another module binds)."""
    return isinstance(stmt, cst.SimpleStatementLine) and any(isinstance(s, (cst.Import, cst.ImportFrom)) for s in stmt.body)
