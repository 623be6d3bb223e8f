"""Which values are the same on every process, and which branches every process takes the same way.

A collective (``wait_for_everyone``, ``gather*``, ``reduce``, ``check_trigger``, a DDP backward) must
be reached by every process the same number of times, so it may only sit under conditions that agree.
A value is *local* (it may differ between processes) when it comes from a process's own data: a batch
of a prepared loader, a prepared model's output on it, a loss, a random draw, the process's rank or
the clock; and everything computed from such a value is local too, a holder it was kept in included
(``losses.append(loss.item())``, read as ``kept_values.py`` reads it for ACC028 too) and the items of a loop
over a local value. A value is *global* again once it
went through ``gather_for_metrics``/``gather``/``reduce`` (read from the edits: the statements ``x, y =
accelerator.gather_for_metrics((x, y))`` the evaluation rule inserts, and the forward calls it replaced by the
name it gathers). Everything else (constants, arguments, epochs, parameters of a
prepared model, ``len(loader.dataset)``) agrees.

The analysis is per function, in source order: a use sees the last assignment before it on its path
(and, inside a loop, the assignments later in the loop body, from the previous iteration); a
parameter is local when a call site passes a local value; a function's result is local when a
``return`` returns one; ``self.x`` and module globals are local when any assignment of them is.
It errs towards "local": a branch it cannot prove agrees is treated as one that may not. It reads the edits
proposed when it is first asked (``Context.agreement`` builds it then), so it is asked after the evaluation rule.
"""

from __future__ import annotations

from typing import Iterable, Protocol

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.batch_structure import BatchStructure
from accelify.codemods.analysis.statement_shapes import comprehension_fors, target_names
from accelify.codemods.analysis.tree_walk import children
from accelify.codemods.analysis.mixed_calls import mixed_loader
from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Loop, Scope
from accelify.codemods.analysis.kept_values import kept_bindings
from accelify.codemods.analysis.names import PROGRESS_BARS, dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import classify, same_module

_RANDOM = ("torch.rand", "torch.randn", "torch.randint", "torch.randperm", "torch.bernoulli", "torch.multinomial",
           "torch.normal", "random.", "numpy.random.", "np.random.")
# Draws from the process's own RNG through a method: ``Categorical(probs).sample()``, ``x.bernoulli()``, ``w.normal_()``.
_RANDOM_METHODS = ("sample", "rsample", "sample_n", "multinomial", "bernoulli", "random_", "uniform_", "normal_",
                   "exponential_", "geometric_", "cauchy_", "log_normal_", "bernoulli_")
# Reads of the clock, which differ between processes. Not the rest of ``datetime``: ``datetime.strptime(name, fmt)``
# sorting checkpoint folders by the time in their names (resume code) reads no clock.
_CLOCK = ("time.time", "time.perf_counter", "time.monotonic", "time.process_time", "time.localtime", "time.gmtime",
          "time.ctime", "time.asctime", "time.strftime", "datetime.datetime.now", "datetime.datetime.utcnow",
          "datetime.datetime.today", "datetime.date.today")
_RANK_ATTRS = ("process_index", "local_process_index", "is_main_process", "is_local_main_process", "is_last_process")
_WALK_WRAPPERS = (*sorted(PROGRESS_BARS), "tqdm.trange", "tqdm.auto.trange", "tqdm.notebook.trange", "enumerate",
                  "builtins.enumerate")
_GLOBAL_METHODS = ("gather_for_metrics", "gather", "reduce", "check_trigger", "pad_across_processes")


class ProposedEdits(Protocol):
    """What the agreement reads of the edits proposed so far (``engine.edits.Edits``)."""

    removed: set[cst.BaseStatement]
    holders: dict[cst.CSTNode, cst.BaseStatement]  # replaced node -> its statement

    def inserted(self) -> Iterable[tuple[cst.BaseStatement, bool, cst.BaseStatement]]: ...

    def replacement_of(self, node: cst.CSTNode) -> cst.CSTNode | None: ...


