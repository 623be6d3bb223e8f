"""What a running sum over a prepared loader is divided by after the loop: a per-process count, a global one, or
something this cannot place. ``analysis/shard_sums.py`` asks, to choose the reduction of the sum.

A per-process count is one every process holds for its own shard: ``len(loader)`` of the prepared loader, a batch
counter (``steps += 1``), or the loop's own ``enumerate`` counter (``for i, batch in enumerate(loader, 1)``: ``i`` is
the number of batches walked once the loop is done; ``i + 1`` with the default start). With even batches (the runtime's default, as Hugging Face Accelerate's) every process walks
the same number of batches, so the sum is reduced with ``"mean"`` and the quotient is the global average. A global
count is the data set's size (``len(loader.dataset)``, ``len(train_set)`` of a data set, a library's
(``datasets.MNIST(...)``) or whatever a ``DataLoader`` of the same function walks, ``len(loader.sampler)``) or a count summed
too: the sum is reduced with ``"sum"``.

An ``enumerate`` counter counts only when nothing else binds it between the loop and the read, the loop has no
``break`` (a process that stops early walks fewer batches than another), and the sum is set again before each pass
of the loop (a sum carried over several passes is over more batches than the last pass's counter). ``i`` with the
default start 0 is one less than the count: the original divides by the count less one, which no reduction can
give on N processes, so it is left to the rule's report. So is a count of samples made from one of batches and the
script's batch size (``batch_size * i``): the batch each process holds is the script's only when whole batches are
dealt to the processes, not with ``split_batches=True`` (a converted ``DataParallel`` script) nor in verify's exact
mode, where every process holds 1/N of each batch.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Loop, Scope
from accelify.codemods.analysis.loop_reads import reads_after
from accelify.codemods.analysis.names import PROGRESS_BARS, dotted
from accelify.codemods.analysis.plan import Plan


def divided_by(plan: Plan, end: cst.For | cst.While, loop: Loop, name: str, reads: list[cst.BaseStatement],
               counters: set[str], summed: set[str]) -> bool | None:
    """Whether ``reads`` (the statements after the loop that read ``name``) divide it by a per-process count (True),
    by a global one or by nothing (False), or by something else (None)."""
    counted = _Counts(plan, loop, end, counters, summed)
    answers: set[bool | None] = set()
    for stmt in reads:
        for division in m.findall(stmt, m.BinaryOperation(operator=m.Divide() | m.FloorDivide())):
            assert isinstance(division, cst.BinaryOperation)
            if not m.findall(division.left, m.Name(name)):
                continue
            answers.add(counted.per_process(division.right, stmt))
        for aug in m.findall(stmt, m.AugAssign(target=m.Name(name), operator=m.DivideAssign())):  # ``loss /= len(loader)``
            answers.add(counted.per_process(aug.value, stmt))  # type: ignore[attr-defined]
    if None in answers or len(answers) > 1:
        return None
    return answers.pop() if answers else False


def divided_by_pass_index(plan: Plan, loop: Loop, name: str) -> str | None:
    """The loop's ``enumerate`` index ``name`` is divided by after the loop as it is (``valid_loss / k`` after ``for k,
    (x, y) in enumerate(loader)``, the loop's last index: its passes less one, an off-by-one many write), or None.
    Over a gathered loader that counts the process's own passes, 1/N of the original's, each of N batches."""
    counter = _enumerate_counter(loop)
    if counter is None or counter[1] != 0:
        return None
    index = counter[0]
    for stmt in reads_after(plan, loop.node, loop.scope, name):
        for division in m.findall(stmt, m.BinaryOperation(operator=m.Divide() | m.FloorDivide())):
            assert isinstance(division, cst.BinaryOperation)
            if m.findall(division.left, m.Name(name)) and m.matches(division.right, m.Name(index)):
                return index
    return None


class _Counts:
    """The counts a sum over ``loop`` (complete after ``end``) may be divided by."""

    def __init__(self, plan: Plan, loop: Loop, end: cst.For | cst.While, counters: set[str], summed: set[str]) -> None:
        self.plan, self.loop, self.counters, self.summed = plan, loop, counters, summed
        self.counter = _enumerate_counter(loop) if end is loop.node and not m.findall(loop.node.body, m.Break()) else None

    def per_process(self, divisor: cst.BaseExpression, at: cst.BaseStatement) -> bool | None:
        """True for a per-process count, False for a global one, None when unsure."""
        scope = self.loop.scope
        divisor = guarded(divisor)
        if self.counter is not None and self._counted(divisor, at):
            return True
        if isinstance(divisor, cst.Name):
            if divisor.value in self.counters:
                return True
            if divisor.value in self.summed:
                return False
            found = self.plan.binding_of(scope, divisor.value)
            if found is not None and found.value is not None and found.where is scope and _simple_len(found.value):
                # ``steps = len(loader)``: counted where it is bound
                return _per_process_len(self.plan, scope, found.value, found.stmt)
            if found is not None and found.value is not None and found.where is scope:
                return _data_set_batches(self.plan, scope, found.value)  # ``n = int(len(dataset) / batch_size)``
            return None
        if _simple_len(divisor):
            return _per_process_len(self.plan, scope, divisor, None)
        if _data_set_batches(self.plan, scope, divisor) is False:
            return False
        while isinstance(divisor, cst.Subscript):
            divisor = divisor.value  # ``X_train.shape[0]``
        if isinstance(divisor, cst.Attribute) and _of_data_set(self.plan, scope, divisor.value):
            return False  # ``self.train.nnz``: what the data set holds, the same on every process however it is dealt
        return None

    def _counted(self, divisor: cst.BaseExpression, at: cst.BaseStatement) -> bool:
        """``i`` (``enumerate(loader, 1)``) or ``i + 1`` (``enumerate(loader)``): the batches this process walked."""
        assert self.counter is not None
        name, start = self.counter
        if start == 1:
            used = divisor
        elif start == 0 and isinstance(divisor, cst.BinaryOperation) and isinstance(divisor.operator, cst.Add):
            one = m.Integer("1")
            used = divisor.left if m.matches(divisor.right, one) else divisor.right if m.matches(divisor.left, one) else divisor
            if used is divisor:
                return False
        else:
            return False
        if not m.matches(used, m.Name(name)):
            return False
        order = self.plan.facts.order
        node = self.loop.node
        return not any(  # nothing else binds the counter from the loop's start to the read
            b.stmt is not node and order[node][0] < order[b.stmt][0] <= order[at][0]
            for b in self.loop.scope.bindings.get(name, [])
        )


def guarded(divisor: cst.BaseExpression) -> cst.BaseExpression:
    """``tok_total`` of ``max(1, tok_total)`` (or ``max(tok_total, 1)``): a count kept from zero, the same count."""
    if isinstance(divisor, cst.Call) and dotted(divisor.func) == "max" and len(divisor.args) == 2 \
            and not any(a.keyword or a.star for a in divisor.args):
        first, second = divisor.args[0].value, divisor.args[1].value
        if isinstance(first, (cst.Integer, cst.Float)):
            return second
        if isinstance(second, (cst.Integer, cst.Float)):
            return first
    return divisor


def _enumerate_counter(loop: Loop) -> tuple[str, int] | None:
    """``for i, batch in enumerate(loader, start)`` with a literal ``start``: ``("i", start)``."""
    iterable, target = loop.node.iter, loop.node.target
    if not (isinstance(iterable, cst.Call) and loop.scope.imports.qualname(iterable.func) == "enumerate"):
        return None
    if not (isinstance(target, cst.Tuple) and len(target.elements) == 2 and isinstance(target.elements[0].value, cst.Name)):
        return None
    start: cst.BaseExpression | None = None
    for index, arg in enumerate(iterable.args):
        if (arg.keyword is None and index == 1) or (arg.keyword is not None and arg.keyword.value == "start"):
            start = arg.value
        elif arg.keyword is not None or index > 1 or arg.star:
            return None
    if start is not None and not isinstance(start, cst.Integer):
        return None
    return target.elements[0].value.value, int(start.value) if start is not None else 0


_ROUNDINGS = ("int", "round", "math.ceil", "math.floor", "numpy.ceil", "numpy.floor")


def _data_set_batches(plan: Plan, scope: Scope, expr: cst.BaseExpression) -> bool | None:
    """False for the original's number of batches computed from the whole data set's size (``int(len(dataset) /
    loader.batch_size)``, ``math.ceil(len(train_set) / batch_size)``, ``len(dataset) // bs``): the same on every
    process, a global count; None for anything else."""
    while isinstance(expr, cst.Call) and len(expr.args) == 1 and scope.imports.qualname(expr.func) in _ROUNDINGS:
        expr = expr.args[0].value
    if not (isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Divide, cst.FloorDivide))):
        return None
    if not isinstance(expr.right, (cst.Name, cst.Attribute, cst.Integer)) or not _simple_len(expr.left):
        return None
    return False if _per_process_len(plan, scope, expr.left, None) is False else None


def original_batch_count(plan: Plan, scope: Scope, expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` is the original's number of batches computed from the whole data set's size
    (``int(len(dataset) / batch_size)``), or a name bound once in ``scope`` to it (M4's ``num_batches``)."""
    if isinstance(expr, cst.Name):
        bindings = scope.bindings.get(expr.value, [])
        if len(bindings) != 1 or bindings[0].value is None:
            return False
        expr = bindings[0].value
    return _data_set_batches(plan, scope, expr) is False


def _simple_len(expr: cst.BaseExpression) -> bool:
    """``len(x)``, or ``x.__len__()`` (set V's V4: ``train_set.__len__()``)."""
    return (isinstance(expr, cst.Call) and dotted(expr.func) == "len" and len(expr.args) == 1) or _dunder_len(expr)


def _dunder_len(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Call) and not expr.args and isinstance(expr.func, cst.Attribute) \
        and expr.func.attr.value == "__len__"


def _per_process_len(plan: Plan, scope: Scope, call: cst.BaseExpression, at: cst.BaseStatement | None) -> bool | None:
    measured = call.func.value if _dunder_len(call) else call.args[0].value  # type: ignore[attr-defined]
    arg = under_progress_bar(plan, scope, measured)
    if isinstance(arg, cst.Attribute) and arg.attr.value == "dataset":
        return False  # the whole data set, whatever the loader
    if isinstance(arg, cst.Attribute) and arg.attr.value == "sampler" and (
            (found := plan.origin(scope, arg.value)) is not None and found.role == "loader"):
        return False  # ``len(train_loader.sampler)``: the script's sampler (a split's size), kept by prepare
    found = plan.origin(scope, arg)
    if found is not None and found.role == "loader":
        return plan.prepared(scope, arg, at) is not None  # before prepare, the whole loader
    if _data_set(plan, scope, arg) or _wrapped_data(plan, scope, arg):
        return False  # ``len(train_set)``, ``len(X_train)`` of ``TensorDataset(X_train, y_train)``: the whole data set
    return None


def under_progress_bar(plan: Plan, scope: Scope, expr: cst.BaseExpression) -> cst.BaseExpression:
    """``dataloader`` for ``loader`` bound to ``tqdm.tqdm(dataloader)``: a bar's length is its iterable's (unless it
    is given a ``total=``)."""
    for _ in range(3):
        binding = plan.binding_of(scope, expr.value) if isinstance(expr, cst.Name) else None
        value = binding.value if binding is not None else None
        if not (isinstance(value, cst.Call) and value.args and value.args[0].keyword is None
                and binding.where.imports.qualname(value.func) in PROGRESS_BARS  # type: ignore[union-attr]
                and not any(a.keyword is not None and a.keyword.value == "total" for a in value.args)):
            break
        expr = value.args[0].value
    return expr


def _of_data_set(plan: Plan, scope: Scope, expr: cst.BaseExpression) -> bool:
    """``train_set`` (a data set: ``_data_set``), ``loader.dataset``, or the data a loader's data set is made of
    (``X_train`` of ``DataLoader(TensorDataset(X_train, y_train))``): an object ``prepare`` does not shard."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "dataset":
        return (found := plan.origin(scope, expr.value)) is not None and found.role == "loader"
    return _data_set(plan, scope, expr) or _wrapped_data(plan, scope, expr)


def _wrapped_data(plan: Plan, scope: Scope, expr: cst.BaseExpression) -> bool:
    """``X_train`` handed to the data set a loader of the same function walks (``DataLoader(TensorDataset(X_train,
    y_train))``, or ``train_set = Ratings(train)`` then ``DataLoader(train_set)``; ``self.train = train`` is
    ``train``)."""
    key = dotted(expr)
    binding = plan.binding_of(scope, key) if key is not None else None
    if binding is None:
        return False
    keys = {key} | ({binding.value.value} if isinstance(binding.value, cst.Name) else set())
    for loader in plan.bindings_with_role("loader"):
        call = loader.value
        if loader.where is not binding.where or not isinstance(call, cst.Call):
            continue
        data = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "dataset"), None)
        if isinstance(data, cst.Name) and (made := plan.binding_of(loader.where, data.value)) is not None:
            data = made.value
        if isinstance(data, cst.Call) and any(a.keyword is None and dotted(a.value) in keys for a in data.args):
            return True
    return False


def _data_set(plan: Plan, scope: Scope, expr: cst.BaseExpression) -> bool:
    """``train_set`` bound to a ``torch.utils.data`` data set (``TensorDataset``, ``Subset``, ``random_split``'s
    parts) or to an instance of the program's ``Dataset`` subclass."""
    key = dotted(expr)
    if key is not None and key in scope.param_names and key not in scope.bindings:
        handed = plan.param_origin(scope, key)  # ``evaluate(valid_ds, valid_dl, ...)``: what every caller hands in
        return handed is not None and handed.role is None and _data_set(plan, handed.where, cst.Name(handed.key))
    binding = plan.binding_of(scope, key) if key is not None else None
    if binding is None:
        return False
    if any(loader.where is binding.where and _loads(loader, key) for loader in plan.bindings_with_role("loader")):
        return True  # ``DataLoader(train_dataset, ...)``: what a loader walks is its data set, whatever its type
    value = binding.unpacked[0] if binding.unpacked is not None else binding.value
    if not isinstance(value, cst.Call):
        return False
    qualname = binding.where.imports.qualname(value.func) or ""
    if qualname.startswith("torch.utils.data.") and not qualname.endswith("DataLoader"):
        return True
    if qualname.startswith(_LIBRARY_DATA_SETS):
        return True  # ``train_dataset = datasets.MNIST(...)``
    return any("Dataset" in base for base in plan.facts.classes.get(qualname, []))


_LIBRARY_DATA_SETS = ("torchvision.datasets.", "torchaudio.datasets.", "torchtext.datasets.")


def _loads(loader: Binding, key: str) -> bool:
    """Whether ``loader`` is bound to a ``DataLoader(...)`` call whose data set argument is ``key``."""
    call = loader.value
    if not isinstance(call, cst.Call):
        return False
    first = next((a.value for a in call.args if a.keyword is None or a.keyword.value == "dataset"), None)
    return first is not None and dotted(first) == key


def divided_by_callers(plan: Plan, scope: Scope, name: str, reads: list[cst.BaseStatement]) -> bool:
    """Whether a sum that the function ``scope`` only returns (``reads``: its ``return val_loss, metrics``) is divided
    by a per-process count by every caller (``val_loss, metrics = test_epoch(val_loader, ...)`` then ``val_loss /=
    len(val_loader)``, siamese-triplet's ``fit``): then the function returns the mean of the processes' sums, which
    the caller's per-process count turns into the global average."""
    position = _returned_at(reads, name)
    sites = plan.call_sites(scope) if position is not None else []
    if not sites:
        return False
    for site in sites:
        got = _bound_to(site.stmt, site.node, position)  # type: ignore[arg-type]
        if got is None:
            return False
        answers: set[bool | None] = set()
        for stmt in reads_after(plan, site.stmt, site.scope, got):
            for division in m.findall(stmt, m.BinaryOperation(operator=m.Divide() | m.FloorDivide())):
                if m.findall(division.left, m.Name(got)):  # type: ignore[attr-defined]
                    answers.add(_len_per_process(plan, site.scope, division.right, stmt))  # type: ignore[attr-defined]
            for aug in m.findall(stmt, m.AugAssign(target=m.Name(got), operator=m.DivideAssign())):
                answers.add(_len_per_process(plan, site.scope, aug.value, stmt))  # type: ignore[attr-defined]
        if answers != {True}:
            return False
    return True


def _len_per_process(plan: Plan, scope: Scope, divisor: cst.BaseExpression, at: cst.BaseStatement) -> bool | None:
    return _per_process_len(plan, scope, divisor, at) if _simple_len(divisor) else None


def _returned_at(reads: list[cst.BaseStatement], name: str) -> int | None:
    """``return name`` (-1) or the position of ``name`` in ``return a, name`` when ``reads`` is that one statement."""
    if len(reads) != 1 or not isinstance(reads[0], cst.SimpleStatementLine) or len(reads[0].body) != 1:
        return None
    ret = reads[0].body[0]
    if not isinstance(ret, cst.Return) or ret.value is None:
        return None
    if m.matches(ret.value, m.Name(name)):
        return -1
    if isinstance(ret.value, cst.Tuple):
        found = [i for i, e in enumerate(ret.value.elements) if m.matches(e.value, m.Name(name))]
        return found[0] if len(found) == 1 else None
    return None


def _bound_to(stmt: cst.BaseStatement, call: cst.Call, position: int) -> str | None:
    """The name ``stmt`` (``got = f(...)``, ``a, got = f(...)``) binds the returned value at ``position`` to."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(stmt.body[0], cst.Assign):
        return None
    assign = stmt.body[0]
    if assign.value is not call or len(assign.targets) != 1:
        return None
    target = assign.targets[0].target
    if position == -1:
        return target.value if isinstance(target, cst.Name) else None
    if isinstance(target, (cst.Tuple, cst.List)) and position < len(target.elements):
        element = target.elements[position].value
        return element.value if isinstance(element, cst.Name) else None
    return None
