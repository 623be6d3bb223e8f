"""Running sums over a prepared (sharded) loader that are read after the loop: what to reduce, and how.

On N processes each process walks 1/N of the batches, so ``total += loss.item()``, ``correct += (pred ==
y).sum().item()``, ``n += y.size(0)`` summed over a prepared loader hold one process's share. Printed,
returned, logged or compared after the loop, they must be reduced across processes first. This analysis
finds them; ``rules/averages.py`` inserts the reduction right after the loop (and leaves out the sums of values
that are already global, which it reads from the gathers the evaluation rule inserted).

An ``Accumulator`` is a name set to a number outside the loop, incremented with ``+=`` in the loop's own body
(or in a loop nested in it: ``correct += 1`` over a batch's outputs counts samples, not batches), and read after it,
or read in the loop by a value read after it (``acc = correct / len(data)``, computed again after the reduction:
``analysis/loop_reads.py``). It is reduced once it is complete: right after the loop when it is set again before each
pass (``running = 0.0`` inside the epoch loop), after the loop around it at the depth where it is set when it
sums several passes (``tr_loss = 0.0`` before the epoch loop), so a reduction never counts a previous pass
twice. Its ``kind`` (``analysis/sum_kinds.py``) says how to reduce it:

- ``"int"`` / ``"float"``: a Python number (``.item()``, ``.size(0)``, ``len(...)``): reduced as a 0-d tensor,
  ``int64`` or ``float64`` (exact, so one process prints what the original printed), then ``.item()``;
- ``"number"``: an ``.item()`` that may be either (``mask.sum().item()``): reduced as ``float64`` and turned back
  into the type it had (``type(total)(...)``);
- ``"tensor"``: a tensor (``total += loss.detach()``): reduced as it is; ``"made tensor"``: a tensor of zeros made
  before the loop to sum into (``total = torch.Tensor([0])``, then ``total += loss.item()``): reduced on the
  process's device and put back on the device it was made on;
- ``"list"`` / ``"int list"``: a list of per-batch numbers (``losses.append(loss.item())`` at every batch, ``losses = []`` before
  the pass) read after it only by order-free summaries (``np.mean(losses)``, ``sum(losses) / len(losses)``,
  ``torch.tensor(losses).mean()``): gathered, so the summary is over every process's batches (with even batches each
  list has the same length); ``"tensor list"``: the same of tensors left on the device (``losses.append(loss.detach())``,
  ``torch.stack(losses).mean()``), gathered stacked and turned back into a list.

``mean`` is set when a read after the loop divides it by a per-process count (``analysis/shard_counts.py``:
``len(loader)`` of a prepared loader, a batch counter ``steps += 1``, the loop's ``enumerate`` counter): with even
batches (Accelerate's default, ours too) every process walks the same number of batches, so the mean of the
per-process sums over that count is the global average. Divided by a global count (``len(loader.dataset)``,
``len(train_set)`` of a data set, a count summed too) it is summed. Divided by anything else it cannot be told
which, and it is ``kept``, as is a running value held by an object not proven a meter (``meter.update(v, n)``: the
meters of the program's own class are reduced, ``analysis/meter_sums.py``; a metric object of the
program's that adds what it is fed to its attributes: ``analysis/metric_objects.py``; rows written into an array
sized by the data set: ``analysis/sized_arrays.py``),
a list read in order (a loss curve plotted) or appended to conditionally, or a sum carried over several passes: the
rule reports those.

A ``defaultdict(float)`` of sums (``metrics['loss'] += ...`` in the loop, or in a helper the loop passes it to,
``analysis/keyed_sums.py``) whose keys are all written out is an accumulator too, reduced key by key (``keys``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Loop, Scope
from accelify.codemods.analysis.kept_values import kept_value
from accelify.codemods.analysis.keyed_sums import KeyedSum, keyed_sums
from accelify.codemods.analysis.loop_reads import (
    counts_samples,
    derived_reads,
    else_placeable,
    in_else,
    inner_stmts,
    reads_after,
)
from accelify.codemods.analysis.loss_means import bound_in, mean_loss
from accelify.codemods.analysis.meter_sums import MeterSums, attribute_meter_sums, meter_sums, meter_update, self_meter
from accelify.codemods.analysis.metric_objects import metric_calls
from accelify.codemods.analysis.sized_arrays import row_writes
from accelify.codemods.analysis.object_lists import OBJECT_LIST, appends_summaries, summarised
from accelify.codemods.analysis.names import PROGRESS_BARS, dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.schedules import enclosing_loop
from accelify.codemods.analysis.shard_counts import divided_by, divided_by_callers
from accelify.codemods.analysis.sum_kinds import (
    helper_kinds,
    increment_kind,
    known_kinds,
    sum_kind,
    unpacked_kinds,
    zero_tensor,
)

@dataclass(frozen=True)
class Accumulator:
    """``name`` summed over the prepared loader ``loop`` walks, read after it."""

    name: str
    loop: Loop
    end: cst.For | cst.While  # the sum is complete after this loop (``loop``, or an epoch loop around it)
    updates: tuple[cst.BaseStatement, ...]
    increments: tuple[cst.BaseExpression, ...]
    kind: str  # "int" | "float" | "tensor"
    mean: bool  # divided by a per-process count: the mean of the processes' sums
    keys: tuple[str, ...] = ()  # a dict of running sums (``metrics['loss'] += ...``): the keys it sums under
    local: bool = False  # summed in a helper: this process's values whatever the loop gathers
    derived: tuple[cst.BaseStatement, ...] = ()  # ``acc = correct / n`` in the loop, read after it: run again after
    at_else: bool = False  # read in ``end``'s ``else:`` clause: reduced first there


@dataclass(frozen=True)
class Kept:
    """A running value over a prepared loader this cannot reduce: the update, and what it is kept in."""

    name: str
    loop: Loop
    node: cst.BaseStatement
    values: tuple[cst.BaseExpression, ...]  # what is added at each batch (the rule reports only local ones)
    local: bool = False  # known to be this process's share whatever is added (a count kept with one of those)


@dataclass
class Averages:
    accumulators: list[Accumulator] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)
    meters: list[MeterSums] = field(default_factory=list)


def find_averages(plan: Plan) -> Averages:
    """Every running sum over a prepared loader read after the loop (see the module docstring)."""
    found = Averages()
    for loop in plan.facts.loops:
        if plan.loader_of(loop) is None:
            continue
        updates: dict[str, list[tuple[cst.BaseStatement, cst.BaseExpression]]] = {}
        inner = inner_stmts(plan, loop)  # ``correct += 1`` in a loop over the batch's outputs
        meter_updates: dict[str, list[cst.BaseStatement]] = {}
        attribute_updates: dict[str, list[cst.BaseStatement]] = {}
        for stmt in loop.stmts + inner:
            if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
                continue
            small = stmt.body[0]
            if isinstance(small, cst.AugAssign) and isinstance(small.operator, cst.AddAssign) and isinstance(small.target, cst.Name):
                updates.setdefault(small.target.value, []).append((stmt, small.value))
            elif stmt in inner:
                continue
            elif (root := meter_update(stmt)) is not None and _progress_bar(loop, root):
                continue  # ``bar.update(1, [np.mean(losses)])``: a progress bar moves, nothing is summed
            elif root is not None and _read_after(plan, loop, root) and _made_before(loop, root):
                meter_updates.setdefault(root, []).append(stmt)  # ``meter.update(v)``, ``meters["loss"].update(v)``
            elif (attribute := self_meter(plan, loop, stmt)) is not None and _read_after(plan, loop, attribute):
                attribute_updates.setdefault(attribute, []).append(stmt)  # ``self.losses.update(v)``
            elif (held := kept_value(stmt)) is not None and "." not in held.key:
                name = held.key  # ``losses.append(v)``
                if _read_after(plan, loop, name) and _made_before(loop, name):
                    listed = _listed(plan, loop, stmt, held.call, name) or _object_list(plan, loop, stmt, held.call, name)
                    if listed is not None:
                        found.accumulators.append(listed)
                    else:
                        found.kept.append(Kept(name, loop, stmt, held.values))
        for name, stmts in meter_updates.items():
            _metered(plan, loop, name, stmts, found)
        for name, stmts in attribute_updates.items():
            _metered(plan, loop, name, stmts, found, attribute_meter_sums(plan, loop, name, stmts))
        reported = {id(k.node) for k in found.kept} | {id(u) for meters in found.meters for u in meters.updates}
        for fed in metric_calls(plan, loop, loop.stmts + inner):  # ``metric(outputs, target)``: sums into itself
            if id(fed.stmt) not in reported and _read_after(plan, loop, fed.name):
                found.kept.append(Kept(fed.name, loop, fed.stmt, tuple(a.value for a in fed.call.args)))
        for row in row_writes(plan, loop):  # ``embeddings[k:k + len(x)] = ...`` into ``np.zeros(len(data))``
            if _read_after(plan, loop, row.name):
                found.kept.append(Kept(row.name, loop, row.stmt, (row.value,)))
        counters = {n for n, ups in updates.items()  # a batch counter; ``correct += 1`` over a batch's items is a sum
                    if all(isinstance(v, cst.Integer) and not counts_samples(plan, loop, u) for u, v in ups)}
        for keyed in keyed_sums(plan, loop):
            if _read_after(plan, loop, keyed.name) and _made_before(loop, keyed.name):
                _keyed(plan, loop, keyed, found, counters, set(updates) - counters)
        summed_here: list[Accumulator] = []
        for name, ups in updates.items():
            if name in counters:
                continue
            kept = Kept(name, loop, ups[0][0], tuple(v for _, v in ups))
            derived: tuple[cst.BaseStatement, ...] | None = ()
            if not _read_after(plan, loop, name):
                derived = derived_reads(plan, loop, name, [u for u, _ in ups])  # ``acc = correct / n`` in the loop
                if derived == ():
                    continue
                if derived is None:
                    found.kept.append(Kept(name, loop, ups[0][0], kept.values, local=True))
                    continue
                kept = Kept(name, loop, ups[0][0], kept.values, local=True)  # what is read is this process's share
            first = _init(plan, loop, name)
            if first is None or any(_assigned_in(loop, name, s) for s in loop.stmts + inner if s not in {u for u, _ in ups}):
                found.kept.append(kept)
                continue
            init, end = first
            if derived and end is not loop.node:
                found.kept.append(kept)  # summed over several passes: the value read after one pass is not recomputed
                continue
            if end is not loop.node and any(not plan.facts.after(r, end) for r in reads_after(plan, loop.node, loop.scope, name)):
                found.kept.append(kept)  # read between the passes (``print(total / step)`` every epoch) and summed on
                continue
            at_else = any(in_else(plan, r, end) for r in reads_after(plan, end, loop.scope, name))
            if at_else and not else_placeable(end):
                found.kept.append(kept)  # ``for ... else: print(tot)`` with a ``break`` that may skip the clause
                continue
            reads = list(derived) if derived else _until_rebound(plan, end, loop.scope, name,
                                                                    reads_after(plan, end, loop.scope, name))
            mean = divided_by(plan, end, loop, name, reads, counters, set(updates) - counters)
            if mean is False and end is loop.node and divided_by_callers(plan, loop.scope, name, reads):
                mean = True  # returned, and every caller divides it by ``len(loader)``
            known = unpacked_kinds(plan, loop) | known_kinds(loop, plan)
            kind = sum_kind(init, [v for _, v in ups], known, _kinds(plan, loop, [v for _, v in ups]))
            if mean is None or kind is None:
                found.kept.append(kept)
                continue
            summed_here.append(Accumulator(name, loop, end, tuple(u for u, _ in ups), tuple(v for _, v in ups), kind, mean,
                                           derived=derived, at_else=at_else))
        _keep_mixed(plan, loop, found, summed_here)
    return found


def _until_rebound(plan: Plan, end: cst.BaseStatement, scope: Scope, name: str,
                   reads: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The ``reads`` of the sum ``name`` completed at ``end`` before the first statement of ``end``'s block after it
    that binds the name anew (``loss_sum = 0`` after the epoch's print: set W's W11, whose test loop then sums into
    the same names): every path from ``end`` to a later read goes through that statement, so what it reads is
    another sum."""
    parent = plan.facts.parent_stmt.get(end)
    block = list(scope.body) if parent is None else list(getattr(getattr(parent, "body", None), "body", ()))
    if end not in block:
        return reads
    for stmt in block[block.index(end) + 1:]:
        small = stmt.body[0] if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and m.matches(small.targets[0].target, m.Name(name)) \
                and not m.findall(small.value, m.Name(name)):
            order = plan.facts.order
            return [r for r in reads if order[r][0] < order[stmt][0]]
    return reads


