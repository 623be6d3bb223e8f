"""Whether an evaluation loop computes the program's own loss on each batch from the forward's outputs, a loss that
must run on this process's batch, not on the batches of every process gathered.

``loss_outputs = loss_fn(*outputs, target)`` then ``val_loss += loss.item()`` (siamese-triplet's ``test_epoch``): the
loss may choose pairs or triplets within the batch (``OnlineTripletLoss``), take the rest of the batch as negatives
(InfoNCE) or normalise by the batch, so its value on the concatenation of N processes' batches is another quantity:
mined over 500 samples instead of 250, J3's "Average nonzero triplets" came out 12250 where the original's is 3000.

What is exact, computed on each process's own batch: the processes are dealt whole batches of the original's batch
sampler in turn (``split_batches=False``, the runtime's default, Hugging Face Accelerate's too), so each process's
batch is one of the original's batches, sample for sample (with shuffling off; shuffled, the original's own batches
are a draw either way), and a loss that depends on which samples share a batch gets the same samples together. The
running sum of the values, reduced after the loop (``rules/averages.py``), is the original's sum, and over
``len(loader)`` (a per-process count, reduced with "mean") the original's mean, when the batches fill whole rounds. What
is not: a last round the batches do not fill (the runtime completes it with samples from the start, which the sum then
counts as a batch of its own), and ``split_batches=True`` (each process holds 1/N of every batch), where a gathered
pass is one original batch: there the gather before the loss stays.

Not such a loss, and gathered as before: a ``torch.nn`` / ``torch.nn.functional`` loss (``analysis/loss_means.py``,
whose sum is then made per original batch) or any ``torch`` object a parameter is given by every caller; a function or
a loss class ``forward`` of the program whose body only combines its inputs elementwise and reduces them (a VAE's
``loss_function``, a contrastive loss of per-pair terms: a sum or mean of per-sample terms); a library function. A
name is judged by every value it may hold (what each caller passes for a parameter, each binding of a name bound
again: the notebook's five experiments rebind ``loss_fn``); one that cannot be followed (``LOSSES[args.loss]``) is
the program's own loss.

``local_loss`` finds the statement that computes such a loss (its value, through plain assignments, is added to a
running sum of the loop), so that the evaluation rule gathers after it what the loop reads later (a metric's outputs
and targets), and the sum stays this process's, reduced after the loop.
"""

from __future__ import annotations

import builtins
from typing import Sequence

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.evaluation_loops import is_model
from accelify.codemods.analysis.facts import Binding, Loop, Scope
from accelify.codemods.analysis.loss_means import is_mean_loss_call
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.placed import split_batches
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.reduced_outputs import assigned_names, plain_assignment, read_names
from accelify.codemods.analysis.shard_sums import find_averages

_LIBRARIES = ("torch", "numpy", "math", "scipy", "sklearn", "builtins", "operator", "functools", "itertools")


def local_loss(
    plan: Plan, loop: Loop, outputs: Sequence[str], stmts: Sequence[cst.BaseStatement], forward: cst.Call | None = None
) -> int | None:
    """The index in ``stmts`` (the statements of ``loop`` from its forward on; the forward binds ``outputs``, or is the
    call ``forward`` inside the first statement, ``val_loss += loss_fn(model(x), y).item()``) of the last statement
    that computes the program's own loss from the outputs (see the module docstring), or None."""
    if split_batches(plan):
        return None  # each process holds 1/N of every batch: a gathered pass is one original batch, as gathered
    found = plan.analysis(find_averages)
    updates = {
        id(update) for acc in found.accumulators if acc.loop.node is loop.node and not acc.local for update in acc.updates
    }
    derived = set(outputs)
    last: int | None = None
    for index, stmt in enumerate(stmts):
        if any(_program_loss(plan, loop, call, stmt, derived, forward) for call in _calls(stmt)) \
                and _summed(stmt, stmts[index:], updates):
            last = index
        if plain_assignment(stmt):
            derived |= assigned_names(stmt)
        elif _augmented(stmt):
            derived.add(stmt.body[0].target.value)  # type: ignore[attr-defined]
    return last


