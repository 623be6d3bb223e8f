"""Shared matchers for device placement calls (``x.to(device)``, ``x.cuda()``)."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.facts import Scope
from accelify.codemods.plan import Plan
from accelify.codemods.roles import is_cuda_string


def device_arg(plan: Plan, scope: Scope, call: cst.Call) -> cst.BaseExpression | None | bool:
    """For a pure placement call, the device expression it names (``device``, ``"cuda"``), ``True`` for
    ``.cuda()``; ``None`` when the call does more than place (a dtype, a tensor, a device index)."""
    func = call.func
    if not isinstance(func, cst.Attribute):
        return None
    positional = [a for a in call.args if a.keyword is None]
    keywords = [a for a in call.args if a.keyword is not None]
    if any(a.star for a in call.args) or any(a.keyword.value != "non_blocking" for a in keywords):  # type: ignore[union-attr]
        if not (func.attr.value == "to" and len(call.args) == 1 and call.args[0].keyword is not None and call.args[0].keyword.value == "device"):
            return None
        positional = [call.args[0]]
    if func.attr.value == "cuda":
        return True if not positional else None
    if func.attr.value != "to" or len(positional) != 1:
        return None
    value = positional[0].value
    if is_device_like(plan, scope, value):
        return value
    return None


def is_device_like(plan: Plan, scope: Scope, value: cst.BaseExpression) -> bool:
    """``device`` (a device variable, also through helper parameters), ``"cuda"``, ``torch.device("cuda")``."""
    if is_cuda_string(value):
        return True
    if isinstance(value, cst.Call) and plan.imports.qualname(value.func) == "torch.device":
        return bool(value.args) and is_cuda_string(value.args[0].value)
    return plan.role(scope, value) == "device"
