"""The plan's decision 1, roles: which bindings create a model, optimizer, scheduler, data loader or device (through
the program's own helpers too: ``make_optimizer(model)``, ``make_loaders()``), and which models each optimizer
trains (``trained_by``); ``Plan`` mixes it in and asks it first."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.distributed import Distributed
from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.filled_dicts import filled_dicts
from accelify.codemods.analysis.flow import Flow
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.roles import (
    LIBRARY_OPTIMIZERS,
    classify,
    element_call,
    factory_role,
    is_cpu_device,
    names_a_device,
    parameter_owners,
    parameter_owners_in,
    strip_placement,
)
from accelify.codemods.analysis.statement_shapes import target_names


class RoleAssignment(Flow):
    """Assigns ``Binding.role`` over the program (``analysis/roles.py`` classifies one value), and follows what an
    optimizer trains; the hand-written distributed code it reads is the plan's (``distributed``)."""

    distributed: Distributed

    def _assign_roles(self) -> None:
        for binding in self.facts.bindings():
            binding.role = classify(binding.value, binding.where.imports, self.facts.classes)
            binding.many = binding.role is not None and element_call(binding.value) is not None
            if binding.role == "device" and self.distributed.follows_device(binding.value):
                binding.role = None  # ``device_type = 'cuda' if 'cuda' in device else 'cpu'``: it follows the device
        for scope in self.facts.scopes:  # every assignment of a device variable is one (the else branches too)
            for bindings in scope.bindings.values():
                if any(b.role == "device" for b in bindings):
                    for b in bindings:
                        if b.role is None and b.value is not None and names_a_device(b.value, b.where.imports):
                            b.role = "device"
        self._cpu_training_devices()
        self._chosen_optimizer_classes()
        for filled in filled_dicts(self.facts):  # ``loaders = {}`` then ``loaders["train"] = DataLoader(...)``
            filled.binding.role = "loader"
            self.filled[id(filled.binding)] = filled
        for binding in self.facts.bindings():
            if binding.role is None and (binding.value is not None or binding.unpacked is not None):
                self._made_by_helper(binding)
        stepped: set[str | None] = set()
        zeroed: set[str | None] = set()
        for site in self.facts.calls:
            if site.method in ("step", "zero_grad") and isinstance(site.node.func, cst.Attribute):
                (stepped if site.method == "step" else zeroed).add(dotted(site.node.func.value))
        for binding in self.facts.bindings():
            if binding.role == "optimizer" and binding.key not in stepped | zeroed and not _from_torch_optim(binding):
                binding.role = None  # ``OrderedSet(m.named_parameters())`` is no optimizer unless it steps
            elif binding.role is None and (binding.key in stepped & zeroed and (
                    self._model_arguments(binding) or self._trains_model_parameters(binding))
                    or binding.key in stepped and self._trains_model_parameters(binding)):
                # ``optimizer = make_optimizer(model, **cfg)`` (however it builds it): stepped and zeroed, fed a model;
                # ``optimizer = opt_func(model.parameters(), lr)`` (a class handed in as a parameter): its parameters,
                # stepped (zeroed or not: O14 zeroes the gradients with ``net.zero_grad()``)
                binding.role = "optimizer"
        for binding in self.facts.bindings():  # whatever an optimizer trains is a model
            if binding.role == "optimizer":
                for where, owner in self.trained_by(binding):
                    found = self.origin(where, owner) or self._handed_built(where, owner)
                    if found is not None and found.role is None and found.value is not None:
                        found.role = "model"
        self._origins.clear()
        self._params.clear()

    def _handed_built(self, where: Scope, owner: cst.BaseExpression) -> Binding | None:
        """``self.model = model`` where every call hands ``model`` an object built in the call itself
        (``Trainer(torch.nn.Linear(2, 1), loader).fit()``): bound nowhere else, the binding that keeps it is the model
        (it was found nowhere, and left out of ``prepare``: every process trained its own copy, silently)."""
        key = dotted(owner)
        binding = self.binding_of(where, key) if key is not None else None
        function = binding.where if binding is not None else None
        value = strip_placement(binding.value) if binding is not None and binding.value is not None else None
        if binding is None or function is None or function.kind != "function" or not isinstance(value, cst.Name):
            return None  # (``self.model = model.to(self.device)`` keeps the model all the same: set Q's Q2)
        param = value.value
        if param not in function.param_names or param in function.bindings:
            return None
        sites = self.run_sites(function)
        args = [self.arg_for(site, function, param) for site in sites]
        if not sites or any(a is None or not isinstance(a.value, cst.Call) or self.origin(s.scope, a.value) is not None
                            for s, a in zip(sites, args)):
            return None
        return binding

    def trained_by(self, optimizer: Binding) -> list[tuple[Scope, cst.BaseExpression]]:
        """The models ``optimizer`` trains, as (scope, expression): the owners of the ``.parameters()``
        passed to its constructor (for a list, to each element and to what is appended to it), else the
        model arguments of the helper that made it. ``block`` of ``for block in model.blocks`` stands for
        ``model.blocks``; ``model.stem`` for ``model`` when only the whole model can be followed."""
        where, call = _maker(optimizer)
        calls: list[cst.BaseExpression] = [call]
        if optimizer.many:
            calls = [e.value for e in optimizer.value.elements] if isinstance(optimizer.value, (cst.List, cst.Tuple)) else [call]  # type: ignore[union-attr]
            calls += [s.node.args[0].value for s in optimizer.where.calls if s.method in ("append", "extend")
                      and s.node.args and dotted(s.node.func.value) == optimizer.key]  # type: ignore[attr-defined]
        owners = [o for c in calls if isinstance(c, cst.Call) for o in parameter_owners(c)]
        if not owners:  # ``AdamW(optimizer_grouped_parameters, ...)``: the groups name ``model.named_parameters()``
            owners = self._group_owners(where, [a.value for c in calls if isinstance(c, cst.Call) for a in c.args])
        if owners:
            receiver = _method_receiver(optimizer)
            return [
                (optimizer.where, receiver)  # ``self.fc.parameters()`` too: the whole model is what gets prepared
                if receiver is not None and _rooted_at_self(owner)
                else (where, self._model_root(where, self._comprehended(optimizer, owner)))
                for owner in owners
            ]
        return [(optimizer.where, arg) for arg in self._model_arguments(optimizer)]

    def _group_owners(self, where: Scope, values: list[cst.BaseExpression]) -> list[cst.BaseExpression]:
        """The owners of the ``.parameters()`` that parameter groups passed by name hold, followed through the names
        they are built from in ``where`` (``param_optimizer = list(model.named_parameters())``, then
        ``groups = [{"params": [p for n, p in param_optimizer if ...]}, ...]``), a few bindings deep."""
        names = [v.value for v in values if isinstance(v, cst.Name)]
        seen: set[str] = set()
        owners: list[cst.BaseExpression] = []
        for _ in range(3):
            nxt: list[str] = []
            for name in names:
                binding = self.binding_of(where, name)
                if name in seen or binding is None or binding.value is None or binding.where is not where:
                    continue
                seen.add(name)
                found = parameter_owners_in(binding.value)
                owners += found
                if not found:
                    nxt += [n.value for n in m.findall(binding.value, m.Name()) if isinstance(n, cst.Name)]
            if owners or not nxt:
                break
            names = nxt
        return owners

    def _comprehended(self, optimizer: Binding, owner: cst.BaseExpression) -> cst.BaseExpression:
        """``block`` -> ``model.blocks`` when ``block`` is the target of the list comprehension's ``for``."""
        value = optimizer.value
        if isinstance(value, cst.ListComp) and isinstance(owner, cst.Name):
            comp: cst.BaseComp | None = value.for_in  # type: ignore[assignment]
            while comp is not None:
                if owner.value in target_names(comp.target):  # type: ignore[attr-defined]
                    iterable = comp.iter  # type: ignore[attr-defined]
                    while isinstance(iterable, cst.Call) and iterable.args:  # enumerate(model.blocks)
                        iterable = iterable.args[0].value
                    return iterable
                comp = comp.inner_for_in  # type: ignore[attr-defined]
        return owner

    def _model_root(self, scope: Scope, owner: cst.BaseExpression) -> cst.BaseExpression:
        """``model.stem`` -> ``model`` when ``model.stem`` itself cannot be followed but ``model`` can."""
        while isinstance(owner, cst.Attribute) and self.origin(scope, owner) is None and dotted(owner.value) is not None \
                and self._handed_built(scope, owner) is None:
            owner = owner.value
        return owner

    def _model_arguments(self, binding: Binding) -> list[cst.BaseExpression]:
        """Arguments of ``binding``'s call that hold an ``nn.Module`` built here (``make_optimizer(model)``)."""
        value = strip_placement(binding.value) if binding.value is not None else None
        if not isinstance(value, cst.Call):
            return []
        out = []
        if isinstance(value.func, cst.Attribute) and (found := self.origin(binding.where, value.func.value)) is not None:
            if found.role == "model":  # ``optimizer = model.configure_optimizers(...)``
                out.append(value.func.value)
        for arg in value.args:
            found = self.origin(binding.where, arg.value) if not arg.star else None
            if found is not None and found.role == "model":
                out.append(arg.value)
        if not out and binding.made is not None:
            # ``get_optimizer(lr, model_parameters=self.policy.parameters())``, a helper that builds the optimizer
            # over the parameters it is handed: their owners are what it trains
            for arg in value.args:
                for owner in parameter_owners_in(arg.value) if not arg.star else []:
                    found = self.origin(binding.where, owner)
                    if found is not None and found.role in ("model", None):
                        out.append(owner)
        return out

    def _trains_model_parameters(self, binding: Binding) -> bool:
        """``binding``'s call is handed the parameters of a model built here (``opt_func(model.parameters(), lr)``)."""
        value = strip_placement(binding.value) if binding.value is not None else None
        if not isinstance(value, cst.Call):
            return False
        owners = parameter_owners(value)
        if any((found := self.origin(binding.where, owner)) is not None and found.role == "model" for owner in owners):
            return True
        # ``self.optimizer = optimizer(self.model.parameters(), lr=lr)`` with ``optimizer=torch.optim.Adam`` and
        # ``model=BaseModule`` both classes handed to ``__init__``: the model has no role yet (it gets one from the
        # optimizer that trains it); stepped, zeroed and handed parameters, the call makes the optimizer
        return bool(owners) and isinstance(value.func, cst.Name) and value.func.value in binding.where.param_names

    def _chosen_optimizer_classes(self) -> None:
        """``optimizer_class = optim.Adam`` (or ``optim.SGD``, in the branches of an ``if`` on a flag), then
        ``self._g_opt = optimizer_class(self._g_net.parameters(), lr=...)``: the call builds an optimizer (S5, a
        pix2pix trainer, was refused with ACC012, "no optimizer was found")."""
        for binding in self.facts.bindings():
            value = binding.value
            if binding.role is not None or not isinstance(value, cst.Call) or not isinstance(value.func, cst.Name):
                continue
            classes = [b.value for b in binding.where.bindings.get(value.func.value, [])]
            if classes and all(c is not None and _optimizer_class(binding.where, c) for c in classes):
                binding.role = "optimizer"

    def _cpu_training_devices(self) -> None:
        """``DEV = torch.device("cpu")`` (or ``"cpu"``), the name's only value, that a model is placed on
        (``Net().to(DEV)``, ``model.to(DEV)``): the device the program trains on, written out because the author's
        machine has no GPU. It is a device variable like any (``accelerator.device``, its model and batch placements
        going): left as it was, it kept the batches of prepared loaders on the CPU while ``prepare`` put the model on
        the GPU (set N's N13, a seq2seq notebook: no warning, as it is not named ``device``). A CPU device nothing
        places a model on (``cpu = torch.device("cpu")`` for ``.to(cpu).numpy()``) is left alone."""
        placed_models: set[str] = set()
        for site in self.facts.calls:
            if site.method != "to" or not site.node.args or not isinstance(site.node.args[0].value, cst.Name):
                continue
            receiver = site.node.func.value  # type: ignore[attr-defined]
            model = classify(receiver, site.scope.imports, self.facts.classes) == "model" or (
                isinstance(receiver, cst.Name) and any(
                    classify(b.value, b.where.imports, self.facts.classes) == "model"
                    for b in site.scope.bindings.get(receiver.value, []) if b.value is not None))
            if model:
                placed_models.add(site.node.args[0].value.value)
        for scope in self.facts.scopes:
            for key, bindings in scope.bindings.items():
                if key in placed_models and all(
                        b.role is None and b.value is not None and is_cpu_device(b.value, b.where.imports) for b in bindings):
                    for b in bindings:
                        b.role = "device"

    def _made_by_helper(self, binding: Binding) -> None:
        """``opt = make_optimizer(model, **cfg)`` where the helper returns ``torch.optim.AdamW(...)``
        directly, or ``train_dl, test_dl = make_loaders()`` returning ``DataLoader(...), DataLoader(...)``:
        the binding takes the role of what every ``return`` builds (element ``index`` of a tuple)."""
        index = None
        if binding.unpacked is not None:
            value, index = binding.unpacked
        else:
            value = strip_placement(binding.value)  # type: ignore[arg-type]
        if not isinstance(value, cst.Call):
            return
        function = self.callee(self.facts.sites[value]) if self._local_call(value) else self._model_method_called(binding, value)
        if function is None:
            return
        returns = _not_none(function.returns)
        returned = []
        for ret in returns:
            expr = ret.value
            if index is not None:
                expr = expr.elements[index].value if isinstance(expr, (cst.Tuple, cst.List)) and index < len(expr.elements) else None
            if expr is not None:
                returned.append(strip_placement(expr))
        if returned and not all(isinstance(e, cst.Call) for e in returned):
            # ``data_loader = DataLoader(...); return data_loader``: each call makes a loader of its own (stargan's
            # ``get_loader`` called for CelebA and for RaFD), as a returned call would; models and optimizers stay
            # the helper's own objects, which the optimizer's ``.parameters()`` there names
            bound = [_bound_call(function, e) for e in returned]
            if all(isinstance(e, cst.Call) and classify(e, function.imports, self.facts.classes) == "loader" for e in bound):
                returned = bound
            elif self._model_method(function) and all(
                    isinstance(e, cst.Call) and classify(e, function.imports, self.facts.classes) == "optimizer" for e in bound):
                # minGPT's ``configure_optimizers``: ``optimizer = torch.optim.AdamW(optim_groups, ...)`` then ``return
                # optimizer``, a method of the model: its ``self`` is the model the caller holds (``model`` of
                # ``self.optimizer = model.configure_optimizers(config)``), so the optimizer is made where it is called,
                # as a returned ``torch.optim.AdamW(...)`` is; the method's own name for it is no optimizer of its own
                returned = bound
                for e in returned:
                    for b in function.bindings.get(_bound_name(function, e) or "", []):
                        b.role = None
        if not returned or len(returned) != len(returns) or not all(isinstance(e, cst.Call) for e in returned):
            return
        roles = {classify(e, function.imports, self.facts.classes) for e in returned}
        if "device" in roles and all(names_a_device(e, function.imports) for e in returned):
            roles = {"device"}  # ``return torch.device('cuda:0')`` or, without CUDA, ``return torch.device('cpu')``
        if len(roles) == 1 and None not in roles:
            binding.role = roles.pop()
            binding.made = (function, returned[0])

    def _model_method_called(self, binding: Binding, value: cst.Call) -> Scope | None:
        """``model.configure_optimizers(config)`` where ``model`` is no name the call graph can follow to a constructor
        (minGPT's ``model, config = self.model, self.config`` in ``Trainer.run``, ``self.model`` the model handed to
        ``__init__``) but holds a model built from a class of the program: that class's method, or None."""
        if not isinstance(value.func, cst.Attribute) or dotted(value.func.value) is None:
            return None
        found = self.origin(binding.where, value.func.value)
        made = strip_placement(found.value) if found is not None and found.role == "model" and found.value is not None else None
        cls = self.classes.class_of(found.where, made.func) if isinstance(made, cst.Call) and found is not None else None
        method = self.classes.method(cls, value.func.attr.value) if cls is not None else None
        return method if method is not None and self._model_method(method) and method.returns else None

    def _model_method(self, function: Scope) -> bool:
        """Whether ``function`` is a method of a class of the program that subclasses a ``torch.nn`` class."""
        cls = function.class_scope
        if cls is None or function.parent is not cls:
            return False
        # (the program's classes are keyed by qualified name: ``mingpt.model.GPT`` in a local module)
        return _module_class(cls.imports.qualname(cst.Name(cls.name)) or cls.name, self.facts.classes)

    def bindings_with_role(self, role: str) -> list[Binding]:
        return [b for b in self.facts.bindings() if b.role == role]


