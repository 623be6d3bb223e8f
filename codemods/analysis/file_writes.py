"""Which calls write a file every process names alike (``open(p, "w")``, ``json.dump``, ``savefig``,
``imageio.mimsave``, ``df.to_csv(p)``, a ``SummaryWriter``, the ``save`` of an animation or image, a library call named
like a write that is handed a path: ``analysis/named_writes.py``), and which start an experiment tracker's run: what
``rules/writes.py`` keeps to the main process; and what of a write is kept there (the statement to guard, a log kept
open, a tracker's uses) or already is, a helper whose writes are kept there at its calls, and a write of one file
per batch of a prepared loader."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.agreement import Agreement
from accelify.codemods.analysis.blocks import under_main_process
from accelify.codemods.analysis.facts import CallSite, Facts, Scope
from accelify.codemods.analysis.handle_uses import Collectives, ProposedEdits, alone, clock_named
from accelify.codemods.analysis.helper_calls import Place
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.reduced_outputs import read_names
from accelify.codemods.analysis.snippets import code_of
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


def outermost_write(site: CallSite) -> cst.BaseStatement | None:
    """The statement to guard: ``with open(...)`` as a whole, or a call that is a statement of its own."""
    stmt = site.stmt
    if isinstance(stmt, cst.With) and any(item.item is site.node for item in stmt.items):
        return stmt
    if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1:
        small = stmt.body[0]
        if isinstance(small, cst.Expr) and small.value is site.node:
            return stmt
    return None



def kept_open(
    facts: Facts, plan: Plan, agreement: Agreement, site: CallSite, wrapped: set[cst.BaseStatement]
) -> cst.BaseExpression | None:
    """``log = open(path, "w")`` / ``writer = SummaryWriter(dir)`` opening one file (or log) on every process: the
    target it is kept in, or None when it is not (already main-only, a file of each process's own, another shape)."""
    stmt = site.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    made = assign.value.body if isinstance(assign.value, cst.IfExp) and m.matches(assign.value.orelse, m.Name("None")) \
        else assign.value  # ``SummaryWriter(d) if args.tensorboard else None``
    if made is not site.node or len(assign.targets) != 1 or any(s in wrapped for s in facts.chain(stmt)):
        return None
    if made is not assign.value and "is_main_process" in code_of(assign.value.test):  # type: ignore[attr-defined]
        return None  # ``SummaryWriter(d) if accelerator.is_main_process else None``: converted already
    if plan.distributed.main_only(facts, stmt, site.scope) is not None or under_main_process(facts, stmt):
        return None  # ``if rank == 0: writer = SummaryWriter()``: the script already keeps it to one process
    if not all(agreement.uniform(site.scope, a.value, stmt) for a in site.node.args) and not clock_named(plan, site):
        return None  # ``SummaryWriter(f"runs/{accelerator.process_index}")``: a file of its own on each process
    return assign.targets[0].target



def main_only(plan: Plan, facts: Facts, edits: ProposedEdits, scope: Scope, stmt: cst.BaseStatement) -> bool:
    """Whether ``stmt`` already runs on the main process alone (the script's rank test, a guard another rule
    puts around it: ``writer.add_graph(...)`` by the tracing rule)."""
    if plan.distributed.main_only(facts, stmt, scope) is not None or under_main_process(facts, stmt):
        return True
    new = edits.replacement_of(stmt)
    return isinstance(new, cst.If) and code_of(new.test).endswith(".is_main_process")



def per_item_write(plan: Plan, site: CallSite) -> str | None:
    """The prepared loader a loop around ``site`` walks when the write is handed a name that loop binds
    (``plt.savefig(f"pred_{i}.png")`` in ``for i, (x, y) in enumerate(test_loader)``): one file per batch, of which
    the main process walks its share only. A write of one file per epoch (no loop name in it) is no such write."""
    passed = set().union(*(read_names(arg.value) for arg in site.node.args))
    loop = site.loop
    while loop is not None:
        if passed & set(loop.targets) and plan.loader_of(loop) is not None:
            return code_of(plan.loop_source(loop))
        loop = loop.parent
    return None


def helper_after_accelerator(place: Place, plan: Plan, site: CallSite) -> bool:
    """A function of a local module with no accelerator of its own, every call of which runs after it exists; or
    such a method of a class of the program (``vocab.save_dict(path)``, ``Vocab.save_dict`` pickling itself), which
    is kept to the main process at its calls as a function is (never ``__init__``, nor a logger class's method: the
    logger is made on the main process only, and its calls kept there with it)."""
    scope = site.scope
    if place.accelerator_in(scope) is not None:
        return False
    if scope.class_scope is None or scope.kind != "function":
        return place.will_be_after_accelerator(scope, site.stmt)
    if scope.name == "__init__" or logger_class(plan, scope.class_scope):
        return False
    sites = plan.run_sites(scope)
    return bool(sites) and all(place.accelerator_in(s.scope) is not None and place.after_accelerator(s.scope, s.stmt)
                               for s in sites)


_DEPTH = 3  # helpers of helpers followed to where the accelerator is (as ``helper_calls`` does)


def called_after_accelerator(place: Place, plan: Plan, function: Scope, depth: int = _DEPTH) -> bool:
    """Whether every call of ``function`` runs after the accelerator exists: in a scope that has it, or in a plain
    helper every call of which does, a few levels up (set V's V8: ``save_plot`` called by ``plot_loss_curves``,
    called by the script after the accelerator is made)."""
    sites = plan.run_sites(function)
    return bool(sites) and all(
        (place.accelerator_in(s.scope) is not None and place.after_accelerator(s.scope, s.stmt))
        or (depth > 1 and place.accelerator_in(s.scope) is None and s.scope.kind == "function"
            and s.scope.class_scope is None and called_after_accelerator(place, plan, s.scope, depth - 1))
        for s in sites)


def tracker_uses(place: Place, facts: Facts, plan: Plan, site: CallSite) -> list[CallSite] | None:
    """``wandb.init(project=..., sync_tensorboard=True)`` as a statement of its own: every use of the package, when
    each is a statement calling one of its functions (``wandb.log({...})``, ``wandb.finish()``) after the accelerator
    exists, with nothing in the arguments that reaches the other processes, so that each can run on the main process
    only; else None."""
    func = dotted(site.node.func)
    if func is None or "." not in func or not alone(site) or site.qualname is None:
        return None
    alias, package = func.split(".")[0], site.qualname.split(".")[0] + "."
    uses = [c for c in facts.calls if c.scope.unit == site.scope.unit and (c.qualname or "").startswith(package)]
    roots = {id(root) for c in uses if isinstance(c.node.func, cst.Attribute) and isinstance(root := c.node.func.value, cst.Name)}
    collectives = Collectives(facts, plan, place.edits)
    for scope in facts.scopes:
        if scope.unit == site.scope.unit and any(id(ref) not in roots for ref in scope.refs.get(alias, [])):
            return None  # ``wandb.config.lr``, ``wandb.run.name``: read as a value, which the others would not have
    for use in uses:
        if not alone(use) or place.is_skipped(use.stmt) or place.accelerator_in(use.scope) is None \
                or not place.after_accelerator(use.scope, use.stmt) or collectives.in_arguments(use) is not None:
            return None
    return uses


def later_reads(facts: Facts, site: CallSite) -> list[CallSite]:
    """The calls after the write ``site`` in its function that are handed the path it writes (the same code:
    ``torch.load(path)`` after ``torch.save(self, path)``, ``Image.open(f"{folder}/pred.png")`` after the image is
    saved there): where only the main process writes, the others must not read before it has."""
    args = site.node.args[1:] if site.qualname == "torch.save" else site.node.args
    paths = {code_of(a.value) for a in args if _path_like(a.value)}
    end = facts.order[site.stmt][1]
    return [c for c in site.scope.calls if c.stmt in facts.order and facts.order[c.stmt][0] > end
            and not writes_file(c) and c.qualname != "torch.save"
            and any(code_of(a.value) in paths for a in c.node.args)]


def barrier_places(facts: Facts, places: list[cst.BaseStatement]) -> list[cst.BaseStatement]:
    """The places of the barriers before ``places`` (one per read, in order) that an earlier one does not already
    cover: a barrier covers what follows it in its block, and in the blocks inside those statements."""
    kept: list[cst.BaseStatement] = []
    for place in sorted(dict.fromkeys(places), key=lambda p: facts.order[p][0]):
        if not any(facts.parent_stmt.get(k) in facts.chain(place) and facts.order[k][0] <= facts.order[place][0]
                   for k in kept):
            kept.append(place)
    return kept


_PATH_WORDS = ("path", "file", "name", "dir", "folder", "ckpt", "checkpoint", "out", "fn")


def _path_like(value: cst.BaseExpression) -> bool:
    """A string, an f-string, a joined path, or a name that says it holds one (``path``, ``filename``, ``args.out``)."""
    if isinstance(value, (cst.SimpleString, cst.FormattedString, cst.ConcatenatedString, cst.BinaryOperation, cst.Call)):
        return True
    name = dotted(value)
    return name is not None and any(w in name.rpartition(".")[2].lower() for w in _PATH_WORDS)
