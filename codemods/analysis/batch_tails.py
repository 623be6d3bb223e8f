"""The statements of a gathered evaluation loop from the gather to the last running value they update, run once per
original batch: what makes per-batch values over a gathered loop the original's where one chain
(``analysis/batch_chains.py``) or one sum (``analysis/loss_means.py``) is not enough.

Over a gathered loop each pass holds, in order, the original's batches of the loader's batch size (the processes are
dealt whole batches in turn; ``gather_for_metrics`` drops the samples that evened out the last round), and the loop
runs 1/N as many times. A value computed from a pass is then the value of N batches at once: a batch's mean (``accuracy
+= torch.mean(equals.type(torch.FloatTensor))``, the Udacity course's test loop), a mean loss appended to a list that is
averaged after the loop (``valid_losses.append(loss.item())`` then ``np.average(valid_losses)``, the much-copied
early-stopping notebook), a mean loss summed as a tensor next to such an accuracy. Summed and divided by the number of
passes, or listed and averaged, it comes out close to the original's and not equal whenever the last round is uneven;
a list holds one value per pass, so a sum of it is 1/N of the original's.

``per_batch_tail`` takes the loop's own statements from the one right after the gather to the last update of its
running values, when every one of them is a plain assignment, an augmented assignment of a name, or a list's
``append``/``extend``, and reads of the loop's own values only the gathered ones (split by rows) and names the
statements bind themselves; the later statements of the pass must not read what they bind (it would be the last
batch's). They then run in ``for out, y in zip(out.split(b), y.split(b)):``: every value added or appended is the
original's, batch by batch. A sum divided by the number of batches (``len(loader)``, or a name bound to it once and
read only there: ``test_loss /= num_batches``, PyTorch's quickstart; the only per-process counts this accepts) is
divided by the original's number of batches instead (``len(loader.batch_sampler.batch_sampler)``);
divided by the data set's size or read as it is, it is the original's sum already. Anything else: None (reported).
"""

from __future__ import annotations

from typing import Iterable

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.batch_chains import BatchChain, rebinding_division
from accelify.codemods.analysis.facts import Loop
from accelify.codemods.analysis.forward_reads import names_read
from accelify.codemods.analysis.kept_values import kept_value
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.shard_counts import guarded, original_batch_count, under_progress_bar
from accelify.codemods.analysis.shard_sums import Accumulator
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.statement_shapes import target_names

_LIST_METHODS = ("append", "extend")


def per_batch_tail(plan: Plan, agreement: Agreement, loop: Loop, accs: Iterable[Accumulator], gathered: set[str],
                   reads: dict[str, list[cst.BaseStatement]], accelerate: bool = False) -> BatchChain | None:
    """The statements of ``loop`` to run per original batch so that every running value of ``accs`` (the loop's
    sums and lists of gathered values) is the original's, the gathered names (``gathered``: those that keep a row per
    sample) to split, and the divisors to change (``reads``: the statements after the loop that read each sum); None
    where the loop is not that shape (see the module docstring). For Hugging Face Accelerate (``accelerate``) the
    count of batches reads the batch sampler the prepared loader keeps on one process."""
    accs = list(accs)
    body = list(loop.node.body.body) if isinstance(loop.node.body, cst.IndentedBlock) else None
    source = plan.loop_source(loop)
    if body is None or not accs or source is None or dotted(source) is None:
        return None
    after: list[cst.BaseStatement] = []  # the loop's statements after the block that holds the gather
    if body is not None and not any(agreement.gathers(s) for s in body):
        body, after = _with_block(agreement, body)  # ``with torch.no_grad():`` around the forward and the sums
    if body is None:
        return None
    anchors = [i for i, s in enumerate(body) if agreement.gathers(s)]
    if len(anchors) != 1 or sum(1 for s in loop.stmts if agreement.gathers(s)) != 1:
        return None  # gathered in a nested block, or twice
    updates = [u for acc in accs for u in acc.updates]
    if any(acc.keys or acc.local for acc in accs) or any(u not in body for u in updates):
        return None  # a dict of sums, a helper's sum, an update under a condition or in an inner loop
    # after the gather; or from the statement the forward was taken out of, the gather put before it (set U's U1:
    # ``target = model(x).to(device)`` reads the gathered ``output``)
    before = body[anchors[0]] in agreement.gathered_before
    start, end = anchors[0] + (0 if before else 1), max(body.index(u) for u in updates)
    if end < start:
        return None
    end += _row_extends(body[end + 1:], after, gathered)
    region = body[start:end + 1]
    names = {acc.name for acc in accs}
    if any(u not in updates and _updated_name(u) not in (None, *names) and not _extends(u) for u in region):
        return None  # another running value in between (the Udacity course's ``test_loss`` kept apart): its
        # statement would run per batch too, its divisor not counted again
    own = _bound_in(loop)
    bound: set[str] = set()
    split: list[str] = []
    for stmt in region:
        found = _shape(stmt, agreement.forward_names)
        if found is None:
            return None
        targets, reads_here = found
        for name in [n for n in reads_here if n not in bound]:
            if name in gathered:
                if name not in split:
                    split.append(name)
            elif name in own:
                return None  # a value of the pass that is this process's (the inputs), not split into batches
        bound |= targets
    if not split or any(set(names_read(s)) & (bound | set(split) | names) for s in body[end + 1:] + after):
        return None  # a later statement reads a name the per-batch loop leaves as its last batch's, or a running
        # value mid-pass (``print(test_loss)`` after each batch: after each pass it would be N batches on)
    loader = code_of(source)
    divisors: list[tuple[cst.Call, cst.BaseStatement]] = []
    for acc in accs:
        if not acc.mean:
            continue
        if acc.end is not loop.node:
            return None
        found_divisors = batch_divisors(plan, loop, acc.name, reads.get(acc.name, []), loader)
        if not found_divisors:
            return None
        divisors += found_divisors
    sampler = f"{loader}.batch_sampler"
    batches = f'len(getattr({sampler}, "batch_sampler", {sampler}))' if accelerate else f"len({sampler}.batch_sampler)"
    return BatchChain(tuple(region), tuple(split), f"{sampler}.batch_size", tuple(divisors), batches)


