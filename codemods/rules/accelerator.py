"""CreateAccelerator: ``accelerator = Accelerator(...)`` as early as possible in the builder, after
the values its arguments depend on (``args = parser.parse_args()`` for ``cpu=args.no_cuda``); the
device rule then rewrites or removes ``device``. In a trainer class that builds its objects in
``__init__`` the accelerator is ``self.accelerator``.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.gradient_accumulation import find_accumulation, find_micro_steps
from accelify.codemods.analysis.mixed_precision import find_amp
from accelify.codemods.analysis.collect import is_docstring, is_import
from accelify.codemods.engine.context import Abort, Context
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.names import ImportMap, dotted
from accelify.codemods.analysis.roles import (
    AVAILABILITY,
    cpu_flag,
    flags_from_test,
    is_cpu_device,
    is_cuda_flag,
    join_terms,
    split_terms,
)
from accelify.codemods.engine.rule import Example, Rule
from accelify.codemods.rules.data_parallel import data_parallel_sites

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
        refusals = [p for p in plan.problems if p.refuse]
        if refusals:
            raise Abort(*(ctx.warning(p.code, p.node, **dict(p.fields)) for p in refusals))
        for problem in plan.problems:
            ctx.warn(problem.code, problem.node, **dict(problem.fields))
        home = plan.home
        backward = next((s for s in ctx.facts.calls if s.method == "backward"), None)
        if home is None:
            if backward is not None:
                ctx.warn(codes.NOTHING_TO_PREPARE, backward.node)
            return
        in_class = home.class_scope is not None and any(a.key.startswith("self.") for a in plan.aliases)
        name = "self.accelerator" if in_class else "accelerator"
        flag = self._cpu_flag(ctx, home)
        arguments = [f"cpu={code_of(flag)}"] if flag is not None else []
        if flag is None and not _names_a_device(ctx):
            # the script never chooses a device: it runs on the CPU (tensors it makes stay there), with the
            # CPU's random stream; so does the conversion (cpu=True: a GPU would need the script to place them)
            arguments = ["cpu=True"]
        if plan.distributed.global_batch(ctx.facts, bool(data_parallel_sites(ctx))):
            arguments.append("split_batches=True")  # DataParallel split each batch over the GPUs: so do the processes
        options = plan.distributed.ddp_options()  # DistributedDataParallel(model, find_unused_parameters=True)
        ctx.amp = find_amp(ctx.facts, plan)
        depends: list[cst.BaseExpression] = [flag] if flag is not None else []
        depends += [a.value for a in options]
        if ctx.amp is not None and ctx.amp.argument() is not None:
            arguments.append(ctx.amp.argument())  # type: ignore[arg-type]
            depends += [e for e in (ctx.amp.precision, ctx.amp.enabled) if e is not None]
        ctx.accumulations = find_accumulation(ctx.facts, plan, home, ctx.unconverted_accumulation)
        ctx.micro_steps = find_micro_steps(ctx.facts, plan, home, plan.distributed.sync_toggles)
        counts = [a.steps for a in [*ctx.accumulations, *ctx.micro_steps]]
        steps = {code_of(k) for k in counts}
        if len(steps) == 1:
            arguments.append(f"gradient_accumulation_steps={steps.pop()}")
            depends.append(counts[0])
        elif steps:  # loops accumulating over different counts: one accelerator cannot do both
            ctx.accumulations, ctx.micro_steps = [], []
        if options:  # the accelerator wraps the model in DDP with the script's options
            handler = ", ".join(f"{a.keyword.value}={code_of(a.value)}" for a in options)  # type: ignore[union-attr]
            arguments.append(f"kwargs_handlers=[DistributedDataParallelKwargs({handler})]")
            ctx.runtime_imports.append("DistributedDataParallelKwargs")
        block = plan.home_block
        if any(ctx.facts.top_stmt(u, home) is not None and ctx.facts.top_in(u, block) is None for u in plan.distributed.uses):
            block = home.body  # a rank read outside the block that calls training reads the accelerator too
        index, after = self._position(ctx, home, block, depends)
        self._check_depends(ctx, home, block, index, depends)
        code = [_constructor(name, arguments, len(ctx.facts.chain(block[0])) - 1, ctx.facts.unit_of(home).module.default_indent)]
        if after:
            ctx.insert_after(block[index - 1], code)
            ctx.accelerator_at = (block[index - 1], True)
        else:
            ctx.insert_before(block[index], code)
            ctx.accelerator_at = (block[index], False)
        ctx.accelerators[home] = name
        if in_class and home.class_scope is not None:
            ctx.accelerators[home.class_scope] = name
        ctx.change(f"create the Accelerator in {home.name}")

    def _cpu_flag(self, ctx: Context, home: Scope) -> cst.BaseExpression | None:
        """``cpu=...`` from the device expression, following ``use_cuda``/``args.cuda`` style flags."""
        imports = home.imports
        devices = [b for b in _bindings(home) if b.role == "device" and b.value is not None]
        flag = _branch_flag(ctx, devices, imports)
        if flag is not None:
            return flag
        for device in devices:
            flag = cpu_flag(device.value, imports)  # type: ignore[arg-type]
            if flag is not None:
                break
        if flag is None:
            # a `args.cuda = not args.no_cuda and torch.cuda.is_available()` flag with no device variable
            for b in _bindings(home):
                if b.value is not None and is_cuda_flag(b.value, imports):
                    flag = flags_from_test(b.value, imports)
                    break
            # nanoGPT: `device = args.device` ("cpu", "cuda", "cuda:1"), the device hand-written DDP sets up
            for b in _bindings(home):
                if flag is None and b.key in ctx.plan.distributed.device_indexes and isinstance(b.value, cst.Attribute):
                    flag = cst.Comparison(cst.parse_expression(b.key), [cst.ComparisonTarget(cst.Equal(), cst.SimpleString('"cpu"'))])
            return flag
        return _expand(ctx, home, flag)

    def _check_depends(
        self, ctx: Context, home: Scope, block: list[cst.BaseStatement], index: int, depends: list[cst.BaseExpression]
    ) -> None:
        """A launcher read must see the accelerator, and the accelerator its arguments' values: when a value the
        arguments read is bound only after the first such read (``ddp = int(os.environ.get("RANK", -1)) != -1``
        above ``steps = 4``), there is no right place: refused, pointing at the read."""
        if not ctx.plan.distributed:
            return
        before = {b.key for b in _bindings(home) if (top := ctx.facts.top_in(b.stmt, block)) is not None and block.index(top) < index}
        bound = {b.key for b in _bindings(home)}
        attributes = {id(a.attr) for d in depends for a in m.findall(d, m.Attribute()) if isinstance(a, cst.Attribute)}
        names = {dotted(r) for d in depends for r in m.findall(d, _REFS) if id(r) not in attributes}  # type: ignore[arg-type]
        late = sorted(n for n in names if n and n in bound and n not in before and n.split(".")[0] not in before)
        if late and index < len(block):
            ctx.abort(codes.MANUAL_DISTRIBUTED, block[index], name=code_of(block[index]).strip().splitlines()[0],
                      fix=f"bind `{late[0]}` before it reads the launcher's values (the accelerator needs it and must come first)")

    def _position(
        self, ctx: Context, home: Scope, block: list[cst.BaseStatement], depends: list[cst.BaseExpression]
    ) -> tuple[int, bool]:
        """Where the accelerator goes in ``block``, as early as possible: ``(index, True)`` right after
        ``block[index - 1]``, the last statement its arguments depend on (``args = parser.parse_args()``),
        else ``(index, False)``: before ``block[index]``, the first statement that is not an import or a
        docstring."""
        plan = ctx.plan
        uses = [a.stmt for a in plan.aliases if a.stmt is not None and plan.prepare_scope is home]
        if plan.home_call is not None:
            uses.append(plan.home_call.stmt)
        uses += plan.distributed.uses  # ``ddp = int(os.environ.get("RANK", -1)) != -1`` reads the accelerator once converted
        tops = [ctx.facts.top_in(stmt, block) for stmt in uses]
        first_use = min((block.index(t) for t in tops if t is not None), default=len(block) - 1)
        start = 1 if block and is_docstring(block[0]) else 0
        while start < first_use and _declares(block[start]):
            start += 1  # ``global best_acc1`` stays the first statement of the function
        if home.kind == "module":
            for i, stmt in enumerate(block[:first_use]):
                if is_import(stmt):
                    start = i + 1
        after = False
        keys: set[str] = set()
        for flag in depends:
            names_of_attributes = {id(a.attr) for a in m.findall(flag, m.Attribute()) if isinstance(a, cst.Attribute)}
            for ref in m.findall(flag, _REFS):
                if id(ref) in names_of_attributes:
                    continue  # the `device` of `args.device` is no variable
                key = dotted(ref)  # type: ignore[arg-type]
                if key:
                    keys.update((key, key.split(".")[0]))
        for b in _bindings(home):
            if b.key in keys:
                top = ctx.facts.top_in(b.stmt, block)
                if top is not None and start <= block.index(top) < first_use:
                    start, after = block.index(top) + 1, True
        return start, after


def _declares(stmt: cst.BaseStatement) -> bool:
    """``global x`` / ``nonlocal x``."""
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Global, cst.Nonlocal)) for s in stmt.body)


def _constructor(name: str, arguments: list[str], depth: int, indent: str) -> str:
    """``accelerator = Accelerator(...)``, one argument per line (black's way) when it would pass 88 columns."""
    line = f"{name} = Accelerator({', '.join(arguments)})"
    if len(indent) * depth + len(line) <= 88 or len(arguments) < 2:
        return line
    return f"{name} = Accelerator(\n" + "".join(f"{indent}{a},\n" for a in arguments) + ")"


def feeds_training(ctx: Context) -> bool:
    """Whether a training loop walks a prepared loader (whose batches the runtime places on the device)."""
    plan = ctx.plan
    return any(
        plan.loader_of(loop) is not None for loop in ctx.facts.loops if any(plan.reaches_backward(s) for s in loop.calls)
    )


def _names_a_device(ctx: Context) -> bool:
    """Whether the program places anything on a device: a device variable, ``.cuda()``, ``.to(<device>)``,
    ``device="cuda"``, or a ``torch.cuda``/``torch.accelerator`` call."""
    if ctx.plan.bindings_with_role("device"):
        return True
    for site in ctx.facts.calls:
        if site.method == "cuda" or (site.qualname or "").startswith(("torch.cuda.", "torch.accelerator.", "torch.backends.mps")):
            return True
        if site.method == "to" and ctx.plan.placement_device(site.scope, site.node) is not None:
            return True
        if any(a.keyword is not None and a.keyword.value == "device" for a in site.node.args):
            return True
    return False


def _bindings(scope: Scope) -> list[Binding]:
    """Bindings made by statements in ``scope`` (including ``self.x`` stored on its class)."""
    owners = [scope] + ([scope.class_scope] if scope.class_scope is not None else [])
    return [b for owner in owners for bs in owner.bindings.values() for b in bs if b.where is scope]


def _branch_flag(ctx: Context, devices: list[Binding], imports: ImportMap) -> cst.BaseExpression | None:
    """``if opt.cuda: device = torch.device("cuda:0") / elif use_mps: device = ... "mps" / else: device =
    torch.device("cpu")``: the CPU unless a branch picks another device, ``not (opt.cuda or use_mps)``."""
    for device in devices:
        chain = ctx.facts.chain(device.stmt)
        if len(chain) > 1 and isinstance(chain[1], cst.If):
            tests: list[cst.BaseExpression] = []
            branch: cst.If = chain[1]
            while True:
                value = _assigned(branch.body, device.key)
                if value is None or is_cpu_device(value, imports):
                    return None
                test = _enabling(ctx, device.where, branch.test, imports)
                if test is None:
                    return None  # ``if torch.cuda.is_available():``: availability alone decides, as the accelerator does
                tests.append(test)
                if isinstance(branch.orelse, cst.If):
                    branch = branch.orelse
                    continue
                last = _assigned(branch.orelse.body, device.key) if isinstance(branch.orelse, cst.Else) else None
                if last is None or not is_cpu_device(last, imports):
                    return None
                break
            if all(isinstance(t, cst.UnaryOperation) and isinstance(t.operator, cst.Not) for t in tests):
                # ``not args.no_cuda`` / ``not args.no_mps``: the CPU when every opt-out is set
                parts = [t.expression.with_changes(lpar=[], rpar=[]) for t in tests]  # type: ignore[attr-defined]
                return join_terms(parts, cst.And())
            joined: cst.BaseExpression = join_terms(tests)  # type: ignore[assignment]
            if len(tests) > 1:
                joined = joined.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
            return cst.UnaryOperation(cst.Not(), joined)
    return None


def _enabling(ctx: Context, scope: Scope, test: cst.BaseExpression, imports: ImportMap) -> cst.BaseExpression | None:
    """What in a branch's test the user chose: ``opt.cuda`` of ``opt.cuda and torch.cuda.is_available()``, ``opt.mps``
    of ``use_mps`` bound to ``opt.mps and torch.backends.mps.is_available()``; None for availability alone."""
    key = dotted(test)
    if key is not None:
        found = ctx.plan.binding_of(scope, key)
        if found is not None and found.value is not None and is_cuda_flag(found.value, imports):
            test = found.value
    terms = [t for t in split_terms(test, cst.And) if not (isinstance(t, cst.Call) and imports.qualname(t.func) in AVAILABILITY)]
    return join_terms([terms[0].with_changes(lpar=[], rpar=[]), *terms[1:]], cst.And()) if terms else None


def _assigned(block: cst.BaseSuite, key: str) -> cst.BaseExpression | None:
    """The value ``key`` is set to in ``block`` (the only statement doing so), or None."""
    if not isinstance(block, cst.IndentedBlock):
        return None
    values = [
        small.value for stmt in block.body if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body
        if isinstance(small, cst.Assign) and any(dotted(t.target) == key for t in small.targets)
    ]
    return values[0] if len(values) == 1 else None


def _expand(ctx: Context, builder: Scope, flag: cst.BaseExpression) -> cst.BaseExpression:
    """``not use_cuda`` where ``use_cuda = not args.no_cuda and torch.cuda.is_available()`` -> ``args.no_cuda``."""
    if isinstance(flag, cst.UnaryOperation) and isinstance(flag.operator, cst.Not):
        key = dotted(flag.expression)
        if key is not None:
            found = ctx.plan.binding_of(builder, key)
            if found is not None and found.value is not None and is_cuda_flag(found.value, builder.imports):
                expanded = flags_from_test(found.value, builder.imports)
                if expanded is not None:
                    return expanded
    return flag
