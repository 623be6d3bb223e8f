"""The call graph of one program: the function of the program each call runs (a function in scope, ``self.method``,
a class's ``__init__`` for ``Trainer(...)``, a function of a local module: ``loops.fit``, ``from data import
make_loaders``), the calls of each function, the argument a call passes for a parameter (also for a key its
``**kwargs`` is read at: ``kwargs["model"]``), and whether a call reaches a ``backward``. ``Flow``
(``analysis/flow.py``) follows values over it."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.classes import Classes
from accelify.codemods.analysis.facts import CallSite, Facts, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.roles import strip_placement


class CallGraph:
    """Which function of the program each call runs, over one program (``Facts.program``)."""

    def __init__(self, facts: Facts, elsewhere: frozenset[int] = frozenset()) -> None:
        self.facts = facts
        # the classes of the trainers a run does not build, when one of several trainers is converted on its own
        # (``analysis/trainer_choice.py``): ``gan = GAN(args)`` in one branch and ``gan = WGAN(args)`` in another
        # leave ``gan`` a GAN for GAN's conversion
        self.elsewhere = elsewhere
        self._units = {unit: f.module_scope for unit, f in facts.units.items()}
        self._callees: dict[CallSite, Scope | None] = {}
        self._sites: dict[Scope, list[CallSite]] = {}
        self._names_read: set[str] | None = None  # every name and attribute name the program reads (``never_run``)
        self._read_outside_memo: dict[int, bool] = {}  # class -> its name read outside it (``never_run``)
        self._unrun_memo: dict[int, bool] = {}  # function -> called only from functions that never run
        self._reads_memo: dict[int, int] = {}  # function -> how many times its name is read (``never_run``)
        self.classes = Classes(facts, self.defined)
        for site in facts.calls:
            function = self._resolve_callee(site)
            self._callees[site] = function
            if self.in_other_trainer(site.scope):
                # a call in another trainer's territory is that trainer's conversion's to follow: a helper both
                # call (``save_checkpoint(model, path)``) sees each trainer's objects in its own conversion
                continue
            for candidate in [function] if function is not None else self._possible_methods(site):
                self._sites.setdefault(candidate, []).append(site)

    def in_other_trainer(self, scope: Scope | None) -> bool:
        """``scope`` is (in) the territory of a trainer this conversion leaves aside (``elsewhere``)."""
        while scope is not None and self.elsewhere:
            if id(scope) in self.elsewhere:
                return True
            scope = scope.parent
        return False

    # the call graph -----------------------------------------------------------------------------
    def callee(self, site: CallSite) -> Scope | None:
        """The function of the program that ``site`` runs, or None (a library call, or unknown)."""
        return self._callees.get(site)

    def held_method(self, site: CallSite) -> Scope | None:
        """``self.preprocessing.load_data()`` in a method, where the class binds ``self.preprocessing`` once, to an
        instance of a class of the program (``Preprocessing(args)``): that class's ``load_data``. None otherwise.
        Only what asks for it follows such calls (the values drawn before training: ``rules/shared_draws.py``)."""
        func = site.node.func
        if not isinstance(func, cst.Attribute) or not isinstance(func.value, cst.Attribute) \
                or dotted(func.value.value) != "self":
            return None
        held = self._held_instance(site.scope, func.value)
        return self.classes.method(held, func.attr.value) if held is not None else None

    def call_sites(self, function: Scope) -> list[CallSite]:
        """Every call of ``function`` in the program."""
        return self._sites.get(function, [])

    def run_sites(self, function: Scope) -> list[CallSite]:
        """The calls of ``function`` but those in functions nothing runs (``never_run``), where some other call runs."""
        sites = self.call_sites(function)
        kept = [s for s in sites if not self.never_run(s.scope)]
        return kept if kept else sites

    def never_run(self, scope: Scope) -> bool:
        """Whether ``scope`` is a module-level function of the program that nothing calls, and whose name nothing reads
        (N15's ``experiment_embedding_dims``, its call commented out), or a method of a module-level class whose name
        nothing reads (set Q's Q2: ``SimCLR.tune``, in a module the entry script imports another class from): what
        its calls pass says nothing of a run."""
        if scope.kind != "function" or scope.parent is None:
            return False
        if self._names_read is None:
            self._names_read = {name for s in self.facts.scopes for name in s.refs}
            self._names_read |= {attribute.attr.value for s in self.facts.scopes for attribute, _ in s.attributes}
        owner = scope.parent
        if owner.kind == "class" and owner.parent is not None and owner.parent.kind == "module":
            return owner.name not in self._names_read or not self._read_outside(owner)
        if owner.kind != "module":
            return False
        sites = self.call_sites(scope)
        if not sites:
            return self._reads(scope) == 0
        return self._called_only_from_unrun(scope, sites, frozenset())

    def _reads(self, function: Scope) -> int:
        """How many times the program reads the module-level ``function``'s name: as a name, or as an attribute of
        its module (``train_utils.train``; ``model.train()`` reads another ``train``)."""
        if id(function) not in self._reads_memo:  # (``never_run`` is asked for every call site)
            qualified = f"{function.unit}.{function.name}"
            self._reads_memo[id(function)] = sum(len(s.refs.get(function.name, [])) for s in self.facts.scopes) + sum(
                1 for s in self.facts.scopes for attribute, _ in s.attributes
                if attribute.attr.value == function.name and s.imports.qualname(attribute) == qualified)
        return self._reads_memo[id(function)]

    def _called_only_from_unrun(self, scope: Scope, sites: list[CallSite], seen: frozenset[int]) -> bool:
        """Whether every call of the module-level function ``scope`` is in a function that never runs (set U's U8:
        a template ``train`` nothing calls, calling ``train_step``, which walks a loader nothing builds), and its name
        is read nowhere else (handed on as a callback, it may run)."""
        if not seen and id(scope) in self._unrun_memo:
            return self._unrun_memo[id(scope)]
        found = self._reads(scope) == len(sites) and all(self._unrun(site.scope, seen | {id(scope)}) for site in sites)
        if not seen:  # (an answer that assumed a function being asked never runs holds for that question only)
            self._unrun_memo[id(scope)] = found
        return found

    def _unrun(self, scope: Scope, seen: frozenset[int]) -> bool:
        """``never_run`` of ``scope`` (or of the function it is nested in), following calls only through module-level
        functions not already being asked (a cycle of calls among themselves runs only if something outside calls in)."""
        while scope.kind == "function" and scope.parent is not None and scope.parent.kind == "function":
            scope = scope.parent
        if scope.kind != "function" or scope.parent is None:
            return False
        if id(scope) in seen:
            return True
        owner = scope.parent
        if owner.kind == "module":
            sites = self.call_sites(scope)
            if not sites:  # a function of a module the script imports that nothing calls (the script's own may be
                return self._reads(scope) == 0 and scope.unit != "__main__"  # what the conversion takes as its entry)
            return self._called_only_from_unrun(scope, sites, seen)
        return self.never_run(scope)

    def _read_outside(self, cls: Scope) -> bool:
        """Whether the class ``cls``'s name is read outside the class itself (``super(Yelp, self).__init__()`` in its
        own ``__init__`` builds nothing: set Q's Q1)."""
        if id(cls) not in self._read_outside_memo:
            self._read_outside_memo[id(cls)] = self._reads_outside(cls)
        return self._read_outside_memo[id(cls)]

    def _reads_outside(self, cls: Scope) -> bool:
        for s in self.facts.scopes:
            inner: Scope | None = s
            while inner is not None and inner is not cls:
                inner = inner.parent
            if inner is cls:
                continue
            if cls.name in s.refs or any(attribute.attr.value == cls.name for attribute, _ in s.attributes):
                return True
        return False

    def _resolve_callee(self, site: CallSite) -> Scope | None:
        func = site.node.func
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name) and (
                func.value.value == "self" or (func.value.value == "cls" and "cls" in site.scope.param_names)):
            cls = site.scope.class_scope
            if func.value.value == "cls" and site.scope.parent is not None and site.scope.parent.kind == "class" \
                    and site.scope.param_names[:1] == ["cls"]:
                cls = site.scope.parent  # ``cls.download(root)`` in a classmethod
            return self.classes.self_method(cls, func.attr.value) if cls is not None else None
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Attribute):
            cls = self.classes.class_of(site.scope, func.value)  # ``mydatasets.SSTDataset.splits(...)``
            if cls is not None:
                return self.classes.method(cls, func.attr.value)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call) and isinstance(func.value.func, cst.Name) \
                and func.value.func.value == "super" and site.scope.class_scope is not None:
            bases = self.classes.bases(site.scope.class_scope)  # ``super().__init__(model, ...)`` in a subclass: the base's
            return next((m for m in (self.classes.method(b, func.attr.value) for b in bases) if m is not None), None)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
            method = self._instance_method(site.scope, func.value.value, func.attr.value)
            if method is not None:
                return method
            cls = self.classes.class_of(site.scope, func.value)  # ``CudaUtils.get_device()``: a static or class method
            if cls is not None:
                return self.classes.method(cls, func.attr.value)
        if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Call):
            cls = self.classes.class_of(site.scope, func.value.func)  # ``GAN().train(loader)``: GAN's ``train``
            if cls is not None:
                return self.classes.method(cls, func.attr.value)
        if isinstance(func, cst.Name):
            owner = site.scope.resolve(func.value)
            if owner is not None and owner.unit == site.scope.unit:
                found = self.facts.function(func.value, owner) or self._init(self.facts.class_scope(func.value, owner))
                if found is not None:
                    return found
            called = self._instance_method(site.scope, func.value, "__call__")
            if called is not None:
                return called  # ``early_stopping(val_loss, model)``: the instance's ``__call__``
        if self.elsewhere and (cls := self._chosen(site.scope, func)) is not None:
            return self._init(cls)  # ``GANS[args.gan_type](args)``: the one trainer this conversion is about
        return self._imported(site.qualname)

    def _chosen(self, scope: Scope, func: cst.BaseExpression) -> Scope | None:
        """The class a call of ``func`` builds in the view of one of several trainers: the class it names, or the one
        class of a registry (``GANS[key]``) that is not another trainer's; None for anything else."""
        found = self.classes.class_of(scope, func)
        if found is None:
            chosen = [c for c in self.classes.registered(scope, func) if id(c) not in self.elsewhere]
            found = chosen[0] if len(chosen) == 1 else None
        return found if found is not None and id(found) not in self.elsewhere else None

    def _instance_method(self, scope: Scope, name: str, method: str) -> Scope | None:
        """``trainer.fit(...)`` where ``trainer = Trainer(...)``, a class of the program: ``Trainer.fit``."""
        owner = scope.resolve(name)
        bindings = owner.bindings.get(name, []) if owner is not None else []
        if len(bindings) > 1:  # ``model = GPT(...)``, then ``model = torch.compile(model)``: the instance is GPT's
            if self.elsewhere:  # the one of several trainers this conversion is about
                bindings = [b for b in bindings if isinstance(b.value, cst.Call) and self._chosen(scope, b.value.func)]
            else:
                bindings = [b for b in bindings if isinstance(b.value, cst.Call) and isinstance(b.value.func, cst.Name)
                            and self.classes.class_of(scope, b.value.func) is not None]  # (imported too: Q5's ``NeuralNet``)
        made = _made(bindings[0].value) if len(bindings) == 1 else None
        if made is None:
            return None
        func = made.func
        cls = self._chosen(scope, func) if self.elsewhere else self.classes.class_of(scope, func)
        return self.classes.method(cls, method) if cls is not None else None

    def _possible_methods(self, site: CallSite) -> list[Scope]:
        """``model.save_model(path)`` where ``model`` is bound in the arms of an ``if`` to instances of two classes of
        the program (``GRUGen(...)`` or ``LSTMGen(...)``), each with its own ``save_model``: each class's method may
        be the one that runs, so the call is one of each method's calls (``call_sites``), while ``callee`` stays
        None (which one runs is not known). Empty unless every binding is such a constructor defining the method."""
        func = site.node.func
        if self.elsewhere or not isinstance(func, cst.Attribute):
            return []
        held = self._held_instance(site.scope, func.value)
        if held is not None:  # ``corpus.vocab.save_dict(path)``: the class ``corpus``'s ``__init__`` binds ``vocab`` to
            method = self.classes.method(held, func.attr.value)
            return [method] if method is not None else []
        if not isinstance(func.value, cst.Name) or func.value.value == "self":
            return []
        owner = site.scope.resolve(func.value.value)
        bindings = owner.bindings.get(func.value.value, []) if owner is not None else []
        found: dict[int, Scope] = {}
        for binding in bindings:
            made = _made(binding.value)
            cls = self.classes.class_of(site.scope, made.func) if made is not None else None
            method = self.classes.method(cls, func.attr.value) if cls is not None else None
            if method is None:
                return []
            found[id(method)] = method
        return list(found.values()) if len(found) > 1 else []

    def _held_instance(self, scope: Scope, expr: cst.BaseExpression) -> Scope | None:
        """The class of the program whose instance ``expr`` holds, where ``expr`` is ``obj.attr`` (or
        ``self.attr``) and the class of ``obj`` binds ``self.attr`` once, to a constructor of a class of the program
        (``self.vocab = Vocab(min_freq)``); None otherwise."""
        if not isinstance(expr, cst.Attribute) or not isinstance(expr.value, cst.Name):
            return None
        owner_name = expr.value.value
        if owner_name == "self":
            holder = scope.class_scope
        else:
            where = scope.resolve(owner_name)
            bindings = where.bindings.get(owner_name, []) if where is not None else []
            made = _made(bindings[0].value) if len(bindings) == 1 else None
            holder = self.classes.class_of(scope, made.func) if made is not None else None
        if holder is None:
            return None
        held = holder.bindings.get(f"self.{expr.attr.value}", [])
        made = _made(held[0].value) if len(held) == 1 else None
        return self.classes.class_of(held[0].where, made.func) if made is not None else None

    def _imported(self, qualname: str | None) -> Scope | None:
        """``loops.fit`` -> the function ``fit`` of the local module ``loops`` (or a class's ``__init__``)."""
        found = self.defined(qualname)
        if found is None:
            return None
        module, name = found
        return self.facts.function(name, module) or self._init(self.facts.class_scope(name, module))

    def defined(self, qualname: str | None) -> tuple[Scope, str] | None:
        """The local module and name that define ``qualname``, through a package's re-exports (``engine.fit``
        where ``engine/__init__.py`` says ``from .loops import fit``: ``engine.loops``'s ``fit``)."""
        for _ in range(8):  # re-exports of re-exports, never a cycle
            if not qualname or "." not in qualname:
                return None
            unit, _, name = qualname.rpartition(".")
            module = self._units.get(unit)
            if module is None or unit == "__main__":
                return None
            if self.facts.function(name, module) is not None or self.facts.class_scope(name, module) is not None:
                return module, name
            target = module.imports.aliases.get(name)
            if target is None or target == qualname:
                return None
            qualname = target
        return None

    def _init(self, cls: Scope | None) -> Scope | None:
        """The ``__init__`` building ``cls`` runs: its own, else the one it inherits from a base class of the program
        (set Q's Q2: ``FineTune(model)`` runs ``BaseModel.__init__``, which keeps the model)."""
        return self.classes.method(cls, "__init__") if cls is not None else None

    def arg_for(self, site: CallSite, function: Scope, param: str) -> cst.Arg | None:
        """The argument ``site`` passes for ``function``'s parameter ``param``."""
        node = function.node
        assert isinstance(node, cst.FunctionDef)
        positional = [p.name.value for p in (*node.params.posonly_params, *node.params.params)]
        bound = isinstance(site.node.func, cst.Attribute) or node.name.value in ("__init__", "__call__")
        if function.parent is not None and function.parent.kind == "class" and bound and positional[:1] in (["self"], ["cls"]):
            positional = positional[1:]
        index = 0
        for arg in site.node.args:
            if arg.star == "**" and (spread := _spread(site.scope, arg.value)) is not None:
                found = next((a for a in spread if a.keyword is not None and a.keyword.value == param), None)
                if found is not None:
                    return found  # ``Trainer(**dict(model=model))``: the ``model=model`` in it
                continue
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

    def kwargs_read(self, scope: Scope, expr: cst.BaseExpression | None) -> tuple[Scope, str] | None:
        """``kwargs["model"]``, ``kwargs.get("model"[, default])`` or ``kwargs.pop("model"[, default])`` read in
        ``scope``, ``kwargs`` being the ``**`` parameter of a function that neither rebinds nor writes it: that
        function and the keyword (``model``) whose argument its callers hand over (``arg_for(site, function,
        "model")``). None for anything else (a computed key, a key that is also a named parameter)."""
        name, key = _kwargs_lookup(expr)
        function = scope.resolve(name) if name is not None else None
        if function is None or function.kind != "function" or not isinstance(function.node, cst.FunctionDef):
            return None
        star = function.node.params.star_kwarg
        if not isinstance(star, cst.Param) or star.name.value != name or name in function.bindings:
            return None
        named = [p.name.value for p in function.params if p is not star and p is not function.node.params.star_arg]
        if key in named or _writes(function.node, name):
            return None
        return function, key  # type: ignore[return-value]

    def reaches_backward(self, site: CallSite, seen: frozenset[int] = frozenset()) -> bool:
        """Whether ``site`` is a ``backward`` call or calls (through the program) a function that makes one."""
        if site.method == "backward":
            return True
        for function in [self.callee(site), *self.callbacks(site)]:
            if function is not None and id(function) not in seen:
                if any(self.reaches_backward(s, seen | {id(function)}) for s in function.calls):
                    return True
        return False

    def callbacks(self, site: CallSite) -> list[Scope]:
        """Functions of the program passed to a call by name (``optimizer.step(closure)``): it runs them."""
        found = []
        for arg in site.node.args:
            if isinstance(arg.value, cst.Name):
                owner = site.scope.resolve(arg.value.value)
                function = self.facts.function(arg.value.value, owner) if owner is not None else None
                if function is not None:
                    found.append(function)
        return found


