"""Whether every read of a tensor's name takes that tensor on any device.

Moving a tensor to the accelerator's device where it is made is right only when nothing reads it (or what is
computed from it) as a CPU tensor: ``plt.scatter(X)``, ``X.numpy()``, a function's default ``train_data=X``,
``print(X)`` (its text names the device) all change or crash on a GPU. The reads allowed are the ones whose
result does not depend on the device: torch functions and modules (``torch.nn.functional.l1_loss(p, y)``,
``loss_fn(p, y)`` with ``loss_fn = torch.nn.L1Loss()``), prepared models, arithmetic and indexing (their result
is on the same device: its reads are checked in turn, as are the names it is bound to), shape-keeping methods,
``.to(...)``/``.cpu()``, ``.shape``/``.dtype``, ``len`` and ``print``.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.plan import Plan

# methods whose result is a tensor on the receiver's device
SAME_DEVICE = {
    "unsqueeze", "squeeze", "view", "reshape", "float", "double", "long", "int", "half", "bool", "t",
    "transpose", "permute", "flatten", "contiguous", "clone", "detach", "type", "expand", "repeat", "sum", "mean",
}
_ANY_DEVICE_ATTRIBUTES = {"shape", "dtype", "device", "ndim", "to", "cpu", "size", "dim", "numel"}
_ANY_DEVICE_EXPRESSIONS = (
    cst.BinaryOperation, cst.UnaryOperation, cst.Comparison, cst.ComparisonTarget, cst.Subscript,
)


def reads_take_any_device(plan: Plan, scope: Scope, name: str, depth: int = 0) -> bool:
    """Whether every read of ``name`` (bound in ``scope``) and of the names computed from it takes a tensor on
    any device (see above)."""
    if depth > 6:
        return False
    for where in plan.facts.scopes:
        if where is not scope and not (
            where.inside(scope) and name not in where.bindings and name not in where.param_names
        ):
            continue
        for ref in where.refs.get(name, []):
            holder = where.holders.get(id(ref))
            if holder is None or not _read_takes_any_device(plan, where, holder, ref, depth):
                return False
    return True


def _parents(stmt: cst.CSTNode) -> dict[int, cst.CSTNode]:
    out: dict[int, cst.CSTNode] = {}
    pending = [stmt]
    while pending:
        node = pending.pop()
        for child in node.children:
            out[id(child)] = node
            pending.append(child)
    return out


def _read_takes_any_device(plan: Plan, scope: Scope, stmt: cst.BaseStatement, ref: cst.CSTNode, depth: int) -> bool:
    parents = _parents(stmt)
    node: cst.CSTNode = ref
    while True:
        parent = parents.get(id(node))
        if parent is None:
            return False
        if isinstance(parent, _ANY_DEVICE_EXPRESSIONS) or isinstance(parent, (cst.SubscriptElement, cst.Index, cst.Slice)):
            if isinstance(parent, (cst.Index, cst.Slice)):
                return False  # ``data[X]``: X as an index
            node = parent
            continue
        if isinstance(parent, cst.Attribute) and parent.value is node:
            call = parents.get(id(parent))
            attr = parent.attr.value
            if attr in _ANY_DEVICE_ATTRIBUTES:
                return True
            if attr in SAME_DEVICE and isinstance(call, cst.Call) and call.func is parent:
                node = call
                continue
            return False
        if isinstance(parent, cst.Arg) and parent.value is node:
            call = parents.get(id(parent))
            return isinstance(call, cst.Call) and _takes_any_device(plan, scope, call, stmt)
        if isinstance(parent, cst.Assign) and parent.value is node:
            names = [t.target.value for t in parent.targets if isinstance(t.target, cst.Name)]
            return len(names) == len(parent.targets) and all(
                reads_take_any_device(plan, scope, n, depth + 1) for n in names
            )
        if isinstance(parent, cst.Element):  # ``X_train, y_train = X[:n], y[:n]``
            tuple_ = parents.get(id(parent))
            assign = parents.get(id(tuple_)) if tuple_ is not None else None
            if not (isinstance(tuple_, cst.Tuple) and isinstance(assign, cst.Assign) and assign.value is tuple_):
                return False
            index = list(tuple_.elements).index(parent)
            if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Tuple):
                return False
            targets = assign.targets[0].target.elements
            if len(targets) != len(tuple_.elements) or not isinstance(targets[index].value, cst.Name):
                return False
            return reads_take_any_device(plan, scope, targets[index].value.value, depth + 1)  # type: ignore[attr-defined]
        return False


def _takes_any_device(plan: Plan, scope: Scope, call: cst.Call, stmt: cst.BaseStatement) -> bool:
    """A torch function or module (not ``torch.utils.data``), a prepared model, ``len``, or ``print`` (which runs on any device; its text
    then names the device)."""
    qualname = scope.imports.qualname(call.func) or ""
    if qualname.startswith("torch.utils.data."):
        return False  # a data set's tensors: a loader's workers cannot hand out GPU tensors (and it places batches)
    if qualname.startswith("torch.") or (isinstance(call.func, cst.Name) and call.func.value in ("len", "print")):
        return True
    if plan.prepared_model(scope, call.func, stmt) is not None:
        return True
    if isinstance(call.func, cst.Name):  # ``loss_fn(pred, y)`` with ``loss_fn = torch.nn.L1Loss()``
        current: Scope | None = scope
        while current is not None:
            bindings = current.bindings.get(call.func.value)
            if bindings:
                values = [b.value for b in bindings]
                return all(
                    isinstance(v, cst.Call) and (current.imports.qualname(v.func) or "").startswith("torch.nn.")
                    for v in values
                )
            current = current.parent
    return False
