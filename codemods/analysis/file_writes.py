"""Which calls write a file every process names alike (``open(p, "w")``, ``json.dump``, ``savefig``,
``imageio.mimsave``, ``df.to_csv(p)``, a ``SummaryWriter``, the ``save`` of an animation or image, a library call named
like a write that is handed a path: ``analysis/named_writes.py``), and which start an experiment tracker's run: what
``rules/writes.py`` keeps to the main process."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.write_calls import FILE_OBJECTS, TF_WRITERS, writes_file


def writer_class(plan: Plan, site: CallSite) -> bool:
    """Whether ``site`` makes an instance of a logger class of the program (``logger_class``)."""
    function = plan.callee(site)
    if function is None or not isinstance(function.node, cst.FunctionDef) or function.node.name.value != "__init__":
        return False
    made = plan.classes.class_of(site.scope, site.node.func) or function.parent  # a subclass may inherit ``__init__``
    return made is not None and logger_class(plan, made)


def logger_class(plan: Plan, cls: Scope) -> bool:
    """Whether ``cls`` is a class of the program that only logs: its ``__init__`` opens a log or a file for writing
    (a ``Logger`` wrapping a TensorBoard or TensorFlow summary writer), and no method of it trains (calls, through
    the program, a ``backward`` or an optimizer's ``step``). A trainer that makes a ``SummaryWriter`` in its
    ``__init__`` (SimCLR's) is no logger: kept to the main process, only that process would train. The writes rule
    makes an instance of a logger class on the main process only, and the save rule keeps collectives out of its
    methods (their calls then run on the main process alone)."""
    init = plan.classes.method(cls, "__init__")
    if init is None or not any(writes_file(s) or (s.qualname or "") in TF_WRITERS for s in init.calls):
        return False
    family, pending = {id(cls)}, [cls]  # its own methods and those it inherits (``class Trainer(BaseTrainer)``)
    while pending:
        for base in plan.classes.bases(pending.pop()):
            if id(base) not in family:
                family.add(id(base))
                pending.append(base)
    methods = [s for s in plan.facts.scopes if s.class_scope is not None and id(s.class_scope) in family]
    return not any(plan.reaches_backward(c) or _steps_optimizer(plan, c) for m in methods for c in m.calls)


def _steps_optimizer(plan: Plan, site: CallSite) -> bool:
    """``self.optimizer.step()`` / ``scaler.step(opt)``: an update of the parameters (a step of something the
    plan takes for an optimizer, or any ``step`` handed an argument, as a scaler's is)."""
    if site.method != "step" or not isinstance(site.node.func, cst.Attribute):
        return False
    found = plan.origin(site.scope, site.node.func.value)
    return bool(site.node.args) or (found is not None and found.role == "optimizer")


def saves_file_object(plan: Plan, site: CallSite) -> bool:
    """``anim.save("x.gif")`` where ``anim = animation.ArtistAnimation(...)``, ``Image.fromarray(a).save(p)``: the
    ``save`` of an object made by a constructor in FILE_OBJECTS, directly or through the name it is bound to."""
    if site.method != "save" or not isinstance(site.node.func, cst.Attribute):
        return False
    receiver = site.node.func.value
    made: cst.BaseExpression | None = receiver if isinstance(receiver, cst.Call) else None
    if isinstance(receiver, cst.Name):
        binding = plan.binding_of(site.scope, receiver.value)
        made = binding.value if binding is not None else None
    maker = plan.facts.sites.get(made) if isinstance(made, cst.Call) else None
    return maker is not None and (maker.qualname or "") in FILE_OBJECTS
