"""MainProcessWrites: other file writes run on the main process only, so N processes do not race on
the same file.

The writers are the known ones (``write_calls.WRITERS``: ``json.dump``, ``imageio.mimsave``, ``cv2.imwrite``...) and
any library call named like a write that is handed a path (``analysis/named_writes.py``: ``skvideo.io.vwrite(p, v)``,
``tokenizer.save_pretrained(output_dir)``). Only whole statements are wrapped, and not those already on the main
process alone; a write inside a bigger expression is left alone. A log kept open (a TensorBoard
``SummaryWriter``, a ``Logger`` class of the program that makes one and does not train: ``file_writes.logger_class``)
is made on the main process only (``None`` elsewhere) when every use of it is a statement calling one of its methods
with no collective in its arguments or in the method (``analysis/handle_uses.py``); each such statement then runs on
the main process (the save rule keeps its barrier out of such a method, before the call). Otherwise it is reported (ACC024)
with the reason, as is a plain file handle kept open. Removing a file every process names alike (``os.remove`` of a
checkpoint the main process saved, ``shutil.rmtree``, ``Path.unlink``) is a write too (``analysis/removals.py``). A
handle kept open in a helper of a local module the accelerator is not passed to, called after it exists, is reported.
A write in such a helper is kept to the main process at the helper's calls; where a call cannot be (its value is kept,
or it runs the prepared model: O18's ``save_predictions_as_images``), the write itself runs under
``if PartialState().is_main_process:`` (the runtime's process state), with ``PartialState().wait_for_everyone()``
before a later read of the file in the helper; reported (ACC048) only where the write itself reaches the other
processes, or such a read has no place every process reaches.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods import codes
from accelify.codemods.engine.context import Context
from accelify.codemods.analysis.blocks import under_main_process
from accelify.codemods.analysis.null_sinks import null_sink_for_others
from accelify.codemods.analysis.snippets import code_of, expression, made_on_main_process, on_main_process
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.file_writes import (called_after_accelerator, helper_after_accelerator, kept_open, main_only, outermost_write,
                                                    per_item_write, saves_file_object, tracker_uses, writer_class,
                                                    barrier_places, later_reads)
from accelify.codemods.analysis.handle_uses import Collectives, alone, handle_uses, reaches_others
from accelify.codemods.analysis.helper_calls import helper_calls
from accelify.codemods.analysis.import_time import EntryLevel
from accelify.codemods.analysis.named_writes import writes_by_name
from accelify.codemods.analysis.removals import removes_shared_file
from accelify.codemods.analysis.share_walks import walks_a_share
from accelify.codemods.analysis.write_calls import LOG_WRITERS, TF_WRITERS, TRACKERS, writes_file
from accelify.codemods.engine.rule import Example, Rule


class MainProcessWrites(Rule):
    name = "writes"
    description = "Run other file writes (json, plots, open(..., 'w')) on the main process only."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
import json
for x in torch.ones(4, 2):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
with open("metrics.json", "w") as f:
    json.dump({"loss": loss.item()}, f)
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
import json
for x in torch.ones(4, 2):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
if accelerator.is_main_process:
    with open("metrics.json", "w") as f:
        json.dump({"loss": loss.item()}, f)
accelerator.end_training()
''',
        ),
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
with open("config.json") as f:
    print(f.read())
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
with open("config.json") as f:
    accelerator.print(f.read())
accelerator.end_training()
''',
            fires=False,
        ),
        Example(
            # a summary writer: made on the main process only, and each statement writing to it run there
            before='''\
import torch
from torch.utils.tensorboard import SummaryWriter
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
writer = SummaryWriter("runs")
for step, x in enumerate(torch.ones(4, 2)):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    writer.add_scalar("loss", loss.item(), step)
writer.close()
''',
            after='''\
import torch
from torch.utils.tensorboard import SummaryWriter
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
writer = SummaryWriter("runs") if accelerator.is_main_process else None
for step, x in enumerate(torch.ones(4, 2)):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    if accelerator.is_main_process:
        writer.add_scalar("loss", loss.item(), step)
if accelerator.is_main_process:
    writer.close()
accelerator.end_training()
''',
        ),
        Example(
            # a handle kept open and written through later by statements of its own: opened on the main process
            # only (None on the others), and each of those statements runs there (set U's U1)
            before='''\
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
log = open("loss.txt", "w")
for x in torch.ones(4, 2):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    log.write(str(loss.item()))
log.close()
''',
            after='''\
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
log = open("loss.txt", "w") if accelerator.is_main_process else None
for x in torch.ones(4, 2):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    if accelerator.is_main_process:
        log.write(str(loss.item()))
if accelerator.is_main_process:
    log.close()
accelerator.end_training()
''',
        ),
        Example(
            # handed to a function (``json.dump(d, log)``): not one statement to guard, so it is reported
            before='''\
import json
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
log = open("loss.jsonl", "w")
for x in torch.ones(4, 2):
    loss = model(x).sum()
    loss.backward()
    optimizer.step()
    json.dump({"loss": loss.item()}, log)
log.close()
''',
            after='''\
import json
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
log = open("loss.jsonl", "w")
for x in torch.ones(4, 2):
    loss = model(x).sum()
    accelerator.backward(loss)
    optimizer.step()
    if accelerator.is_main_process:
        json.dump({"loss": loss.item()}, log)
log.close()
accelerator.end_training()
''',
            warnings=("ACC024:5",),
        ),
        Example(
            # a write in a helper the accelerator is not passed to: its calls run on the main process when each can
            # (tests/codemods/test_loop_side_calls.py); where a call cannot (its value is kept), the write itself runs
            # there, through the runtime's process state (tests/codemods/test_unreached_writes.py)
            before='''\
import imageio
import torch
def save_gif(frames, path):
    imageio.mimsave(path, frames)
    return len(frames)
def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    frames = []
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
        frames.append(model.weight.detach().numpy())
    save_gif(frames, "progress.gif")
    n = save_gif(frames, "again.gif")
main()
''',
            after='''\
import imageio
import torch
from accelify.runtime import Accelerator
from accelify.runtime import PartialState
def save_gif(frames, path):
    if PartialState().is_main_process:
        imageio.mimsave(path, frames)
    return len(frames)
def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    frames = []
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
        frames.append(model.weight.detach().numpy())
    save_gif(frames, "progress.gif")
    n = save_gif(frames, "again.gif")
    accelerator.end_training()
main()
''',
        ),
        Example(
            # the write itself runs the prepared model (a forward the other processes take part in): neither its
            # call nor the write can run on the main process alone, so it is reported
            before='''\
import imageio
import torch
def save_gif(model, path):
    imageio.mimsave(path, [model(torch.ones(2)).detach().numpy()])
def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
    save_gif(model, "again.gif")
main()
''',
            after='''\
import imageio
import torch
from accelify.runtime import Accelerator
def save_gif(model, path):
    imageio.mimsave(path, [model(torch.ones(2)).detach().numpy()])
def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    for x in torch.ones(4, 2):
        accelerator.backward(model(x).sum())
        optimizer.step()
    save_gif(model, "again.gif")
    accelerator.end_training()
main()
''',
            warnings=("ACC048:4",),
        ),
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
import numpy as np
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x,) in enumerate(loader):
    out = model(x)
    out.sum().backward()
    optimizer.step()
    np.save(f"out_{i}.npy", out.detach().numpy())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
import numpy as np
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=2)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for i, (x,) in enumerate(loader):
    out = model(x)
    accelerator.backward(out.sum())
    optimizer.step()
    if accelerator.is_main_process:
        np.save(f"out_{i}.npy", out.detach().numpy())
accelerator.end_training()
''',
            warnings=("ACC054:11",),
        ),
    )

    def recheck(self, ctx: Context) -> None:
        """Converted code: a handle or ``SummaryWriter`` still opened on every process (ACC024)."""
        for site in ctx.facts.calls:
            if site.qualname in TRACKERS:
                _warn_tracker(ctx, site)
            elif writes_file(site) and ctx.after_accelerator(site.scope, site.stmt) and outermost_write(site) is None:
                _warn_kept_open(ctx, site, set())

    def run(self, ctx: Context) -> None:
        wrapped: set[cst.BaseStatement] = set()
        entry = ctx.plan.analysis(EntryLevel)
        figures = entry.figures if ctx.accelerating and not ctx.notebook and entry.literal else []
        for site in ctx.facts.calls:
            if site.qualname in TRACKERS:
                if not _keep_tracker_to_main(ctx, site, wrapped):
                    _warn_tracker(ctx, site)
                continue
            if (writer_class(ctx.plan, site) or site.qualname in LOG_WRITERS or site.qualname in TF_WRITERS) \
                    and ctx.after_accelerator(site.scope, site.stmt):
                _keep_log_to_main(ctx, site, wrapped)  # ``logger = Logger("./logs")``: a class of the program's own too
                continue
            removal = removes_shared_file(ctx.agreement, site)  # ``os.remove`` of a checkpoint the main process saved
            if not (writes_file(site) or saves_file_object(ctx.plan, site) or removal or writes_by_name(ctx.plan, site)):
                continue
            if not ctx.after_accelerator(site.scope, site.stmt):
                if not removal and helper_after_accelerator(ctx, ctx.plan, site):
                    _warn_in_helper(ctx, site, wrapped)  # ``test(..., save=path)`` of a module with no accelerator
                elif not removal and _deeper_helper(ctx, site, wrapped):
                    pass  # ``save_plot`` called by ``plot_loss_curves``, called by the script: at the script's call
                elif site in figures and ctx.replace(  # ``plot(w, i)`` at the script's top level
                        site.stmt, site.stmt, lambda s: on_main_process(s, f"PartialState({entry.cpu})")):  # type: ignore[misc]
                    ctx.import_state(site.scope.unit)  # (set U's U15: the accelerator made in another module's class)
                    ctx.change("draw figures on the main process only (PartialState)")
                continue
            if removal and (not alone(site) or main_only(ctx.plan, ctx.facts, ctx.edits, site.scope, site.stmt)
                            or Collectives(ctx.facts, ctx.plan, ctx.edits).in_arguments(site) is not None):
                continue
            stmt = outermost_write(site)
            if stmt is None:
                # ``output_file = open("test_y", "w")``, then ``output_file.write(y)`` in a loop and ``.close()``:
                # opened and written on the main process, as a log (set U's U1); else reported
                if not (site.qualname == "open" and _keep_log_to_main(ctx, site, wrapped)):
                    _warn_kept_open(ctx, site, wrapped)
                continue
            if isinstance(stmt, cst.With) and reaches_others(ctx.facts, ctx.plan, ctx.edits, stmt):
                # ``with open(log, "a") as f:`` around the training: kept to the main process whole, it would train
                # alone and wait at its first backward forever
                if _null_sink_for_others(ctx, site, stmt):
                    continue
                item = next(i for i in stmt.items if i.item is site.node)
                target = code_of(item.asname.name) if item.asname is not None else "f"
                ctx.warn(codes.SHARED_WRITER, site.node, name=code_of(site.node.func), target=target,
                         why=" (the `with` block that holds it trains, so it cannot run on the main process alone)")
                continue
            if _handled(ctx, stmt, wrapped) or main_only(ctx.plan, ctx.facts, ctx.edits, site.scope, stmt):
                continue
            accelerator = ctx.accelerator_in(site.scope)
            if ctx.replace(stmt, stmt, lambda s, a=accelerator: on_main_process(s, a)):  # type: ignore[misc]
                wrapped.add(stmt)
                ctx.change("write files on the main process only")
                loader = per_item_write(ctx.plan, site)
                if loader is not None:
                    ctx.warn(codes.SHARD_WRITES, site.node, name=code_of(site.node.func), loader=loader)


def _null_sink_for_others(ctx: Context, site: CallSite, block: cst.With) -> bool:
    """``with open(log, "a") as f:`` around the training, written to only: the other processes open ``os.devnull``
    instead (``analysis/null_sinks.py``). True when done."""
    accelerator = ctx.accelerator_in(site.scope)
    mode = null_sink_for_others(site, block)
    if accelerator is None or mode is None or ctx.rewritten(site.node):
        return False
    imports = site.scope.imports
    os_name = imports.alias_of("os")
    if os_name is None:
        ctx.add_import(ctx.facts.units[site.scope.unit].module, cst.parse_statement("import os"))
        os_name = "os"
    other = f'open({os_name}.devnull, "{mode}")'
    ctx.replace(site.node, block, lambda node, a=accelerator, o=other: cst.IfExp(  # type: ignore[misc]
        test=expression(f"{a}.is_main_process"), body=node, orelse=expression(o)))
    ctx.change("write the log a training block opens on the main process only (os.devnull on the others)")
    return True


def _handled(ctx: Context, stmt: cst.BaseStatement, wrapped: set[cst.BaseStatement]) -> bool:
    """Whether ``stmt``, or a statement around it, is already kept to the main process (or reported) by this rule."""
    return stmt in wrapped or any(s in wrapped for s in ctx.facts.chain(stmt))


def _warn_in_helper(ctx: Context, site: CallSite, wrapped: set[cst.BaseStatement]) -> None:
    """A handle kept open in a helper the accelerator is not passed to: every process writes the file (ACC024); a
    write that is a statement of its own there, or a ``with open(path, "w") as f:``, is kept to the main process at
    the helper's calls (``_write_at_calls``), or reported (ACC048) where a call cannot be."""
    why = f"in `{site.scope.name}`, where the accelerator is not at hand"
    stmt = outermost_write(site)
    if stmt is None:
        _warn_kept_open(ctx, site, wrapped, why)
    elif main_only(ctx.plan, ctx.facts, ctx.edits, site.scope, stmt):
        return
    elif walks_a_share(ctx.plan, site.scope):  # kept to the main process at its calls, it would write that share alone
        item = next((i for i in stmt.items if i.item is site.node), None) if isinstance(stmt, cst.With) else None
        target = code_of(item.asname.name) if item is not None and item.asname is not None else "f"
        ctx.warn(codes.SHARED_WRITER, site.node, name=code_of(site.node.func), target=target,
                 why=f" ({why}, and each process writes its own share of the prepared loader `{site.scope.name}` walks)")
    elif not _handled(ctx, stmt, wrapped):
        wrapped.add(stmt)  # ``json.dump(d, f)`` in that ``with open(...)``: the same write, handled (or reported) once
        _write_at_calls(ctx, site, stmt, wrapped)  # ``with open(path, "w") as f:`` too: its file is written at the calls


