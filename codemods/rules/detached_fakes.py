"""DetachSharedForward: a generator's output the discriminator's loss reads is detached there, when that loss is
backpropagated with ``retain_graph=True`` and the generator's gradients from it are zeroed before its own step.

The GAN loop many copy (a WGAN's critic iterations, a DCGAN's ``loss_disc.backward(retain_graph=True)``)::

    fake = gen(noise)
    loss_critic = -(torch.mean(critic(real)) - torch.mean(critic(fake)))
    critic.zero_grad()
    loss_critic.backward(retain_graph=True)   # into the generator's graph too
    opt_critic.step()
    loss_gen = -torch.mean(critic(fake))
    gen.zero_grad()                           # those generator gradients are dropped
    loss_gen.backward()                       # the same generator forward, a second time
    opt_gen.step()

On one process the first backward's generator gradients are zeroed before they are used. Under
DistributedDataParallel the generator's gradients are averaged across processes in the first backward through its
forward; the second backward through the same forward is not averaged, so each process steps its generator with its
own gradient and the generators part (set U's U12: the runtime's sentinel stopped it at the first step). Reading
``fake.detach()`` in the discriminator's loss computes the same discriminator gradients and leaves the generator's
forward one backward, its own. Only where the generator's gradients are zeroed (``gen.zero_grad()``, or its
optimizer's) after that backward and before its optimizer steps: else they are part of its update, and stay.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, CallSite, Scope
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class DetachSharedForward(Rule):
    name = "detached_fakes"
    description = "Detach a generator's output in a discriminator loss backpropagated with retain_graph=True."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True)
critic = torch.nn.Linear(8, 1)
gen = torch.nn.Linear(4, 8)
opt_gen = torch.optim.RMSprop(gen.parameters(), lr=5e-5)
opt_critic = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
for (real,) in loader:
    fake = gen(torch.randn(real.shape[0], 4))
    loss_critic = -(torch.mean(critic(real)) - torch.mean(critic(fake)))
    critic.zero_grad()
    loss_critic.backward(retain_graph=True)
    opt_critic.step()
    loss_gen = -torch.mean(critic(fake))
    gen.zero_grad()
    loss_gen.backward()
    opt_gen.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True)
critic = torch.nn.Linear(8, 1)
gen = torch.nn.Linear(4, 8)
opt_gen = torch.optim.RMSprop(gen.parameters(), lr=5e-5)
opt_critic = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
critic, gen, opt_gen, opt_critic, loader = accelerator.prepare(
    critic, gen, opt_gen, opt_critic, loader
)
for (real,) in loader:
    fake = gen(torch.randn(real.shape[0], 4))
    loss_critic = -(torch.mean(critic(real)) - torch.mean(critic(fake.detach())))
    critic.zero_grad()
    accelerator.backward(loss_critic, retain_graph=True)
    opt_critic.step()
    loss_gen = -torch.mean(critic(fake))
    gen.zero_grad()
    accelerator.backward(loss_gen)
    opt_gen.step()
accelerator.end_training()
''',
        ),
        Example(
            # the generator's gradients from the discriminator's loss are kept (no zero_grad before its step): its
            # update uses them, so its output is not detached
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True)
critic = torch.nn.Linear(8, 1)
gen = torch.nn.Linear(4, 8)
opt_gen = torch.optim.RMSprop(gen.parameters(), lr=5e-5)
opt_critic = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
for (real,) in loader:
    gen.zero_grad()
    fake = gen(torch.randn(real.shape[0], 4))
    loss_critic = -(torch.mean(critic(real)) - torch.mean(critic(fake)))
    critic.zero_grad()
    loss_critic.backward(retain_graph=True)
    opt_critic.step()
    loss_gen = -torch.mean(critic(fake))
    loss_gen.backward()
    opt_gen.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
loader = DataLoader(TensorDataset(torch.randn(64, 8)), batch_size=8, shuffle=True)
critic = torch.nn.Linear(8, 1)
gen = torch.nn.Linear(4, 8)
opt_gen = torch.optim.RMSprop(gen.parameters(), lr=5e-5)
opt_critic = torch.optim.RMSprop(critic.parameters(), lr=5e-5)
critic, gen, opt_gen, opt_critic, loader = accelerator.prepare(
    critic, gen, opt_gen, opt_critic, loader
)
for (real,) in loader:
    gen.zero_grad()
    fake = gen(torch.randn(real.shape[0], 4))
    loss_critic = -(torch.mean(critic(real)) - torch.mean(critic(fake)))
    critic.zero_grad()
    accelerator.backward(loss_critic, retain_graph=True)
    opt_critic.step()
    loss_gen = -torch.mean(critic(fake))
    accelerator.backward(loss_gen)
    opt_gen.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        for backward in ctx.facts.calls:
            if backward.method == "backward" and _retains(backward.node):
                for arg in _shared_outputs(ctx, backward):
                    if ctx.replace(arg, backward.scope.holders[id(arg)],
                                   lambda n: cst.Call(func=cst.Attribute(value=n, attr=cst.Name("detach")))):
                        ctx.change("detach the generator's output in the discriminator's loss (retain_graph=True)")


def _retains(call: cst.Call) -> bool:
    return any(a.keyword is not None and a.keyword.value == "retain_graph" and isinstance(a.value, cst.Name)
               and a.value.value == "True" for a in call.args)


def _shared_outputs(ctx: Context, backward: CallSite) -> list[cst.Name]:
    """The ``fake`` arguments of discriminator calls (``critic(fake)``) before ``backward`` that should read
    ``fake.detach()``: ``fake`` bound last before it to a prepared model's output, read again after it, and that
    model's gradients zeroed after ``backward`` before its optimizer steps."""
    scope, facts, plan = backward.scope, ctx.facts, ctx.plan
    found: list[cst.Name] = []
    for made in scope.calls:
        stmt = made.stmt
        target = _assigned_name(stmt, made.node)
        generator = plan.prepared_model(scope, made.node.func, stmt) if target is not None else None
        if generator is None or not facts.after(backward.stmt, stmt):
            continue
        rebound = [b for b in scope.bindings.get(target, []) if b.stmt is not stmt  # type: ignore[arg-type]
                   and facts.after(b.stmt, stmt) and facts.after(backward.stmt, b.stmt)]
        if rebound:
            continue
        reads = [(ref, scope.holders.get(id(ref))) for ref in scope.refs.get(target, [])]  # type: ignore[arg-type]
        before = [id(ref) for ref, holder in reads if holder is not None and facts.after(holder, stmt)
                  and not facts.after(holder, backward.stmt) and holder is not backward.stmt]
        after = [ref for ref, holder in reads if holder is not None and facts.after(holder, backward.stmt)]
        if not before or not after or not _zeroed_before_step(ctx, scope, generator, backward.stmt):
            continue
        for site in scope.calls:
            if site.stmt is stmt or not any(id(a.value) in before for a in site.node.args):
                continue
            critic = plan.prepared_model(scope, site.node.func, site.stmt)
            if critic is not None and critic is not generator:
                found += [a.value for a in site.node.args if id(a.value) in before and isinstance(a.value, cst.Name)]
    return found


def _assigned_name(stmt: cst.BaseStatement, call: cst.Call) -> str | None:
    """``fake`` of ``fake = gen(noise)``."""
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        assign = stmt.body[0]
        if assign.value is call and len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
            return assign.targets[0].target.value
    return None


def _zeroed_before_step(ctx: Context, scope: Scope, generator: Binding, backward: cst.BaseStatement) -> bool:
    """Whether the generator's gradients are zeroed after ``backward`` (``gen.zero_grad()``, or the zero_grad of an
    optimizer over its parameters) before any step of such an optimizer."""
    facts = ctx.facts
    optimizers = {o.key for o in ctx.plan.objects if o.role == "optimizer" and o.value is not None
                  and m.findall(o.value, m.Name(generator.key))}
    later = sorted((s for s in scope.calls if facts.after(s.stmt, backward) and isinstance(s.node.func, cst.Attribute)),
                   key=lambda s: facts.order[s.stmt][0])
    for site in later:
        receiver = site.node.func.value  # type: ignore[attr-defined]
        name = receiver.value if isinstance(receiver, cst.Name) else None
        if site.method == "zero_grad" and (name == generator.key or name in optimizers):
            return True
        if site.method == "step" and name in optimizers:
            return False
    return False
