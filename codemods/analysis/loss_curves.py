"""A loss curve kept per step over a prepared loader: ``D_losses.append(errD.item())`` at every batch, plotted or
averaged after training (set O's DCGAN and autoencoder, E2, G1).

On N processes each process appends its own batches' losses: the list holds one process's curve, 1/N of the steps
each, and what is drawn or averaged from it is that process's share. Every process walks the same number of batches
of a prepared loader, so the value can be made the step's global one where it is appended: the mean over the
processes of their batch's loss (``accelerator.reduce(errD.detach(), "mean").item()``), the loss of the global batch.
The list then holds one value per global step, each the whole batch's: the curve of the distributed run. Only for
the exact shape: one append of ``<tensor>.item()`` per pass, reached alike by every process (``agreed``), the tensor a
loss of the pass (backwarded, a mean loss, or a sum of those); anything else stays reported (ACC028).
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.kept_values import kept_value
from accelify.codemods.analysis.loss_means import mean_loss
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.sum_kinds import known_kinds


def curve_tensor(plan: Plan, agreement: Agreement, loop: Loop, stmt: cst.BaseStatement) -> tuple[cst.Call, str] | None:
    """The ``X.item()`` call ``stmt`` appends and the name ``X`` of the loss tensor, when ``stmt`` is a loss curve's
    append that can be reduced where it is (see the module docstring); else None."""
    kept = kept_value(stmt)
    if kept is None or kept.keyed or "." in kept.key or kept.call.func.attr.value != "append" \
            or len(kept.call.args) != 1 or kept.call.args[0].keyword is not None:  # type: ignore[attr-defined]
        return None
    call = kept.call
    value = call.args[0].value
    if not (isinstance(value, cst.Call) and not value.args and isinstance(value.func, cst.Attribute)
            and value.func.attr.value == "item" and isinstance(value.func.value, cst.Name)):
        return None
    tensor = value.func.value.value
    if sum(1 for s in loop.stmts if _appends_to(s, kept.key)) != 1:
        return None  # appended in two places of the pass: which is the step's is not clear
    if known_kinds(loop, plan).get(tensor) != "tensor" and not mean_loss(plan, loop, value.func.value):
        return None
    if agreement.collective_place(stmt, loop.scope) is not stmt:
        return None  # under a condition some processes may not take: a collective there could hang
    return value, tensor


def _appends_to(stmt: cst.BaseStatement, name: str) -> bool:
    kept = kept_value(stmt)
    return kept is not None and kept.key == name and not kept.keyed \
        and kept.call.func.attr.value in ("append", "extend", "insert")  # type: ignore[attr-defined]