class Agreement(BatchStructure):
    """Answers ``uniform(scope, expr, at)`` and ``agreed(stmt, scope)`` for one conversion."""

    def __init__(self, facts: Facts, plan: Plan, edits: ProposedEdits) -> None:
        self.facts = facts
        self.plan = plan
        self.edits = edits
        # what is global again: names gathered right after a statement (or right before it), and forward calls
        # replaced by a gathered name
        self.gathered: dict[cst.BaseStatement, set[str]] = {}
        self.gathered_before: set[cst.BaseStatement] = set()
        self._stochastic: dict[int, bool] = {}
        self._forward_sets: dict[tuple[int, str], bool] = {}
        self.gathered_nodes: set[cst.CSTNode] = set()
        self.forward_names: dict[cst.CSTNode, str] = {}  # each of those nodes: the gathered name it is replaced by
        self._read_gathers(edits)
        self._local_binding: dict[int, bool] = {}
        self._params: dict[tuple[int, str], bool] = {}
        self._returns: dict[int, bool] = {}
        self._contexts: dict[int, bool] = {}
        self._batch_loops: dict[int, bool] = {}
        self._kept = kept_bindings(facts)
        self._items = _comprehension_items(facts)

    def _read_gathers(self, edits: ProposedEdits) -> None:
        for anchor, before, stmt in edits.inserted():
            names = _gathered_names(stmt)
            if names:
                self.gathered.setdefault(anchor, set()).update(names)
                if before:
                    self.gathered_before.add(anchor)
        if not self.gathered_before:
            return
        for node, stmt in edits.holders.items():
            if stmt in self.gathered_before:
                new = edits.replacement_of(node)
                if isinstance(new, cst.Name) and new.value in self.gathered[stmt]:
                    self.gathered_nodes.add(node)
                    self.forward_names[node] = new.value

    def gathers(self, stmt: cst.BaseStatement) -> bool:
        """Whether values are gathered for metrics right before or after ``stmt``."""
        return stmt in self.gathered

    # values -------------------------------------------------------------------------------------
    def uniform(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement) -> bool:
        """Whether ``expr``, evaluated in ``scope`` at statement ``at``, has the same value on every process."""
        return not self._local(scope, expr, at, frozenset())

    def _local(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement, seen: frozenset) -> bool:
        if expr in self.gathered_nodes:
            return False
        if id(expr) in self._items:  # ``i`` of ``[f(seed + i) for i in range(n)]``: an item of what it walks
            return self._local(scope, self._items[id(expr)], at, seen)
        if expr in self.plan.distributed.local_nodes:
            return True  # a launcher value the script reads (``int(os.environ["RANK"])``, ``args.local_rank``)
        if isinstance(expr, (cst.Comparison, cst.Call, cst.Subscript)) and self.structure_agrees(scope, expr, at, seen):
            return False  # ``len(target)``, ``target is None`` of a batch: the processes agree (batch_structure.py)
        if isinstance(expr, (cst.Name, cst.Attribute)) and dotted(expr) is not None:
            key = dotted(expr)
            assert key is not None
            if key.rsplit(".", 1)[-1] in _RANK_ATTRS:
                return True
            if self.plan.origin(scope, expr) in self.plan.objects:
                return False  # a prepared model, optimizer or loader: a handle, the same object everywhere
            if key.count(".") <= 1 and (scope.resolve(key.split(".")[0]) is not None or key.startswith("self.")):
                return self._key_local(scope, key, at, seen)
            return isinstance(expr, cst.Attribute) and self._local(scope, expr.value, at, seen)
        if isinstance(expr, cst.Call):
            return self._call_local(scope, expr, at, seen)
        return any(self._local(scope, e, at, seen) for e in _subexpressions(expr))

    def _call_local(self, scope: Scope, call: cst.Call, at: cst.BaseStatement, seen: frozenset) -> bool:
        site = self.facts.sites.get(call)
        qualname = (site.qualname if site is not None else None) or ""
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _GLOBAL_METHODS:
            return False
        if qualname in _WALK_WRAPPERS:
            # a progress bar or counter walks the items it is given, whatever it shows: ``tqdm(loader, disable=not
            # accelerator.is_main_process)`` hands every process the same number of items
            return any(self._local(scope, a.value, at, seen) for a in call.args if a.keyword is None)
        if qualname.startswith(_CLOCK):
            return True
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _RANDOM_METHODS and not qualname.startswith("torch."):
            return True  # a policy's action, a dropout mask drawn by hand: each process draws its own
        if qualname.startswith(_RANDOM):  # a draw from a generator seeded here agrees; the process's own RNG may not
            generator = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "generator"), None)
            return generator is None or self._local(scope, generator, at, seen)
        if qualname in ("len", "builtins.len") and call.args:
            return self._len_local(scope, call.args[0].value, at, seen)
        if qualname in ("next", "builtins.next") and call.args and self._draws_shard(scope, call.args[0].value, at):
            return True  # ``x, y = next(it)`` of ``it = iter(loader)``, a prepared loader: this process's batch
        if (model := self.plan.prepared(scope, call.func, at)) is not None:
            # a forward pass: the parameters agree (DDP keeps them equal), so it is local when its input is, or
            # when the model draws as it runs (dropout in training: each process its own masks; set P's P5, a GCN
            # stopping early on the loss of its training forward over the whole graph)
            if site is not None and not site.no_grad and _calls_itself(call, model) and self._draws_in_forward(model):
                return True
            return any(self._local(scope, a.value, at, seen) for a in call.args)
        function = self.plan.callee(site) if site is not None else None
        if function is not None:  # a function of the program: what it returns (its parameters are followed there)
            return self._returns_local(function, seen)
        parts = [a.value for a in call.args]
        if isinstance(call.func, cst.Attribute):
            parts.append(call.func.value)
        return any(self._local(scope, p, at, seen) for p in parts)

    def _set_by_forward(self, scope: Scope, name: str, attr: str, at: cst.BaseStatement) -> bool:
        """Whether ``name`` holds a prepared model whose class sets ``self.<attr>`` in a method other than
        ``__init__`` (its forward keeping the loss of the batch it ran: a value of this process's batch)."""
        model = self.plan.prepared(scope, cst.Name(name), at)
        if model is None:
            return False
        memo = (id(model), attr)
        if memo not in self._forward_sets:
            value = _unplaced(model)
            cls = self.plan.classes.class_of(model.where, value.func) if isinstance(value, cst.Call) else None
            self._forward_sets[memo] = cls is not None and any(
                method.name.value != "__init__" and bool(m.findall(method, m.AssignTarget(
                    target=m.Attribute(value=m.Name("self"), attr=m.Name(attr)))))
                for method in m.findall(cls.node, m.FunctionDef()) if isinstance(method, cst.FunctionDef))
        return self._forward_sets[memo]

    def _draws_in_forward(self, model: Binding) -> bool:
        """Whether the model ``model`` holds may draw at random in its forward: a class of the program (or a
        ``torch.nn`` container built in place) that mentions dropout, in its body or in the program's classes it
        names; a model of unknown make (a library's, loaded) may too. A ``torch.nn`` layer without dropout does not."""
        memo = self._stochastic.get(id(model))
        if memo is None:
            memo = self._stochastic[id(model)] = self._mentions_dropout(model)
        return memo

    def _mentions_dropout(self, model: Binding) -> bool:
        value = _unplaced(model)
        if not isinstance(value, cst.Call):
            return True  # made elsewhere (loaded, handed in): not known not to draw
        cls = self.plan.classes.class_of(model.where, value.func)
        if cls is None:
            name = model.where.imports.qualname(value.func) or ""
            if not name.startswith("torch.nn."):
                return True  # a library's model (torchvision's, timm's): may hold dropout
            return _dropout_in(value)  # ``nn.Sequential(nn.Linear(...), nn.Dropout(0.5), ...)``
        seen: set[int] = set()
        todo = [cls]
        while todo:
            current = todo.pop()
            if id(current) in seen:
                continue
            seen.add(id(current))
            if _dropout_in(current.node):
                return True
            for call in m.findall(current.node, m.Call()):
                inner = self.plan.classes.class_of(current, call.func)  # type: ignore[attr-defined]
                if inner is not None:
                    todo.append(inner)
        return False

    def _draws_shard(self, scope: Scope, source: cst.BaseExpression, at: cst.BaseStatement) -> bool:
        """Whether ``next(source)`` draws a batch of a prepared loader: ``source`` is ``iter(loader)`` or a name bound
        only to one."""
        if isinstance(source, cst.Call) and m.matches(source.func, m.Name("iter")) and len(source.args) == 1:
            loader: cst.BaseExpression | None = source.args[0].value
        else:
            loader = _iterated(scope, source)
        if loader is None:
            return False
        found = self.plan.prepared(scope, loader, at)
        return (found is not None and found.role == "loader") or any(w.call is loader for w in self.plan.wrapped)

    def _len_local(self, scope: Scope, arg: cst.BaseExpression, at: cst.BaseStatement, seen: frozenset) -> bool:
        """``len(loader)`` of a prepared loader is the same everywhere (even batches), as is ``len(ds)``."""
        base = arg.value if isinstance(arg, cst.Attribute) and arg.attr.value == "dataset" else arg
        base = _iterated(scope, base) or base  # ``len(it)`` of ``it = iter(DataLoader(...))``: the loader's length
        found = self.plan.origin(scope, base)
        if (found is not None and found.role == "loader") or classify(base, scope.imports, self.facts.classes) == "loader":
            return False
        return self._local(scope, arg, at, seen)

    def _key_local(self, scope: Scope, key: str, at: cst.BaseStatement, seen: frozenset) -> bool:
        head = key.split(".")[0]
        owner = scope.class_scope if head == "self" else scope.resolve(head)
        if owner is None:
            return False
        kept = [b for b in self._kept.get((id(owner), key), []) if b.stmt not in self.edits.removed]
        if key.count(".") == 1 and head != "self" and self._set_by_forward(scope, head, key.split(".")[1], at):
            return True  # ``model.loss``, kept by the model's forward on the batch it ran (set P's P10, a VAE)
        if owner.kind == "function" and head in owner.param_names and head not in owner.bindings:
            return "." not in key and (self._param_local(owner, head, seen) or any(self._binding_local(b, seen) for b in kept))
        bindings = [b for b in owner.bindings.get(key, []) if b.stmt not in self.edits.removed] + kept
        if "." in key and head != "self" and not owner.bindings.get(key):
            return self._key_local(scope, head, at, seen)  # ``out.data``, ``loss.shape``: an attribute of ``out``
        if owner is not scope or owner.kind != "function":  # self.x, a module global, a closure's variable
            return any(self._binding_local(b, seen) for b in bindings)
        reaching, entry = self._reaching(key, bindings, at)
        if entry and head in owner.param_names and self._param_local(owner, head, seen):
            return True  # ``SR = SR > threshold``: the parameter's value reaches the use, as it came
        return any(self._binding_local(b, seen) for b in reaching)

    def _reaching(self, key: str, bindings: list[Binding], at: cst.BaseStatement) -> tuple[list[Binding], bool]:
        """The assignments a use at ``at`` may see: back to the last one on its path (a gather of the
        name counts as one that makes it global), and the ones later in an enclosing loop (from the
        previous iteration); and whether the value the name had on entering the scope (a parameter's)
        may reach it too, no assignment on the path having replaced it."""
        order = self.facts.order
        chain = set(self.facts.chain(at))
        events: list[tuple[float, cst.BaseStatement, Binding | None]] = [(order[b.stmt][0], b.stmt, b) for b in bindings]
        for stmt, names in self.gathered.items():
            if key in names:
                where = order[stmt][0] - 0.5 if stmt in self.gathered_before else order[stmt][1] + 0.5
                events.append((where, stmt, None))
        here = order[at][0]
        out: list[Binding] = []
        entry = False
        for position, stmt, binding in sorted((e for e in events if e[0] < here), key=lambda e: e[0], reverse=True):
            if binding is not None:
                out.append(binding)
            parent = self.facts.parent_stmt.get(stmt)
            while isinstance(parent, cst.With) and parent not in chain:  # a ``with`` body runs whenever the ``with`` does
                parent = self.facts.parent_stmt.get(parent)
            on_path = stmt in chain if binding is not None and isinstance(stmt, (cst.For, cst.While)) else (
                parent is None or parent in chain
            )
            if on_path and (binding is None or not binding.aug):
                break  # unconditional on the way to ``at``: nothing earlier reaches it
        else:
            entry = True
        for loop_stmt in chain:
            if isinstance(loop_stmt, cst.For) and key in target_names(loop_stmt.target):
                continue  # the loop binds it anew each pass: what the previous pass left never reaches the use
            if isinstance(loop_stmt, (cst.For, cst.While)):
                last = order[loop_stmt][1]
                out.extend(b for b in bindings if here < order[b.stmt][0] <= last)
        return out, entry

    def _binding_local(self, binding: Binding, seen: frozenset) -> bool:
        if id(binding) in self._local_binding:
            return self._local_binding[id(binding)]
        if id(binding) in seen:
            return False
        self._local_binding[id(binding)] = False  # recursion guard: assume agreed, revisit below
        if isinstance(binding.stmt, cst.For):  # a loop target: a batch when the loop walks a prepared loader, and
            # an item of what it walks otherwise (``for p in preds`` over a process's own predictions)
            found = next((lp for lp in binding.where.loops if lp.node is binding.stmt), None)
            result = found is not None and self._over_prepared(found) and binding.key in self.plan.batch_names(found)
            if not result and found is not None and not self._over_prepared(found) \
                    and mixed_loader(self.plan, found) is not None:
                result = True  # a loader prepared at one call of the function: this process's shard there
            if not result and (found is None or not self._over_prepared(found)):
                result = self._local(binding.where, binding.stmt.iter, binding.stmt, seen | {id(binding)})
        elif binding.value is None:
            result = binding.unpacked is not None and self._local(binding.where, binding.unpacked[0], binding.stmt, seen | {id(binding)})
        else:
            result = self._local(binding.where, binding.value, binding.stmt, seen | {id(binding)})
            if binding.aug and not result:
                result = self._key_local(binding.where, binding.key, binding.stmt, seen | {id(binding)})
        if not result and not isinstance(binding.stmt, cst.For):
            result = self._bound_under_local_test(binding, seen | {id(binding)})
        self._local_binding[id(binding)] = result
        return result

    def _bound_under_local_test(self, binding: Binding, seen: frozenset) -> bool:
        """Whether ``binding`` is made under an ``if``/``while`` whose test may differ between processes (``if bad ==
        patience: stopped = True`` with ``bad`` counted from a local loss): the value it leaves is then local too,
        whatever it assigns (set P's P5: a constant flag, set on one process only, its ``break`` a hang)."""
        scope = binding.where
        for outer in self.facts.chain(binding.stmt)[1:]:
            if isinstance(outer, (cst.FunctionDef, cst.ClassDef)):
                break
            if isinstance(outer, (cst.If, cst.While)) and self._local(scope, outer.test, outer, seen):
                return True
        return False

    def _over_prepared(self, loop: Loop) -> bool:
        if id(loop) not in self._batch_loops:
            self._batch_loops[id(loop)] = self.plan.loader_of(loop) is not None
        return self._batch_loops[id(loop)]

    def _param_local(self, function: Scope, param: str, seen: frozenset) -> bool:
        key = (id(function), param)
        if key in self._params:
            return self._params[key]
        if key in seen:
            return False
        self._params[key] = False
        result = False
        # its own guard, not the function's: ``_returns_local(f)`` reaching a parameter of ``f`` (``return
        # correct / batch_size`` computed from ``prediction``) must still follow the callers' arguments
        for site in self.plan.call_sites(function):
            arg = self.plan.arg_for(site, function, param)
            if arg is not None and self._local(site.scope, arg.value, site.stmt, seen | {key}):
                result = True
                break
        self._params[key] = result
        return result

    def _returns_local(self, function: Scope, seen: frozenset) -> bool:
        if id(function) in self._returns:
            return self._returns[id(function)]
        if id(function) in seen:
            return False
        self._returns[id(function)] = False
        result = False
        for ret in function.returns:
            stmt = _statement_of(self.facts, ret)
            if ret.value is not None and stmt is not None and self._local(function, ret.value, stmt, seen | {id(function)}):
                result = True
                break
            if stmt is not None and self._returned_under_local_test(function, stmt, seen | {id(function)}):
                result = True  # ``if gt_item in pred_items: return 1`` then ``return 0`` (set U's U2's ``hit``): which
                break  # value comes back is decided on the caller's values
        self._returns[id(function)] = result
        return result

    def _returned_under_local_test(self, function: Scope, stmt: cst.BaseStatement, seen: frozenset) -> bool:
        """Whether ``stmt`` (a ``return``) sits under an ``if``/``while`` of ``function`` whose test may differ."""
        for outer in self.facts.chain(stmt)[1:]:
            if outer is function.node:
                return False
            if isinstance(outer, (cst.If, cst.While)) and self._local(function, outer.test, outer, seen):
                return True
        return False

    # places -------------------------------------------------------------------------------------
    def agreed(self, stmt: cst.BaseStatement, scope: Scope) -> bool:
        """Whether every process reaches ``stmt`` the same number of times: every ``if``/``while`` test
        around it agrees, every loop around it walks the same number of items, and so does every call
        of its function."""
        for outer in self.facts.chain(stmt)[1:]:
            if isinstance(outer, (cst.If, cst.While)) and not self.uniform(scope, outer.test, outer):
                return False
            if isinstance(outer, cst.For) and not self._loop_agrees(scope, outer):
                return False
        return self._function_agreed(scope)

    def collective_place(self, stmt: cst.BaseStatement, scope: Scope, movable: bool = False,
                         after: cst.BaseStatement | None = None) -> cst.BaseStatement | None:
        """Where a collective meant to run right before ``stmt`` goes so that every process reaches it alike: ``stmt``
        itself when the processes reach it alike (``agreed``); else, for a ``movable`` one (a barrier, which carries
        no value), the outermost ``if``/``while``/``for`` around ``stmt`` that the processes may run differently (the
        first of an ``if``/``elif`` chain), when that comes after ``after`` (a barrier that orders a read after a
        write must stay after the write) and every process reaches it alike. None where there is no such place (a
        value gathered or reduced under a condition only some processes take, a function called under one): the
        rule must not insert it there, and does what it does without the collective or reports why it cannot.
        Every rule that inserts a collective asks this, so none puts one under a condition that may differ."""
        if self.agreed(stmt, scope):
            return stmt
        if not movable or not self._function_agreed(scope):
            return None
        place = stmt
        for outer in self.facts.chain(stmt)[1:]:
            if (isinstance(outer, (cst.If, cst.While)) and not self.uniform(scope, outer.test, outer)) or (
                    isinstance(outer, cst.For) and not self._loop_agrees(scope, outer)):
                place = outer
        parent = self.facts.parent_stmt.get(place)
        while isinstance(place, cst.If) and isinstance(parent, cst.If) and parent.orelse is place:
            place, parent = parent, self.facts.parent_stmt.get(parent)  # an ``elif``: before its ``if``
        if after is not None and not self.facts.after(place, after):
            return None
        return place if self.agreed(place, scope) else None

    def _loop_agrees(self, scope: Scope, loop: cst.For) -> bool:
        found = next((lp for lp in scope.loops if lp.node is loop), None)
        if found is not None and self._over_prepared(found):
            return True  # prepared loaders hand every process the same number of batches
        return self.uniform(scope, loop.iter, loop)

    def function_agreed(self, scope: Scope) -> bool:
        """Whether every call of the function ``scope`` (and of those calling it) runs on every process alike: none
        is under a test, a loop or a loop exit that may differ between processes."""
        return self._function_agreed(scope)

    def _function_agreed(self, scope: Scope) -> bool:
        if scope.kind != "function":
            return True
        if id(scope) in self._contexts:
            return self._contexts[id(scope)]
        self._contexts[id(scope)] = True  # recursion guard
        sites: list[CallSite] = self.plan.call_sites(scope)
        result = all(self.agreed(site.stmt, site.scope) for site in sites)
        self._contexts[id(scope)] = result
        return result


