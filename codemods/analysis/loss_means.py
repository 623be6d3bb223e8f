"""Whether a value added to a running sum is a batch's mean loss or a count: what a sum over a gathered loop
may be divided by.

Where the evaluation rule gathers a loop's outputs and targets (``accelerator.gather_for_metrics``), each pass of the
loop holds every process's batch, and the loop runs 1/N as many times as the original's. A sum of counts or of
per-sample sums over it is the whole data set's, as in the original; a sum of batch means is the original's only
divided by the number of passes (the original's number of batches becomes the prepared loader's length, and the
means are over N times larger batches). So a sum of mean losses divided by the data set's size, or read as it is,
comes out 1/N of the original's, and a sum of counts divided by a per-process number of batches N times it:
``rules/gathered_sums.py`` reports both.

Such a sum of mean losses over a gathered loop is made the original's again by ``per_batch_sum``: each gathered pass
holds, in order, the original's batches of the loader's batch size (the processes are dealt whole batches in turn, and
``gather_for_metrics`` drops the samples that evened out the last round), so the value added becomes the sum of the
loss over those batches: ``sum(criterion(out, y).item() for out, y in zip(out.split(b), y.split(b)))``, ``b`` the
prepared loader's per-process batch size. On one process that is the original's one batch; with split batches
(every process holds 1/N of each batch) the gathered pass is again one original batch.

A mean loss is a call of a loss function of ``torch.nn.functional`` (``F.cross_entropy(out, y)``) or of a loss
module (``criterion = nn.BCELoss()``, the name bound to a ``torch.nn`` class ending in ``Loss``) without a
``reduction`` other than ``"mean"``, as it is or through ``.item()``, ``.sum()``, ``.mean()``, ``.detach()``, ``.cpu()``
or ``float(...)``, or a name the loop binds to one (``loss = criterion(out, y)``).
"""

from __future__ import annotations

from typing import Callable

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Facts, Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.snippets import code_of

_PASS_THROUGH = ("item", "sum", "mean", "detach", "cpu")
_LEGACY = ("size_average", "reduce")  # the pre-1.0 arguments: the reduction cannot be told


def mean_loss(plan: Plan, loop: Loop, expr: cst.BaseExpression) -> bool:
    """Whether ``expr``, added at each pass of ``loop``, is a batch's mean loss (see the module docstring)."""
    expr = _unwrapped(expr)
    if isinstance(expr, cst.Name):
        bound = bound_in(loop, expr.value)
        return len(bound) == 1 and _loss_call(plan, loop, _unwrapped(bound[0]))
    return _loss_call(plan, loop, expr)


def per_batch_sum(plan: Plan, loop: Loop, increment: cst.BaseExpression, gathered: set[str]) -> str | None:
    """The code of the sum, over the original's batches a gathered pass of ``loop`` holds, of ``increment`` (a batch's
    mean loss of the tensors ``gathered`` right after the forward), or None when it is not that shape (see the module
    docstring)."""
    inner = _unwrapped(increment)
    expr = increment
    if isinstance(inner, cst.Name):
        bound = bound_in(loop, inner.value)
        if len(bound) != 1:
            return None
        expr = increment.deep_replace(inner, bound[0]) if inner is not increment else bound[0]  # type: ignore[assignment]
        inner = _unwrapped(bound[0])
    if not isinstance(inner, cst.Call) or not _loss_call(plan, loop, inner):
        return None
    names: list[str] = []
    for arg in inner.args:
        skip = {id(a.attr) for a in m.findall(arg.value, m.Attribute())}
        for name in m.findall(arg.value, m.Name()):
            if id(name) in skip:
                continue
            if name.value not in gathered:  # type: ignore[attr-defined]
                return None
            if name.value not in names:  # type: ignore[attr-defined]
                names.append(name.value)  # type: ignore[attr-defined]
    source = plan.loop_source(loop)
    if not names or source is None or dotted(source) is None:
        return None
    size = f"{code_of(source)}.batch_sampler.batch_size"
    sequences = starred_reads(expr)
    if len(names) == 1:
        return f"sum({code_of(expr)} for {names[0]} in {split_rows(names[0], size, names[0] in sequences)})"
    parts = ", ".join(split_rows(n, size, n in sequences) for n in names)
    return f"sum({code_of(expr)} for {', '.join(names)} in zip({parts}))"