def _updated_name(stmt: cst.BaseStatement) -> str | None:
    """The name ``total += ...`` or ``values.append(...)`` updates, or None for another statement."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1):
        return None
    small = stmt.body[0]
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
        return small.target.value
    kept = kept_value(stmt)
    if kept is not None and not kept.keyed and "." not in kept.key and kept.call.func.attr.value in _LIST_METHODS:  # type: ignore[attr-defined]
        return kept.key
    return None


def _extends(stmt: cst.BaseStatement) -> bool:
    """``all_preds.extend(...)``: a list given the rows of what it is handed, the same list whether it is handed a
    pass at once or each original batch of it in turn."""
    return isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and m.matches(
        stmt.body[0], m.Expr(m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("extend")))))


def _row_extends(later: list[cst.BaseStatement], after: list[cst.BaseStatement], gathered: set[str]) -> int:
    """How many of the statements right after the last update (``later``) to run per batch too: the lists extended
    by the rows of the pass (``all_preds.extend(y_pred.cpu().numpy())``, U15's evaluation) that read a gathered name
    the per-batch loop rebinds to its last batch, when no statement after them reads one."""
    count = 0
    while count < len(later) and _extends(later[count]):
        count += 1
    if not any(set(names_read(s)) & gathered for s in later[:count]) or any(
            set(names_read(s)) & gathered for s in later[count:] + after):
        return 0
    return count


def _with_block(agreement: Agreement, body: list[cst.BaseStatement]
                ) -> tuple[list[cst.BaseStatement] | None, list[cst.BaseStatement]]:
    """The statements of the one ``with`` block of the loop's body that holds the gather (``with torch.no_grad():``
    around the forward, the gather and the sums), and the loop's statements after it; (None, []) otherwise."""
    blocks = [i for i, s in enumerate(body) if isinstance(s, cst.With) and isinstance(s.body, cst.IndentedBlock)
              and any(agreement.gathers(inner) for inner in s.body.body)]
    if len(blocks) != 1:
        return None, []
    block = body[blocks[0]]
    assert isinstance(block, cst.With) and isinstance(block.body, cst.IndentedBlock)
    return list(block.body.body), body[blocks[0] + 1:]