def _metered(plan: Plan, loop: Loop, name: str, stmts: list[cst.BaseStatement], found: Averages,
             meters: MeterSums | None = None) -> None:
    """The meters held by ``name`` (or ``meters``, a trainer's, when given) and updated by ``stmts`` in ``loop``:
    reduced when proven (``meter_sums.py``), else each update kept and reported."""
    if "." not in name:
        first = _init(plan, loop, name, lambda value, _: value is not None)
        meters = meter_sums(plan, loop, name, stmts, first[0].value, first[1]) if first is not None else None  # type: ignore[arg-type]
    if meters is not None:
        found.meters.append(meters)
        return
    for stmt in stmts:
        found.kept.append(Kept(name, loop, stmt, tuple(a.value for a in stmt.body[0].value.args)))  # type: ignore[attr-defined]


def _kinds(plan: Plan, loop: Loop, values: list[cst.BaseExpression]) -> dict[int, str]:
    """``helper_kinds``, and a tensor for a batch's mean loss added as it is under ``no_grad`` (``test_loss +=
    criterion(log_ps, labels)``, the Udacity course's test loop)."""
    kinds = helper_kinds(plan, values)
    for v in values:
        site = plan.facts.sites.get(v) if isinstance(v, cst.Call) else None
        if site is not None and (loop.no_grad or site.no_grad) and mean_loss(plan, loop, v):
            kinds[id(v)] = "tensor"  # (also under a ``with torch.no_grad():`` inside the loop)
        elif isinstance(v, cst.Name) and mean_loss(plan, loop, v) and (loop.no_grad or _bound_under_no_grad(plan, loop, v.value)):
            kinds[id(v)] = "tensor"  # ``loss = criterion(out, y)`` then ``val_loss += loss`` (M4's ``Evaluate``)
    return kinds