def starred_reads(node: cst.CSTNode) -> set[str]:
    """Names ``node`` unpacks (``loss_fn(*outputs)``, ``[*outputs]``): each holds a sequence of per-sample tensors (a
    siamese or triplet net's outputs): a per-sample tensor unpacked would hand a loss one argument per sample."""
    found = {a.value.value for a in m.findall(node, m.Arg(star="*", value=m.Name()))}  # type: ignore[union-attr]
    found |= {e.value.value for e in m.findall(node, m.StarredElement(value=m.Name()))}  # type: ignore[union-attr]
    return found


def split_rows(name: str, size: str, sequence: bool) -> str:
    """The code that splits gathered ``name`` into the original's batches of ``size`` rows: ``name.split(size)``, or
    for a sequence of tensors (``sequence``) each member split and the pieces zipped per batch."""
    if sequence:
        return f"zip(*(member.split({size}) for member in {name}))"
    return f"{name}.split({size})"


_ROWWISE = ("squeeze", "float", "double", "long", "detach", "cpu", "sigmoid", "contiguous")


def rowwise_names(loop: Loop, gathered: set[str], forwards: set[cst.CSTNode]) -> set[str]:
    """``gathered`` and the names ``loop`` binds to one of them (or to a forward call in ``forwards``, which the
    conversion replaces by a gathered name) through methods that keep a row per sample (``outputs =
    model(a, b).squeeze()``), so that splitting them splits the samples."""
    names = set(gathered)
    for stmt in loop.stmts:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            assign = stmt.body[0]
            value = assign.value
            while (isinstance(value, cst.Call) and isinstance(value.func, cst.Attribute) and not value.args
                   and value.func.attr.value in _ROWWISE) or (isinstance(value, cst.Attribute) and value.attr.value == "data"):
                value = value.func.value if isinstance(value, cst.Call) else value.value  # type: ignore[attr-defined]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name) \
                    and (value in forwards or (isinstance(value, cst.Name) and value.value in names)):
                names.add(assign.targets[0].target.value)
    return names


def transformed_mean_loss(plan: Plan, loop: Loop, value: cst.BaseExpression, seen: frozenset[str] = frozenset()) -> bool:
    """Whether ``value`` (or what the loop binds the name it is to) puts a batch's mean loss through a function that is
    not linear (``10 * log10(1 / mse.item())`` with ``mse = criterion(pred, y)``: a log, a root, an exponential, a
    division by it, a power), directly or through names the loop binds (``rmse = sqrt(mse)``, ``psnr = 20 *
    log10(1 / rmse)``): over a gathered pass that is the function of the mean of N batches, not the sum of its
    values over each, so no division makes it the original's. A mean loss scaled by the batch's size is linear."""
    expr = _unwrapped(value)
    if isinstance(expr, cst.Name):
        bound = bound_in(loop, expr.value)
        if len(bound) != 1 or expr.value in seen:
            return False
        seen, expr = seen | {expr.value}, bound[0]
    names = {n.value for n in m.findall(expr, m.Name())} - seen  # type: ignore[attr-defined]
    if any(len(bound_in(loop, n)) == 1 and transformed_mean_loss(plan, loop, cst.Name(n), seen) for n in names):
        return True  # a name bound to a function of a mean loss
    losses = {n for n in names if any(_from_loss(plan, loop, v, seen | {n}) for v in bound_in(loop, n))}

    def mean(node: cst.BaseExpression) -> bool:
        inner = _unwrapped(node)
        return (isinstance(inner, cst.Name) and inner.value in losses) or (isinstance(inner, cst.Call) and _loss_call(plan, loop, inner))

    for call in m.findall(expr, m.Call()):
        name = (dotted(call.func) or "").rsplit(".", 1)[-1]  # type: ignore[attr-defined]
        if name in _NONLINEAR and any(_holds(a.value, mean) for a in call.args):  # type: ignore[attr-defined]
            return True
    for op in m.findall(expr, m.BinaryOperation()):
        if (isinstance(op.operator, cst.Divide) and _holds(op.right, mean)) or isinstance(op.operator, cst.Power) \
                and (_holds(op.left, mean) or _holds(op.right, mean)):  # type: ignore[attr-defined]
            return True
    return False


