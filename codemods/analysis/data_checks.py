"""Never a silent partial conversion: the checks the plan makes once the prepare site is chosen.

Every loop that trains walks a prepared loader as prepared, or data that is not a loader; a loader walked raw, a
library's batch iterator ``prepare`` cannot shard, or a loader or model built inline where it is passed is refused
(a ``Problem``); data that cannot be followed at all is reported.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Binding, CallSite, Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.loader_holders import LoaderHolders
from accelify.codemods.analysis.problems import (
    BUILT_ELSEWHERE,
    MODELS_IN_A_COLLECTION,
    NOT_A_LOADER,
    UNKNOWN_DATA,
    UNSHARDED,
)
from accelify.codemods.analysis.roles import classify, strip_placement

_BUILTIN_DATA = {"range", "list", "zip", "enumerate", "iter", "tuple", "sorted", "reversed", "map", "filter", "itertools.count",
                 "tqdm.trange", "tqdm.auto.trange"}


class TrainingDataChecks(LoaderHolders):
    """The plan's checks of what the training walks and trains (``Plan`` mixes it in; ``trained_by``, ``bystander``
    and ``_problem`` are the plan's)."""

    objects: list[Binding]

    def _check_training_data(self) -> None:
        """Every loop that trains walks a prepared loader as prepared, or data that is not a loader. A
        loader it walks raw (built elsewhere, or used where prepare's result does not reach) would feed
        every process the whole data set: the file is refused, naming it. Data that cannot be followed at
        all is reported."""
        for loop in self.facts.loops:
            if self.bystander(loop.scope):
                continue
            if not any(self.reaches_backward(site) for site in loop.calls):
                if self._feeds_training(loop):  # type: ignore[attr-defined]
                    self.check_inline(loop)  # ``def batches(): for b in DataLoader(...): yield b``
                continue
            self.check_inline(loop)
            source = self.loop_source(loop)
            drawn = [site.node.args[0].value for site in loop.calls
                     if isinstance(site.node.func, cst.Name) and site.node.func.value == "next" and site.node.args]
            if not self.check_holders(loop.scope, [source, *drawn], loop.node.iter) or not self.check_captured(loop):
                continue  # ``loaders[phase]`` of a dict made before prepare, that cannot be made again after it
            found = self.origin(loop.scope, source)
            # ``x, y = next(data_iter)`` with ``data_iter = iter(loader)`` walks the loader all the same; a name
            # bound to one of two loaders (``data_loader = self.a`` or ``self.b``) walks either (the loop's own
            # iterable when it is one name: checked below)
            own = self.alternatives(loop.scope, source)
            walked = [(loop.node.iter, loop.node, own)] if len(own) > 1 else []
            walked += [(site.node, site.stmt, self.alternatives(loop.scope, drawn)) for site, drawn in self.drawn_sources(loop)]
            for node, at, choices in walked:
                for value in choices:
                    origin = self.origin(loop.scope, value)
                    if origin is not None and origin.role == "loader" and self.prepared(loop.scope, value, at) is None:
                        self._problem(UNSHARDED, node, name=dotted(value) or "the loader", line=origin.key)
                        break
            if found is not None and found.role == "loader":
                if self.loader_of(loop) is None:
                    self._problem(UNSHARDED, loop.node.iter, name=dotted(source) or "the loader", line=found.key)
            elif dotted(source) is not None and (kind := self._iterator_class(found)) is not None:
                # torchtext's legacy ``BucketIterator``: followed to where it is built, and no DataLoader
                self._problem(NOT_A_LOADER, loop.node.iter, name=dotted(source) or "", iterator=kind)
            elif found is None and (inline := self._inline(loop.scope, source, "loader")) is not None:
                # ``Solver(DataLoader(...))``: built where it is passed, out of prepare's reach, as a named one would be
                self._problem(BUILT_ELSEWHERE, inline, name=dotted(source) or "the loader")
            elif dotted(source) is not None and self._unknown_data(loop.scope, source, found) \
                    and not self._trains_in_callees(loop):
                self._problem(UNKNOWN_DATA, loop.node.iter, refuse=False, name=dotted(source) or "")

    def _trains_in_callees(self, loop: Loop) -> bool:
        """Whether every call of ``loop`` that trains runs a function of the program with a training loop of its own
        over data it builds (``for i in tqdm(tic): trainModel(i)``, ``trainModel`` making its loaders from the name):
        the loop walks names (tickers, subjects, files), not batches; the callee's loop is the training loop, checked
        on its own. A callee that trains over what the loop hands it (``for batch in data: step(batch)`` with
        ``for chunk in batch.chunk(4)`` in ``step``) leaves the loop walking the data."""
        training = [site for site in loop.calls if self.reaches_backward(site)]
        return bool(training) and all(self._trains_own_data(site, set(loop.targets), frozenset()) for site in training)

    def _trains_own_data(self, site: CallSite, handed: set[str], seen: frozenset[int]) -> bool:
        """Whether the function ``site`` runs trains in a loop of its own (itself or through the functions it calls)
        over a DataLoader, and over nothing of the names in ``handed`` (what the caller's loop hands it) passed to it."""
        function = self.callee(site)
        if function is None or id(function) in seen or not isinstance(function.node, cst.FunctionDef):
            return False
        given = _derived(function, {name for name in function.param_names
                                    if (arg := self.arg_for(site, function, name)) is not None
                                    and _root(arg.value) in handed})
        walked = [other for other in self.facts.loops
                  if other.scope is function and any(self.reaches_backward(s) for s in other.calls)]
        if walked:  # none over what it is handed, and one over a DataLoader (not only ``for _ in range(n_critic)``)
            if any(_roots(self.loop_source(other)) & given for other in walked):
                return False
            return any((found := self.origin(other.scope, self.loop_source(other))) is not None and found.role == "loader"
                       for other in walked)
        training = [s for s in function.calls if self.reaches_backward(s)]
        return bool(training) and all(self._trains_own_data(s, given, seen | {id(function)}) for s in training)

    def _iterator_class(self, found: Binding | None) -> str | None:
        """``torchtext.data.BucketIterator`` when ``found`` builds one of torchtext's batch iterators, alone or one per
        split with ``.splits(...)`` (not a DataLoader, so ``prepare`` cannot shard it: every process would walk all
        of it)."""
        if found is None or (found.value is None and found.unpacked is None):
            return None
        value = found.unpacked[0] if found.unpacked is not None else strip_placement(found.value)  # type: ignore[arg-type]
        if not isinstance(value, cst.Call):
            return None
        qualname = found.where.imports.qualname(value.func) or ""
        qualname = qualname.removesuffix(".splits")  # ``BucketIterator.splits((train, val), ...)``: one per split
        return qualname if qualname.startswith("torchtext.") and qualname.endswith("Iterator") else None

    def _check_trained_models(self) -> None:
        """A model an optimizer trains that a caller builds inline where it passes it (``Trainer(Net(), loader)``) is
        out of prepare's reach: prepared without it, the processes would train their own copies (no gradient is
        averaged). Refused, as a named one built there would be. Without a prepared loader every process trains on
        the same data, so the copies stay equal (ACC022 says it is no faster): left as it is."""
        if not any(o.role == "loader" for o in self.objects) and not self.feeds_training():  # type: ignore[attr-defined]
            return  # (a loader prepared where it is built, ``iter(DataLoader(...))`` drawn from with ``next``, feeds it too)
        for optimizer in self.objects:
            if optimizer.role != "optimizer":
                continue
            for where, owner in self.trained_by(optimizer):
                if self.origin(where, owner) is None and (inline := self._inline(where, owner, "model")) is not None:
                    self._problem(BUILT_ELSEWHERE, inline, name=dotted(owner) or "the model")
                    return

    def _check_collections(self) -> None:
        """``nets = [net_sgd, net_adam]`` (or a tuple, or a dict of them) made before ``prepare`` from names it
        rebinds, and read after it (``for net, opt in zip(nets, optimizers):``): the list still holds the objects as
        they were, so the loop would train unwrapped models. It is made again right after ``prepare`` where its
        statement can run again and mean the same (``rebuilt``); refused (ACC036) where it cannot."""
        scope, after = self.prepare_scope, self.prepare_after  # type: ignore[attr-defined]
        if scope is None or after is None:
            return
        prepared = {a.spelled for a in self.aliases if a.obj.role in ("model", "optimizer")}  # type: ignore[attr-defined]
        order = self.facts.order
        for key, bindings in scope.bindings.items():
            for binding in bindings:
                value = binding.value
                if binding in self.rebuilt or binding.unpacked is not None \
                        or not isinstance(value, (cst.List, cst.Tuple, cst.Dict)):
                    continue
                held = {e.value.value for e in value.elements
                        if isinstance(e, (cst.Element, cst.DictElement)) and isinstance(e.value, cst.Name)}
                if not held & prepared or order[binding.stmt][1] > order[after][1]:
                    continue  # (made after prepare: it holds the prepared objects)
                refs = scope.refs.get(key, [])
                holders = [scope.holders.get(id(ref)) for ref in refs]
                if not any(h is not None and order[h][0] > order[after][1] for h in holders):
                    continue  # never read after prepare
                if self._rebuildable(binding):
                    self.rebuilt.append(binding)
                else:
                    self._problem(MODELS_IN_A_COLLECTION, binding.stmt, name=key)  # type: ignore[attr-defined]

    def _inline(self, scope: Scope, source: cst.BaseExpression, role: str) -> cst.Call | None:
        """The object of ``role`` a caller builds inline where it passes ``source`` (``Solver(DataLoader(...))`` stored
        as ``self.loader``, ``Trainer(Net(), ...)`` read as the parameter ``model``), if every call passes one; None
        otherwise."""
        key = dotted(source)
        binding = self.binding_of(scope, key) if key is not None and key.count(".") <= 1 else None
        value, where = (binding.value, binding.where) if binding is not None else (source, scope)
        name = dotted(value) if value is not None else None
        if name is None or where.kind != "function" or name not in where.param_names or name in where.bindings:
            return None
        found = []
        for site in self.call_sites(where):
            arg = self.arg_for(site, where, name)
            if arg is None or not isinstance(arg.value, cst.Call) or \
                    classify(arg.value, site.scope.imports, self.facts.classes) != role:
                return None
            found.append(arg.value)
        return found[0] if found else None

    def _unknown_data(self, scope: Scope, source: cst.BaseExpression, found: Binding | None) -> bool:
        """Training data that may be a DataLoader nobody can see being built: made by a call of a library
        function (``loader = build_loader(cfg)``), or not followed at all. Tensors, ranges and lists are data
        the script makes itself."""
        if found is None:
            owner = scope.resolve(source.value) if isinstance(source, cst.Name) else None
            if owner is not None and _made_data(self, owner, source):
                return False  # ``sample_data = []`` filled by the script, or an item of it (set P's P11)
            return self._bound(scope, dotted(source) or "") and not self._handed_own_data(scope, source)
        value = strip_placement(found.value) if found.value is not None else None
        if found.unpacked is not None:
            value = found.unpacked[0]
        if not isinstance(value, cst.Call):
            return False
        qualname = found.where.imports.qualname(value.func) or ""
        local = self.facts.sites.get(value) is not None and self.callee(self.facts.sites[value]) is not None
        return not local and not qualname.startswith(("torch.", "numpy.", "np.")) and qualname not in _BUILTIN_DATA

    def _handed_own_data(self, scope: Scope, source: cst.BaseExpression) -> bool:
        """Whether ``source`` is a parameter every caller hands a list, tuple or comprehension it makes itself
        (``data = [torch.randn(20, 1) for _ in range(8)]``, then ``train_model(model, data, 2)``): data the script
        makes, no DataLoader out of sight."""
        if not isinstance(source, cst.Name):
            return False
        owner = scope.resolve(source.value)
        if owner is None or owner.kind != "function" or source.value not in owner.param_names \
                or source.value in owner.bindings:
            return False
        sites = self.run_sites(owner)
        args = [(site, self.arg_for(site, owner, source.value)) for site in sites]
        return bool(sites) and all(arg is not None and _made_data(self, site.scope, arg.value) for site, arg in args)

    def _bound(self, scope: Scope, key: str) -> bool:
        """Whether ``key`` is assigned in the program (or is a parameter something is passed to)."""
        head = key.split(".")[0]
        owner = scope.resolve(head)
        if owner is None:
            return False
        if owner.kind == "function" and head in owner.param_names and head not in owner.bindings:
            return bool(self.call_sites(owner))
        return self.binding_of(scope, key) is not None