def _bound_under_no_grad(plan: Plan, loop: Loop, name: str) -> bool:
    """Whether every binding of ``name`` in ``loop`` is a call made under ``no_grad`` (a ``with torch.no_grad():``
    inside the loop)."""
    sites = [plan.facts.sites.get(v) if isinstance(v, cst.Call) else None for v in bound_in(loop, name)]
    return bool(sites) and all(site is not None and site.no_grad for site in sites)


def _keep_mixed(plan: Plan, loop: Loop, found: Averages, summed: list[Accumulator]) -> None:
    """Adds the loop's sums to ``found``, but ``metrics['loss'] / epoch_samples`` or ``acc / length`` with ``metrics``
    or ``acc`` left per process: a reduced count alone would make the printed value 1/N of the truth, so both stay
    one process's share, reported. Whichever order the sums come in: what one kept sum makes local may make
    another local too."""
    kept_here = {k.name for k in found.kept if k.loop is loop}
    changed = True
    while changed:
        changed = False
        for acc in list(summed):
            if any(_mixed(r, acc.name, kept_here) for r in [*reads_after(plan, loop.node, loop.scope, acc.name), *acc.derived]):
                summed.remove(acc)
                found.kept.append(Kept(acc.name, loop, acc.updates[0], acc.increments, local=True))
                kept_here.add(acc.name)
                changed = True
    found.accumulators.extend(summed)


