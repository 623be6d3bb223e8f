"""MainProcessLogging: logging's handlers are set up on the main process only, so N processes do not write
every line N times (and race on one log file).

Every process runs ``logging.basicConfig(filename=...)``, ``logger.addHandler(logging.FileHandler(p))``: each
opens the file and writes every record into it, and every ``logger.info(...)`` shows N times. The least
surprising form, and one that runs the same under ``accelify.runtime`` and Hugging Face Accelerate, is the
one a user of either writes by hand: the set-up statements go under ``if accelerator.is_main_process:``.
A set-up that already depends on the process (``level=INFO if local_rank in [-1, 0] else WARN``, a file
named by rank) is the script's own choice and stays. The other processes keep logging's defaults (no handler: warnings and errors only, on stderr), so a
warning one process alone meets still shows. The logging calls themselves stay as they are (a runtime
``get_logger`` would change every call site, and Accelerate's refuses to log before the accelerator exists).

What is set up:
- ``logging.basicConfig(...)``, ``logging.config.dictConfig(...)`` / ``fileConfig(...)`` statements;
- ``x.addHandler(...)`` statements, with the handlers they add when those are made just before
  (``fh = logging.FileHandler(p)``, ``fh.setFormatter(fmt)``, ``fh.setLevel(...)``: a handler opens its
  file when it is made), and the formatters made among them: consecutive set-up statements go under one
  ``if``.

A helper that sets logging up (``setup_logging(run_dir)``) called by ``main()`` after the accelerator exists gets
the accelerator. Left as it is, with ACC031: set-up that runs before the accelerator exists (at the top of the
module when the accelerator is made in ``main()``; moving it would reorder side effects, and a helper called
before it); a handler that is used elsewhere too (it would not exist on the other processes).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.blocks import under_main_process
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

CONFIGURERS = {"logging.basicConfig", "logging.config.dictConfig", "logging.config.fileConfig"}


class MainProcessLogging(Rule):
    name = "logging"
    description = "Set up logging handlers (basicConfig, FileHandler) on the main process only."
    examples = (
        Example(
            before='''\
import logging
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
logging.basicConfig(filename="train.log", level=logging.INFO)
logger = logging.getLogger(__name__)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    logger.info("loss %.4f", loss.item())
''',
            after='''\
import logging
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
if accelerator.is_main_process:
    logging.basicConfig(filename="train.log", level=logging.INFO)
logger = logging.getLogger(__name__)
for x in torch.ones(4, 2):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    logger.info("loss %.4f", loss.item())
accelerator.end_training()
''',
        ),
        Example(
            # a handler made, dressed and added: one set-up, under one test (the logger's level with it: on the other
            # processes it stays unset, so only warnings pass, which is what they are meant to log)
            before='''\
import logging
import torch

def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    logger = logging.getLogger("train")
    logger.setLevel(logging.INFO)
    formatter = logging.Formatter("%(asctime)s %(message)s")
    handler = logging.FileHandler("train.log")
    handler.setFormatter(formatter)
    logger.addHandler(handler)
    for x in torch.ones(4, 2):
        loss = model(x).sum()
        loss.backward()
        optimizer.step()
        logger.info("loss %.4f", loss.item())
''',
            after='''\
import logging
import torch
from accelify.runtime import Accelerator

def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    logger = logging.getLogger("train")
    if accelerator.is_main_process:
        logger.setLevel(logging.INFO)
        formatter = logging.Formatter("%(asctime)s %(message)s")
        handler = logging.FileHandler("train.log")
        handler.setFormatter(formatter)
        logger.addHandler(handler)
    for x in torch.ones(4, 2):
        loss = model(x).sum()
        accelerator.backward(loss)
        optimizer.step()
        logger.info("loss %.4f", loss.item())
    accelerator.end_training()
''',
        ),
        Example(
            # set up at import time, before main() makes the accelerator: reported, not moved
            before='''\
import logging
import torch

logging.basicConfig(filename="train.log", level=logging.INFO)

def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
''',
            after='''\
import logging
import torch
from accelify.runtime import Accelerator

logging.basicConfig(filename="train.log", level=logging.INFO)

def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
    accelerator.end_training()
''',
            warnings=("ACC031:4",),
        ),
        Example(
            # records logged, but no handler set up here: nothing to move
            before='''\
import logging
import torch
import torch.distributed as dist
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
logger = logging.getLogger(__name__)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    logger.info("step")
''',
            fires=False,
            after='''\
import logging
import torch
import torch.distributed as dist
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
logger = logging.getLogger(__name__)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
    logger.info("step")
accelerator.end_training()
''',
        ),
    )

    def recheck(self, ctx: Context) -> None:
        """Converted code: a set-up still run by every process (ACC031), unless it depends on the process."""
        for site in ctx.facts.calls:
            if not _configures(site) or ctx.is_skipped(site.stmt) or under_main_process(ctx.facts, site.stmt):
                continue
            if ctx.plan.distributed.main_only(ctx.facts, site.stmt, site.scope) is not None:
                continue
            if all(ctx.agreement.uniform(site.scope, value, site.stmt) for value in _values(site.stmt)):
                ctx.warn(codes.LOG_EVERY_PROCESS, site.node, name=code_of(site.node.func))

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        done: set[cst.BaseStatement] = set()
        agreement: Agreement | None = None
        for site in ctx.facts.calls:
            if not _configures(site) or site.stmt in done:
                continue
            if ctx.plan.distributed.main_only(ctx.facts, site.stmt, site.scope) is not None:
                continue  # the script already sets it up on one process
            block = _block(ctx, site)
            group = _group(ctx, site, block) if block is not None else None
            ready = group is not None and ctx.will_be_after_accelerator(site.scope, group[0])
            if group is None or not ready or any(ctx.is_skipped(s) for s in group):
                if not ctx.is_skipped(site.stmt):
                    ctx.warn(codes.LOG_EVERY_PROCESS, site.node, name=code_of(site.node.func))
                done.add(site.stmt)
                continue
            done.update(group)
            if agreement is None:  # its own: the shared one is built after the evaluation rule's gathers
                agreement = Agreement(ctx.facts, ctx.plan, ctx.edits)
            if not all(agreement.uniform(site.scope, value, s) for s in group for value in _values(s)):
                continue  # ``level=INFO if local_rank in [-1, 0] else WARN``, a file per rank: already per process
            others = _warnings_only(site, group)
            ctx.regroup_through(site.scope, group, lambda stmts, a, o=others: [_under(f"{a}.is_main_process", stmts, o)])
            ctx.change("set up logging on the main process only")


def _configures(site: CallSite) -> bool:
    """``logging.basicConfig(...)``, ``dictConfig``/``fileConfig``, ``x.addHandler(...)``, as statements."""
    if site.qualname not in CONFIGURERS and site.method != "addHandler":
        return False
    stmt = site.stmt
    return (
        isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
        and isinstance(stmt.body[0], cst.Expr) and stmt.body[0].value is site.node
    )


def _block(ctx: Context, site: CallSite) -> list[cst.BaseStatement] | None:
    """The statements of the block ``site.stmt`` is in."""
    parent = ctx.facts.parent_stmt.get(site.stmt)
    if parent is None:
        scope: Scope | None = site.scope
        while scope is not None and scope.kind != "module":
            scope = scope.parent
        body = list(scope.node.body) if scope is not None else []
    else:
        inner = getattr(parent, "body", None)
        body = list(getattr(inner, "body", ()))
    return body if site.stmt in body else None


def _group(ctx: Context, site: CallSite, block: list[cst.BaseStatement]) -> list[cst.BaseStatement] | None:
    """The consecutive set-up statements around ``site.stmt`` (the handlers and formatters it adds, made and
    dressed just before), or None when a name they bind is read elsewhere (it would not exist on the other
    processes)."""
    scope = site.scope
    made = {name for s in block if (name := _made(scope, s)) is not None}
    setup = [_made(scope, s) is not None or _dresses(scope, s, made) for s in block]
    start = end = block.index(site.stmt)
    while start > 0 and setup[start - 1]:
        start -= 1
    while end + 1 < len(block) and setup[end + 1]:
        end += 1
    group = block[start:end + 1]
    while group and (name := _made(scope, group[-1])) is not None:
        group = group[:-1]  # made after the set-up: not part of it
    while group and (name := _made(scope, group[0])) is not None and not _reads(name, group[1:]):
        group = group[1:]  # made before but not used by this set-up
    for stmt in block:
        name = _made(scope, stmt)
        if stmt not in group and name is not None and _handler(scope, stmt) and _reads(name, group):
            return None  # a handler made apart from the set-up opens its file on every process anyway
    inside = {id(n) for stmt in group for n in m.findall(stmt, m.Name())}
    for name in _names_made(scope, group):
        if any(id(n) not in inside for n in m.findall(scope.node, m.Name(name))):
            return None  # read outside the set-up (``handler.flush()`` later): it must exist on every process
    return group if site.stmt in group else None


def _made(scope: Scope, stmt: cst.BaseStatement) -> str | None:
    """``h = logging.FileHandler(p)`` / ``fmt = logging.Formatter(...)``: the name bound, else None."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    target = assign.targets[0].target
    if len(assign.targets) != 1 or not isinstance(target, cst.Name) or not isinstance(assign.value, cst.Call):
        return None
    q = scope.imports.qualname(assign.value.func) or ""
    if q.startswith("logging.") and (q.endswith("Handler") or q == "logging.Formatter"):
        return target.value
    return None


