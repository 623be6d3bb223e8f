"""MainProcessLoguru: loguru's logger writes on the main process only, so N processes do not show every line N times
(and append every record to its log files N times).

loguru's ``logger`` is one object per process with a handler on stderr from the start: ``logger.info(...)`` on N
processes shows N times, and a sink added with ``logger.add("train.log")`` gets every record N times. Right after
the accelerator is created, the other processes take its handlers off and keep warnings and errors on stderr (as the
logging rule leaves Python's logging on them):

    if not accelerator.is_main_process:
        logger.remove()
        logger.add(sys.stderr, level="WARNING")

A sink added after that (``logger.add(path)`` where the accelerator is at hand) goes under ``if
accelerator.is_main_process:``; one added where it is not (a helper that does not get it, run once it exists) is
reported (ACC031). The logging calls stay as they are. The same code runs under Hugging Face Accelerate.
"""

from __future__ import annotations

from accelify.codemods import codes
from accelify.codemods.analysis.creation import Creation
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.handle_uses import alone
from accelify.codemods.analysis.snippets import code_of, on_main_process, statement
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_LOGGER = "loguru.logger"


class MainProcessLoguru(Rule):
    name = "loguru"
    description = "Keep loguru's logger to the main process (warnings and errors stay on the others)."
    examples = (
        Example(
            before='''\
import torch
from loguru import logger
from torch.utils.data import DataLoader, TensorDataset


def main():
    logger.add("train.log")
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
        logger.info(f"epoch {epoch} done")


if __name__ == "__main__":
    main()
''',
            after='''\
import torch
from loguru import logger
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
import sys


def main():
    accelerator = Accelerator()
    if not accelerator.is_main_process:
        logger.remove()
        logger.add(sys.stderr, level="WARNING")
    if accelerator.is_main_process:
        logger.add("train.log")
    loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    model, opt, loader = accelerator.prepare(model, opt, loader)
    for epoch in range(2):
        for x, y in loader:
            opt.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            opt.step()
        logger.info(f"epoch {epoch} done")
    accelerator.end_training()


if __name__ == "__main__":
    main()
''',
        ),
        Example(
            # Python's own logging under the name ``logger``: the logging rule's, not this one's
            before='''\
import logging
import torch
from torch.utils.data import DataLoader, TensorDataset
logger = logging.getLogger(__name__)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
for x, y in loader:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    logger.info("step")
''',
            after='''\
import logging
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
logger = logging.getLogger(__name__)
loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)
model = torch.nn.Linear(4, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
model, opt, loader = accelerator.prepare(model, opt, loader)
for x, y in loader:
    opt.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    opt.step()
    logger.info("step")
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        sites = [s for s in ctx.facts.calls if (s.qualname or "").startswith(_LOGGER + ".") and not ctx.plan.never_run(s.scope)]
        home = ctx.plan.home
        anchor = ctx.plan.analysis(Creation).anchor
        accelerator = ctx.accelerator_in(home) if home is not None else None
        if not sites or not ctx.accelerating or home is None or anchor is None or accelerator is None:
            return
        imports = ctx.facts.unit_of(home).imports
        module = ctx.facts.unit_of(home).module
        logger = imports.alias_of(_LOGGER)
        if logger is None:
            loguru = imports.alias_of("loguru")
            if loguru is None:
                ctx.add_import(module, statement("import loguru"))
                loguru = "loguru"
            logger = f"{loguru}.logger"
        system = imports.alias_of("sys")
        if system is None:
            ctx.add_import(module, statement("import sys"))
            system = "sys"
        code = (f"if not {accelerator}.is_main_process:\n    {logger}.remove()\n"
                f'    {logger}.add({system}.stderr, level="WARNING")\n')
        at, after = anchor
        ctx.insert_after(at, [code], ungrouped=True) if after else ctx.insert_before(at, [code], ungrouped=True)
        ctx.change("keep loguru's logger to the main process (warnings and errors on the others)")
        for site in sites:
            if site.method == "add":
                self._sink(ctx, site)

    def _sink(self, ctx: Context, site: CallSite) -> None:
        """``logger.add(path)`` that runs once the other processes' handlers are off: on the main process only."""
        accelerator = ctx.accelerator_in(site.scope)
        if accelerator is None or not ctx.after_accelerator(site.scope, site.stmt):
            if ctx.will_be_after_accelerator(site.scope, site.stmt) or _called_after(ctx, site):
                ctx.warn(codes.LOG_EVERY_PROCESS, site.node, name=code_of(site.node.func))
            return
        stmt = site.stmt
        if not alone(site):
            ctx.warn(codes.LOG_EVERY_PROCESS, site.node, name=code_of(site.node.func))
            return
        if ctx.replace(stmt, stmt, lambda s, a=accelerator: on_main_process(s, a)):  # type: ignore[misc]
            ctx.change("add loguru's sinks on the main process only")


def _called_after(ctx: Context, site: CallSite) -> bool:
    """Whether the function holding ``site`` is called somewhere once the accelerator exists."""
    return any(ctx.accelerator_in(s.scope) is not None and ctx.after_accelerator(s.scope, s.stmt)
               for s in ctx.plan.call_sites(site.scope))

