"""ThreadAccelerator: helper functions that need the accelerator get it as a parameter, and every
call site passes it. A ``device`` parameter that is no longer used is replaced in place.

Only when the builder is a function: module-level scripts have a global ``accelerator``, and trainer
classes use ``self.accelerator``.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.statement_shapes import is_docstring
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.analysis.roles import CLIPPING, module_method
from accelify.codemods.engine.rule import Example, Rule


class ThreadAccelerator(Rule):
    name = "threading"
    description = "Pass the accelerator to helper functions that need it."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

def train(model, device, loader, optimizer):
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        loss = torch.nn.functional.mse_loss(model(data), target)
        loss.backward()
        optimizer.step()

def main():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    model = torch.nn.Linear(2, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    train(model, device, loader, optimizer)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

def train(model, accelerator, loader, optimizer):
    for data, target in loader:
        loss = torch.nn.functional.mse_loss(model(data), target)
        accelerator.backward(loss)
        optimizer.step()

def main():
    accelerator = Accelerator()
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    train(model, accelerator, loader, optimizer)
    accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")

def train(model, loader, optimizer):
    for data, target in loader:
        data, target = data.to(device), target.to(device)
        torch.nn.functional.mse_loss(model(data), target).backward()
        optimizer.step()

loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train(model, loader, optimizer)
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()

def train(model, loader, optimizer):
    for data, target in loader:
        accelerator.backward(torch.nn.functional.mse_loss(model(data), target))
        optimizer.step()

loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
train(model, loader, optimizer)
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # a generator that only passes the prepared loader's batches on does not need the accelerator
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def forever(loader):
    while True:
        for batch in loader:
            yield batch


def main():
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    batches = forever(loader)
    for step in range(4):
        x, y = next(batches)
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def forever(loader):
    while True:
        for batch in loader:
            yield batch


def main():
    accelerator = Accelerator(cpu=True)
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    batches = forever(loader)
    for step in range(4):
        x, y = next(batches)
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
    accelerator.end_training()
''',
            fires=False,
        ),
        Example(  # a helper handed on as a value (called through another function's parameter): reported
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset


def train(model, loader, optimizer):
    for x, y in loader:
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()


def repeat(times, step, *args):
    for _ in range(times):
        step(*args)


def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
    train(model, loader, optimizer)
    repeat(2, train, model, loader, optimizer)


main()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def train(model, loader, optimizer, accelerator):
    for x, y in loader:
        optimizer.zero_grad()
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()


def repeat(times, step, *args):
    for _ in range(times):
        step(*args)


def main():
    accelerator = Accelerator()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    train(model, loader, optimizer, accelerator)
    repeat(2, train, model, loader, optimizer)
    accelerator.end_training()


main()
''',
            warnings=("ACC061:22",),
        ),
    )

    def run(self, ctx: Context) -> None:
        home = ctx.plan.home
        if home is None or ctx.accelerator_in(home) is None:
            return
        functions = [
            s for s in ctx.facts.scopes
            if s.kind == "function" and s is not home and (home.kind == "module" or not s.inside(home))
            # another trainer's functions are threaded by its own conversion, which makes a shared helper the same
            and not ctx.plan.in_other_trainer(s)
            # a helper without the accelerator; or one that sees the module's but takes `device` as a parameter
            and (ctx.accelerator_in(s) is None or (s.class_scope is None and self._device_params(ctx, s)))
        ]
        self.global_seen = {s for s in functions if ctx.accelerator_in(s) is not None}
        classes: list[tuple[Scope, Scope]] = []
        wanted = self._choose(ctx, home, functions, classes)
        for function in wanted:
            ctx.bind_accelerator(function, "accelerator")  # the parameter ``_thread`` adds
        for cls, init in classes:  # methods reach it as self.accelerator, set in __init__
            ctx.bind_accelerator(cls, "self.accelerator")
        for cls, init in classes:
            self._thread(ctx, init)
            body = init.body
            index = 1 if body and is_docstring(body[0]) else 0
            while index < len(body) - 1 and _calls_super_init(body[index]):
                index += 1  # an attribute set before super().__init__() fails on nn.Module subclasses
            if index < len(body) and _calls_super_init(body[index]):
                ctx.insert_after(body[index], ["self.accelerator = accelerator"])
            else:
                ctx.insert_before(body[index], ["self.accelerator = accelerator"])
        plan = ctx.plan
        done: set[Scope] = set()
        while len(done) < len(wanted):  # callees first: their call sites consume the caller's `device`
            pending = [f for f in functions if f in wanted and f not in done]
            ready = [
                f for f in pending if all(plan.callee(s) in done or plan.callee(s) not in wanted or plan.callee(s) is f for s in f.calls)
            ] or pending[:1]
            for function in ready:
                self._thread(ctx, function)
                done.add(function)

    def _choose(
        self, ctx: Context, home: Scope, functions: list[Scope], classes: list[tuple[Scope, Scope]]
    ) -> set[Scope]:
        """The helpers that need the accelerator (or call one that does) and can get it from every caller;
        ``classes`` receives the classes whose methods need it and whose ``__init__`` can take it."""
        plan = ctx.plan
        readers = set(ctx.readers())  # rank tests, collectives, autocasts rewritten through the accelerator
        wanted = {f for f in functions if self._needs(ctx, f, readers) and not _model_save_method(ctx, f)}
        grown = True
        while grown:  # callers of helpers that need it need it too, to pass it on
            callers = {f for f in functions if f not in wanted and any(plan.callee(s) in wanted for s in f.calls)}
            wanted |= callers
            grown = bool(callers)
        for cls in {f.class_scope for f in wanted if f.class_scope is not None}:
            assert cls is not None
            init = ctx.facts.function("__init__", cls)
            sites = plan.call_sites(init) if init is not None else []
            if init is not None and sites and not _pickles_itself(ctx, cls) and all(
                ctx.accelerator_in(s.scope) is not None and not any(a.star for a in s.node.args) for s in sites
            ):
                wanted -= {f for f in wanted if f.class_scope is cls}
                classes.append((cls, init))
        # a closure its factory hands back (``main_loop`` in ``get_main_loop(...)``, called through the name it is
        # returned to) has no call site to pass it: the factory takes it, and the closure sees the factory's
        for closure in [f for f in wanted if not plan.call_sites(f) and f.parent is not None and f.parent.kind == "function"
                        and f.parent in functions and f.class_scope is None]:
            wanted.discard(closure)
            wanted.add(closure.parent)  # type: ignore[arg-type]
        shrunk = True
        while shrunk:  # a helper can only get it if every call site has it to pass (and passes plain arguments)
            bad = {
                f
                for f in wanted
                if not plan.call_sites(f)
                or any(
                    (ctx.accelerator_in(s.scope) is None and _home(s.scope, wanted) is None and s in plan.run_sites(f))
                    or any(a.star for a in s.node.args)
                    for s in plan.call_sites(f)
                )
            }  # (a caller nothing runs, N15's kept experiment, is left as it is: it passes nothing)
            wanted -= bad  # (the leftovers rule reports what they needed it for: ACC009)
            shrunk = bool(bad)
        return wanted

    def _needs(self, ctx: Context, function: Scope, readers: set[Scope]) -> bool:
        plan = ctx.plan
        if function in readers:  # a rule already rewrote something here through the accelerator
            return True
        for site in function.calls:
            if site.method == "backward" or site.qualname in CLIPPING:
                return True
            if site.qualname == "torch.save" and not plan.distributed.keeps_save(ctx.facts, site):
                return True
        if any(plan.loader_of(loop) is not None and self._uses_accelerator_in(ctx, loop) for loop in function.loops):
            return True
        return self._device_param(ctx, function) is not None

    @staticmethod
    def _uses_accelerator_in(ctx: Context, loop: Loop) -> bool:
        """A loop over a prepared loader will read the accelerator when it runs a prepared model (evaluation
        gathers there) or shows a progress bar (only the local main process draws it); a loop that only
        passes batches on (``for batch in loader: yield batch``) will not."""
        if isinstance(loop.node.iter, cst.Call) and (loop.scope.imports.qualname(loop.node.iter.func) or "").startswith("tqdm"):
            return True
        return any(ctx.plan.prepared_model(loop.scope, site.node.func, site.stmt) is not None for site in loop.calls)

    def _device_params(self, ctx: Context, function: Scope) -> list[str]:
        """Parameters every call site passes the device variable to."""
        return [
            name for name in function.param_names
            if name not in function.bindings and (origin := ctx.plan.param_origin(function, name)) is not None
            and origin.role == "device"
        ]

    def _device_param(self, ctx: Context, function: Scope) -> str | None:
        """The name of a device parameter whose every use inside the helper has been removed."""
        for name in function.param_names:
            origin = ctx.plan.param_origin(function, name)
            if origin is None or origin.role != "device" or name in function.bindings:
                continue
            if all(ctx.dropped(ref) for ref in function.refs.get(name, [])):
                return name
        return None

    def _thread(self, ctx: Context, function: Scope) -> None:
        node = function.node
        assert isinstance(node, cst.FunctionDef)
        replaced = self._device_param(ctx, function)
        if replaced is None and function in self.global_seen:
            return  # it has the module's accelerator, and still uses its `device` for something else
        sites = ctx.plan.call_sites(function)
        if replaced is not None:
            ctx.replace(node.params, node, lambda p: _rename_param(p, replaced))  # type: ignore[arg-type,return-value]
            for site in sites:
                arg = ctx.plan.arg_for(site, function, replaced)
                if arg is None or (ctx.accelerator_in(site.scope) is None and site not in ctx.plan.run_sites(function)):
                    continue
                value = _passed(ctx, site.scope)
                ctx.replace(arg, site.stmt, lambda a, v=value: _pass_accelerator(a, v))  # type: ignore[misc]
        else:
            params = node.params
            keyword = bool(params.star_arg != cst.MaybeSentinel.DEFAULT or params.kwonly_params or params.star_kwarg) or any(
                p.default is not None for p in params.params
            )
            ctx.replace(params, node, lambda p: _add_param(p, keyword))  # type: ignore[arg-type,return-value]
            for use in _handed_on(ctx, function):
                ctx.warn(codes.HANDED_ON_FUNCTION, use[1], name=function.name, use=use[0])
            for site in sites:
                if ctx.accelerator_in(site.scope) is None and site not in ctx.plan.run_sites(function):
                    continue
                use_keyword = keyword or any(a.keyword is not None for a in site.node.args)
                value = _passed(ctx, site.scope)
                ctx.replace(site.node, site.stmt, lambda c, k=use_keyword, v=value: _add_arg(c, k, v))  # type: ignore[misc]
        ctx.change(f"pass the accelerator to {function.name}()")


def _handed_on(ctx: Context, function: Scope) -> list[tuple[str, cst.BaseStatement]]:
    """Where ``function`` (a module-level one) is read as a value, not called: ``multiple_runs(model, loader, 2,
    training_loop)`` (set P's P5), with the statement that reads it; its calls through that value pass what they
    passed before."""
    if function.parent is None or function.parent.kind != "module":
        return []
    called = {id(site.node.func) for site in ctx.facts.calls}
    found: list[tuple[str, cst.BaseStatement]] = []
    for scope in ctx.facts.scopes:
        for ref in scope.refs.get(function.name, []):
            holder = scope.holders.get(id(ref))
            if id(ref) in called or holder is None or not isinstance(holder, cst.SimpleStatementLine):
                continue
            if not _names_function(ctx, scope, ref, function):
                continue
            found.append((code_of(holder.body[0]).strip(), holder))
    return found


def _names_function(ctx: Context, scope: Scope, ref: cst.BaseExpression, function: Scope) -> bool:
    """Whether ``ref`` (a name read in ``scope``) is ``function``: defined in the module it is read in, or imported
    from the module that defines it."""
    assert isinstance(ref, cst.Name)
    owner = scope.resolve(ref.value)
    if owner is not None and ctx.facts.function(ref.value, owner) is function:
        return True
    if owner is None or owner.kind != "module":
        return False
    found = ctx.plan.defined(scope.imports.qualname(ref))
    return found is not None and ctx.facts.function(found[1], found[0]) is function


def _model_save_method(ctx: Context, function: Scope) -> bool:
    """``Net.save_model(self, path)``: a model's own method that saves it. The accelerator is not threaded into
    the model (a new ``__init__`` parameter breaks every other construction of it: a ``load_model`` classmethod's
    ``cls(**hparams)``, a generation script); the save rule keeps each call of the method to the main process."""
    return (module_method(function, ctx.facts.classes) and any(site.qualname == "torch.save" for site in function.calls)
            and not any(site.method == "backward" or site.qualname in CLIPPING for site in function.calls))


def _calls_super_init(stmt: cst.BaseStatement) -> bool:
    """``super().__init__(...)`` (or ``Base.__init__(self, ...)``) as a statement."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    call = stmt.body[0].value
    return isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute) and call.func.attr.value == "__init__"


