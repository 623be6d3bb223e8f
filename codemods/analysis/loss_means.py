"""Whether a value added to a running sum is a batch's mean loss or a count: what a sum over a gathered loop
may be divided by.

Where the evaluation rule gathers a loop's outputs and targets (``accelerator.gather_for_metrics``), each pass of the
loop holds every process's batch, and the loop runs 1/N as many times as the original's. A sum of counts or of
per-sample sums over it is the whole data set's, as in the original; a sum of batch means is the original's only
divided by the number of passes (the original's number of batches becomes the prepared loader's length, and the
means are over N times larger batches). So a sum of mean losses divided by the data set's size, or read as it is,
comes out 1/N of the original's, and a sum of counts divided by a per-process number of batches N times it:
``rules/averages.py`` reports both.

A mean loss is a call of a loss function of ``torch.nn.functional`` (``F.cross_entropy(out, y)``) or of a loss
module (``criterion = nn.BCELoss()``, the name bound to a ``torch.nn`` class ending in ``Loss``) without a
``reduction`` other than ``"mean"``, as it is or through ``.item()``, ``.sum()``, ``.mean()``, ``.detach()``, ``.cpu()``
or ``float(...)``, or a name the loop binds to one (``loss = criterion(out, y)``).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan

_PASS_THROUGH = ("item", "sum", "mean", "detach", "cpu")
_LEGACY = ("size_average", "reduce")  # the pre-1.0 arguments: the reduction cannot be told


def mean_loss(plan: Plan, loop: Loop, expr: cst.BaseExpression) -> bool:
    """Whether ``expr``, added at each pass of ``loop``, is a batch's mean loss (see the module docstring)."""
    expr = _unwrapped(expr)
    if isinstance(expr, cst.Name):
        bound = [s.body[0].value for s in loop.stmts  # type: ignore[attr-defined]
                 if isinstance(s, cst.SimpleStatementLine) and len(s.body) == 1 and isinstance(s.body[0], cst.Assign)
                 and any(m.matches(t.target, m.Name(expr.value)) for t in s.body[0].targets)]
        return len(bound) == 1 and _loss_call(plan, loop, _unwrapped(bound[0]))
    return _loss_call(plan, loop, expr)


def _unwrapped(expr: cst.BaseExpression) -> cst.BaseExpression:
    while True:
        if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value in _PASS_THROUGH \
                and not expr.args:
            expr = expr.func.value
        elif isinstance(expr, cst.Call) and dotted(expr.func) == "float" and len(expr.args) == 1:
            expr = expr.args[0].value
        else:
            return expr


def _loss_call(plan: Plan, loop: Loop, expr: cst.BaseExpression) -> bool:
    if not isinstance(expr, cst.Call):
        return False
    qualname = loop.scope.imports.qualname(expr.func) or ""
    if qualname.startswith("torch.nn.functional."):
        leaf = qualname.rsplit(".", 1)[1]
        return (leaf.endswith("_loss") or leaf in ("cross_entropy", "binary_cross_entropy",
                                                   "binary_cross_entropy_with_logits")) and _by_mean(expr)
    key = dotted(expr.func)
    binding = plan.binding_of(loop.scope, key) if key is not None else None
    if binding is None or not isinstance(binding.value, cst.Call):
        return False
    made = binding.where.imports.qualname(binding.value.func) or ""
    return made.startswith("torch.nn.") and made.endswith("Loss") and _by_mean(binding.value)


def _by_mean(call: cst.Call) -> bool:
    """No ``reduction`` argument, or ``reduction="mean"``, and none of the legacy ones."""
    for arg in call.args:
        if arg.keyword is None:
            if isinstance(arg.value, cst.SimpleString):
                return False  # a reduction given by position (``nn.CrossEntropyLoss(None, None, -100, None, "sum")``)
            continue
        if arg.keyword.value in _LEGACY:
            return False
        if arg.keyword.value == "reduction":
            return isinstance(arg.value, cst.SimpleString) and arg.value.evaluated_value == "mean"
    return True