def _handler(scope: Scope, stmt: cst.BaseStatement) -> bool:
    """``h = logging.FileHandler(p)`` (not a formatter)."""
    assert isinstance(stmt, cst.SimpleStatementLine) and isinstance(stmt.body[0], cst.Assign)
    return (scope.imports.qualname(stmt.body[0].value.func) or "").endswith("Handler")  # type: ignore[attr-defined]


def _names_made(scope: Scope, stmts: list[cst.BaseStatement]) -> list[str]:
    return [name for s in stmts if (name := _made(scope, s)) is not None]


def _dresses(scope: Scope, stmt: cst.BaseStatement, made: set[str]) -> bool:
    """``basicConfig(...)``, ``logger.addHandler(h)``, ``x.setFormatter(fmt)`` / ``x.setLevel(...)`` / ``x.addFilter``,
    any method of a handler made in the block: a set-up statement."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)):
        return False
    call = stmt.body[0].value
    if not isinstance(call, cst.Call):
        return False
    if scope.imports.qualname(call.func) in CONFIGURERS:
        return True
    if not isinstance(call.func, cst.Attribute):
        return False
    owner = call.func.value
    if call.func.attr.value in ("addHandler", "setLevel", "setFormatter", "addFilter") and isinstance(owner, cst.Name):
        return True  # ``logger.setLevel(logging.INFO)`` among them: harmless on the main process only
    return call.func.attr.value == "addHandler" or (isinstance(owner, cst.Name) and owner.value in made)


def _values(stmt: cst.BaseStatement) -> list[cst.BaseExpression]:
    """The expressions a set-up statement evaluates (it is one ``x = call(...)`` or ``call(...)``)."""
    assert isinstance(stmt, cst.SimpleStatementLine)
    small = stmt.body[0]
    return [small.value] if isinstance(small, (cst.Expr, cst.Assign)) else []


def _reads(name: str, stmts: list[cst.BaseStatement]) -> bool:
    return any(isinstance(n, cst.Name) and n.value == name for s in stmts for n in m.findall(s, m.Name()))


def _warnings_only(site: CallSite, group: list[cst.BaseStatement]) -> str | None:
    """For the other processes, when the logger the group adds handlers to has its level lowered outside the group
    (``logger.setLevel(logging.INFO)`` before ``if not logger.handlers:``): ``logger.addHandler(logging.lastResort)``.
    Without a handler there, the first module-level ``logging.info(...)`` of another process calls ``basicConfig()``
    and every line shows twice, the copy prefixed ``INFO:root:`` with that process's own values (field test J4);
    ``lastResort`` keeps logging's default for them: warnings and errors only, on stderr."""
    logging_name = next((name for name, qual in site.scope.imports.aliases.items() if qual == "logging"), None)
    func = site.node.func
    if logging_name is None or site.method != "addHandler" or not isinstance(func, cst.Attribute) \
            or not isinstance(func.value, cst.Name):
        return None
    owner = func.value.value
    lowered = [s for s in site.scope.calls if s.method == "setLevel" and s.stmt not in group
               and isinstance(s.node.func, cst.Attribute) and m.matches(s.node.func.value, m.Name(owner))]
    return f"{owner}.addHandler({logging_name}.lastResort)" if lowered else None


def _under(test: str, body: list[cst.BaseStatement], otherwise: str | None = None) -> cst.BaseStatement:
    """``if <test>:`` over ``body`` (``else: <otherwise>``); the first statement's blank lines and comments go before
    the ``if``."""
    first = body[0]
    body = [first.with_changes(leading_lines=[]), *body[1:]]
    orelse = cst.Else(body=cst.IndentedBlock([cst.parse_statement(otherwise)])) if otherwise is not None else None
    return cst.If(test=expression(test), body=cst.IndentedBlock(body), orelse=orelse, leading_lines=first.leading_lines)
