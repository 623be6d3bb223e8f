"""Running sums a model keeps on itself over a prepared loader, read back after the loop.

A model of the program may add to one of its own attributes at every forward (``self.cumulative_losses['kl'] +=
self.kl`` in a method its ``forward`` calls, ``self.total += loss``) and hand the sums back through a method the
program calls after the loop (``return model.get_cumulative_losses()``; set P's P10, a VAE that logs them to wandb)
or an attribute it reads (``model.total``). On N processes each process's model summed its own shard's batches: what
is read is one process's share. Found here, reported by the averages rule (ACC028): where the sums are complete and
how the method turns them into what it returns are the model's own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.analysis.loop_reads import reads_after
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import same_module


@dataclass(frozen=True)
class ModelSum:
    """``name`` (``model.cumulative_losses``), summed by the model's forward over ``loop`` and read at ``read``."""

    name: str
    loop: Loop
    read: cst.BaseStatement


def model_sums(plan: Plan) -> list[ModelSum]:
    """Every running sum a prepared model keeps on itself over a prepared loader and the program reads after it."""
    found: list[ModelSum] = []
    for loop in plan.facts.loops:
        if plan.loader_of(loop) is None:
            continue
        done: set[str] = set()
        for site in loop.calls:
            key = dotted(site.node.func)
            if key is None or key in done or plan.prepared_model(loop.scope, site.node.func, site.stmt) is None:
                continue
            done.add(key)
            cls = _model_class(plan, loop.scope, site.node.func)
            if cls is None:
                continue

            def method(name: str, cls: Scope = cls) -> cst.FunctionDef | None:
                found = plan.classes.method(cls, name)
                return found.node if found is not None and isinstance(found.node, cst.FunctionDef) else None

            summed = _summed(method)
            for stmt in reads_after(plan, loop.node, loop.scope, key.split(".")[0]):
                read = next((a for a in summed if _reads(stmt, key, a, method)), None)
                if read is not None:
                    found.append(ModelSum(f"{key}.{read}", loop, stmt))
                    break
    return found


def _model_class(plan: Plan, scope: Scope, func: cst.BaseExpression) -> Scope | None:
    """The program's class whose instance ``func`` holds (``VAE`` of ``model = VAE(...).to(device)``), or None."""
    model = plan.model_object(scope, func)
    if model is None:
        return None
    value = model.unpacked[0] if model.unpacked is not None else model.value
    value = same_module(value) if value is not None else None
    return plan.classes.class_of(model.where, value.func) if isinstance(value, cst.Call) else None


def _summed(method: Callable[[str], cst.FunctionDef | None]) -> list[str]:
    """The attributes ``forward`` (or a method it calls through ``self``) adds to: ``self.a += v``, ``self.a[k] += v``
    (not a constant count)."""
    seen: set[str] = set()
    todo = ["forward"]
    out: list[str] = []
    while todo:
        name = todo.pop()
        body = method(name) if name not in seen else None
        seen.add(name)
        if body is None:
            continue
        for aug in m.findall(body, m.AugAssign(operator=m.AddAssign())):
            assert isinstance(aug, cst.AugAssign)
            target = aug.target.value if isinstance(aug.target, cst.Subscript) else aug.target
            if m.matches(target, m.Attribute(value=m.Name("self"))) and not isinstance(aug.value, (cst.Integer, cst.Float)):
                attr = target.attr.value  # type: ignore[attr-defined]
                if attr not in out:
                    out.append(attr)
        todo += [c.func.attr.value for c in m.findall(body, m.Call(func=m.Attribute(value=m.Name("self"))))]  # type: ignore[attr-defined]
    return out


def _reads(stmt: cst.BaseStatement, key: str, attr: str, method: Callable[[str], cst.FunctionDef | None]) -> bool:
    """Whether ``stmt`` reads ``key.attr``, or calls a method of ``key`` (not its forward) that reads ``self.attr``."""
    for node in m.findall(stmt, m.Attribute()):
        assert isinstance(node, cst.Attribute)
        if dotted(node.value) != key:
            continue
        if node.attr.value == attr:
            return True
        body = method(node.attr.value) if node.attr.value not in ("forward", "__call__") else None
        if body is not None and m.findall(body, m.Attribute(value=m.Name("self"), attr=m.Name(attr))):
            return True
    return False