def _comprehension_items(facts: Facts) -> dict[int, cst.BaseExpression]:
    """Each load of a name a comprehension binds (``i`` in ``[make_env(seed + i) for i in range(n)]``), by the
    node's id, with what its ``for`` walks: such a name is no variable of the function, whatever else it binds."""
    found: dict[int, cst.BaseExpression] = {}
    for unit in facts.units.values():
        for comp in m.findall(unit.module, m.ListComp() | m.SetComp() | m.GeneratorExp() | m.DictComp()):
            assert isinstance(comp, (cst.ListComp, cst.SetComp, cst.GeneratorExp, cst.DictComp))
            parts: list[cst.CSTNode] = [comp.key, comp.value] if isinstance(comp, cst.DictComp) else [comp.elt]
            fors = comprehension_fors(comp.for_in)
            for index, walk in enumerate(fors):
                names = set(target_names(walk.target))
                found.update((id(name), walk.iter) for name in m.findall(walk.target, m.Name()))  # the target itself
                later = [*parts, *(c.test for f in fors[index:] for c in f.ifs), *(f.iter for f in fors[index + 1:])]
                for node in later:  # (an inner comprehension, found after this one, binds its own names again)
                    for name in m.findall(node, m.Name()):
                        if isinstance(name, cst.Name) and name.value in names:
                            found[id(name)] = walk.iter
    return found


