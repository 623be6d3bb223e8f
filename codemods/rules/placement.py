"""RemovePlacement: prepared models and batches from prepared loaders need no device placement.

``model.cuda()`` statements, ``model = model.to(device)`` and ``if args.cuda: model.cuda()`` go away;
``model(x.to(device))`` on a batch becomes ``model(x)``.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.facts import Binding, CallSite
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.roles import PLACEMENT_METHODS, rewraps, strip_placement
from accelify.codemods.engine.rule import Example, Rule


class RemovePlacement(Rule):
    name = "placement"
    description = "Drop .to(device)/.cuda() on prepared models and on batches of prepared loaders."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1).to(device)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for data, target in loader:
    data, target = data.to(device), target.to(device)
    torch.nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for data, target in loader:
    accelerator.backward(torch.nn.functional.mse_loss(model(data), target))
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for data, target in loader:
    data = data.to(torch.float16).float()
    torch.nn.functional.mse_loss(model(data), target).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for data, target in loader:
    data = data.to(torch.float16).float()
    accelerator.backward(torch.nn.functional.mse_loss(model(data), target))
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        plan = ctx.plan
        for binding in plan.objects:
            if binding.role == "model" and binding.value is not None:
                self._strip_value(ctx, binding.value, binding.stmt)
        by_stmt: dict[cst.BaseStatement, list[CallSite]] = {}
        for site in ctx.facts.calls:
            if site.method in PLACEMENT_METHODS and not ctx.rewritten(site.node):
                if self._placeable(ctx, site):
                    by_stmt.setdefault(site.stmt, []).append(site)
                elif self._places_and_converts(ctx, site):
                    # `x.to(device=device, dtype=torch.float32)`: the dtype (or memory format) stays, the device goes
                    ctx.replace(site.node, site.stmt, _without_device)
                    ctx.change("remove device placement of prepared objects and batches")
        for stmt, sites in list(by_stmt.items()):
            if len(sites) == 1 and self._placed_elements(ctx, stmt, sites[0]) and ctx.remove(stmt):
                ctx.change("remove device placement of prepared objects and batches")
                del by_stmt[stmt]
        for stmt, sites in by_stmt.items():
            if self._whole_statement(stmt, sites) and ctx.remove(stmt):
                ctx.change("remove device placement of prepared objects and batches")
                continue
            for site in sites:
                # a batch moved into a new name (`real = real_cpu.to(device)`) stays: on a prepared batch it is a no-op
                if self._is_model(ctx, site) and ctx.replace(site.node, site.stmt, _receiver):
                    ctx.change("remove device placement of prepared objects and batches")

    def _strip_value(self, ctx: Context, value: cst.BaseExpression, stmt: cst.BaseStatement) -> None:
        """``Net().to(device).cuda()`` -> ``Net()`` when every call of the chain only places; ``Net().cuda() if
        args.cuda else Net()`` -> ``Net()`` too."""
        sites: list[CallSite] = []
        node = value.body if isinstance(value, cst.IfExp) and strip_placement(value) is not value else value
        while isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute) and node.func.attr.value in PLACEMENT_METHODS:
            site = ctx.facts.sites.get(node)
            if site is None or ctx.plan.placement_device(site.scope, node) is None:
                return
            sites.append(site)
            node = node.func.value
        if sites and ctx.replace(value, stmt, strip_placement):  # type: ignore[arg-type]
            ctx.change("remove device placement of prepared objects and batches")

    def _placeable(self, ctx: Context, site: CallSite) -> bool:
        """A placement of a prepared model, or of a batch of a prepared loader, to the device."""
        if ctx.plan.placement_device(site.scope, site.node) is None:
            return False
        receiver = site.node.func.value  # type: ignore[attr-defined]
        if isinstance(receiver, cst.Name) and _element_of_batch(ctx, site, receiver.value) is not None:
            return True
        return self._is_model(ctx, site) or (isinstance(receiver, cst.Name) and ctx.plan.is_batch(site.scope, receiver.value, site.loop))

    def _placed_elements(self, ctx: Context, stmt: cst.BaseStatement, site: CallSite) -> bool:
        """``batch = tuple(t.to(device) for t in batch)`` (or a list comprehension): every element of a batch placed."""
        receiver = site.node.func.value  # type: ignore[attr-defined]
        if not isinstance(receiver, cst.Name):
            return False
        batch = _element_of_batch(ctx, site, receiver.value)
        if batch is None or not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return False
        small = stmt.body[0]
        return isinstance(small, cst.Assign) and len(small.targets) == 1 and dotted(small.targets[0].target) == batch

    def _places_and_converts(self, ctx: Context, site: CallSite) -> bool:
        """``x.to(device=d, dtype=...)`` (device as a keyword, with other keywords) on a batch or a model."""
        device = _device_keyword(site.node)
        if site.method != "to" or device is None or site.node.args[0].keyword is None:
            return False
        if not ctx.plan.is_device_like(site.scope, device.value):
            return False
        receiver = site.node.func.value  # type: ignore[attr-defined]
        return self._is_model(ctx, site) or (isinstance(receiver, cst.Name) and ctx.plan.is_batch(site.scope, receiver.value, site.loop))

    def _is_model(self, ctx: Context, site: CallSite) -> bool:
        """A prepared model placed before or after ``prepare`` (placing the raw model is dropped too), not another
        module bound to the same name later (``model = Net.from_pretrained(d)`` after training)."""
        receiver = site.node.func.value  # type: ignore[attr-defined]
        found = ctx.plan.model_object(site.scope, receiver)
        if found is None or not _made_for_prepare(ctx, found):
            return False
        latest = _latest_binding(ctx, site, dotted(receiver))
        if latest is None or ctx.plan.holds(latest) is found:
            return True
        # ``if args.net == "a": net = A() else: net = B()`` then ``net = net.cuda()``: whichever arm ran, it is the
        # model that reaches ``prepare`` (only the first arm's creation is recorded as the prepared object)
        other = ctx.plan.holds(latest)
        return other is not None and other.role == "model" and other.where is found.where \
            and _other_arms(ctx, found.stmt, other.stmt)

    def _whole_statement(self, stmt: cst.BaseStatement, sites: list[CallSite]) -> bool:
        """``model.cuda()``, ``x = x.to(device)`` or ``x, y = x.to(d), y.to(d)``: nothing left once placement goes."""
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
            return False
        small = stmt.body[0]
        calls = {site.node for site in sites}
        if isinstance(small, cst.Expr):
            return small.value in calls
        if not (isinstance(small, cst.Assign) and len(small.targets) == 1):
            return False
        target, value = small.targets[0].target, small.value
        pairs: list[tuple[cst.BaseExpression, cst.BaseExpression]] = [(target, value)]
        if isinstance(target, (cst.Tuple, cst.List)) and isinstance(value, (cst.Tuple, cst.List)):
            if len(target.elements) != len(value.elements):
                return False
            pairs = [(t.value, v.value) for t, v in zip(target.elements, value.elements)]
        return all(
            v in calls and dotted(t) is not None and dotted(t) == dotted(v.func.value)  # type: ignore[attr-defined]
            for t, v in pairs
        )


def _element_of_batch(ctx: Context, site: CallSite, name: str) -> str | None:
    """For ``t`` in ``tuple(t.to(device) for t in batch)`` / ``[t.to(device) for t in batch]`` (the placement the
    whole comprehension makes) over a batch of a prepared loader: ``batch``."""
    stmt = site.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    value = stmt.body[0].value
    if isinstance(value, cst.Call) and dotted(value.func) in ("tuple", "list") and len(value.args) == 1:
        value = value.args[0].value
    if not isinstance(value, (cst.GeneratorExp, cst.ListComp)) or value.elt is not site.node:
        return None
    comp = value.for_in
    if comp.inner_for_in is not None or comp.ifs or not isinstance(comp.target, cst.Name) or comp.target.value != name:
        return None
    batch = dotted(comp.iter)
    if batch is None or "." in batch or not ctx.plan.is_batch(site.scope, batch, site.loop):
        return None
    return batch


def _latest_binding(ctx: Context, site: CallSite, key: str | None) -> Binding | None:
    """The last assignment of ``key`` in the site's scope before the site that does not just wrap it, if any."""
    if key is None or "." in key:
        return None
    order = ctx.facts.order
    earlier = [b for b in site.scope.bindings.get(key, []) if b.where is site.scope and order[b.stmt][0] < order[site.stmt][0]]
    earlier = [b for b in earlier if not rewraps(b, site.scope.imports)]  # ``model = nn.DataParallel(model)`` holds it still
    return max(earlier, key=lambda b: order[b.stmt][0], default=None)