def _keyed(plan: Plan, loop: Loop, keyed: KeyedSum, found: Averages, counters: set[str], summed: set[str]) -> None:
    """A dict of running sums: reduced key by key when it is a ``defaultdict`` of numbers set before the pass and
    every key it sums under is written out (a key no process added reads 0 there, so every process reduces the same
    keys in the same order); else kept and reported."""
    first = _init(plan, loop, keyed.name, made=_number_dict)
    kept = Kept(keyed.name, loop, keyed.stmt, keyed.values, local=keyed.local)
    if first is None or not keyed.keys:
        found.kept.append(kept)
        return
    init, end = first
    if end is not loop.node and any(not plan.facts.after(r, end) for r in reads_after(plan, loop.node, loop.scope, keyed.name)):
        found.kept.append(kept)
        return
    mean = divided_by(plan, end, loop, keyed.name, reads_after(plan, end, loop.scope, keyed.name), counters, summed)
    if mean is None:
        found.kept.append(kept)
        return
    found.accumulators.append(
        Accumulator(keyed.name, loop, end, (keyed.stmt,) * len(keyed.values), keyed.values, "float", mean, keyed.keys, keyed.local)
    )


# summaries of a list that do not depend on its order: the gathered list gives the whole data set's
_ORDER_FREE = {"numpy.mean", "numpy.sum", "numpy.average", "numpy.median", "statistics.mean", "statistics.fmean",
               "statistics.median", "sum", "len", "max", "min"}