def _home(scope: Scope, reachable: set[Scope]) -> Scope | None:
    """The scope in ``reachable`` that ``scope`` is (or is nested in), for closures."""
    current: Scope | None = scope
    while current is not None:
        if current in reachable:
            return current
        current = current.parent if current.kind == "function" else None
    return None


def _rename_param(params: cst.Parameters, name: str) -> cst.Parameters:
    def swap(group: tuple[cst.Param, ...] | list[cst.Param]) -> list[cst.Param]:
        return [p.with_changes(name=cst.Name("accelerator"), annotation=None) if p.name.value == name else p for p in group]

    return params.with_changes(
        params=swap(params.params), posonly_params=swap(params.posonly_params), kwonly_params=swap(params.kwonly_params)
    )


def _passed(ctx: Context, scope: Scope) -> str:
    """What a call site in ``scope`` passes: its accelerator (``self.accelerator`` in a trainer's method)."""
    return ctx.accelerator_in(scope) or "accelerator"


def _pass_accelerator(arg: cst.CSTNode, value: str) -> cst.CSTNode:
    assert isinstance(arg, cst.Arg)
    keyword = cst.Name("accelerator") if arg.keyword is not None else None
    return arg.with_changes(value=expression(value), keyword=keyword)


def _add_param(params: cst.Parameters, keyword: bool) -> cst.Parameters:
    new = cst.Param(cst.Name("accelerator"))
    if not keyword:
        return params.with_changes(params=[*params.params, new])
    star = params.star_arg if params.star_arg != cst.MaybeSentinel.DEFAULT else cst.ParamStar()
    return params.with_changes(star_arg=star, kwonly_params=[*params.kwonly_params, new])


def _add_arg(call: cst.CSTNode, keyword: bool, value: str) -> cst.CSTNode:
    assert isinstance(call, cst.Call)
    arg = cst.Arg(expression(value), keyword=cst.Name("accelerator") if keyword else None)
    if keyword:
        arg = arg.with_changes(equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))
    return call.with_changes(args=[*call.args, arg])


_PICKLERS = ("torch.save", "pickle.dump", "joblib.dump", "dill.dump")


def _pickles_itself(ctx: Context, cls: Scope) -> bool:
    """Whether a method of ``cls`` pickles the object itself (N4's vocabulary: ``torch.save(self, path)``): an
    accelerator kept on ``self`` would go into the pickle (it cannot), so its methods take it as a parameter instead."""
    return any(site.qualname in _PICKLERS and site.node.args and m.matches(site.node.args[0].value, m.Name("self"))
               for site in ctx.facts.calls if site.scope.class_scope is cls)