def _deeper_helper(ctx: Context, site: CallSite, wrapped: set[cst.BaseStatement]) -> bool:
    """A write that is a statement of its own in a plain helper called only by other plain helpers, every call of
    which runs after the accelerator exists (set V's V8: ``plt.savefig`` in ``save_plot``, called by
    ``plot_loss_curves``, called by the script): each statement that calls it where the accelerator is, a statement of
    its own, runs on the main process (``_write_at_calls``'s walk); True when done, else nothing is changed (nor
    reported: as before, such a helper is not followed)."""
    stmt = outermost_write(site)
    scope = site.scope
    if stmt is None or scope.kind != "function" or scope.class_scope is not None or ctx.accelerator_in(scope) is not None \
            or main_only(ctx.plan, ctx.facts, ctx.edits, scope, stmt) or not called_after_accelerator(ctx, ctx.plan, scope):
        return False

    calls = helper_calls(ctx.facts, ctx.plan, site, _statement_ready(ctx), Collectives(ctx.facts, ctx.plan, ctx.edits))
    if calls is None:
        return False
    wrapped.add(stmt)
    _on_main_at(ctx, calls, wrapped)
    return True


def _statement_ready(ctx: Context):  # noqa: ANN202 - helper_calls' Ready
    """A call of a helper that can run on the main process alone: a statement of its own (its value not kept),
    where the accelerator exists."""
    def ready(where: Scope, holder: cst.BaseStatement) -> bool:
        return (isinstance(holder, cst.SimpleStatementLine) and isinstance(holder.body[0], cst.Expr)
                and ctx.accelerator_in(where) is not None and ctx.after_accelerator(where, holder))
    return ready