def _made_data(plan: TrainingDataChecks, scope: Scope, expr: cst.BaseExpression, depth: int = 0) -> bool:
    """A list, tuple or comprehension written here, or a name bound to one (its only binding), or the target of a
    ``for`` over such data (``for episode_data in sample_data``: an item of a list the script fills)."""
    literal = (cst.List, cst.Tuple, cst.ListComp, cst.GeneratorExp)
    if isinstance(expr, literal):
        return True
    key = dotted(expr)
    bindings = scope.bindings.get(key or "", []) if key is not None and "." not in key else []
    if not bindings or any(b.unpacked is not None for b in bindings):
        return False
    if len(bindings) == 1:
        return isinstance(bindings[0].value, literal) or _walks_made_data(plan, scope, bindings[0].stmt, key, depth)
    # every binding a literal or an item of made data (``episode_data = []`` filled, then ``for episode_data in ...``)
    return all(isinstance(b.value, literal) or _walks_made_data(plan, scope, b.stmt, key, depth) for b in bindings)


def _walks_made_data(plan: TrainingDataChecks, scope: Scope, stmt: cst.CSTNode, key: str | None, depth: int) -> bool:
    """Whether ``stmt`` is a ``for`` whose target is ``key`` over data the script makes."""
    return (isinstance(stmt, cst.For) and isinstance(stmt.target, cst.Name) and stmt.target.value == key and depth < 3
            and _made_data(plan, scope, stmt.iter, depth + 1))


