"""A device kept in a dict: ``params.update({"device": torch.device("cuda:0" if CUDA else "cpu")})``,
``config = {"device": ...}``, ``params["device"] = torch.device(...)`` (set O's O2, a DCGAN whose trainer reads
``params["device"]`` everywhere: ``.to(params["device"])``, ``torch.randn(..., device=params["device"])``).

The entry is the program's one device choice, read through the dict; on N processes each must name the process's
own device, so the value becomes the accelerator's device where the accelerator exists, or the runtime's process
state (``PartialState().device``) where it does not yet (a config module read at import time). This module finds the
entries: a ``"device"`` key whose value picks the accelerator's device (``roles.is_device_expr``)."""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Facts, Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import is_device_expr


@dataclass(frozen=True)
class DeviceEntry:
    """The value of a dict's ``"device"`` entry, the statement that holds it, and the scope it runs in."""

    value: cst.BaseExpression
    stmt: cst.BaseStatement
    scope: Scope


def device_entries(plan: Plan) -> list[DeviceEntry]:
    """Every ``"device"`` entry of a dict display, or ``d["device"] = ...`` assignment, whose value is a device
    choice, in every module of the program (``plan.analysis(device_entries)``: one walk, shared)."""
    facts = plan.facts
    by_node = {id(s.node): s for s in facts.scopes}
    found: list[DeviceEntry] = []
    for unit in facts.units.values():
        for stmt in unit.order:
            if not isinstance(stmt, cst.SimpleStatementLine):
                continue
            scope = _scope_of(unit, stmt, by_node)
            if scope is None:
                continue
            imports = unit.imports
            for element in m.findall(stmt, m.DictElement(key=m.SimpleString())):
                assert isinstance(element, cst.DictElement)
                if _device_key(element.key) and is_device_expr(element.value, imports):
                    found.append(DeviceEntry(element.value, stmt, scope))
            small = stmt.body[0] if len(stmt.body) == 1 else None
            if isinstance(small, cst.Assign) and len(small.targets) == 1:
                target = small.targets[0].target
                if isinstance(target, cst.Subscript) and len(target.slice) == 1 \
                        and isinstance(target.slice[0].slice, cst.Index) and _device_key(target.slice[0].slice.value) \
                        and is_device_expr(small.value, imports):
                    found.append(DeviceEntry(small.value, stmt, scope))
    return found


def _device_key(key: cst.BaseExpression | None) -> bool:
    return isinstance(key, cst.SimpleString) and key.evaluated_value == "device"


def _scope_of(unit: Facts, stmt: cst.BaseStatement, by_node: dict[int, Scope]) -> Scope | None:
    """The function (or module) ``stmt`` runs in."""
    for outer in unit.chain(stmt)[1:]:
        if isinstance(outer, cst.FunctionDef):
            return by_node.get(id(outer))
        if isinstance(outer, cst.ClassDef):
            return None
    return unit.module_scope