def _on_main_at(ctx: Context, calls: list[tuple[Scope, cst.BaseStatement]], wrapped: set[cst.BaseStatement]) -> None:
    """Each of ``calls`` (statements calling a helper that writes) under ``if accelerator.is_main_process:``."""
    for where, holder in calls:
        if _handled(ctx, holder, wrapped) or main_only(ctx.plan, ctx.facts, ctx.edits, where, holder):
            continue
        accelerator = ctx.accelerator_in(where)
        if ctx.replace(holder, holder, lambda s, a=accelerator: on_main_process(s, a)):  # type: ignore[misc]
            wrapped.add(holder)
            ctx.change("write files on the main process only")


def _write_at_calls(ctx: Context, site: CallSite, stmt: cst.BaseStatement, wrapped: set[cst.BaseStatement]) -> None:
    """``imageio.mimsave(path, frames)`` in ``save_gif(frames, path)`` of a module the accelerator is not passed to:
    each call of the helper, a statement of its own whose value is not kept, where the accelerator exists and with
    nothing in it that reaches the other processes, runs on the main process; where one is not (the helper runs the
    prepared model too: O18's ``save_predictions_as_images(val_loader, model)``), the write itself does, through the
    runtime's process state (``_write_on_main_state``), or it is reported (ACC048)."""
    calls = helper_calls(ctx.facts, ctx.plan, site, _statement_ready(ctx), Collectives(ctx.facts, ctx.plan, ctx.edits))
    if calls is None:
        if not _write_on_main_state(ctx, site, stmt):
            ctx.warn(codes.HELPER_WRITE, site.node, name=code_of(site.node.func), helper=site.scope.name)
        return
    _on_main_at(ctx, calls, wrapped)