def _derived(function: Scope, names: set[str]) -> set[str]:
    """``names`` with every name ``function`` binds from one of them (``x, y = batch``, ``parts = x.chunk(2)``)."""
    found = set(names)
    while True:
        more = {key for key, bindings in function.bindings.items() if key not in found and any(
            (value := b.unpacked[0] if b.unpacked is not None else b.value) is not None and _roots(value) & found
            for b in bindings)}
        if not more:
            return found
        found |= more


def _roots(expr: cst.BaseExpression) -> set[str]:
    """The names an iterable or value is made from: ``x`` and ``y`` of ``zip(x.chunk(2), y.chunk(2))``."""
    root = _root(expr)
    if isinstance(expr, cst.Call) and root in ("zip", "enumerate", "iter", "list", "tuple", "sorted", "reversed"):
        return {r for arg in expr.args for r in _roots(arg.value)}
    return {root} if root is not None else set()


def _root(expr: cst.BaseExpression) -> str | None:
    """The name an expression starts from: ``batch`` of ``batch.chunk(4)``, ``tic`` of ``tic[k]``."""
    while True:
        if isinstance(expr, cst.Name):
            return expr.value
        if isinstance(expr, cst.Attribute):
            expr = expr.value
        elif isinstance(expr, cst.Call):
            expr = expr.func
        elif isinstance(expr, cst.Subscript):
            expr = expr.value
        else:
            return None