def _shape(stmt: cst.BaseStatement, forwards: dict[cst.CSTNode, str] | None = None) -> tuple[set[str], list[str]] | None:
    """(names bound, names read) of a statement that may run per batch: ``a = ...`` (names or tuples of names),
    ``total += ...``, ``values.append(...)``; None for any other statement. A forward the evaluation rule took out
    (``forwards``) reads as the gathered name that replaces it."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1) or _draws(stmt):
        return None
    small = stmt.body[0]
    if isinstance(small, cst.Assign):
        targets: set[str] = set()
        for target in small.targets:
            names = [target.target] if isinstance(target.target, cst.Name) else \
                [e.value for e in target.target.elements] if isinstance(target.target, cst.Tuple) else [None]
            if not all(isinstance(n, cst.Name) for n in names):
                return None  # ``self.x = ...``, ``out[i] = ...``, a starred or nested target
            targets |= set(target_names(target.target))
        return targets, names_read(small.value, forwards)
    if isinstance(small, cst.AugAssign) and isinstance(small.target, cst.Name):
        return set(), names_read(small.value, forwards)
    if isinstance(small, cst.Expr) and m.matches(small.value, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name()))):
        call = small.value
        assert isinstance(call, cst.Call) and isinstance(call.func, cst.Attribute)
        if call.func.attr.value in _LIST_METHODS:
            return set(), names_read(call, forwards)
    return None


_RANDOM = ("rand", "randn", "randint", "randn_like", "rand_like", "randint_like", "randperm", "normal", "bernoulli",
           "multinomial", "poisson", "dropout", "random", "choice", "shuffle")


def _draws(stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` draws at random (``out + torch.randn(1)``): run per batch on every process, each process would
    draw its own values, and what is global would differ between processes."""
    return any((dotted(c.func) or "").rsplit(".", 1)[-1] in _RANDOM for c in m.findall(stmt, m.Call()))  # type: ignore[attr-defined]


def batch_divisors(plan: Plan, loop: Loop, name: str, reads: list[cst.BaseStatement], loader: str
              ) -> list[tuple[cst.Call, cst.BaseStatement]] | None:
    """Every ``len(loader)`` that divides the sum ``name`` in ``reads`` (the statements after the loop that read it), with
    the statement holding it, when every read of the sum is such a division, or the first one is ``name /= d`` (the
    later ones then read the mean); ``d`` may be a name bound once to ``len(loader)`` and read only there
    (``num_batches = len(dataloader)``, PyTorch's quickstart): its ``len(loader)`` is the one to change. Else None."""
    out = []
    for stmt in reads:
        rebound = rebinding_division(stmt, name)  # ``val_loss /= d``, ``val_loss = val_loss / d``
        if rebound is not None:
            if original_batch_count(plan, loop.scope, rebound):
                return out  # ``val_loss /= int(len(dataset) / batch_size)``: the original's count already
            found = _count(plan, loop, rebound, loader, stmt)
            return None if found is None else out + [found]
        divisions = [d for d in m.findall(stmt, m.BinaryOperation(operator=m.Divide())) if m.matches(d.left, m.Name(name))]  # type: ignore[attr-defined]
        if len(divisions) != len(m.findall(stmt, m.Name(name))):
            return None
        for division in divisions:
            if original_batch_count(plan, loop.scope, division.right):  # type: ignore[attr-defined]
                continue
            found = _count(plan, loop, division.right, loader, stmt)  # type: ignore[attr-defined]
            if found is None:
                return None
            out.append(found)
    return out


def _count(plan: Plan, loop: Loop, divisor: cst.BaseExpression, loader: str, stmt: cst.BaseStatement | None = None
           ) -> tuple[cst.Call, cst.BaseStatement] | None:
    divisor = guarded(divisor)  # ``max(num_batches, 1)``: the same count
    """``len(loader)`` itself (held by ``stmt``), or the ``len(loader)`` a name is bound to once in the loop's scope and
    read only as this divisor; None otherwise. ``len(bar)`` of ``bar = tqdm(loader)`` is ``len(loader)``."""
    def length(expr: cst.BaseExpression) -> bool:
        return m.matches(expr, m.Call(func=m.Name("len"))) and len(expr.args) == 1 \
            and code_of(under_progress_bar(plan, loop.scope, expr.args[0].value)) == loader  # type: ignore[attr-defined]

    if length(divisor) and stmt is not None:
        return divisor, stmt  # type: ignore[return-value]
    if not isinstance(divisor, cst.Name):
        return None
    scope = loop.scope
    bindings = scope.bindings.get(divisor.value, [])
    if len(bindings) != 1 or bindings[0].value is None or not length(bindings[0].value) or len(scope.refs.get(divisor.value, [])) != 1:
        return None
    return bindings[0].value, bindings[0].stmt  # type: ignore[return-value]


def _bound_in(loop: Loop) -> set[str]:
    """The names the loop binds: its targets, and every name assigned in its body."""
    names = set(loop.targets)
    for node in m.findall(loop.node.body, m.AssignTarget() | m.AugAssign() | m.AnnAssign() | m.For() | m.WithItem()):
        target = getattr(node, "target", None) or getattr(node, "asname", None)
        if isinstance(target, cst.AsName):
            target = target.name
        if target is not None:
            names |= {n.value for n in m.findall(target, m.Name())}  # type: ignore[attr-defined]
    return names