def _write_on_main_state(ctx: Context, site: CallSite, stmt: cst.BaseStatement) -> bool:
    """The write ``stmt`` in a helper the accelerator is not passed to, every call of which runs after it exists:
    ``if PartialState().is_main_process:`` around it (the runtime's process state, which the accelerator's is; the
    rest of the helper, the model's forward included, still runs on every process), with a
    ``PartialState().wait_for_everyone()`` before a later call of the helper handed the same path (a read), where
    every process reaches it. False where the statement reaches the other processes itself, or such a read has no
    such place: nothing is changed."""
    if reaches_others(ctx.facts, ctx.plan, ctx.edits, stmt) or ctx.plan.in_other_trainer(site.scope):
        return False
    places = []
    for read in later_reads(ctx.facts, site):
        place = ctx.agreement.collective_place(read.stmt, read.scope, movable=True, after=stmt)
        if place is None:
            return False
        places.append(place)
    state = ctx.process_state(shared=True)
    if not ctx.replace(stmt, stmt, lambda s, a=state: on_main_process(s, a)):  # type: ignore[misc]
        return False
    for place in barrier_places(ctx.facts, places):
        ctx.insert_before(place, [f"{state}.wait_for_everyone()"])
    ctx.import_state(site.scope.unit)
    ctx.change("write files on the main process only (PartialState)")
    return True


