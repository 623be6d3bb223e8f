"""ReplaceDevice: the device variable becomes ``accelerator.device``, or goes away when nothing uses it.

``args.device = ...`` and ``self.device = ...`` are handled the same way. Where the accelerator is not at hand (a
device chosen in the ``__main__`` block or at a module's top level and handed to a trainer class or a ``main()`` that
makes the accelerator, a model's own ``self.device``), it becomes the runtime's process state's device
(``PartialState().device``), which is the accelerator's.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import expression
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.device_entries import device_entries
from accelify.codemods.analysis.facts import Binding
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.roles import is_module_scope
from accelify.codemods.analysis.seen_from import seen_from
from accelify.codemods.engine.rule import Example, Rule


class ReplaceDevice(Rule):
    name = "device"
    description = "Tie the device variable to accelerator.device (or drop it when unused)."
    examples = (
        Example(
            before='''\
import torch
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
torch.cuda.set_device(0)
model = torch.nn.Linear(2, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
mask = torch.ones(2).to(device)
for x in torch.ones(4, 2):
    model(x * mask).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
device = accelerator.device
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
mask = torch.ones(2).to(device)
for x in torch.ones(4, 2, device=accelerator.device):
    accelerator.backward(model(x * mask).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
device = torch.device("cpu")
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x.to(device)).sum().backward()
    optimizer.step()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
device = torch.device("cpu")
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x.to(device)).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
            warnings=('ACC002:6',),
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
print(f"training on {device}")


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    model = torch.nn.Linear(16, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator, PartialState

device = PartialState().device
PartialState().print(f"training on {device}")


def main():
    accelerator = Accelerator()
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    accelerator.end_training()


if __name__ == "__main__":
    main()
''',
        ),
        Example(
            # the device of the module's top level, assigned in two places where the accelerator is not at hand: one
            # assignment cannot be the process state's for both, so it is reported
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset

device = "cpu"
if torch.cuda.is_available():
    device = "cuda"
print(f"training on {device}")


def main():
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    model = torch.nn.Linear(16, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator, PartialState

device = "cpu"
if torch.cuda.is_available():
    device = "cuda"
PartialState().print(f"training on {device}")


def main():
    accelerator = Accelerator()
    loader = DataLoader(TensorDataset(torch.randn(64, 16), torch.randn(64, 1)), batch_size=8)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    accelerator.end_training()


if __name__ == "__main__":
    main()
''',
            warnings=("ACC011:4", "ACC011:6"),
        ),
        Example(  # a string device compared with a type keeps its meaning: accelerator.device is a torch.device
            before='''\
import torch
device = "cuda" if torch.cuda.is_available() else "cpu"
model = torch.nn.Linear(2, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x.to(device)).sum().backward()
    optimizer.step()
if device == "cuda":
    print(torch.cuda.max_memory_allocated())
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator()
device = accelerator.device
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x.to(device)).sum())
    optimizer.step()
if device.type == "cuda":
    accelerator.print(torch.cuda.max_memory_allocated())
accelerator.end_training()
''',
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for site in ctx.facts.calls:
            if site.qualname == "torch.cuda.set_device" and _alone(site.stmt, site.node) and ctx.remove(site.stmt):
                ctx.change("remove torch.cuda.set_device")
        groups: dict[tuple[int, str], list[Binding]] = {}
        for binding in ctx.plan.bindings_with_role("device"):
            if binding.loop is None:  # every assignment of one variable (if/elif/else branches) goes together
                groups.setdefault((id(binding.scope), binding.key), []).append(binding)
        for group in groups.values():
            refs = [ref for binding in group for ref in self._refs(ctx, binding)]
            if all(ctx.dropped(ref) for ref in refs):
                for binding in group:
                    if _single_assign(binding.stmt) and ctx.remove(binding.stmt):
                        ctx.change("remove the unused device variable")
                continue
            if all(ctx.dropped(ref) or self._handed_to_unused(ctx, ref) for ref in refs):
                continue  # only handed to parameters whose every use went (F10's trainer): nothing places by it
            for binding in group:
                self._tie(ctx, binding)
        self._tie_entries(ctx)

    def _tie_entries(self, ctx: Context) -> None:
        """A device kept in a dict (``params.update({"device": torch.device("cuda:0" if CUDA else "cpu")})``, O2):
        the value becomes the accelerator's device where it exists, else the runtime's process state's
        (``analysis/device_entries.py``); left (and its uses reported) where neither can be written."""
        for entry in ctx.plan.analysis(device_entries):
            if ctx.plan.never_run(entry.scope):
                continue
            accelerator = ctx.accelerator_in(entry.scope)
            if accelerator is not None and ctx.after_accelerator(entry.scope, entry.stmt):
                code, state = f"{accelerator}.device", False
            else:
                made = ctx.process_state(shared=False)
                if made is None:
                    continue
                code, state = f"{made}.device", True
            if ctx.replace(entry.value, entry.stmt, lambda _, e=code: expression(e)):  # type: ignore[misc]
                if state:
                    ctx.import_state(entry.scope.unit)
                ctx.change("a device kept in a dict: the process's own")

    def _handed_to_unused(self, ctx: Context, ref: cst.BaseExpression, depth: int = 0) -> bool:
        """Whether ``ref`` is only an argument of a call of the program's own function whose parameter is never used
        once the edits apply (``Trainer(device=device)`` where every ``.to(device)`` of the trainer went), or only
        handed on the same way."""
        for scope in ctx.facts.scopes:
            holder = scope.holders.get(id(ref))
            if holder is not None:
                break
        else:
            return False
        for site in ctx.facts.calls:
            if site.stmt is not holder:
                continue
            arg = next((a for a in site.node.args if a.value is ref), None)
            callee = ctx.plan.callee(site) if arg is not None else None
            if arg is None or callee is None or depth > 3:
                continue
            param = next((p for p in callee.param_names if ctx.plan.arg_for(site, callee, p) is arg), None)
            if param is None or param in callee.bindings:
                return False
            return all(ctx.dropped(r) or self._handed_to_unused(ctx, r, depth + 1) for r in callee.refs.get(param, []))
        return False

    def _tie(self, ctx: Context, binding: Binding) -> None:
        """``device = ...`` -> ``device = accelerator.device`` (or a warning when that cannot be done)."""
        stmt = binding.stmt
        accelerator = ctx.accelerator_in(binding.where)
        if accelerator is not None and _single_assign(stmt) and not ctx.after_accelerator(binding.where, stmt) \
                and self._bound_again(ctx, binding, accelerator):
            return
        if accelerator is None and (self._model_state(ctx, binding) or self._process_device(ctx, binding)):
            return
        if accelerator is None or not ctx.after_accelerator(binding.where, stmt) or not _single_assign(stmt):
            ctx.warn(codes.DEVICE_NOT_REPLACED, stmt, name=binding.key)
            return
        assert binding.value is not None
        if ctx.replace(binding.value, stmt, lambda _, a=accelerator: expression(f"{a}.device")):  # type: ignore[misc]
            ctx.change("use accelerator.device")
            self._type_tests(ctx, binding)

    def _process_device(self, ctx: Context, binding: Binding) -> bool:
        """A device variable where the accelerator is not at hand (F10's ``device = CudaUtils.get_device()`` in the
        ``__main__`` block, handed to a trainer class that makes the accelerator and to the methods that place its
        batches): ``device = PartialState().device``, the runtime's process state, whose device is the
        accelerator's. True when done; not in code nothing runs, for a name assigned more than once, or where the
        state cannot be made as the accelerator is (its ``cpu`` an expression)."""
        stmt = binding.stmt
        if ctx.notebook:
            return False  # the notebook's own process must not make the state before ``notebook_launcher`` starts the others
        if not _single_assign(stmt) or binding.value is None or ctx.plan.never_run(binding.where) \
                or len(binding.where.bindings.get(binding.key, [])) != 1:
            return False
        state = ctx.process_state(shared=False)
        if state is None or not ctx.replace(binding.value, stmt, lambda _, e=f"{state}.device": expression(e)):  # type: ignore[misc]
            return False
        ctx.import_state(binding.where.unit)
        ctx.change("a device where the accelerator is not at hand: the process's own")
        self._type_tests(ctx, binding)
        return True

    def _model_state(self, ctx: Context, binding: Binding) -> bool:
        """A model's own device choice in its ``__init__``, which the accelerator does not reach (N4's
        ``self.device = torch.device("cuda:0" if self.use_coda else "cpu")``, its forward moving the batch with
        ``.to(self.device)``): ``self.device = PartialState().device``, the runtime's process state, whose device is
        the accelerator's (``PartialState(cpu=True)`` where a model may be made before the accelerator exists, as
        the accelerator is made). True when done; not where that ``cpu`` is an expression the model cannot read."""
        method = binding.where
        cls = method.class_scope
        if binding.key != "self.device" or method.name != "__init__" or cls is None \
                or not is_module_scope(cls, ctx.facts.classes) or not _single_assign(binding.stmt) or binding.value is None \
                or ctx.plan.in_other_trainer(method):
            return False
        made = ctx.plan.call_sites(method)
        state = ctx.process_state(shared=bool(made) and all(
            ctx.accelerator_in(c.scope) is not None and ctx.after_accelerator(c.scope, c.stmt) for c in made))
        if state is None or not ctx.replace(binding.value, binding.stmt, lambda _, e=f"{state}.device": expression(e)):  # type: ignore[misc]
            return False
        ctx.import_state(method.unit)
        ctx.change("the model's own device: PartialState().device")
        return True

    def _bound_again(self, ctx: Context, binding: Binding, accelerator: str) -> bool:
        """A module's ``device = "cuda:0" if ... else "cpu"`` at its top, and the accelerator made later at the
        same level (in its ``if __name__ == "__main__":`` block), where every use of the device at that level comes
        after it: ``device = accelerator.device`` right after the accelerator (the functions that read the global
        run once it exists). True when done."""
        anchor = ctx.plan.analysis(Creation).anchor
        if binding.where.kind != "module" or "." in binding.key or anchor is None or ctx.plan.home is not binding.where:
            return False
        top = binding.where
        holders = [top.holders.get(id(ref)) for ref in self._refs(ctx, binding)
                   if not ctx.dropped(ref) and any(ref in refs for refs in top.refs.values())]
        if not all(s is not None and ctx.after_accelerator(top, s) for s in holders):
            return False
        at, after = anchor
        code = [f"{binding.key} = {accelerator}.device"]
        ctx.insert_after(at, code) if after else ctx.insert_before(at, code)
        ctx.change("use accelerator.device")
        self._type_tests(ctx, binding)
        return True

    def _type_tests(self, ctx: Context, binding: Binding) -> None:
        """``device == "cuda"`` and ``str(device) == "cuda"`` compare a string; ``accelerator.device`` is a
        ``torch.device`` (``cuda:0``), which equals no string: they become ``device.type == "cuda"``."""
        refs = {id(ref) for ref in self._refs(ctx, binding)}
        if not refs:
            return
        holder: dict[int, cst.BaseStatement] = {}
        for stmt in ctx.facts.order:  # pre-order: the innermost statement holding a comparison comes last
            for comparison in m.findall(stmt, m.Comparison()):
                holder[id(comparison)] = stmt
        for stmt in set(holder.values()):
            for comparison in m.findall(stmt, m.Comparison()):
                if holder.get(id(comparison)) is not stmt:
                    continue
                assert isinstance(comparison, cst.Comparison)
                sides = [comparison.left, *(t.comparator for t in comparison.comparisons)]
                if len(sides) != 2 or not all(isinstance(t.operator, (cst.Equal, cst.NotEqual, cst.Is, cst.IsNot))
                                              for t in comparison.comparisons):
                    continue
                device, other = (sides if _device_ref(sides[0], refs) else reversed(sides))
                if not _device_ref(device, refs) or _device_type(other) is None:
                    continue
                name = device.args[0].value if isinstance(device, cst.Call) else device
                if ctx.replace(device, stmt, lambda _, n=name: cst.Attribute(n, cst.Name("type"))):  # type: ignore[misc]
                    ctx.change("compare the device's type")

    def _refs(self, ctx: Context, binding: Binding) -> list[cst.BaseExpression]:
        """Every load, in any scope, that may see ``binding`` (through helper parameters too)."""
        found: list[cst.BaseExpression] = []
        attr = binding.key.rpartition(".")[2]
        for scope in ctx.facts.scopes:
            for key, refs in scope.refs.items():
                if key != binding.key and key.rpartition(".")[2] != attr:
                    continue
                for ref in refs:
                    origin = ctx.plan.origin(scope, ref)
                    # a load of the same name whose origin is unknown might be this device: count it as a use
                    if origin is binding or (origin is None and key == binding.key and scope.resolve(key.split(".")[0])):
                        found.append(ref)
            if "." in binding.key and scope.class_scope is not None:
                # a trainer's ``self.args.device`` where ``self.args`` is the ``args`` its construction in the
                # binding's scope passes (``SimCLR(args=args)``): the same object's device (set I's I10)
                for attribute, _ in scope.attributes:
                    if attribute.attr.value != attr or not (dotted(attribute.value) or "").startswith("self."):
                        continue
                    if dotted(seen_from(ctx.plan, binding.where, scope, attribute)) == binding.key:
                        found.append(attribute)
        return found


def _device_ref(node: cst.BaseExpression, refs: set[int]) -> bool:
    """``device`` (a load of the tied variable) or ``str(device)``."""
    if id(node) in refs:
        return True
    return (isinstance(node, cst.Call) and isinstance(node.func, cst.Name) and node.func.value == "str"
            and len(node.args) == 1 and id(node.args[0].value) in refs)


def _device_type(node: cst.BaseExpression) -> str | None:
    """``"cuda"``, ``'cpu'``: a string that names a device type (not ``"cuda:1"``)."""
    if isinstance(node, cst.SimpleString):
        value = node.evaluated_value
        if isinstance(value, str) and value in ("cuda", "cpu", "mps", "xpu", "npu", "hpu", "xla", "meta"):
            return value
    return None


def _single_assign(stmt: cst.BaseStatement) -> bool:
    """``name = value`` (or ``obj.attr = value``) alone on its line."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return False
    small = stmt.body[0]
    if isinstance(small, cst.AnnAssign):
        return True
    return (
        isinstance(small, cst.Assign)
        and len(small.targets) == 1
        and isinstance(small.targets[0].target, (cst.Name, cst.Attribute))
    )


def _alone(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    return (
        isinstance(stmt, cst.SimpleStatementLine)
        and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr)
        and stmt.body[0].value is call
    )