def _calls(stmt: cst.BaseStatement) -> list[cst.Call]:
    return [c for c in m.findall(stmt, m.Call()) if isinstance(c, cst.Call)]


def _augmented(stmt: cst.BaseStatement) -> bool:
    """``loss_inputs += (target,)``: an update of a name by itself (the name stays what it was derived from)."""
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.AugAssign) \
        and isinstance(stmt.body[0].target, cst.Name)


def _program_loss(
    plan: Plan, loop: Loop, call: cst.Call, stmt: cst.BaseStatement, derived: set[str], forward: cst.Call | None
) -> bool:
    """``loss_fn(*loss_inputs)``: a call of a parameter, a name or an attribute that is neither a library's nor the
    model, nor a ``torch.nn`` mean loss, given (a name derived from) the forward's outputs."""
    func = call.func
    if isinstance(func, cst.Attribute):
        if not (isinstance(func.value, cst.Name) and func.value.value == "self"):
            return False  # ``outputs.argmax(1)``, ``F.softmax(...)``: a method or a module's function
    elif not isinstance(func, cst.Name) or hasattr(builtins, func.value):
        return False
    qualname = loop.scope.imports.qualname(func) or ""
    if qualname.split(".", 1)[0] in _LIBRARIES or is_model(plan, loop.scope, func, stmt):
        return False
    if not _named_loss(func, stmt) or is_mean_loss_call(plan, loop, call) or _torch_object(plan, loop, func) \
            or _per_sample(plan, loop, call):
        return False
    return any(read_names(arg.value) & derived or (forward is not None and _holds(arg.value, forward)) for arg in call.args)


def _named_loss(func: cst.BaseExpression, stmt: cst.BaseStatement) -> bool:
    """A loss by its name (``loss_fn``, ``criterion``, ``self.triplet_loss``) or by the names its statement binds or
    adds to (``loss, n = online_pairs(out, y)``, ``val_loss += score(out, y)``): a metric helper (``correct +=
    count_correct(out, y)``, ``acc += get_accuracy(out, y)``) is gathered for as before, its counts then over the
    samples without the ones that even out the last round."""
    names = [dotted(func) or ""]
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Assign):
            names += list(assigned_names(stmt))
        elif isinstance(small, cst.AugAssign):
            names.append(dotted(small.target) or "")
    return any("loss" in n.lower() or "criterion" in n.lower() for n in names)


# what a loss of per-sample terms is made of: elementwise maths, shape and type changes, reductions; anything else
# (indexing by a mask or by indices, ``nonzero``, ``triu``, ``cdist``, ``matmul``, a selector object, another function
# of the program) may mix the samples of the batch
_ELEMENTWISE = frozenset((
    "pow", "exp", "log", "log1p", "abs", "sqrt", "relu", "sigmoid", "tanh", "clamp", "clamp_min", "float", "double",
    "view", "reshape", "flatten", "squeeze", "unsqueeze", "sum", "mean", "detach", "type_as", "softplus", "log_softmax",
    "softmax", "neg", "square", "maximum", "minimum", "view_as", "contiguous",
))
_NOT_PER_SAMPLE = (cst.Subscript, cst.ClassDef, cst.FunctionDef, cst.For, cst.While, cst.Lambda, cst.ListComp,
                   cst.GeneratorExp)


