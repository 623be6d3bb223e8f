"""CreateAccelerator: ``accelerator = Accelerator(...)`` as early as possible in the builder, after
the values its arguments depend on (``args = parser.parse_args()`` for ``cpu=args.no_cuda``); the
device rule then rewrites or removes ``device``. In a trainer class that builds its objects in
``__init__`` the accelerator is ``self.accelerator``.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis import is_docstring, is_import
from accelify.codemods.context import Context, code_of
from accelify.codemods.facts import Binding, Scope
from accelify.codemods.names import dotted
from accelify.codemods.roles import cpu_flag, flags_from_test, is_cuda_flag
from accelify.codemods.rule import Example, Rule

_REFS = m.Name() | m.Attribute(value=m.Name())


class CreateAccelerator(Rule):
    name = "accelerator"
    description = "Create the Accelerator in the function (or module) that builds the model and optimizer."
    examples = (
        Example(
            before='''\
import argparse
import torch

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu")
    model = torch.nn.Linear(2, 1).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x.to(device)).sum().backward()
        optimizer.step()
''',
            after='''\
import argparse
import torch
from accelify.runtime import Accelerator

def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--no-cuda", action="store_true")
    args = parser.parse_args()
    accelerator = Accelerator(cpu=args.no_cuda)
    device = accelerator.device
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x.to(device)).sum())
        optimizer.step()
    accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
print(model(torch.ones(2)))
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        plan = ctx.plan
        builder = plan.builder
        backward = next((s for s in ctx.facts.calls if s.method == "backward"), None)
        if builder is None:
            if backward is not None:
                ctx.warn(codes.NOTHING_TO_PREPARE, backward.node)
            return
        if backward is not None and not plan.trains(builder):
            ctx.abort(codes.BUILT_ELSEWHERE, backward.node, builder=builder.name)
        in_class = builder.class_scope is not None and any(b.key.startswith("self.") for b in plan.prepared)
        name = "self.accelerator" if in_class else "accelerator"
        flag = self._cpu_flag(ctx, builder)
        arguments = f"cpu={code_of(flag)}" if flag is not None else ""
        body = builder.body
        index, after = self._position(ctx, builder, flag)
        code = [f"{name} = Accelerator({arguments})"]
        if after:
            ctx.insert_after(body[index - 1], code)
        else:
            ctx.insert_before(body[index], code)
        ctx.accelerator_stmt = body[index]
        ctx.accelerators[builder] = name
        if in_class and builder.class_scope is not None:
            ctx.accelerators[builder.class_scope] = name
        ctx.change(f"create the Accelerator in {builder.name}")

    def _cpu_flag(self, ctx: Context, builder: Scope) -> cst.BaseExpression | None:
        """``cpu=...`` from the device expression, following ``use_cuda``/``args.cuda`` style flags."""
        imports = ctx.imports_map
        devices = [b for b in _bindings(builder) if b.role == "device" and b.value is not None]
        flag = None
        for device in devices:
            flag = cpu_flag(device.value, imports)  # type: ignore[arg-type]
            if flag is not None:
                break
        if flag is None:
            # a `args.cuda = not args.no_cuda and torch.cuda.is_available()` flag with no device variable
            for b in _bindings(builder):
                if b.value is not None and is_cuda_flag(b.value, imports):
                    flag = flags_from_test(b.value, imports)
                    break
            return flag
        return _expand(ctx, builder, flag)

    def _position(self, ctx: Context, builder: Scope, flag: cst.BaseExpression | None) -> tuple[int, bool]:
        """Where the accelerator goes, as early as possible: ``(index, True)`` right after ``body[index - 1]``,
        the last statement its arguments depend on (``args = parser.parse_args()``), else ``(index, False)``:
        before ``body[index]``, the first statement of the builder that is not an import or a docstring."""
        body = builder.body
        plan = ctx.plan
        tops = [ctx.facts.top_stmt(b.stmt, builder) for b in plan.prepared]
        first_use = min((body.index(t) for t in tops if t in body), default=len(body) - 1)
        start = 1 if body and is_docstring(body[0]) else 0
        if builder.kind == "module":
            for i, stmt in enumerate(body[:first_use]):
                if is_import(stmt):
                    start = i + 1
        after = False
        keys: set[str] = set()
        if flag is not None:
            for ref in m.findall(flag, _REFS):
                key = dotted(ref)  # type: ignore[arg-type]
                if key:
                    keys.update((key, key.split(".")[0]))
        for b in _bindings(builder):
            if b.key in keys:
                top = ctx.facts.top_stmt(b.stmt, builder)
                if top in body and start <= body.index(top) < first_use:
                    start, after = body.index(top) + 1, True
        return start, after


def _bindings(scope: Scope) -> list[Binding]:
    """Bindings made by statements in ``scope`` (including ``self.x`` stored on its class)."""
    owners = [scope] + ([scope.class_scope] if scope.class_scope is not None else [])
    return [b for owner in owners for bs in owner.bindings.values() for b in bs if b.where is scope]


def _expand(ctx: Context, builder: Scope, flag: cst.BaseExpression) -> cst.BaseExpression:
    """``not use_cuda`` where ``use_cuda = not args.no_cuda and torch.cuda.is_available()`` -> ``args.no_cuda``."""
    if isinstance(flag, cst.UnaryOperation) and isinstance(flag.operator, cst.Not):
        key = dotted(flag.expression)
        if key is not None:
            found = ctx.plan.binding_of(builder, key)
            if found is not None and found.value is not None and is_cuda_flag(found.value, ctx.imports_map):
                expanded = flags_from_test(found.value, ctx.imports_map)
                if expanded is not None:
                    return expanded
    return flag