def _made(value: cst.BaseExpression | None) -> cst.Call | None:
    """The constructor call a name is bound to: ``Logger(...)``, also as the converted code makes it on the main
    process only (``Logger(...) if accelerator.is_main_process else None``), and a model placed where it is built
    (``Net(...).to(device)``: the instance is Net's); None for anything else."""
    if isinstance(value, cst.IfExp) and isinstance(value.orelse, cst.Name) and value.orelse.value == "None":
        value = value.body
    value = strip_placement(value) if value is not None else None
    return value if isinstance(value, cst.Call) else None


_READS = frozenset({"get", "pop"})
_WRITES = frozenset({"update", "setdefault", "clear", "popitem"})


def _kwargs_lookup(expr: cst.BaseExpression | None) -> tuple[str | None, str | None]:
    """``kwargs["k"]`` / ``kwargs.get("k"[, d])`` / ``kwargs.pop("k"[, d])``: ``("kwargs", "k")``; else ``(None, None)``."""
    owner: cst.BaseExpression | None = None
    key: cst.BaseExpression | None = None
    if isinstance(expr, cst.Subscript) and len(expr.slice) == 1 and isinstance(expr.slice[0].slice, cst.Index):
        owner, key = expr.value, expr.slice[0].slice.value
    elif isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _READS \
            and 1 <= len(expr.args) <= 2 and not any(a.star or a.keyword is not None for a in expr.args):
        owner, key = expr.func.value, expr.args[0].value
    if isinstance(owner, cst.Name) and isinstance(key, cst.SimpleString) and isinstance(key.evaluated_value, str):
        return owner.value, key.evaluated_value
    return None, None


def _writes(function: cst.FunctionDef, name: str) -> bool:
    """Whether ``function`` changes its dict ``name`` (``name["k"] = v``, ``del name["k"]``, ``name.update(...)``)."""
    stored = m.Subscript(value=m.Name(name))
    targets = [t.target for a in m.findall(function, m.Assign()) for t in a.targets]  # type: ignore[attr-defined]
    targets += [a.target for a in m.findall(function, m.AugAssign() | m.AnnAssign() | m.Del())]  # type: ignore[attr-defined]
    if any(m.matches(t, stored) for t in targets):
        return True
    return bool(m.findall(function, m.Call(func=m.Attribute(value=m.Name(name), attr=m.OneOf(*(m.Name(w) for w in _WRITES))))))


def _spread(scope: Scope, value: cst.BaseExpression) -> list[cst.Arg] | None:
    """The keyword arguments of ``**dict(k=v, ...)`` (the builtin, every argument a plain keyword); None otherwise."""
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict"
            and scope.resolve("dict") is None):
        return None
    args = list(value.args)
    return args if all(a.keyword is not None and not a.star for a in args) else None