def _per_sample(plan: Plan, loop: Loop, call: cst.Call) -> bool:
    """``loss_function(recon, x, mu, logvar)``, ``criterion = ContrastiveLoss(margin)``: a function (or a ``forward``)
    of the program whose body only combines its inputs elementwise and reduces them (``torch.*``, ``F.*``, tensor
    methods of ``_ELEMENTWISE``, arithmetic but ``@``): a sum or mean of per-sample terms, as gathered as it is. Every
    value the name may hold counts (a parameter: what every caller passes; a name bound several times: each)."""
    if isinstance(call.func, cst.Name):
        owner = loop.scope.resolve(call.func.value)
        function = plan.facts.function(call.func.value, owner) if owner is not None else None
        if function is not None and len(owner.bindings.get(call.func.value, [])) <= 1:  # type: ignore[union-attr]
            return _elementwise(function)
    values = _values(plan, loop.scope, call.func, 0)
    if not values:
        return False
    for binding in values:
        cls = plan.classes.class_of(binding.where, binding.value.func) if isinstance(binding.value, cst.Call) else None
        forward = plan.classes.method(cls, "forward") if cls is not None else None
        if forward is None or not _elementwise(forward):
            return False
    return True


def _elementwise(function: Scope) -> bool:
    if not isinstance(function.node, cst.FunctionDef):
        return False
    body = function.node.body
    if any(m.findall(body, m.TypeOf(*(getattr(m, t.__name__) for t in _NOT_PER_SAMPLE)))) \
            or m.findall(body, m.BinaryOperation(operator=m.MatrixMultiply())):
        return False
    imports = function.imports
    for inner in m.findall(body, m.Call()):
        func = inner.func  # type: ignore[attr-defined]
        qualname = imports.qualname(func) or ""
        leaf = qualname.rsplit(".", 1)[-1] if qualname else (func.attr.value if isinstance(func, cst.Attribute) else "")
        if qualname.startswith("torch.nn.functional.") or (qualname.startswith("torch.") and leaf in _ELEMENTWISE):
            continue
        if isinstance(func, cst.Attribute) and func.attr.value in _ELEMENTWISE and dotted(func) != f"self.{func.attr.value}":
            continue
        return False
    return True


def _values(plan: Plan, scope: Scope, expr: cst.BaseExpression, depth: int) -> list[Binding] | None:
    """Every binding ``expr`` (a name, ``self.x``) may hold: through a parameter, what each caller passes; a name
    bound several times, each binding. None when one cannot be followed."""
    key = dotted(expr)
    if key is None or depth > 4:
        return None
    head = key.split(".")[0]
    if head == "self":
        owner = scope.class_scope
        return list(owner.bindings.get(key, [])) or None if owner is not None and key.count(".") == 1 else None
    owner = scope.resolve(head)
    if owner is None or "." in key:
        return None
    if owner.kind == "function" and head in owner.param_names and head not in owner.bindings:
        sites = plan.call_sites(owner)
        found: list[Binding] = []
        for site in sites:
            arg = plan.arg_for(site, owner, head)
            got = _values(plan, site.scope, arg.value, depth + 1) if arg is not None else None
            if got is None:
                return None
            found += got
        return found or None
    return list(owner.bindings.get(head, [])) or None


def _torch_object(plan: Plan, loop: Loop, func: cst.BaseExpression) -> bool:
    """``criterion`` a parameter every caller gives a ``torch`` object (``nn.CrossEntropyLoss()``, the reduction
    ``"sum"`` too: a sum over samples): a per-sample loss, as gathered as it is."""
    values = _values(plan, loop.scope, func, 0)
    return bool(values) and all(
        isinstance(b.value, cst.Call) and (b.where.imports.qualname(b.value.func) or "").split(".", 1)[0] == "torch"
        for b in values  # type: ignore[union-attr]
    )


def _holds(node: cst.CSTNode, call: cst.Call) -> bool:
    return any(found is call for found in m.findall(node, m.Call()))


def _summed(stmt: cst.BaseStatement, rest: Sequence[cst.BaseStatement], updates: set[int]) -> bool:
    """Whether the value ``stmt`` computes reaches, through plain assignments, a running sum's update (``stmt`` itself:
    ``val_loss += loss_fn(out, y).item()``)."""
    if id(stmt) in updates:
        return True
    tainted = assigned_names(stmt)
    for later in rest[1:]:
        if not read_names(later) & tainted:
            continue
        if id(later) in updates:
            return True
        if plain_assignment(later):
            tainted |= assigned_names(later)
    return False
