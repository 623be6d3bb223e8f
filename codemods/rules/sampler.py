"""RemoveDistributedSampler: the prepared loader shards the data, so the ``DistributedSampler`` goes.

- ``sampler = DistributedSampler(ds)`` (and ``sampler = None`` in the other branch) goes with every use:
  the loader's ``sampler=sampler`` goes, its ``shuffle=(sampler is None)`` becomes the sampler's own
  shuffle (``shuffle=True`` unless it was built with ``shuffle=False``), and ``sampler.set_epoch(epoch)``
  goes (the prepared loader reshuffles each epoch);
- ``RandomSampler(ds) if args.local_rank == -1 else DistributedSampler(ds)`` keeps its other sampler;
- ``DataLoader(ds, sampler=DistributedSampler(ds))`` loses the argument and gains the shuffle.

A sampler variable used for anything else is left as it is (the unsupported rule refuses the file).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.analysis.facts import Binding, CallSite, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.roles import LOADERS
from accelify.codemods.engine.rule import Example, Rule


class RemoveDistributedSampler(Rule):
    name = "sampler"
    description = "Drop DistributedSampler (and set_epoch): the prepared loader shards and reshuffles."
    examples = (
        Example(
            before='''\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler
dist.init_process_group("gloo")
ds = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
sampler = DistributedSampler(ds)
loader = DataLoader(ds, batch_size=4, sampler=sampler)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    sampler.set_epoch(epoch)
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
ds = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
loader = DataLoader(ds, batch_size=4, shuffle=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for epoch in range(2):
    for x, y in loader:
        accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
        optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
ds = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
loader = DataLoader(ds, batch_size=4, sampler=RandomSampler(ds))
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, RandomSampler, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
ds = TensorDataset(torch.randn(8, 2), torch.randn(8, 1))
loader = DataLoader(ds, batch_size=4, sampler=RandomSampler(ds))
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for x, y in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        done: set[int] = set()
        for site in ctx.plan.distributed.samplers:
            if self._sampler(ctx, site, done):
                ctx.change("DistributedSampler -> the prepared loader's sharding")
            else:
                ctx.abort(codes.MANUAL_DISTRIBUTED, site.node, name=code_of(site.node.func),
                          fix="pass the dataset to a plain DataLoader with `shuffle=True`: the prepared loader shards it")

    def _sampler(self, ctx: Context, site: CallSite, done: set[int]) -> bool:
        """Remove one ``DistributedSampler``; False when its shape is not one of the above."""
        stmt = site.stmt
        shuffle = _keyword(site.node, "shuffle") or expression("True")
        loader = _loader_argument(ctx, site.node)
        if loader is not None:  # DataLoader(ds, sampler=DistributedSampler(ds)) (or X if c else DistributedSampler(ds))
            self._loader_call(ctx, loader, shuffle)
            self._set_epochs(ctx, site.scope, "")  # ``self.train_data.sampler.set_epoch(epoch)``
            return True
        binding = _binding_of(ctx, site)
        if binding is None:
            return False
        value = binding.value
        if isinstance(value, cst.IfExp):  # RandomSampler(ds) if args.local_rank == -1 else DistributedSampler(ds)
            other = value.orelse if value.body is site.node else value.body
            if not _is_none(other):
                keep_body = value.body is not site.node
                ctx.replace(value, stmt, lambda n, b=keep_body: n.body if b else n.orelse)  # type: ignore[attr-defined]
                self._set_epochs(ctx, binding.where, binding.key)
                return True
        if id(binding.stmt) in done:
            return True
        if value is not site.node and not isinstance(value, cst.IfExp):
            return False
        group = [b for b in binding.scope.bindings.get(binding.key, []) if b.where is binding.where]
        if not all(_alone(b) and (b.value is site.node or _is_none(b.value) or _is_none_choice(b.value, site.node)) for b in group):
            return False
        loaders = [s for s in binding.where.calls if s.qualname in LOADERS and _passes(s.node, binding.key)]
        for b in group:
            ctx.remove(b.stmt)
            done.add(id(b.stmt))
        for call in loaders:
            self._loader_call(ctx, call, shuffle, binding.key)
        self._set_epochs(ctx, binding.where, binding.key)
        return True

    def _loader_call(self, ctx: Context, site: CallSite, shuffle: cst.BaseExpression, key: str | None = None) -> None:
        """``DataLoader(..., sampler=<it>, shuffle=<anything>)`` -> ``DataLoader(..., shuffle=<its shuffle>)``."""
        ctx.replace(site.node, site.stmt, lambda call, s=shuffle: _without_sampler(call, s))  # type: ignore[misc]

    def _set_epochs(self, ctx: Context, scope: Scope, key: str) -> None:
        """``sampler.set_epoch(epoch)`` (or ``loader.sampler.set_epoch``) alone on its line."""
        for site in ctx.facts.calls:
            if site.method != "set_epoch" or not isinstance(site.node.func, cst.Attribute):
                continue
            receiver = dotted(site.node.func.value) or ""
            if (key and receiver == key) or receiver.endswith(".sampler"):
                stmt = site.stmt
                if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr):
                    ctx.remove(stmt)


def _keyword(call: cst.Call, name: str) -> cst.BaseExpression | None:
    return next((a.value for a in call.args if a.keyword is not None and a.keyword.value == name), None)


def _loader_argument(ctx: Context, sampler: cst.Call) -> CallSite | None:
    """The DataLoader call whose ``sampler=`` is this sampler (directly or as a choice with None)."""
    for site in ctx.facts.calls:
        if site.qualname in LOADERS:
            value = _keyword(site.node, "sampler")
            if value is sampler or (isinstance(value, cst.IfExp) and sampler in (value.body, value.orelse)
                                    and (_is_none(value.body) or _is_none(value.orelse))):
                return site
    return None


def _binding_of(ctx: Context, site: CallSite) -> Binding | None:
    for scope in ctx.facts.scopes:
        for bindings in scope.bindings.values():
            for binding in bindings:
                if binding.stmt is site.stmt and binding.value is not None and site.node in (
                    binding.value, getattr(binding.value, "body", None), getattr(binding.value, "orelse", None)
                ):
                    return binding
    return None


def _is_none(value: cst.BaseExpression | None) -> bool:
    return isinstance(value, cst.Name) and value.value == "None"


def _is_none_choice(value: cst.BaseExpression | None, sampler: cst.Call) -> bool:
    return isinstance(value, cst.IfExp) and sampler in (value.body, value.orelse) and (_is_none(value.body) or _is_none(value.orelse))


def _alone(binding: Binding) -> bool:
    stmt = binding.stmt
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)


def _passes(call: cst.Call, key: str) -> bool:
    value = _keyword(call, "sampler")
    return value is not None and dotted(value) == key


def _without_sampler(node: cst.CSTNode, shuffle: cst.BaseExpression) -> cst.CSTNode:
    """``DataLoader(ds, sampler=s, shuffle=(s is None))`` -> ``DataLoader(ds, shuffle=<shuffle>)``."""
    assert isinstance(node, cst.Call)
    args = [a for a in node.args if not (a.keyword is not None and a.keyword.value == "sampler")]
    if any(a.keyword is not None and a.keyword.value == "shuffle" for a in args):
        args = [a.with_changes(value=shuffle) if a.keyword is not None and a.keyword.value == "shuffle" else a for a in args]
    else:
        equal = cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace(""))
        args.append(cst.Arg(shuffle, keyword=cst.Name("shuffle"), equal=equal))
    for i, arg in enumerate(args[:-1]):
        if arg.comma == cst.MaybeSentinel.DEFAULT:
            args[i] = arg.with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    if args:
        args[-1] = args[-1].with_changes(comma=node.args[-1].comma)
    return node.with_changes(args=args)