def _made_for_prepare(ctx: Context, found: Binding) -> bool:
    """A model made in a factory function (``get_network(args)``) is the prepared one only where a call's result
    is what ``prepare`` takes: a second call (``teacher = get_network(args)``) makes another model, which keeps
    its placement."""
    factory = found.where
    if factory.kind != "function" or factory is ctx.plan.prepare_scope:
        return True
    if not any(r.value is not None and ctx.plan.origin(factory, r.value) is found for r in factory.returns):
        return True  # made in a driver that passes it on (``main`` builds it, ``train`` prepares it)
    prepared = {id(alias.stmt) for alias in ctx.plan.aliases if alias.stmt is not None}
    sites = ctx.plan.call_sites(factory)
    return bool(sites) and all(id(s.stmt) in prepared for s in sites)


def _other_arms(ctx: Context, first: cst.BaseStatement, second: cst.BaseStatement) -> bool:
    """Whether two statements are in different arms of one ``if`` (``if``/``elif``/``else``): never both run."""
    up_first, up_second = ctx.facts.chain(first), ctx.facts.chain(second)
    for index, node in enumerate(up_first[1:], start=1):
        if isinstance(node, cst.If) and node in up_second:
            below_first = up_first[index - 1]
            below_second = up_second[up_second.index(node) - 1]
            return _in_body(node, below_first) != _in_body(node, below_second)
    return False


def _in_body(branch: cst.If, stmt: cst.BaseStatement) -> bool:
    return any(s is stmt for s in branch.body.body)  # type: ignore[union-attr]


def _device_keyword(call: cst.Call) -> cst.Arg | None:
    return next((a for a in call.args if a.keyword is not None and a.keyword.value == "device"), None)


def _without_device(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Call)
    args = [a for a in node.args if not (a.keyword is not None and a.keyword.value == "device")]
    if args:
        args[-1] = args[-1].with_changes(comma=cst.MaybeSentinel.DEFAULT)
    return node.with_changes(args=args)


def _receiver(node: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(node, cst.Call) and isinstance(node.func, cst.Attribute)
    return node.func.value.with_changes(lpar=node.lpar, rpar=node.rpar) if node.lpar else node.func.value