def _listed(plan: Plan, loop: Loop, stmt: cst.BaseStatement, call: cst.Call, name: str) -> Accumulator | None:
    """``losses.append(loss.item())`` as a statement of the loop's own body (every batch, so with even batches
    every process's list is as long), ``losses = []`` before the pass, nothing else in the loop touching
    ``losses``, no ``break``, and every read after the pass an order-free summary (``_ORDER_FREE``): gathered
    then. None otherwise (kept and reported)."""
    assert isinstance(call.func, cst.Attribute)
    if call.func.attr.value != "append" or len(call.args) != 1 or call.args[0].keyword is not None:
        return None
    if plan.facts.parent_stmt.get(stmt) is not loop.node or m.findall(loop.node.body, m.Break()):
        return None
    if any(m.findall(s, m.Name(name)) for s in loop.stmts if s is not stmt and not any(n is stmt for n in plan.facts.chain(s))):
        return None
    value = call.args[0].value  # (``HR.append(hit(item, recommends))``: what the program's function returns)
    kind = increment_kind(value, known_kinds(loop), helper_kinds(plan, [value]))
    first = _init(plan, loop, name, made=_empty_list)
    if kind == "tensor" and _off_device(call.args[0].value):
        return None  # ``loss.detach().cpu()``: a gather needs the tensors on the process's device
    if kind not in ("int", "float", "number", "tensor") or first is None:
        return None
    init, end = first
    reads = _until_summarised(plan, loop, name, reads_after(plan, loop.node, loop.scope, name))
    if any(not plan.facts.after(r, end) for r in reads if end is not loop.node) or not all(
            _summarised(loop.scope, r, name) for r in reads):
        return None
    listed = {"int": "int list", "tensor": "tensor list"}.get(kind, "list")
    return Accumulator(name, loop, end, (stmt,), (call.args[0].value,), listed, False)


