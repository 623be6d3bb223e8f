"""When a test on a batch's size is the same on every process: the static deadlock check's one exception.

``if images.size()[0] != self.batch_size: continue`` in a loop over a prepared loader, before its backward, reads a
value of the process's own batch; the agreement analysis takes any such value for one that may differ between
processes, and the check would name a latent deadlock. But a prepared loader hands every process batches of the same
size at every step, when all of these hold (what this module proves, and nothing else):

- the loop walks a loader prepared by the program (``accelerator.prepare``), built here by ``DataLoader(...)`` with a
  batch size, no ``batch_sampler`` (batches of varying size: processes get different ones) and no ``collate_fn`` of
  its own (one may drop samples: ``images`` then has fewer rows on one process);
- its dataset is map-style, as far as the program shows: ``TensorDataset``, ``Subset``, a ``torchvision.datasets``
  class, or a class of the program deriving from ``torch.utils.data.Dataset`` and not from ``IterableDataset``. An
  iterable dataset is sharded by its stream, whose last batch may be short on some processes only; a dataset the
  program does not show (a library's) is not taken for map-style;
- nothing in the program turns ``even_batches`` off (``Accelerator(even_batches=False)`` leaves the last round short
  on some processes): with it on (the default, in ``accelify.runtime`` and in Hugging Face Accelerate alike) the
  sharded sampler completes the last round with samples from the start, so every process gets full batches (or
  equal slices of them with ``split_batches``), and ``drop_last`` leaves only full ones;
- the size read is ``x.size()[0]``, ``x.size(0)``, ``x.shape[0]`` or ``len(x)`` (``x.data`` alike) of a batch the loop binds (its target,
  ``batch[0]``, or names unpacked from it, never reassigned in the loop), compared with values the analysis finds
  the same on every process, or with another such size.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.dataset_kinds import map_style
from accelify.codemods.analysis.facts import Facts, Loop, Scope
from accelify.codemods.analysis.short_batches import sized_batch

def even_batch_size_test(agreement: Agreement, scope: Scope, test: cst.BaseExpression, at: cst.BaseStatement) -> bool:
    """Whether ``test`` (of an ``if``/``while`` at ``at``) compares the size of a prepared loader's batch, the same on
    every process (see the module docstring), with values that are the same on every process."""
    while isinstance(test, cst.UnaryOperation) and isinstance(test.operator, cst.Not):
        test = test.expression
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return False
    left, right = test.left, test.comparisons[0].comparator
    for size, other in ((left, right), (right, left)):
        batch, compared = sized_batch(size), sized_batch(other)
        if batch is None or not _even_batch(agreement, scope, batch, at):
            continue
        if agreement.uniform(scope, other, at):
            return True
        if compared is not None and _even_batch(agreement, scope, compared, at):
            return True
    return False


def _int_index(node: cst.Subscript) -> bool:
    return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
        and isinstance(node.slice[0].slice.value, cst.Integer)


def _even_batch(agreement: Agreement, scope: Scope, name: str, at: cst.BaseStatement) -> bool:
    """``name`` is a batch, as drawn, of a loop around ``at`` over a prepared loader whose batches are even."""
    facts, plan = agreement.facts, agreement.plan
    for outer in facts.chain(at):
        if not isinstance(outer, cst.For):
            continue
        loop = next((lp for lp in scope.loops if lp.node is outer), None)
        if loop is None or name not in plan.batch_names(loop):
            continue
        return _as_drawn(facts, scope, loop, name, at) and _even_loader(agreement, loop)
    return False


def _as_drawn(facts: Facts, scope: Scope, loop: Loop, name: str, at: cst.BaseStatement) -> bool:
    """Every binding of ``name`` in the loop before ``at`` is its target or an unpacking of its batch (one outside the
    loop, another loop over the training data binding the same ``x, y``, or one after ``at``, ``out, y =
    accelerator.gather_for_metrics((out, y))``, is replaced by the loop's own at the next step)."""
    for binding in scope.bindings.get(name, []):
        if binding.stmt is loop.node or binding.stmt not in loop.stmts or facts.after(binding.stmt, at):
            continue
        value = binding.unpacked[0] if binding.unpacked is not None else binding.value
        if isinstance(value, cst.Subscript) and _int_index(value):
            value = value.value
        if not (isinstance(value, cst.Name) and value.value in loop.targets):
            return False
    return True


def _even_loader(agreement: Agreement, loop: Loop) -> bool:
    facts, plan = agreement.facts, agreement.plan
    prepared = plan.loader_of(loop)
    made = plan.built_by(prepared) if prepared is not None else None  # through a builder: `a, b = make_loaders()`
    call = made.value if made is not None else None
    if made is None or not isinstance(call, cst.Call):
        return False
    if (made.where.imports.qualname(call.func) or "").rsplit(".", 1)[-1] != "DataLoader":
        return False
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    collate = keywords.get("collate_fn")
    if "batch_sampler" in keywords or any(a.star for a in call.args) or (
            collate is not None and not (isinstance(collate, cst.Name) and collate.value == "None")):
        return False
    positional = [a.value for a in call.args if a.keyword is None]
    if len(positional) > 4:  # DataLoader(dataset, batch_size, shuffle, sampler, batch_sampler, ...): by position
        return False
    size = keywords.get("batch_size", positional[1] if len(positional) > 1 else None)
    if isinstance(size, cst.Name) and size.value == "None":
        return False
    dataset = keywords.get("dataset", positional[0] if positional else None)
    return dataset is not None and map_style(facts, plan, made.where, dataset) and not _uneven_anywhere(facts)


def _uneven_anywhere(facts: Facts) -> bool:
    """Some call of the program passes ``even_batches`` other than ``True`` (an ``Accelerator`` or its data-loader
    configuration)."""
    for site in facts.calls:
        for arg in site.node.args:
            if arg.keyword is not None and arg.keyword.value == "even_batches" and not (
                    isinstance(arg.value, cst.Name) and arg.value.value == "True"):
                return True
    return False
