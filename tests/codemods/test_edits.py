"""What the edits say is already handled: the facts a rule reads instead of notes other rules leave behind."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.collect import collect
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.edits import apply

CODE = """\
import torch
def train(model, x, device):
    y = model(x.to(device), device)
    if device:
        model.cuda()
    return y
"""


def context() -> tuple[Context, cst.Module]:
    module = cst.parse_module(CODE)
    facts = collect(module)
    return Context(facts, Plan(facts)), module


def names(module: cst.Module, value: str) -> list[cst.Name]:
    return [n for n in m.findall(module, m.Name(value)) if isinstance(n, cst.Name)]


def test_a_replacement_drops_what_it_does_not_keep() -> None:
    ctx, module = context()
    call = next(c for c in m.findall(module, m.Call(func=m.Attribute(attr=m.Name("to")))) if isinstance(c, cst.Call))
    stmt = next(s for s in ctx.facts.order if call in m.findall(s, m.Call()))
    assert not ctx.rewritten(call)
    ctx.replace(call, stmt, lambda n: n.func.value)  # type: ignore[attr-defined]  # x.to(device) -> x
    inner, second = names(module, "device")[1:3]  # the argument of .to, and the argument passed on
    x = names(module, "x")[1]
    assert ctx.rewritten(call) and ctx.edits.replaced(call) and ctx.dropped(call)
    assert ctx.dropped(inner) and not ctx.dropped(second) and not ctx.dropped(x)
    assert not ctx.rewritten(x)


def test_a_removed_statement_drops_all_of_it_and_a_regroup_keeps_what_it_wraps() -> None:
    ctx, module = context()
    guard = next(s for s in ctx.facts.order if isinstance(s, cst.If))
    cuda = next(c for c in m.findall(guard, m.Call()) if isinstance(c, cst.Call))
    ctx.regroup([guard], lambda stmts: [cst.parse_statement("with ctx():\n    pass\n").with_changes(
        body=cst.IndentedBlock(list(stmts)))])
    assert not ctx.dropped(cuda)
    ctx.remove(guard)
    assert ctx.dropped(cuda) and ctx.dropped(guard.test)


def test_an_edit_through_the_accelerator_reads_its_name_when_the_edits_apply() -> None:
    ctx, module = context()
    train = next(s for s in ctx.facts.scopes if s.name == "train")
    stmt = next(s for s in ctx.facts.order if isinstance(s, cst.SimpleStatementLine) and m.findall(s, m.Assign()))
    target = names(module, "y")[0]
    ctx.replace_through(train, target, stmt, lambda n, a: cst.Name(f"{a}_y"))
    assert ctx.readers() == [train] and not ctx.accelerating
    assert "accelerator_y = " in apply(module, ctx.edits).code
    ctx.bind_accelerator(train, "acc")  # the edit that passes it in declares the name
    assert ctx.accelerator_in(train) == "acc" and ctx.accelerating
    assert "acc_y = " in apply(module, ctx.edits).code


def test_a_group_leaves_out_the_ungrouped_statements_at_its_edges() -> None:
    """The accelerator inserted before a statement a rule then keeps to the main process stays out of the guard (a
    NameError inside it); other statements inserted there go in with the statement, as before."""
    ctx, module = context()
    y = next(s for s in ctx.facts.order if isinstance(s, cst.SimpleStatementLine) and m.findall(s, m.Assign()))
    ret = next(s for s in ctx.facts.order if m.findall(s, m.Return()))
    ctx.insert_before(y, ["accelerator = Accelerator()"], ungrouped=True)
    ctx.insert_before(y, ["x = x + 1"])
    ctx.insert_after(ret, ["done = True"], ungrouped=True)

    def guard(stmts: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
        return [cst.parse_statement("if accelerator.is_main_process:\n    pass\n").with_changes(
            body=cst.IndentedBlock(list(stmts)))]

    ctx.regroup([y, *[s for s in ctx.facts.order if isinstance(s, cst.If)], ret], guard)
    assert apply(module, ctx.edits).code.split("def train(model, x, device):\n", 1)[1] == (
        "    accelerator = Accelerator()\n"
        "    if accelerator.is_main_process:\n"
        "        x = x + 1\n"
        "        y = model(x.to(device), device)\n"
        "        if device:\n"
        "            model.cuda()\n"
        "        return y\n"
        "    done = True\n"
    )