def _object_list(plan: Plan, loop: Loop, stmt: cst.BaseStatement, call: cst.Call, name: str) -> Accumulator | None:
    """``summ.append(summary_batch)`` of per-batch dicts, summarised after the pass (``analysis/object_lists.py``):
    gathered whole after the loop."""
    if not appends_summaries(plan, loop, call, name):
        return None
    first = _init(plan, loop, name, made=_empty_list)
    if first is None or first[1] is not loop.node:
        return None
    reads = reads_after(plan, loop.node, loop.scope, name)
    if not reads or not all(summarised(loop.scope, r, name) for r in reads):
        return None
    return Accumulator(name, loop, loop.node, (stmt,), (call.args[0].value,), OBJECT_LIST, False)


def _off_device(expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` moves a tensor off the process's device or out of torch (``.cpu()``, ``.to(...)``, ``.numpy()``)."""
    return any(isinstance(c.func, cst.Attribute) and c.func.attr.value in ("cpu", "to", "numpy", "tolist")  # type: ignore[attr-defined]
               for c in m.findall(expr, m.Call()))


def _empty_list(value: cst.BaseExpression | None, binding: Binding) -> bool:
    return isinstance(value, cst.List) and not value.elements


def _until_summarised(plan: Plan, loop: Loop, name: str, reads: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """``reads`` up to ``losses = np.mean(losses)`` in the block the loop is in (always run after it): what reads
    ``losses`` after that reads the summary, not the list (set U's U13: ``return losses``)."""
    block = plan.facts.parent_stmt.get(loop.node)
    for read in sorted(reads, key=lambda r: plan.facts.order[r][0]):
        small = read.body[0] if isinstance(read, cst.SimpleStatementLine) and len(read.body) == 1 else None
        if isinstance(small, cst.Assign) and len(small.targets) == 1 and m.matches(small.targets[0].target, m.Name(name)) \
                and plan.facts.parent_stmt.get(read) is block and _summarised(loop.scope, read, name):
            return [r for r in reads if not plan.facts.after(r, read)]
    return reads


def _summarised(scope: Scope, stmt: cst.BaseStatement, name: str) -> bool:
    """Every load of ``name`` in ``stmt`` is the whole argument of an order-free summary (``np.mean(name)``), or of a
    ``torch.stack(name)`` / ``torch.tensor(name)`` summarised as a whole (``torch.stack(losses).mean()``)."""
    uses = m.findall(stmt, m.Name(name))
    allowed: set[int] = {id(t.target) for a in m.findall(stmt, m.Assign()) for t in a.targets}  # type: ignore[attr-defined]
    # (``losses = np.mean(losses)``: the name bound to the summary is no read of the list)
    for call in m.findall(stmt, m.Call()):
        assert isinstance(call, cst.Call)
        qualname = scope.imports.qualname(call.func) or dotted(call.func)
        if qualname in _ORDER_FREE and len(call.args) == 1 and m.matches(call.args[0].value, m.Name(name)):
            allowed.add(id(call.args[0].value))
        if isinstance(call.func, cst.Attribute) and call.func.attr.value in _WHOLE and not call.args:
            made = call.func.value
            if isinstance(made, cst.Call) and (scope.imports.qualname(made.func) or "") in _STACKS and len(made.args) == 1 \
                    and m.matches(made.args[0].value, m.Name(name)):
                allowed.add(id(made.args[0].value))
    return all(id(u) in allowed for u in uses)


_STACKS = ("torch.stack", "torch.tensor", "numpy.array", "numpy.stack")
_WHOLE = ("mean", "sum", "max", "min", "median", "std", "var")  # over every element: the order does not matter


def _number_dict(value: cst.BaseExpression | None, binding: Binding) -> bool:
    """``defaultdict(float)`` / ``defaultdict(int)``."""
    return (isinstance(value, cst.Call) and binding.where.imports.qualname(value.func) == "collections.defaultdict"
            and len(value.args) == 1 and m.matches(value.args[0].value, m.Name("float") | m.Name("int")))


def _mixed(stmt: cst.BaseStatement, name: str, kept: set[str]) -> bool:
    """``metrics['loss'] / epoch_samples`` or ``print_metrics(metrics, epoch_samples)``: ``name`` computed with a
    running value that stays one process's share."""
    for node in m.findall(stmt, m.BinaryOperation()):
        assert isinstance(node, cst.BinaryOperation)
        sides = [_names(node.left), _names(node.right)]
        if (name in sides[0] and sides[1] & kept) or (name in sides[1] and sides[0] & kept):
            return True
    for call in m.findall(stmt, m.Call()):
        direct = {a.value.value for a in call.args if isinstance(a.value, cst.Name)}  # type: ignore[attr-defined]
        if name in direct and direct & kept:
            return True
    return False


def _names(expr: cst.BaseExpression) -> set[str]:
    return {n.value for n in m.findall(expr, m.Name())}  # type: ignore[attr-defined]


def _read_after(plan: Plan, loop: Loop, name: str) -> bool:
    return bool(reads_after(plan, loop.node, loop.scope, name))


def _progress_bar(loop: Loop, name: str) -> bool:
    """``with click.progressbar(loader) as bar:`` ... ``bar.update(1, [np.mean(losses), ...])`` (set W's W8): a
    progress bar's ``update`` moves the bar, it sums nothing."""
    bindings = loop.scope.bindings.get(name, [])
    return bool(bindings) and all(isinstance(b.value, cst.Call) and loop.scope.imports.qualname(b.value.func) in PROGRESS_BARS
                                  for b in bindings)


def _made_before(loop: Loop, name: str) -> bool:
    """``meter = AverageMeter()`` / ``losses = []`` in the loop's scope, outside the loop."""
    return any(b.loop is not loop and not b.aug for b in loop.scope.bindings.get(name, []))


def _number(value: cst.BaseExpression | None, binding: Binding) -> bool:
    """``0``, ``0.0``, or a tensor of zeros made to sum into (``torch.Tensor([0])``: ``analysis/sum_kinds.py``)."""
    return isinstance(value, (cst.Integer, cst.Float)) or (value is not None and zero_tensor(binding.where, value))


def _init(plan: Plan, loop: Loop, name: str, made: Callable[[cst.BaseExpression | None, Binding], bool] = _number
          ) -> tuple[Binding, cst.For | cst.While] | None:
    """The last assignment of ``name`` to a number before the loop, and the loop after which the sum is
    complete: the loop itself, or the loop around it at the assignment's depth (``tr_loss = 0.0`` before the
    epoch loop: summed over every epoch, complete after the epoch loop)."""
    scope: Scope = loop.scope
    inits = [
        b for b in scope.bindings.get(name, [])
        if not b.aug and b.stmt is not loop.node and plan.facts.order[b.stmt][1] < plan.facts.order[loop.node][0]
    ]
    if not inits or not made(inits[-1].value, inits[-1]):
        return None
    init = inits[-1]
    outer = enclosing_loop(plan, loop.node)
    if outer is not None and any(
        not b.aug and made(b.value, b) and b.stmt is not init.stmt
        and any(n is outer for n in plan.facts.chain(b.stmt)[1:]) and not any(n is loop.node for n in plan.facts.chain(b.stmt))
        for b in scope.bindings.get(name, [])
    ):
        return init, loop.node  # set again on every pass of the loop around (``running = 0.0`` after the print)
    around = enclosing_loop(plan, init.stmt)
    end: cst.For | cst.While | None = loop.node
    while end is not None and enclosing_loop(plan, end) is not around:
        end = enclosing_loop(plan, end)
    return (init, end) if end is not None and plan.facts.after(end, init.stmt) else None


def _assigned_in(loop: Loop, name: str, stmt: cst.BaseStatement) -> bool:
    return any(b.stmt is stmt for b in loop.scope.bindings.get(name, []))
