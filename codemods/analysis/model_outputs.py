"""Which names a statement with a model's forward pass binds that hold one row per sample, the names statements
read, and the batch names gathered with them: what an evaluation loop gathers (``rules/evaluation.py``)."""

from __future__ import annotations

from typing import Sequence

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Loop
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.statement_shapes import target_names


# Tensor methods that keep one row per sample: gathering their result gathers the predictions.
PER_SAMPLE = {"argmax", "argmin", "softmax", "log_softmax", "sigmoid", "exp", "float", "double", "detach", "cpu", "round"}


def named_output(stmt: cst.BaseStatement, call: cst.Call) -> list[str] | None:
    """``out = model(x)``, ``pred = model(x).argmax(1)`` or ``recon, mu, logvar = model(x)``: the names
    that hold one row per sample."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if isinstance(target, cst.Tuple) and assign.value is call and all(isinstance(e.value, cst.Name) for e in target.elements):
        return [e.value.value for e in target.elements]  # type: ignore[attr-defined]
    if not isinstance(target, cst.Name):
        return None
    value = assign.value
    while value is not call:
        if not (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute)):
            return None
        method = value.func.attr.value
        if method not in PER_SAMPLE or reduces_batch(value):
            return None
        value = value.func.value
    return [target.value]


# Nodes that bind names of their own (a comprehension's loop variable, a lambda's parameters): an expression inside
# one cannot be moved out of it, its names would be unbound there.
_OWN_SCOPES = m.ListComp() | m.SetComp() | m.DictComp() | m.GeneratorExp() | m.Lambda()


def in_own_scope(stmt: cst.BaseStatement, call: cst.Call) -> bool:
    """Whether ``call`` lies in a comprehension, generator expression or lambda of ``stmt`` (``tuple(net(d) for d in
    data)``): it reads names that scope binds, so it cannot be taken out of the statement."""
    for node in m.findall(stmt, _OWN_SCOPES):
        if any(c is call for c in m.findall(node, m.Call())):
            return True
    return False


def comprehension_output(stmt: cst.BaseStatement, call: cst.Call) -> list[str] | None:
    """``outputs = tuple(net(d) for d in data)`` or ``outputs = [net(d) for d in data]`` (a network applied to each
    member of a pair or triplet): the name bound to the sequence of forward outputs, each one row per sample, which
    ``gather_for_metrics`` gathers member by member; None for any other shape (``sum(net(d).mean() for d in data)``)."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    value = assign.value
    if isinstance(value, cst.Call) and m.matches(value.func, m.Name("tuple") | m.Name("list")) and len(value.args) == 1 \
            and isinstance(value.args[0].value, cst.GeneratorExp):
        value = value.args[0].value
    if not isinstance(value, (cst.ListComp, cst.GeneratorExp)) or isinstance(assign.value, cst.GeneratorExp):
        return None  # a bare generator is read once: gathered, it would be another kind of object
    element = value.elt
    while element is not call:
        if not (isinstance(element, cst.Call) and isinstance(element.func, cst.Attribute)) \
                or element.func.attr.value not in PER_SAMPLE or reduces_batch(element):
            return None
        element = element.func.value
    return [assign.targets[0].target.value]


def reduces_batch(call: cst.Call) -> bool:
    """``x.argmax()`` (over everything) or ``x.softmax(0)``: a result that is no longer one row per sample."""
    if call.func.attr.value in ("argmax", "argmin", "softmax", "log_softmax") and not call.args:  # type: ignore[attr-defined]
        return call.func.attr.value in ("argmax", "argmin")  # type: ignore[attr-defined]
    for arg in call.args:
        if (arg.keyword is None or arg.keyword.value == "dim") and isinstance(arg.value, cst.Integer):
            return arg.value.evaluated_value == 0
        if arg.keyword is None or arg.keyword.value == "dim":
            return not isinstance(arg.value, cst.UnaryOperation)  # dim=-1 style is per sample; other shapes: unknown
    return False


def read_through_attributes(name: str, stmts: Sequence[cst.BaseStatement]) -> bool:
    """``name`` is read in ``stmts``, and only as ``name.attr`` (a model output object such as
    ``outputs.logits``), never whole, indexed or rebound."""
    reads = [n for stmt in stmts for n in m.findall(stmt, m.Name(name)) if isinstance(n, cst.Name)]
    if not reads:
        return False
    called = {id(c.func) for stmt in stmts for c in m.findall(stmt, m.Call(func=m.Attribute()))}  # type: ignore[union-attr]
    through = {
        id(a.value)  # type: ignore[union-attr]
        for stmt in stmts
        for a in m.findall(stmt, m.Attribute(value=m.Name(name)))
        if id(a) not in called and a.attr.value not in TENSOR_ATTRIBUTES  # type: ignore[union-attr]
    }
    return all(id(n) in through for n in reads)


