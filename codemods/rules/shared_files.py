"""WriteOnceReadAll: files made at start-up and read back are made by the main process; the others wait, then read.

Every process runs the start-up code. An archive written (``zipfile.ZipFile(p, "w")``), extracted (``zipfile.ZipFile(p).extractall(d)``,
``tarfile``, ``shutil.unpack_archive``), a file downloaded (``urllib.request.urlretrieve``,
``torch.hub.download_url_to_file``, or ``urllib.request.urlopen``/``requests.get`` in a function that writes it out,
extracts or deletes files) or a table written and read back (``df.to_csv(p)`` then
``pd.read_csv(p)``) is written by N processes at once into the same place, and read by some while
others are still writing it. So the statement that makes the files runs on the main process only, and
``accelerator.wait_for_everyone()`` follows it, after the write and before any read:

    if accelerator.is_main_process:
        with zipfile.ZipFile(archive) as zf:
            zf.extractall(root)
    accelerator.wait_for_everyone()

An ``if not os.path.exists(d):`` around it goes under the test whole, so that the barrier is outside every
branch a process could take alone (the others may find the folder the main process is filling). A table
written and never read back in the run is only written on the main process (no barrier). This works in a
helper too (``prepare_data(root)`` called by ``main()`` after the accelerator exists: it gets the accelerator).

A helper the accelerator does not reach (``get_training_set()`` -> ``download_bsd300()``, fetching with ``urlopen`` and
extracting) runs under ``with accelerator.main_process_first():`` at its calls instead, where every call is a
statement after the accelerator exists and nothing in it reaches the other processes (``analysis/helper_calls.py``).

Left as it is, with ACC018: a statement inside a loop or a branch other than an existence test, where the
accelerator does not exist yet (at import time, in a helper called before it is created), or a download
(``urlopen``, ``requests.get``) that its function writes out, extracts or deletes files after, when its calls cannot
be put on the main process first: at the fetch.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.handle_uses import Collectives
from accelify.codemods.analysis.helper_calls import first_ready, helper_calls
from accelify.codemods.analysis.import_time import EntryLevel
from accelify.codemods.analysis.snippets import code_of, on_main_process, statement
from accelify.codemods.analysis.write_calls import TABLE_WRITES
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.main_first import first_at
from accelify.codemods.engine.rule import Example, Rule

_MAKERS = {"shutil.unpack_archive", "urllib.request.urlretrieve", "torch.hub.download_url_to_file",
           "torchvision.datasets.utils.download_and_extract_archive", "torchvision.datasets.utils.extract_archive",
           "torchvision.datasets.utils.download_url"}
_FETCHES = ("urllib.request.urlopen", "requests.get", "requests.request", "httpx.get")  # written out by the code around
_DELETES = ("os.remove", "os.unlink", "shutil.rmtree")
_READS = ("read_csv", "read_parquet", "read_feather", "read_pickle", "load", "loadtxt", "open")
_ARCHIVES = ("zipfile.ZipFile", "tarfile.open", "tarfile.TarFile")
_CHECKS = ("os.path.exists", "os.path.isdir", "os.path.isfile")


class WriteOnceReadAll(Rule):
    name = "shared_files"
    description = "Extract, download or write start-up files on the main process; the others wait, then read them."
    examples = (
        Example(
            before='''\
import os
import zipfile
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
if not os.path.isdir("data/raw"):
    with zipfile.ZipFile("data/raw.zip") as zf:
        zf.extractall("data")
x = torch.load("data/raw/x.pt")
for row in x:
    model(row).sum().backward()
    optimizer.step()
''',
            after='''\
import os
import zipfile
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
if accelerator.is_main_process:
    if not os.path.isdir("data/raw"):
        with zipfile.ZipFile("data/raw.zip") as zf:
            zf.extractall("data")
accelerator.wait_for_everyone()
x = torch.load("data/raw/x.pt")
for row in x:
    accelerator.backward(model(row).sum())
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC022:10",),
        ),
        Example(
            # a table written and read back by every process, made in a helper main() calls
            before='''\
import pandas as pd
import torch

def load_table(path):
    pd.DataFrame({"a": [1.0, 2.0]}).to_csv(path, index=False)
    return pd.read_csv(path)

def main():
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    table = load_table("t.csv")
    for value in table["a"]:
        model(torch.tensor([value])).sum().backward()
        optimizer.step()
''',
            after='''\
import pandas as pd
import torch
from accelify.runtime import Accelerator

def load_table(path, accelerator):
    if accelerator.is_main_process:
        pd.DataFrame({"a": [1.0, 2.0]}).to_csv(path, index=False)
    accelerator.wait_for_everyone()
    return pd.read_csv(path)

def main():
    accelerator = Accelerator(cpu=True)
    model = torch.nn.Linear(1, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    table = load_table("t.csv", accelerator)
    for value in table["a"]:
        accelerator.backward(model(torch.tensor([value])).sum())
        optimizer.step()
    accelerator.end_training()
''',
            warnings=("ACC022:12",),
        ),
        Example(
            # an archive only read: nothing is written
            before='''\
import zipfile
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
with zipfile.ZipFile("data.zip") as zf:
    names = zf.namelist()
for x in torch.ones(len(names), 2):
    model(x).sum().backward()
    optimizer.step()
''',
            after='''\
import zipfile
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
with zipfile.ZipFile("data.zip") as zf:
    names = zf.namelist()
for x in torch.ones(len(names), 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
accelerator.end_training()
''',
            fires=False,
            warnings=("ACC022:7",),
        ),
        Example(
            # extracted at import time, before main() creates the accelerator: reported
            before='''\
import shutil
import torch
shutil.unpack_archive("data.tar.gz", "data")

def main():
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x in torch.ones(4, 2):
        model(x).sum().backward()
        optimizer.step()
''',
            after='''\
import shutil
import torch
from accelify.runtime import Accelerator
shutil.unpack_archive("data.tar.gz", "data")

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
            warnings=("ACC018:3",),
        ),
    )

    def run(self, ctx: Context) -> None:
        if not ctx.accelerating:
            return
        done: set[int] = set()
        for site in ctx.facts.calls:
            read_back = self._makes(site)
            if read_back is None or ctx.is_skipped(site.stmt) or id(site.stmt) in done:
                continue
            if ctx.plan.distributed.main_only(ctx.facts, site.stmt, site.scope) is not None:
                continue
            unit = None if read_back is _fetched else _unit(ctx, site)
            if unit is None or not ctx.will_be_after_accelerator(site.scope, unit):
                if read_back is _read_back and _entry_table(ctx, site):
                    continue
                if not _first_at_calls(ctx, site):
                    ctx.warn(codes.STARTUP_RACE, site.node, name=code_of(site.node.func))
                continue
            done.add(id(site.stmt))
            barrier = read_back(ctx, site)
            if barrier and ctx.agreement.collective_place(unit, site.scope) is None:
                ctx.warn(codes.STARTUP_RACE, site.node, name=code_of(site.node.func))  # the barrier after it would hang
                continue
            ctx.regroup_through(site.scope, [unit], lambda group, a, b=barrier: _gate(group, a, b))
            ctx.change("make start-up files on the main process; the others wait, then read them")

    def _makes(self, site: CallSite):  # noqa: ANN202 - a predicate or None
        """How to tell whether what ``site`` makes is read back (then a barrier follows), or None."""
        q = site.qualname or ""
        if q in _MAKERS or site.method == "extractall" or (q in _ARCHIVES and _writing(site.node)):
            return lambda ctx, s: True  # an archive written, extracted or downloaded, to be read
        if _extracts_member(site):
            return lambda ctx, s: True  # ``for item in tar: tar.extract(item, dest)``
        if q in _FETCHES and _writes_files(site.scope):
            return _fetched  # a download the same function writes out (``open(p, "wb")``, an extraction)
        if site.method in TABLE_WRITES and site.node.args:
            return _read_back
        return None


def _first_at_calls(ctx: Context, site: CallSite) -> bool:
    """Files made in a helper the accelerator does not reach (``get_training_set()`` -> ``download_bsd300()``): each
    statement calling the helper, where the accelerator exists, runs under ``main_process_first``
    (``analysis/helper_calls.py``); True when every call can, else nothing is changed."""
    if ctx.accelerator_in(site.scope) is not None:
        return False
    found = helper_calls(ctx.facts, ctx.plan, site, lambda scope, stmt: first_ready(ctx, scope, stmt, ctx.facts),
                         Collectives(ctx.facts, ctx.plan, ctx.edits))
    if found is None:
        return False
    first_at(ctx, found)
    ctx.change("make start-up files in a helper on the main process first, at its calls")
    return True



def _entry_table(ctx: Context, site: CallSite) -> bool:
    """A table the entry script writes, never read back, in a function of the script out of the accelerator's reach
    (set U's U15: ``predictions_df.to_csv(p)`` in ``main()`` after a trainer of another module trained): written
    on the main process through ``PartialState``, as the figures saved there (``EntryLevel``); True when done."""
    entry = ctx.plan.analysis(EntryLevel)
    if ctx.notebook or not entry.literal or site not in entry.figures or _read_back(ctx, site):
        return False
    if not ctx.replace(site.stmt, site.stmt, lambda s: on_main_process(s, f"PartialState({entry.cpu})")):  # type: ignore[misc]
        return False
    ctx.import_state(site.scope.unit)
    ctx.change("write tables on the main process only (PartialState)")
    return True


def _fetched(ctx: Context, site: CallSite) -> bool:
    """A download its function writes out elsewhere (``data = urlopen(url)``, then ``open(p, "wb")``, an extraction,
    ``os.remove``): the files are made by statements spread through the function, some of which the writes rule
    keeps to the main process already, so it is reported (ACC018), never gated in part."""
    return True


def _read_back(ctx: Context, site: CallSite) -> bool:
    """Whether the program reads the path ``site`` wrote (the same expression or name) after it, or in another
    function (which may run after it): a barrier then goes between."""
    path = code_of(site.node.args[0].value)
    order = ctx.facts.order
    return any(
        (other.method or (other.qualname or "").rsplit(".", 1)[-1]) in _READS
        and other.node.args and code_of(other.node.args[0].value) == path
        and (other.scope is not site.scope or order[other.stmt][0] > order[site.stmt][1])  # elsewhere: it may run later
        for other in ctx.facts.calls
    )


def _unit(ctx: Context, site: CallSite) -> cst.BaseStatement | None:
    """The statement to run on the main process: the call's own statement, the ``with`` that opens the archive
    around it, and the existence tests around those; None when it is not directly in its function's body."""
    stmt = site.stmt
    opened = isinstance(stmt, cst.With) and any(item.item is site.node for item in stmt.items)
    if not opened and not (
        isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Expr)
    ):
        return None
    parent = ctx.facts.parent_stmt.get(stmt)
    if isinstance(parent, cst.With) and len(parent.body.body) == 1 and any(
        isinstance(item.item, cst.Call) and site.scope.imports.qualname(item.item.func) in _ARCHIVES for item in parent.items
    ):
        stmt, parent = parent, ctx.facts.parent_stmt.get(parent)
    while isinstance(parent, cst.If) and parent.orelse is None and len(parent.body.body) == 1 and _checks(site.scope, parent.test):
        stmt, parent = parent, ctx.facts.parent_stmt.get(parent)
    body = site.scope.body
    return stmt if stmt in body else None


