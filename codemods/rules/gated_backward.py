"""WarnGatedBackward: a backward that each process may skip on its own is reported (ACC064).

Under DistributedDataParallel every backward averages the gradients across processes, so every process must run it
as many times as the others. A backward under a test on a process's own data (a DQN's ``if len(buffer) >
batch_size: train_step()``, a replay buffer filled by episodes of different lengths on each process: set U's U10;
``if loss.item() > threshold:``), or in a function called under one, runs on some processes and not on the others:
they wait for each other at the next averaging, forever. It may not show in a short run (the buffers may pass the
threshold in the same episode). Whether a test agrees is the agreement analysis's answer (``analysis/agreement.py``,
the one verify's "no latent deadlock" check reads): tests on the step, the epoch, a prepared loader's batches or a
reduced value agree. Nothing is rewritten: what every process should decide on is the program's choice. Where the
conversion seeds the values drawn before training alike (``rules/shared_draws.py``), nothing is reported: the
agreement was built before those seeds, and the tests on such values (a replay buffer filled from episodes drawn up
front) agree.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.analysis.draws_before_training import SHARED_DRAWS
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule


class WarnGatedBackward(Rule):
    name = "gated_backward"
    description = "Report a backward that runs under a test each process decides on its own data."
    examples = (
        Example(
            before='''\
import random
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
buffer = []
for episode in range(20):
    for step in range(random.randint(1, 20)):
        buffer.append(torch.randn(4))
    if len(buffer) > 32:
        batch = torch.stack(random.sample(buffer, 32))
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
''',
            after='''\
import random
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model, opt = accelerator.prepare(model, opt)
buffer = []
for episode in range(20):
    for step in range(random.randint(1, 20)):
        buffer.append(torch.randn(4))
    if len(buffer) > 32:
        batch = torch.stack(random.sample(buffer, 32))
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
accelerator.end_training()
''',
            warnings=("ACC064:13",),
        ),
        Example(
            # a test on the episode number: the same on every process
            before='''\
import random
import torch
model = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
buffer = []
for episode in range(20):
    for step in range(random.randint(1, 20)):
        buffer.append(torch.randn(4))
    if episode >= 5:
        batch = torch.stack(random.sample(buffer, 32))
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
''',
            after='''\
import random
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(4, 2)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
model, opt = accelerator.prepare(model, opt)
buffer = []
for episode in range(20):
    for step in range(random.randint(1, 20)):
        buffer.append(torch.randn(4))
    if episode >= 5:
        batch = torch.stack(random.sample(buffer, 32))
        loss = model(batch).pow(2).mean()
        opt.zero_grad()
        accelerator.backward(loss)
        opt.step()
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating or SHARED_DRAWS in ctx.changes:
            return  # (values drawn before training, seeded alike by the shared-draws rule after the agreement was
            # built: a test on them agrees, set P's P11's replay buffer filled from such episodes; not told apart here)
        agreement = ctx.agreement
        for site in ctx.facts.calls:
            if site.method != "backward" or ctx.plan.never_run(site.scope) or ctx.reported(site.node):
                continue
            where = _local_test(ctx, site.scope, site.stmt)
            if where is None and not agreement.function_agreed(site.scope):
                tests = [t for call in ctx.plan.call_sites(site.scope) if (t := _local_test(ctx, call.scope, call.stmt))]
                where = f"in `{site.scope.name}`, " + (f"called {tests[0]}" if tests else
                                                       "which is called under a test that may differ between processes")
            if where is not None:
                ctx.warn(codes.GATED_BACKWARD, site.node, where=where)


def _local_test(ctx: Context, scope, stmt: cst.BaseStatement) -> str | None:  # type: ignore[no-untyped-def]
    """``under `if len(buffer) > 32``` for the innermost ``if``/``while`` around ``stmt`` whose test may differ
    between processes, or None."""
    for outer in ctx.facts.chain(stmt)[1:]:
        if isinstance(outer, (cst.If, cst.While)) and not ctx.agreement.uniform(scope, outer.test, outer):
            return f"under `{'if' if isinstance(outer, cst.If) else 'while'} {code_of(outer.test)}`"
    return None
