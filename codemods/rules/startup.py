"""SafeStartup: folders and downloads made at start-up do not race between processes.

Every process runs the start-up code. Two processes that both find a folder missing both create it,
and the second ``os.makedirs`` raises ``FileExistsError``. So:

- ``os.makedirs(d)`` (and ``Path(d).mkdir()``) gains ``exist_ok=True``: behind an existence check
  that is exactly what one process did; a bare one no longer fails when the folder already exists
  (the only difference, and only where the original would have stopped with an error); behind an existence check
  whose block also writes a file there (a data cache built once, then read by every run), the block goes under
  ``with accelerator.main_process_first():`` (the main process builds it, the others find the folder and read);
- ``os.mkdir(d)`` behind an existence check goes under ``with accelerator.main_process_first():``,
  so the main process creates it and the others then find it; a bare one runs on the main process
  only, followed by ``accelerator.wait_for_everyone()``;
- a dataset built with ``download=True`` is built under ``with accelerator.main_process_first():``
  (the main process downloads, the others then read the files): its own statement, or the one it is written in
  (``loader = DataLoader(datasets.MNIST(root, download=True), ...)``) when nothing else there reaches the other
  processes; in a helper of the program without the accelerator, each call of the helper (a statement after the
  accelerator exists) goes under it instead.

Where the accelerator does not exist yet (``os.mkdir`` or a download before it is created), the
statement is left as it is, with ACC018.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.snippets import code_of, expression, statement
from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.handle_uses import Collectives, reaches_others
from accelify.codemods.analysis.helper_calls import already_first, first_ready, helper_calls, holding_statement
from accelify.codemods.analysis.write_calls import writes_file
from accelify.codemods.engine.rule import Example, Rule

_CHECKS = ("os.path.exists", "os.path.isdir", "os.path.lexists")


class SafeStartup(Rule):
    name = "startup"
    description = "Create folders and download data at start-up without races between processes."
    examples = (
        Example(
            before='''\
import os
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if not os.path.exists("out"):
    os.makedirs("out")
if not os.path.isdir("out/samples"):
    os.mkdir("out/samples")
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import os
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
if not os.path.exists("out"):
    os.makedirs("out", exist_ok=True)
with accelerator.main_process_first():
    if not os.path.isdir("out/samples"):
        os.mkdir("out/samples")
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import os
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
os.makedirs("out", exist_ok=True)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import os
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
os.makedirs("out", exist_ok=True)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            before='''\
import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms

train_set = torchvision.datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())


def main():
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


if __name__ == "__main__":
    main()
''',
            after='''\
import torch
import torchvision
from torch.utils.data import DataLoader
from torchvision import transforms
from accelify.runtime import Accelerator

train_set = torchvision.datasets.MNIST("data", train=True, download=True, transform=transforms.ToTensor())


def main():
    accelerator = Accelerator()
    loader = DataLoader(train_set, batch_size=64, shuffle=True)
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(28 * 28, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
    for images, labels in loader:
        loss = torch.nn.functional.cross_entropy(model(images), labels)
        optimizer.zero_grad()
        accelerator.backward(loss)
        optimizer.step()
    accelerator.end_training()


if __name__ == "__main__":
    main()
''',
            warnings=("ACC018:6",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        wrapped: set[cst.BaseStatement] = set()
        for site in ctx.facts.calls:
            q = site.qualname or ""
            if _race_handled(ctx, site):
                continue  # `try: os.makedirs(d) except OSError: pass`: the losing process already carries on
            if ctx.plan.distributed.main_only(ctx.facts, site.stmt, site.scope):
                continue  # under the script's own main-process test: one process creates it
            if q == "os.makedirs" or (site.method == "mkdir" and q != "os.mkdir" and _is_path_mkdir(site)):
                guard = _guard(ctx, site)
                if guard is not None and _writes_in(ctx, guard):
                    # ``if not os.path.exists(DATA): os.makedirs(DATA); ...; np.save(DATA/"data.npy", data)``, then
                    # every process loads it (set U's U2): the main process builds the cache, the others then find
                    # the folder and only read
                    self._first(ctx, site, guard, wrapped)
                    continue
                if not _has_keyword(site.node, "exist_ok") and ctx.replace(site.node, site.stmt, _exist_ok):
                    ctx.change("create folders with exist_ok=True")
                elif not _exist_ok_true(site.node):
                    # ``mkdir(parents=True, exist_ok=run_id == "")``: the author wants an error where it exists, and
                    # the second process gets one (FileExistsError) for the folder the first just made
                    ctx.warn(codes.STARTUP_RACE, site.node, name=code_of(site.node.func))
            elif q == "os.mkdir":
                self._mkdir(ctx, site, wrapped)
            elif any(a.keyword is not None and a.keyword.value == "download" and _true(a.value) for a in site.node.args):
                if ctx.accelerator_in(site.scope) is None and _download_in_helper(ctx, site, wrapped):
                    continue
                self._first(ctx, site, _alone(site) or _holding(ctx, site), wrapped)

    def _mkdir(self, ctx: Context, site: CallSite, wrapped: set[cst.BaseStatement]) -> None:
        guard = _guard(ctx, site)
        if guard is not None:
            self._first(ctx, site, guard, wrapped)
            return
        stmt = _alone(site)
        accelerator = ctx.accelerator_in(site.scope)
        if stmt is None or accelerator is None or not ctx.after_accelerator(site.scope, stmt):
            ctx.warn(codes.STARTUP_RACE, site.node, name=code_of(site.node.func))
            return
        if ctx.replace(stmt, stmt, lambda s, a=accelerator: _under(s, f"if {a}.is_main_process:")):  # type: ignore[misc]
            if ctx.agreement.collective_place(stmt, site.scope) is stmt:  # after the write: it cannot move before a test
                ctx.insert_after(stmt, [f"{accelerator}.wait_for_everyone()"])
            ctx.change("create folders on the main process only")

    def _first(self, ctx: Context, site: CallSite, stmt: cst.BaseStatement | None, wrapped: set[cst.BaseStatement]) -> None:
        """``with accelerator.main_process_first():`` around ``stmt``."""
        accelerator = ctx.accelerator_in(site.scope)
        if stmt is None or accelerator is None or not ctx.after_accelerator(site.scope, stmt):
            ctx.warn(codes.STARTUP_RACE, site.node, name=code_of(site.node.func))
            return
        if stmt in wrapped or already_first(ctx, stmt):
            return
        if ctx.agreement.collective_place(stmt, site.scope) is None \
                or reaches_others(ctx.facts, ctx.plan, ctx.edits, stmt):
            # main_process_first waits: not in a local branch, nor around a barrier (a save rule's in a ``download()``:
            # the main process would wait there for the others, which wait for it to leave)
            ctx.warn(codes.STARTUP_RACE, site.node, name=code_of(site.node.func))
            return
        if ctx.replace(stmt, stmt, lambda s, a=accelerator: _under(s, f"with {a}.main_process_first():")):  # type: ignore[misc]
            wrapped.add(stmt)
            ctx.change("create folders and download data on the main process first")


def _holding(ctx: Context, site: CallSite) -> cst.BaseStatement | None:
    """``train_loader = DataLoader(datasets.MNIST(root, download=True), ...)``: the one statement the download is
    written in, when nothing else in it reaches the other processes (so running it under ``main_process_first``
    only orders the processes: the main process downloads, the others then read)."""
    return holding_statement(ctx.facts, site, Collectives(ctx.facts, ctx.plan, ctx.edits))


def _download_in_helper(ctx: Context, site: CallSite, wrapped: set[cst.BaseStatement]) -> bool:
    """A download in a helper of the program that has no accelerator (``get_training_dataloader(...)`` building
    ``CIFAR100(root, download=True)``): each call of the helper runs under ``main_process_first``
    (``analysis/helper_calls.py``); True when every call can."""
    found = helper_calls(ctx.facts, ctx.plan, site, lambda scope, stmt: first_ready(ctx, scope, stmt),
                         Collectives(ctx.facts, ctx.plan, ctx.edits))
    if found is None:
        return False
    for scope, holder in found:
        if holder not in wrapped and not already_first(ctx, holder):
            accelerator = ctx.accelerator_in(scope)
            ctx.replace(holder, holder, lambda s, a=accelerator: _under(s, f"with {a}.main_process_first():"))  # type: ignore[misc]
            wrapped.add(holder)
    ctx.change("download data on the main process first")
    return True


def _writes_in(ctx: Context, block: cst.BaseStatement) -> bool:
    """Whether a statement inside ``block`` writes a file (a cache made there, read after it)."""
    return any(block in ctx.facts.chain(s.stmt)[1:] and writes_file(s) for s in ctx.facts.calls)


def _race_handled(ctx: Context, site: CallSite) -> bool:
    """Whether the call sits in a ``try`` whose ``except`` catches ``OSError`` / ``FileExistsError``."""
    for outer in ctx.facts.chain(site.stmt)[1:]:
        if isinstance(outer, cst.Try):
            for handler in outer.handlers:
                caught = code_of(handler.type) if handler.type is not None else "BaseException"
                body = code_of(handler.body)
                stops = "raise" in body or "exit(" in body  # `except OSError: sys.exit(1)` ends the launch
                if any(name in caught for name in ("OSError", "FileExistsError", "IOError", "Exception")) and not stops:
                    return True
    return False


def _guard(ctx: Context, site: CallSite) -> cst.If | None:
    """The ``if not os.path.exists(d):`` around a call on ``d`` (its first argument), if any."""
    if not site.node.args:
        return None
    path = code_of(site.node.args[0].value)
    for outer in ctx.facts.chain(site.stmt)[1:]:
        if isinstance(outer, cst.If):
            for check in m.findall(outer.test, m.Call()):
                assert isinstance(check, cst.Call)
                if site.scope.imports.qualname(check.func) in _CHECKS and check.args and code_of(check.args[0].value) == path:
                    return outer
    return None


def _alone(site: CallSite) -> cst.BaseStatement | None:
    """The statement that is this call (``os.mkdir(d)``) or assigns it (``ds = MNIST(..., download=True)``)."""
    stmt = site.stmt
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, (cst.Expr, cst.Assign, cst.AnnAssign)) and small.value is site.node:
            return stmt
    return None


def _is_path_mkdir(site: CallSite) -> bool:
    """``Path(d).mkdir(...)`` or ``out_dir.mkdir(...)``: a pathlib mkdir (not ``os.mkdir``)."""
    return isinstance(site.node.func, cst.Attribute) and not any(a.keyword is None for a in site.node.args[:1])


def _has_keyword(call: cst.Call, name: str) -> bool:
    return any(a.keyword is not None and a.keyword.value == name for a in call.args)


def _exist_ok_true(call: cst.Call) -> bool:
    """Whether ``call`` passes ``exist_ok=True`` (or no ``exist_ok`` at all)."""
    return all(_true(a.value) for a in call.args if a.keyword is not None and a.keyword.value == "exist_ok")


def _true(value: cst.BaseExpression) -> bool:
    return isinstance(value, cst.Name) and value.value == "True"


def _exist_ok(call: cst.CSTNode) -> cst.CSTNode:
    assert isinstance(call, cst.Call)
    arg = cst.Arg(
        expression("True"), keyword=cst.Name("exist_ok"),
        equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")),
    )
    args = list(call.args)
    if args and args[-1].comma != cst.MaybeSentinel.DEFAULT:
        arg = arg.with_changes(comma=args[-1].comma)
        args[-1] = args[-1].with_changes(comma=cst.Comma(whitespace_after=cst.SimpleWhitespace(" ")))
    return call.with_changes(args=[*args, arg])


def _under(stmt: cst.CSTNode, header: str) -> cst.CSTNode:
    """``stmt`` indented under ``header`` (an ``if ...:`` or ``with ...:`` line)."""
    assert isinstance(stmt, cst.BaseStatement)
    shell = statement(f"{header}\n    pass\n")
    assert isinstance(shell, (cst.If, cst.With))
    return shell.with_changes(
        body=cst.IndentedBlock([stmt.with_changes(leading_lines=[])]), leading_lines=stmt.leading_lines
    )