def _writes_files(scope: Scope) -> bool:
    """Whether ``scope`` itself writes, extracts or deletes files (``open(p, "wb")``, ``tar.extractall(d)``,
    ``os.remove(p)``): a download it makes is then files on disk every process makes at once."""
    for call in scope.calls:
        q = call.qualname or ""
        if (q in ("open", "io.open") and _writing(call.node)) or q in _DELETES or q in _MAKERS:
            return True
        if call.method in ("extractall", "write_bytes", "write_text") or _extracts_member(call):
            return True
    return False


def _extracts_member(site: CallSite) -> bool:
    """``tar.extract(item, dest)`` in a function that opens an archive (not pandas' ``.str.extract(pattern)``)."""
    return site.method == "extract" and any((c.qualname or "") in _ARCHIVES for c in site.scope.calls)


def _writing(call: cst.Call) -> bool:
    """``zipfile.ZipFile(p, "w")`` / ``tarfile.open(p, mode="w:gz")``: an archive opened to be written."""
    mode = next((a.value for a in call.args if a.keyword is not None and a.keyword.value == "mode"), None)
    positional = [a.value for a in call.args if a.keyword is None]
    if mode is None and len(positional) > 1:
        mode = positional[1]
    return isinstance(mode, cst.SimpleString) and str(mode.evaluated_value)[:1] in ("w", "a", "x")


def _checks(scope: Scope, test: cst.BaseExpression) -> bool:
    """``not os.path.exists(d)`` / ``not Path(d).exists()``: a test on whether the files are there."""
    calls = m.findall(test, m.Call())
    return bool(calls) and all(
        scope.imports.qualname(c.func) in _CHECKS or (isinstance(c.func, cst.Attribute) and c.func.attr.value in ("exists", "is_dir"))
        or scope.imports.qualname(c.func) in ("os.path.join", "pathlib.Path")
        for c in calls  # type: ignore[union-attr]
    )


def _gate(group: list[cst.BaseStatement], accelerator: str, barrier: bool) -> list[cst.BaseStatement]:
    first = group[0]
    shell = statement(f"if {accelerator}.is_main_process:\n    pass\n")
    assert isinstance(shell, cst.If)
    gated = shell.with_changes(
        body=cst.IndentedBlock([first.with_changes(leading_lines=[]), *group[1:]]), leading_lines=first.leading_lines
    )
    return [gated, statement(f"{accelerator}.wait_for_everyone()")] if barrier else [gated]