# Attributes of a tensor (``outputs.data``): a name read through them holds a tensor, not an output object.
TENSOR_ATTRIBUTES = {"data", "shape", "dtype", "device", "T", "mT", "grad", "real", "imag", "ndim", "is_cuda"}


def derivation(
    name: str, stmts: Sequence[cst.BaseStatement]
) -> tuple[cst.BaseStatement, list[str], cst.BaseExpression] | None:
    """The first ``preds = name.logits.argmax(dim=-1)`` (an attribute of the output, through methods that keep
    one row per sample) among ``stmts``, with the name it binds and its value."""
    for stmt in stmts:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
            continue
        value = assign.value
        while isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute):
            if value.func.attr.value not in PER_SAMPLE or reduces_batch(value):
                break
            value = value.func.value
        if isinstance(value, cst.Attribute) and m.matches(value.value, m.Name(name)):
            return stmt, [assign.targets[0].target.value], assign.value
    return None


def extractable(stmt: cst.BaseStatement) -> bool:
    """A simple statement the forward can be taken out of (``loss += f(model(x), y).item()``)."""
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(
        stmt.body[0], (cst.Assign, cst.AugAssign, cst.AnnAssign, cst.Expr)
    )


def call_inputs(call: cst.Call) -> set[str]:
    return {n.value for n in m.findall(call, m.Name()) if isinstance(n, cst.Name)}


def names_outside(stmt: cst.BaseStatement, call: cst.Call) -> set[str]:
    """Names ``stmt`` uses outside ``call``."""
    inside = {id(n) for n in m.findall(call, m.Name())}
    return {n.value for n in m.findall(stmt, m.Name()) if isinstance(n, cst.Name) and id(n) not in inside}


def names_used(stmts: Sequence[cst.BaseStatement]) -> set[str]:
    """The variables ``stmts`` read or bind: not attribute names (``outputs.data``) nor keywords (``dim=1``)."""
    names: set[str] = set()
    for stmt in stmts:
        skip = {id(n.attr) for n in m.findall(stmt, m.Attribute())}  # type: ignore[union-attr]
        skip |= {id(a.keyword) for a in m.findall(stmt, m.Arg()) if a.keyword is not None}  # type: ignore[union-attr]
        names |= {n.value for n in m.findall(stmt, m.Name()) if isinstance(n, cst.Name) and id(n) not in skip}
    return names


def gathered_names(plan: Plan, loop: Loop, outputs: list[str], inputs: set[str], later: set[str]) -> list[str]:
    """What one ``gather_for_metrics`` after the forward takes, in order: the outputs, then the batch names used
    after the forward (``later``): targets first, then inputs (``inputs``, what the forward read) used again."""
    # a state the forward returns and takes back (an RNN's hidden state: ``out, h = net(x, h)``) stays this
    # process's own: gathered, it would come back with every process's rows
    outputs = [o for o in outputs if o not in inputs] or outputs
    batch = plan.batch_names(loop)
    ordered = target_names(loop.node.target)
    for stmt in loop.stmts:  # then the parts unpacked from the batch (``images, labels = data``), in order
        if isinstance(stmt, cst.SimpleStatementLine):
            for small in stmt.body:
                if isinstance(small, cst.Assign):
                    ordered += [n for t in small.targets for n in target_names(t.target) if n in batch]
    used = [name for name in dict.fromkeys(ordered) if name in batch and name in later and name not in outputs]
    return outputs + [n for n in used if n not in inputs] + [n for n in used if n in inputs]


def optional_names(loop: Loop, names: Sequence[str]) -> list[str]:
    """Those of ``names`` the loop may bind to None (``target = target if len(target) > 0 else None``, as siamese and
    triplet trainers do for data sets without labels; ``target = None``): gathered with tensors in one tuple, a None
    sends the whole tuple through ``gather_object``, which hands back a list of every process's objects."""
    return [n for n in names if any(_may_be_none(b) for b in loop.scope.bindings.get(n, []) if _inside(b, loop))]


def _inside(binding: Binding, loop: Loop) -> bool:
    inner = binding.loop
    while inner is not None and inner is not loop:
        inner = inner.parent
    return inner is loop


def _may_be_none(binding: Binding) -> bool:
    value = binding.value
    if isinstance(value, cst.IfExp):
        return any(m.matches(v, m.Name("None")) for v in (value.body, value.orelse))
    return value is not None and m.matches(value, m.Name("None"))