def _module_class(name: str, classes: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> bool:
    """Whether the class ``name`` subclasses a ``torch.nn`` class (``nn.Module``), directly or through the program's."""
    return any(base.startswith("torch.nn.") or (base not in seen and _module_class(base, classes, seen | {name}))
               for base in classes.get(name, []))


def _not_none(returns: list[cst.Return]) -> list[cst.Return]:
    """The ``return`` statements that give something: ``if dataset is None: return None`` beside a
    ``return DataLoader(...)`` is a failure the caller tests for (``if loader is None: return``), not another kind."""
    given = [r for r in returns if not (r.value is None or (isinstance(r.value, cst.Name) and r.value.value == "None"))]
    return given if given else returns


def _bound_name(function: Scope, call: cst.BaseExpression) -> str | None:
    """The name ``function`` binds ``call`` to (what ``_bound_call`` followed), or None."""
    return next((key for key, bindings in function.bindings.items()
                 if len(bindings) == 1 and bindings[0].value is not None and strip_placement(bindings[0].value) is call), None)


def _bound_call(function: Scope, expr: cst.BaseExpression) -> cst.BaseExpression:
    """``data_loader`` of ``return data_loader`` -> the call it is bound to, when the function binds it once
    (``data_loader = DataLoader(...)``): each call of the helper makes an object of its own, as a returned call does."""
    bindings = function.bindings.get(expr.value, []) if isinstance(expr, cst.Name) else []
    if len(bindings) == 1 and bindings[0].loop is None and bindings[0].value is not None:
        value = strip_placement(bindings[0].value)
        if isinstance(value, cst.Call):
            return value
    return expr


def _maker(binding: Binding) -> tuple[Scope, cst.Call]:
    """The scope and the call that built ``binding``'s object (in a helper that returned it, or here; the
    first element of a list)."""
    where, value = binding.made or (binding.where, strip_placement(binding.value))  # type: ignore[arg-type]
    element = element_call(value) if binding.many else None
    value = strip_placement(element) if element is not None else value
    return where, value if isinstance(value, cst.Call) else cst.Call(cst.Name("_"))


def _method_receiver(binding: Binding) -> cst.BaseExpression | None:
    """``model`` of ``optimizer = model.configure_optimizers(...)`` when a method of a class built the object:
    what that method's ``self`` stands for where the binding is."""
    if binding.made is None or binding.made[0].parent is None or binding.made[0].parent.kind != "class":
        return None
    value = binding.unpacked[0] if binding.unpacked is not None else strip_placement(binding.value)  # type: ignore[arg-type]
    if isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
        return value.func.value
    return None


def _rooted_at_self(expr: cst.BaseExpression) -> bool:
    while isinstance(expr, cst.Attribute):
        expr = expr.value
    return isinstance(expr, cst.Name) and expr.value == "self"


def _from_torch_optim(binding: Binding) -> bool:
    """Whether ``binding`` holds a ``torch.optim`` optimizer, or a library's (``transformers.AdamW``), not just a
    call that takes parameters."""
    where, core = _maker(binding)
    q = where.imports.qualname(core.func) or ""
    return q.startswith("torch.optim.") or q in LIBRARY_OPTIMIZERS or \
        factory_role(core, where.imports, {}) == "optimizer"  # ``config.init_obj('optimizer', torch.optim, params)``


def _optimizer_class(scope: Scope, value: cst.BaseExpression) -> bool:
    """``optim.Adam``, ``torch.optim.SGD``: a class of ``torch.optim`` named, not called."""
    name = scope.imports.qualname(value) or ""
    last = name.rsplit(".", 1)[-1]
    return name.startswith("torch.optim.") and name.count(".") == 2 and last[:1].isupper() and last != "Optimizer"