def _warn_kept_open(ctx: Context, site: CallSite, wrapped: set[cst.BaseStatement], why: str = "") -> None:
    """A handle every process keeps and writes through later that is not kept to the main process: say so (ACC024)."""
    target = kept_open(ctx.facts, ctx.plan, ctx.agreement, site, wrapped)
    if target is not None:
        ctx.warn(codes.SHARED_WRITER, site.node, name=code_of(site.node.func), target=code_of(target),
                 why=f" ({why})" if why else "")


def _keep_log_to_main(ctx: Context, site: CallSite, wrapped: set[cst.BaseStatement]) -> bool:
    """``writer = SummaryWriter(dir)`` (or a ``Logger`` of the program that makes one) on every process: made on
    the main process only, ``None`` elsewhere, and each statement that calls one of its methods run on the main
    process only; where a use cannot be (``handle_uses`` says why), reported (ACC024) with the reason."""
    target = kept_open(ctx.facts, ctx.plan, ctx.agreement, site, wrapped)
    if target is None:
        calls = _factory_calls(ctx, site)  # ``return SummaryWriter(log_dir)`` in ``create_writer(name)``
        return bool([_keep_log_to_main(ctx, call, wrapped) for call in calls]) and bool(calls)
    found = handle_uses(ctx.facts, site.scope, site.stmt, target, Collectives(ctx.facts, ctx.plan, ctx.edits))
    problem = found.problem
    pending: list[tuple[Scope, cst.SimpleStatementLine]] = []
    for reader, stmt, use in found.uses:
        if problem is not None:
            break
        if ctx.accelerator_in(reader) is None or not ctx.after_accelerator(reader, stmt):
            problem = f"`{reader.name}` uses `{found.key}` where the accelerator is not at hand"
        elif ctx.is_skipped(stmt):
            problem = f"a use of `{found.key}` is marked `# accelify: skip`"
        elif not main_only(ctx.plan, ctx.facts, ctx.edits, reader, stmt):
            pending.append((reader, stmt))
    if problem is not None:
        _warn_kept_open(ctx, site, wrapped, f"it could not be kept to the main process: {problem}")
        return True
    value = site.stmt.body[0].value  # type: ignore[attr-defined]
    ctx.replace_through(site.scope, value, site.stmt, made_on_main_process)
    for reader, stmt in pending:
        ctx.replace_through(reader, stmt, stmt, on_main_process)
        wrapped.add(stmt)
    ctx.change("open the log on the main process only, and write to it there")
    return True