def _gathered_names(stmt: cst.BaseStatement) -> list[str]:
    """The names ``x, y = accelerator.gather_for_metrics((x, y))`` binds (also under ``if y is not None:``, as a
    name the loop may set to None is gathered), or none for any other statement."""
    if isinstance(stmt, cst.If) and isinstance(stmt.body, cst.IndentedBlock) and len(stmt.body.body) == 1 \
            and m.matches(stmt.test, m.Comparison(comparisons=[m.ComparisonTarget(m.IsNot(), m.Name("None"))])) \
            and not stmt.orelse:
        stmt = stmt.body.body[0]
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return []
    value = stmt.body[0].value
    if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and value.func.attr.value == "gather_for_metrics"):
        return []
    return [name for target in stmt.body[0].targets for name in target_names(target.target)]


def _subexpressions(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The expressions directly inside ``expr`` (through elements, arguments, slices, f-string parts)."""
    out: list[cst.BaseExpression] = []
    pending: list[cst.CSTNode] = children(expr)
    while pending:
        node = pending.pop()
        if isinstance(node, cst.BaseExpression):
            out.append(node)
        elif not isinstance(node, (cst.BaseStatement, cst.BaseSuite)):
            pending.extend(children(node))
    return out


def _statement_of(facts: "Facts", node: cst.CSTNode) -> cst.BaseStatement | None:
    for stmt in facts.order:
        if isinstance(stmt, cst.SimpleStatementLine) and node in stmt.body:
            return stmt
    return None


def _dropout_in(node: cst.CSTNode) -> bool:
    """Whether ``node`` names dropout anywhere: ``nn.Dropout(...)``, ``F.dropout(...)``, ``self.dropout``, a
    ``dropout=`` keyword."""
    return any("dropout" in n.value.lower() for n in m.findall(node, m.Name()))  # type: ignore[attr-defined]


def _calls_itself(call: cst.Call, model: Binding) -> bool:
    """Whether ``call`` runs the model's forward (``model(x)``, ``self.net(x)``), not one of its methods
    (``model.init_hidden(n)``, which makes zeros)."""
    key = dotted(call.func)
    return key is not None and key.rsplit(".", 1)[-1] == model.key.rsplit(".", 1)[-1]


def _unplaced(model: Binding) -> cst.BaseExpression | None:
    """What ``model`` is bound to without its placement or mode switch (``VAE(...)`` of ``VAE(...).to(device)``)."""
    value = model.unpacked[0] if model.unpacked is not None else model.value
    return same_module(value) if value is not None else None


def _iterated(scope: Scope, expr: cst.BaseExpression) -> cst.BaseExpression | None:
    """``X`` when ``expr`` is a name the scope binds only to ``iter(X)`` (P4's ``dataloader = iter(DataLoader(...))``)."""
    if not isinstance(expr, cst.Name):
        return None
    values = [b.value for b in scope.bindings.get(expr.value, [])]
    calls = [v for v in values if isinstance(v, cst.Call) and m.matches(v.func, m.Name("iter")) and len(v.args) == 1]
    return calls[0].args[0].value if values and len(calls) == len(values) else None