def _from_loss(plan: Plan, loop: Loop, value: cst.BaseExpression, seen: frozenset[str]) -> bool:
    """Whether ``value`` is a mean loss or computed from one through names the loop binds (``mse = loss.item()``)."""
    inner = _unwrapped(value)
    if isinstance(inner, cst.Call) and _loss_call(plan, loop, inner):
        return True
    names = {n.value for n in m.findall(value, m.Name())} - seen  # type: ignore[attr-defined]
    return any(_from_loss(plan, loop, v, seen | {n}) for n in names for v in bound_in(loop, n))


_NONLINEAR = ("log", "log10", "log2", "log1p", "exp", "sqrt", "pow")


def _holds(expr: cst.BaseExpression, mean: "Callable[[cst.BaseExpression], bool]") -> bool:
    """Whether ``expr`` or an expression in it is a mean loss."""
    return mean(expr) or any(mean(n) for n in m.findall(expr, m.Call() | m.Name()))  # type: ignore[arg-type]


def bound_in(loop: Loop, name: str) -> list[cst.BaseExpression]:
    """The values ``loop``'s statements bind ``name`` to (``loss = criterion(out, y)``)."""
    return [s.body[0].value for s in loop.stmts  # type: ignore[attr-defined]
            if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign)
            and any(m.matches(t.target, m.Name(name)) for t in s.body[0].targets)]


def _unwrapped(expr: cst.BaseExpression) -> cst.BaseExpression:
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _PASS_THROUGH \
                and not expr.args:
            expr = expr.func.value
        elif isinstance(expr, cst.Call) and dotted(expr.func) == "float" and len(expr.args) == 1:
            expr = expr.args[0].value
        else:
            return expr