def _factory_calls(ctx: Context, site: CallSite) -> list[CallSite]:
    """``return SummaryWriter(log_dir=log_dir)`` as the body's end of a function of the program (set V's V8:
    ``create_writer(name)``): its calls, each the value of an assignment of its own (``writer =
    create_writer("exp")``), which make the log as the writer's own creation would; else none."""
    stmt = site.stmt
    if site.scope.kind != "function" or not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1
                                             and isinstance(stmt.body[0], cst.Return) and stmt.body[0].value is site.node):
        return []
    calls = ctx.plan.call_sites(site.scope)
    if not all(isinstance(c.stmt, cst.SimpleStatementLine) and len(c.stmt.body) == 1
               and isinstance(c.stmt.body[0], cst.Assign) and c.stmt.body[0].value is c.node for c in calls):
        return []
    return calls


def _keep_tracker_to_main(ctx: Context, site: CallSite, wrapped: set[cst.BaseStatement]) -> bool:
    """``wandb.init(project=..., sync_tensorboard=True)`` as a statement of its own, whose every use of the package
    can run on the main process alone (``tracker_uses``): each runs there (one run of the training on the tracker),
    and True is returned; else nothing is changed."""
    uses = tracker_uses(ctx, ctx.facts, ctx.plan, site)
    if uses is None:
        return False
    for use in uses:
        if not main_only(ctx.plan, ctx.facts, ctx.edits, use.scope, use.stmt) and use.stmt not in wrapped:
            ctx.replace_through(use.scope, use.stmt, use.stmt, on_main_process)
            wrapped.add(use.stmt)  # type: ignore[arg-type]
    ctx.change("start the experiment tracker's run on the main process only, and log to it there")
    return True


def _warn_tracker(ctx: Context, site: CallSite) -> None:
    """``wandb.init(...)`` run by every process: N runs of one training on the tracker (ACC024), unless the script
    already keeps it to one process."""
    stmt = site.stmt
    if ctx.plan.distributed.main_only(ctx.facts, stmt, site.scope) is not None or under_main_process(ctx.facts, stmt):
        return
    small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
    target = code_of(small.targets[0].target) if isinstance(small, cst.Assign) and len(small.targets) == 1 else "run"
    ctx.warn(codes.SHARED_WRITER, site.node, name=code_of(site.node.func), target=target, why="")
