"""WarnBatchIndex: a loop over a prepared loader that skips or stops by the batch index (``for i, (x, y) in
enumerate(loader): if i < 8: continue``, ``if i >= args.max_batches: break``).

On N processes each process walks 1/N of the batches and ``i`` counts its own: each skips (or trains) the bound's
number of ITS batches, N times as many as the original overall, and nothing fails. Reported (ACC052) with the bound
spread over the processes as the fix; left as it is, because ``accelify verify``'s exact mode splits each original
batch over the processes (there ``i`` counts the original's batches), so no rewrite could be checked there. A test on
the index modulo something (``if i % 100 == 0: print(...)``) only says how often, and is left alone.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_OPS = {cst.LessThan: "<", cst.LessThanEqual: "<=", cst.GreaterThan: ">", cst.GreaterThanEqual: ">=", cst.Equal: "=="}


class WarnBatchIndex(Rule):
    name = "batch_index"
    description = "Report a loop over a prepared loader that skips or stops by the batch index."
    examples = (
        Example(
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(40, 2), torch.randn(40, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    if i < 4:
        continue
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(40, 2), torch.randn(40, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for i, (x, y) in enumerate(loader):
    if i < 4:
        continue
    optimizer.zero_grad()
    accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
    optimizer.step()
accelerator.end_training()
''',
            warnings=("ACC052:7",),
        ),
        Example(  # how often to print: the same on every process, nothing to report
            before='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(40, 2), torch.randn(40, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    optimizer.step()
    if i % 5 == 0:
        print(i, loss.item())
''',
            after='''\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
loader = DataLoader(TensorDataset(torch.randn(40, 2), torch.randn(40, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
for i, (x, y) in enumerate(loader):
    optimizer.zero_grad()
    loss = torch.nn.functional.mse_loss(model(x), y)
    accelerator.backward(loss)
    optimizer.step()
    if i % 5 == 0:
        accelerator.print(i, loss.item())
accelerator.end_training()
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for loop in ctx.facts.loops:
            if ctx.accelerator_in(loop.scope) is None or ctx.plan.loader_of(loop) is None:
                continue
            index = _index_name(loop)
            body = loop.node.body
            if index is None or not isinstance(body, cst.IndentedBlock):
                continue
            for stmt in body.body:
                found = _bounded_exit(stmt, index)
                if found is None:
                    continue
                test, op, bound, leaves = found
                does = "skips batches" if leaves == "continue" else "stops its epoch"
                each = (f"skips `{bound}` batches of its own" if leaves == "continue"
                        else f"trains up to `{bound}` batches of its own")
                ctx.warn(codes.BATCH_INDEX_BOUND, test, does=does, test=code_of(test), each=each, index=index,
                         op=op, bound=bound)

    def recheck(self, ctx: Context) -> None:
        """Converted code: the test is left as it was, so it is reported again."""
        self.run(ctx)


def _index_name(loop: Loop) -> str | None:
    """``i`` of ``for i, batch in enumerate(loader)``."""
    source = loop.node.iter
    target = loop.node.target
    if not (isinstance(source, cst.Call) and m.matches(source.func, m.Name("enumerate")) and source.args):
        return None
    if isinstance(target, cst.Tuple) and target.elements and isinstance(target.elements[0].value, cst.Name):
        return target.elements[0].value.value
    return None


def _bounded_exit(stmt: cst.BaseStatement, index: str) -> tuple[cst.Comparison, str, str, str] | None:
    """``if i < 8: continue`` / ``if i >= n: break`` (the whole body the one statement): the test, its operator,
    the bound's code and what the body does; None for anything else."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None:
        return None
    if isinstance(stmt.body, cst.IndentedBlock):  # ``if i < 8:`` / ``continue`` on its own line
        inner = stmt.body.body
        if len(inner) != 1 or not isinstance(inner[0], cst.SimpleStatementLine):
            return None
        smalls = inner[0].body
    else:
        smalls = stmt.body.body  # ``if (i<8): continue`` on one line (O11's own spelling)
    if len(smalls) != 1:
        return None
    small = smalls[0]
    leaves = "continue" if isinstance(small, cst.Continue) else "break" if isinstance(small, cst.Break) else None
    test = stmt.test
    if leaves is None or not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    if not m.matches(test.left, m.Name(index)):
        return None
    target = test.comparisons[0]
    op = _OPS.get(type(target.operator))
    if op is None or m.findall(target.comparator, m.Name(index)):
        return None
    return test, op, code_of(target.comparator), leaves