def is_mean_loss_call(plan: Plan, loop: Loop, expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` is a call of a ``torch.nn.functional`` loss or a ``torch.nn`` loss module with the mean
    reduction: a batch's mean of a per-sample term (see the module docstring)."""
    return _loss_call(plan, loop, expr)


def _loss_call(plan: Plan, loop: Loop, expr: cst.BaseExpression) -> bool:
    return _mean_loss_in(plan, loop.scope, expr, 0)


def _mean_loss_in(plan: Plan, scope: Scope, expr: cst.BaseExpression, depth: int) -> bool:
    """``expr`` in ``scope`` calls a mean loss: a ``torch.nn.functional`` loss, a loss module, or a function of the
    program that returns one of its parameters' mean loss (``def l2_loss(pred, label): loss = F.mse_loss(pred,
    label); return loss``), whose batch rows are then the caller's."""
    if not isinstance(expr, cst.Call):
        return False
    qualname = scope.imports.qualname(expr.func) or ""
    if qualname.startswith("torch.nn.functional."):
        leaf = qualname.rsplit(".", 1)[1]
        return (leaf.endswith("_loss") or leaf in ("cross_entropy", "binary_cross_entropy",
                                                   "binary_cross_entropy_with_logits")) and _by_mean(expr)
    if isinstance(expr.func, cst.Call):  # ``nn.CrossEntropyLoss()(output, y)``: the loss module made where it is called
        made = scope.imports.qualname(expr.func.func) or ""
        return made.startswith("torch.nn.") and made.endswith("Loss") and _by_mean(expr.func)
    key = dotted(expr.func)
    binding = plan.binding_of(scope, key) if key is not None else None
    if binding is not None and isinstance(binding.value, cst.Call):
        made = binding.where.imports.qualname(binding.value.func) or ""
        return made.startswith("torch.nn.") and made.endswith("Loss") and _by_mean(binding.value)
    return depth < 2 and _own_mean_loss(plan, expr, depth)


def _own_mean_loss(plan: Plan, call: cst.Call, depth: int) -> bool:
    """``l2_loss(output, label)``: a function of the program whose one ``return`` gives a mean loss (directly, or
    through a name it binds once) computed from its parameters only, each passed through as it is."""
    site = plan.facts.sites.get(call)
    function = plan.callee(site) if site is not None else None
    if function is None or function.class_scope is not None or len(function.returns) != 1 \
            or any(a.star for a in call.args):
        return False
    value = function.returns[0].value
    value = _unwrapped(value) if value is not None else None
    if isinstance(value, cst.Name):
        bindings = function.bindings.get(value.value, [])
        value = _unwrapped(bindings[0].value) if len(bindings) == 1 and bindings[0].value is not None \
            and bindings[0].unpacked is None else None
    if not isinstance(value, cst.Call) or not _mean_loss_in(plan, function, value, depth + 1):
        return False
    params = set(function.param_names)
    read = {n.value for a in value.args for n in m.findall(a.value, m.Name())  # type: ignore[attr-defined]
            if not isinstance(a.value, cst.Attribute)} - {"True", "False", "None"}
    return all(isinstance(_unwrapped(a.value), cst.Name) and _unwrapped(a.value).value in params  # type: ignore[attr-defined]
               for a in value.args if a.keyword is None) and read <= params


def _by_mean(call: cst.Call) -> bool:
    """No ``reduction`` argument, or ``reduction="mean"``; of the legacy ones only ``size_average=True`` (with no
    ``reduce=False``), which is the mean."""
    for arg in call.args:
        if arg.keyword is None:
            if isinstance(arg.value, cst.SimpleString):
                return False  # a reduction given by position (``nn.CrossEntropyLoss(None, None, -100, None, "sum")``)
            continue
        if arg.keyword.value == "size_average":
            if not (isinstance(arg.value, cst.Name) and arg.value.value == "True"):
                return False
        elif arg.keyword.value in _LEGACY:
            if not (isinstance(arg.value, cst.Name) and arg.value.value == "True"):
                return False
        elif arg.keyword.value == "reduction":
            return isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "mean"
    return True


def batch_mean(plan: Plan, facts: Facts, loop: Loop, value: cst.BaseExpression, depth: int = 0) -> bool:
    """A batch's mean: a mean loss (``mean_loss``), a ``.mean()`` (``(pred == y).float().mean()``, ``torch.mean(eq)``),
    a score of scikit-learn's metrics (``metrics.accuracy_score(pred, y)``), or a name the loop binds once to one of
    those (``accuracy = ...; val_acc += accuracy``)."""
    inner = value.func.value if m.matches(value, m.Call(func=m.Attribute(attr=m.Name("item")), args=[])) else value  # type: ignore[attr-defined]
    imports = facts.unit_of(loop.scope).imports
    if isinstance(inner, cst.Name) and depth < 2:
        bound = bound_in(loop, inner.value)
        return len(bound) == 1 and batch_mean(plan, facts, loop, bound[0], depth + 1)
    torch_mean = isinstance(inner, cst.Call) and len(inner.args) == 1 and imports.qualname(inner.func) == "torch.mean"
    score = isinstance(inner, cst.Call) and (imports.qualname(inner.func) or "").startswith("sklearn.metrics.") \
        and (imports.qualname(inner.func) or "").endswith("_score")
    return mean_loss(plan, loop, value) or torch_mean or score \
        or m.matches(inner, m.Call(func=m.Attribute(attr=m.Name("mean")), args=[]))
