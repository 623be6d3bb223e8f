"""Whether a script that never chooses a device can run on whatever device the accelerator picks.

A script with no device runs on the CPU. Converted with ``Accelerator()``, on a GPU machine ``prepare`` puts the
model on the GPU and the prepared loaders hand out batches there; any other tensor the script makes
(``torch.randn(b, nz)`` noise, ``torch.tensor(weights)`` for a loss, an RNN's ``torch.zeros(...)`` hidden state)
stays on the CPU and meets the model's GPU tensors: a crash. So ``Accelerator()`` (not ``cpu=True``, which makes
the conversion useless on the GPU machine it is for) only when the runtime places everything training touches:

- every forward of a prepared model and every ``backward`` runs in a loop over a prepared loader (its batches);
- every tensor the script makes (``torch.zeros``, ``torch.randn``, ``torch.tensor``, ``torch.from_numpy``..., or a
  call of a function of the program that makes one) is made in the prepare scope before ``prepare`` and only feeds
  the data: nothing after ``prepare`` reads it or what is computed from it (the data sets and loaders made from
  it are placed by the loader); or in a function every call of which is such a call (``make_data(n, seed)``).
  A tensor made in a loop, in a helper training calls, in a model's ``forward`` or at module level when the
  objects are prepared in a function is not.

Otherwise the conversion keeps ``cpu=True`` (as the original, it runs on the CPU).
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.distributed import data_parallel_sites
from accelify.codemods.analysis.drawn_sums import draws_prepared
from accelify.codemods.analysis.statement_shapes import target_names
from accelify.codemods.analysis.facts import Binding, CallSite, Loop, Scope
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import is_module_scope

FACTORIES = {
    f"torch.{name}"
    for name in (
        "zeros", "ones", "empty", "full", "arange", "range", "linspace", "logspace", "eye", "tensor", "as_tensor",
        "from_numpy", "randn", "rand", "randint", "randperm", "normal", "bernoulli", "multinomial", "Tensor",
        "FloatTensor", "LongTensor", "IntTensor", "BoolTensor", "DoubleTensor", "ByteTensor", "complex", "polar",
        "sparse_coo_tensor", "tril_indices", "triu_indices",
    )
}


def placed_by_runtime(plan: Plan) -> bool:
    """Whether every tensor training touches is placed by ``prepare`` and the prepared loaders (see above)."""
    facts = plan.facts
    if plan.prepare_scope is None or plan.prepare_after is None or not plan.aliases:
        return False
    if not any(plan.loader_of(lp) is not None for lp in facts.loops):
        return False
    # one of several trainers converted on its own (``trainer_choice``): the others' tensors are theirs to judge
    calls = [site for site in facts.calls
             if not plan.in_other_trainer(site.scope) and not plan.in_other_trainer(plan.callee(site))]
    for site in calls:
        runs_model = site.method == "backward" or plan.prepared_model(site.scope, site.node.func, site.stmt) is not None
        if runs_model and not in_loader_loop(plan, site) and not _fed_a_drawn_batch(plan, site):
            return False
        if _runs_unprepared_model(plan, site):
            return False
    makers = _makers(plan)
    memo: dict[int, bool] = {}
    return all(
        _makes_data_only(plan, site, makers, memo, frozenset())
        for site in calls
        if site.qualname in FACTORIES or (plan.callee(site) is not None and id(plan.callee(site)) in makers)
    )


def _runs_unprepared_model(plan: Plan, site: CallSite) -> bool:
    """``teacher_model(x)`` of a teacher that cannot be placed where it is made (``placeable_teacher``): the script
    never places it, so it stays on the CPU and meets the batches prepared loaders hand out on the accelerator's
    device."""
    found = unprepared_model(plan, site)
    return found is not None and placeable_teacher(plan, found) is None


def unprepared_model(plan: Plan, site: CallSite) -> Binding | None:
    """The creation of the model ``site`` runs the forward of, when ``prepare`` does not receive it (a distillation
    teacher, trained by no optimizer: ``teacher_model(x)``)."""
    func = site.node.func
    if not (isinstance(func, cst.Name) or m.matches(func, m.Attribute(value=m.Name("self")))):
        return None  # (``teacher.eval()`` is no forward)
    owner = site.scope.class_scope
    if owner is not None and is_module_scope(owner, plan.facts.classes):
        return None  # ``self.fc(x)`` in a model's ``forward``: a part of the model, placed with it
    found = plan.origin(site.scope, func)
    return found if found is not None and found.role == "model" and not plan.is_prepared(found) else None


def placeable_teacher(plan: Plan, found: Binding) -> cst.Call | None:
    """The value that makes an unprepared model (a distillation teacher) when it can be placed where it is made
    (``teacher = Net()`` -> ``teacher = Net().to(accelerator.device)``, ``rules/tensors.py``): a statement of its own
    in the prepare scope, the only binding of its name there, the model made by a call (a class, ``torch.load``)."""
    scope = plan.prepare_scope
    value = found.value
    if scope is None or found.where is not scope or not isinstance(value, cst.Call) or found.unpacked is not None:
        return None
    stmt = found.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)
            and len(stmt.body[0].targets) == 1 and stmt.body[0].value is value):
        return None
    return value if len(scope.bindings.get(found.key, [])) == 1 else None


def wraps_unprepared_model(plan: Plan, site: CallSite) -> bool:
    """``nn.DataParallel(teacher)``: a DataParallel around a model prepare does not receive (a distillation teacher
    whose saved weights carry DataParallel's ``module.`` keys). It stays, on each process's device alone
    (``rules/data_parallel.py``), and does not make the script's batch a global one (``split_batches``)."""
    args = site.node.args
    if len(args) != 1 or args[0].keyword is not None or args[0].star:
        return False
    held = plan.origin(site.scope, args[0].value)
    return held is not None and held.role == "model" and not plan.is_prepared(held)


def split_batches(plan: Plan) -> bool:
    """Whether the conversion makes ``Accelerator(split_batches=True)``: a script whose ``DataParallel`` split each
    batch over the GPUs (not a teacher's, which is no split of the training's batch)."""
    facts = plan.facts
    wraps = [s for s in data_parallel_sites(facts) if not wraps_unprepared_model(plan, s)]
    return bool(plan.distributed.global_batch(facts, bool(wraps)))


def _fed_a_drawn_batch(plan: Plan, site: CallSite) -> bool:
    """A forward whose every input is (part of) a batch drawn from a prepared loader with ``next`` (S1's
    ``X, y = next(iter(test_loader))`` then ``model(X)``): the runtime placed it."""
    names = [a.value for a in site.node.args]
    if not names or not all(isinstance(n, cst.Name) for n in names):
        return False
    for name in names:
        bindings = site.scope.bindings.get(name.value, [])  # type: ignore[attr-defined]
        values = [b.unpacked[0] if b.unpacked is not None else b.value for b in bindings]
        if not values or not all(isinstance(v, cst.Call) and draws_prepared(plan, site.scope, v, b.stmt)
                                 for v, b in zip(values, bindings)):
            return False
    return True


def in_loader_loop(plan: Plan, site: CallSite) -> bool:
    """Whether ``site`` runs inside a loop (at any depth) over a prepared loader."""
    loop: Loop | None = site.loop
    while loop is not None:
        if plan.loader_of(loop) is not None:
            return True
        loop = loop.parent
    return False


def _makers(plan: Plan) -> set[int]:
    """The functions of the program that make tensors, directly or through the functions they call; not the
    prepare scope nor the functions that lead to it (``main()``): their own calls are checked where they are."""
    assert plan.prepare_scope is not None
    sites = [plan.prepare_scope, *(site.scope for site in plan.function_sites)]
    drivers = {id(s) for s in sites}
    pending = list(sites)
    while pending:
        for site in plan.call_sites(pending.pop()):
            if id(site.scope) not in drivers:
                drivers.add(id(site.scope))
                pending.append(site.scope)
    makers = {
        id(site.scope) for site in plan.facts.calls
        if site.qualname in FACTORIES and site.scope.kind == "function" and id(site.scope) not in drivers
    }
    changed = True
    while changed:
        changed = False
        for site in plan.facts.calls:
            callee = plan.callee(site)
            scope = site.scope
            if callee is not None and id(callee) in makers and scope.kind == "function" and id(scope) not in makers | drivers:
                makers.add(id(scope))
                changed = True
    return makers


def _makes_data_only(plan: Plan, site: CallSite, makers: set[int], memo: dict[int, bool], seen: frozenset[int]) -> bool:
    """A call that makes tensors is made where only the data reads them: in the prepare scope before ``prepare``,
    feeding nothing read after it; or in a function every call of which is such a call (``make_data(n, seed)``)."""
    scope = site.scope
    if scope is plan.prepare_scope or any(scope is f.scope for f in plan.function_sites):
        return _feeds_data_only(plan, site)
    if scope.kind != "function" or id(scope) in seen:
        return False
    if id(scope) not in memo:
        sites = plan.call_sites(scope)
        memo[id(scope)] = bool(sites) and all(_makes_data_only(plan, s, makers, memo, seen | {id(scope)}) for s in sites)
    return memo[id(scope)]


def _feeds_data_only(plan: Plan, site: CallSite) -> bool:
    """A factory in the prepare scope: before ``prepare``, and what it binds (and what is computed from that) is
    read by nothing after ``prepare``."""
    facts = plan.facts
    scope: Scope = site.scope
    anchor, aliases = plan.prepare_after, plan.aliases
    for other in plan.function_sites:  # another training function, preparing its own
        if other.scope is scope:
            anchor, aliases = other.after, other.aliases
    if anchor is None or facts.order[site.stmt][0] > facts.order[anchor][1]:
        return False
    placed = {a.key for a in aliases}  # prepared: prepare places them
    tainted = _bound_by(site.stmt) - placed - _data_objects(site.stmt, scope)
    changed = True
    while changed:  # ``y = x @ w`` after ``x = torch.randn(...)``: y too
        changed = False
        for stmt, (first, _) in facts.order.items():
            if first > facts.order[anchor][1] or not isinstance(stmt, cst.SimpleStatementLine):
                continue
            if facts.top_stmt(stmt, scope) is None:
                continue
            names = _bound_by(stmt) - placed - _data_objects(stmt, scope)
            if names - tainted and _reads(stmt) & tainted:
                tainted |= names
                changed = True
    for name in tainted:
        for ref in scope.refs.get(name, []):
            holder = scope.holders.get(id(ref))
            if holder is not None and facts.after(holder, anchor):
                return False
    return True


def _data_objects(stmt: cst.BaseStatement, scope: Scope) -> set[str]:
    """Names a statement binds to data sets and loaders (``torch.utils.data.*``): their tensors reach training
    through a loader, which places its batches."""
    out: set[str] = set()
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
        value = stmt.body[0].value
        calls = [value] if isinstance(value, cst.Call) else [e.value for e in value.elements if isinstance(e.value, cst.Call)] \
            if isinstance(value, cst.Tuple) else []
        if calls and all((scope.imports.qualname(c.func) or "").startswith("torch.utils.data.") for c in calls):
            for target in stmt.body[0].targets:
                out |= set(target_names(target.target))
    return out


def _bound_by(stmt: cst.BaseStatement) -> set[str]:
    out: set[str] = set()
    if isinstance(stmt, cst.SimpleStatementLine):
        for small in stmt.body:
            if isinstance(small, cst.Assign):
                for target in small.targets:
                    out |= set(target_names(target.target))
            elif isinstance(small, (cst.AnnAssign, cst.AugAssign)):
                out |= set(target_names(small.target))
    return out


def _reads(stmt: cst.BaseStatement) -> set[str]:
    skip = {id(a.attr) for a in m.findall(stmt, m.Attribute())} | {id(a.keyword) for a in m.findall(stmt, m.Arg()) if a.keyword}
    return {n.value for n in m.findall(stmt, m.Name()) if id(n) not in skip}
