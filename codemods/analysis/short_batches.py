"""Loops that skip the short last batch of a loader, and what keeps their set of samples on N processes.

``for x, y in test_loader: if len(y) != batch_size: break`` (or ``continue``) evaluates, or trains on, exactly the
loader's full batches: on one process a loader over a map-style data set with no sampler of its own hands out
batches of its batch size except the last one. A prepared loader completes its last batch on every process (even
batches, the runtime's default and Hugging Face Accelerate's), so on N processes the test never fires and the loop
takes the short batch's samples too. ``drop_last=True`` does not fix that: a prepared loader then also drops the
last round of full batches when their number does not divide by N (3 processes, 2 full batches: nothing at all).

What keeps the original's set is a loader that only ever makes full batches, by its sampler: ``sampler=range(len(d)
// b * b)`` for a sequential loader, ``sampler=RandomSampler(d, num_samples=len(d) // b * b)`` for a shuffled one
(the same draws as ``shuffle=True``, cut before the short batch: on one process exactly the original's batches).
Prepared, its last round is completed with duplicates that ``gather_for_metrics`` drops, and every process takes
part in every step.

``find_skips`` proves, for each such test, that the size compared is the loader's batch size (the same literal, the
loader's ``.batch_size``, or the same name or attribute, never rebound, also through a builder's parameters:
``same_values``) and that the loader's construction is visible and can take that sampler; otherwise it says why not
(``Skip.problem``). ``decisions`` adds what depends on the target and the module (``--target accelerate``: an
evaluation loop's loader is left, Hugging Face's ``gather_for_metrics`` miscounting such a sampler's last batch).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst

from accelify.codemods.analysis.dataset_kinds import map_style
from accelify.codemods.analysis.evaluation_loops import is_evaluation
from accelify.codemods.analysis.facts import Binding, Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import strip_placement
from accelify.codemods.analysis.same_values import same_value
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.tree_walk import descendants

_LOADERS = ("torch.utils.data.DataLoader", "torch.utils.data.dataloader.DataLoader")
_OWN_BATCHING = ("sampler", "batch_sampler", "collate_fn")
# the problems ``Skip.problem`` names (the warning's ``why``)
NOT_THE_BATCH_SIZE = "the size it is compared with is not provably the loader's batch size"
NOT_VISIBLE = "the loader's construction (a `DataLoader(...)` this program makes) is not visible here"
OWN_BATCHING = "the loader has its own sampler, batch sampler or collate function, so a short batch may come anywhere"
NOT_MAP_STYLE = "the loader's data set is not known to be map-style (an iterable one cannot take a sampler)"
UNKNOWN_DROP_LAST = "whether the loader drops its short last batch is decided at run time"
UNKNOWN_SHUFFLE = "whether the loader shuffles is decided at run time"
WALKED_ELSEWHERE = "the same loader is walked elsewhere without this test"
LENGTH_READ = "the program reads `len()` of the loader, which counts the short batch"
NOT_REPEATABLE = "its batch size or generator is not a plain name or number that can be read again"
NO_TORCH_NAME = "`torch` is not imported by name where the loader is made"
IN_COMPREHENSION = "its data set is built inside a comprehension or lambda"
# Hugging Face Accelerate counts the duplicates that complete the last round as ``len(dataset) % total batch size``
HF_REMAINDER = ("Hugging Face Accelerate's `gather_for_metrics` takes the duplicates of the last batch to be "
                "`len(loader.dataset) % batch_size` samples (whatever the sampler), which a sampler that leaves the "
                "short batch out makes wrong (use `--target accelify`, whose runtime counts them as it makes them)")
_COMPREHENSIONS = (cst.ListComp, cst.SetComp, cst.DictComp, cst.GeneratorExp, cst.Lambda)


@dataclass(frozen=True)
class Skip:
    """``if <size of a batch> != <size>: break`` in ``loop``, a loop over a prepared loader."""

    loop: Loop
    test: cst.If
    loader: Binding | None  # where the loader is made (``DataLoader(...)``)
    problem: str | None = None  # why its construction is left as it is (the loop keeps the short batch on N processes)


@dataclass(frozen=True)
class FullBatches:
    """What the loader ``call`` (in ``binding``) needs to make full batches only."""

    binding: Binding
    call: cst.Call
    dataset: cst.BaseExpression
    size: cst.BaseExpression
    shuffle: bool
    generator: cst.BaseExpression | None


@dataclass(frozen=True)
class Decision:
    """The skips of one loader, and either what makes it full batches only (``parts``, ``sampler``: how the module
    names ``RandomSampler`` when it shuffles) or why it is left as it is (``problem``, or each skip's own)."""

    skips: tuple[Skip, ...]
    parts: FullBatches | None
    sampler: str | None = None
    problem: str | None = None


def decisions(plan: Plan, target: str) -> list[Decision]:
    """For each loader a loop skips the short batch of: rewrite it, or why not (for the conversion ``target``)."""
    groups: dict[int, list[Skip]] = {}
    for skip in plan.analysis(find_skips):
        groups.setdefault(id(skip.loader), []).append(skip)
    out: list[Decision] = []
    for group in groups.values():
        made, skips = group[0].loader, tuple(group)
        problem = next((s.problem for s in group if s.problem is not None), None)
        if problem is not None or made is None:
            out.append(Decision(skips, None, problem=problem))
            continue
        parts = full_batches(plan, made)
        sampler = _sampler_class(made.where) if parts.shuffle else None
        if parts.shuffle and sampler is None:
            problem = NO_TORCH_NAME
        elif repeatable_dataset(parts) is None and _in_comprehension(made, parts.call):
            problem = IN_COMPREHENSION
        elif target == "accelerate" and any(is_evaluation(plan, s.loop) for s in group):  # gathered for metrics
            problem = HF_REMAINDER
        out.append(Decision(skips, None, problem=problem) if problem is not None else Decision(skips, parts, sampler))
    return out


def full_batch_tests(plan: Plan, target: str) -> set[int]:
    """The ids of the ``if`` statements whose loader is rewritten to full batches only: their test never fires, on
    any process (every process only ever gets full batches)."""
    return {id(s.test) for d in decisions(plan, target) if d.parts is not None for s in d.skips}


def repeatable_dataset(parts: FullBatches) -> str | None:
    """The data set's code when it can be read again as it is (a name, ``self.test_set``, ``sets[phase]``)."""
    dataset = parts.dataset
    if dotted(dataset) is not None:
        return code_of(dataset)
    if isinstance(dataset, cst.Subscript) and dotted(dataset.value) is not None and all(
            isinstance(e.slice, cst.Index) and (isinstance(e.slice.value, (cst.Integer, cst.SimpleString))
                                                or dotted(e.slice.value) is not None) for e in dataset.slice):
        return code_of(dataset)
    return None


def find_skips(plan: Plan) -> list[Skip]:
    """Every test that skips a loader's short last batch in a loop over a prepared loader (module docstring)."""
    found: list[Skip] = []
    for loop in plan.facts.loops:
        prepared = plan.loader_of(loop)
        made = plan.built_by(prepared) if prepared is not None else None
        if made is None or not isinstance(loop.node.body, cst.IndentedBlock):
            continue
        batches = plan.batch_names(loop)
        for stmt in loop.node.body.body:
            compared = _short_batch_test(stmt, batches)
            if compared is None:
                if _unpacks(stmt, batches):
                    continue  # ``x, y = batch`` / ``x = x.to(device)`` before the test
                break
            assert isinstance(stmt, cst.If)
            call = made.value
            if not isinstance(call, cst.Call) or not _is_loader(made.where, call):
                found.append(Skip(loop, stmt, made, NOT_VISIBLE))
            elif _true(_argument(call, "drop_last", 99)) or _full_batch_sampler(call):
                pass  # no short batch at all: the test never fires, on one process or N
            elif not _loader_size(plan, loop, made, compared):
                found.append(Skip(loop, stmt, made, NOT_THE_BATCH_SIZE))
            else:
                found.append(Skip(loop, stmt, made, _construction_problem(plan, made)))
            break
    return _walked_alike(plan, found)


def full_batches(plan: Plan, made: Binding) -> FullBatches:
    """The parts of the loader ``made`` (one ``find_skips`` found no problem with) the new sampler is built from."""
    call = made.value
    assert isinstance(call, cst.Call)
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    positional = [a.value for a in call.args if a.keyword is None]
    dataset = keywords.get("dataset", positional[0] if positional else None)
    size = keywords.get("batch_size", positional[1] if len(positional) > 1 else None)
    shuffle = keywords.get("shuffle", positional[2] if len(positional) > 2 else None)
    assert dataset is not None and size is not None
    return FullBatches(made, call, dataset, size, _true(shuffle), keywords.get("generator"))


def length_reads(plan: Plan, made: Binding) -> list[cst.Call]:
    """``len(loader)`` anywhere in the program, of the loader ``made``."""
    out: list[cst.Call] = []
    for site in plan.facts.calls:
        if site.qualname != "len" or len(site.node.args) != 1:
            continue
        held = plan.origin(site.scope, site.node.args[0].value)
        if held is not None and plan.built_by(held) is made:
            out.append(site.node)
    return out


def sized_batch(expr: cst.BaseExpression) -> str | None:
    """``x`` of ``x.size()[0]``, ``x.size(0)``, ``x.shape[0]``, ``len(x)``, and of ``x.data`` or ``x[i]`` in their place."""
    target: cst.BaseExpression | None = None
    if isinstance(expr, cst.Subscript) and _first_index(expr):
        value = expr.value
        if isinstance(value, cst.Call) and not value.args and isinstance(value.func, cst.Attribute) \
                and value.func.attr.value == "size":
            target = value.func.value
        elif isinstance(value, cst.Attribute) and value.attr.value == "shape":
            target = value.value
    elif isinstance(expr, cst.Call) and len(expr.args) == 1 and expr.args[0].keyword is None:
        arg = expr.args[0].value
        if isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "size" and _zero(arg):
            target = expr.func.value
        elif isinstance(expr.func, cst.Name) and expr.func.value == "len":
            target = arg
    if isinstance(target, cst.Attribute) and target.attr.value == "data":
        target = target.value
    if isinstance(target, cst.Subscript) and isinstance(target.value, cst.Name) and _int_index(target):
        target = target.value
    return target.value if isinstance(target, cst.Name) else None


# -- the test -------------------------------------------------------------------------------------------------------
def _short_batch_test(stmt: cst.BaseStatement, batches: set[str]) -> cst.BaseExpression | None:
    """``if len(y) != n: break`` (``continue``; ``x.size(0) < n``; ``n != ...``): what the batch's size is compared with."""
    if not isinstance(stmt, cst.If) or stmt.orelse is not None or not isinstance(stmt.body, cst.IndentedBlock):
        return None
    body = stmt.body.body
    if len(body) != 1 or not isinstance(body[0], cst.SimpleStatementLine) or len(body[0].body) != 1 \
            or not (isinstance(body[0].body[0], (cst.Break, cst.Continue)) or _triggers(body[0].body[0])):
        return None
    test = stmt.test
    if not isinstance(test, cst.Comparison) or len(test.comparisons) != 1:
        return None
    operator, right = test.comparisons[0].operator, test.comparisons[0].comparator
    for size, other, smaller in ((test.left, right, cst.LessThan), (right, test.left, cst.GreaterThan)):
        name = sized_batch(size)
        if name is not None and name in batches and isinstance(operator, (cst.NotEqual, smaller)):
            return other
    return None


def _triggers(small: cst.BaseSmallStatement) -> bool:
    """``accelerator.set_trigger()``: the ``break`` of a converted program (``rules/trigger.py``), seen again."""
    return isinstance(small, cst.Expr) and isinstance(small.value, cst.Call) \
        and isinstance(small.value.func, cst.Attribute) and small.value.func.attr.value == "set_trigger"


def _unpacks(stmt: cst.BaseStatement, batches: set[str]) -> bool:
    """``x, y = batch``, ``x = x.to(device)``, ``inputs = batch[0]``: names taken from the batch, nothing computed."""
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return False
    value = stmt.body[0].value
    parts = value.elements if isinstance(value, cst.Tuple) else [value]
    for part in parts:
        core = strip_placement(part.value if isinstance(part, cst.BaseElement) else part)
        if isinstance(core, cst.Subscript):
            core = core.value
        if not (isinstance(core, cst.Name) and core.value in batches):
            return False
    return True


# -- the size compared is the loader's -----------------------------------------------------------------------------
def _loader_size(plan: Plan, loop: Loop, made: Binding, compared: cst.BaseExpression) -> bool:
    call = made.value
    assert isinstance(call, cst.Call)
    if isinstance(compared, cst.Attribute) and compared.attr.value == "batch_size":
        held = plan.origin(loop.scope, compared.value)  # ``loader.batch_size``
        if held is not None and plan.built_by(held) is made:
            return True
    size = _argument(call, "batch_size", 1)
    if size is None:
        return isinstance(compared, cst.Integer) and compared.evaluated_value == 1  # DataLoader's default
    if isinstance(size, cst.Integer) or isinstance(compared, cst.Integer):
        return isinstance(size, cst.Integer) and isinstance(compared, cst.Integer) \
            and size.evaluated_value == compared.evaluated_value
    key, wanted = dotted(size), dotted(compared)
    return key is not None and wanted is not None and same_value(plan, made.where, key, loop.scope, wanted)


# -- the loader can take the sampler -------------------------------------------------------------------------------
def _construction_problem(plan: Plan, made: Binding) -> str | None:
    call = made.value
    assert isinstance(call, cst.Call)
    if any(a.star for a in call.args) or len([a for a in call.args if a.keyword is None]) > 3:
        return NOT_VISIBLE
    keywords = {a.keyword.value: a.value for a in call.args if a.keyword is not None}
    if any(k in keywords and not _none(keywords[k]) for k in _OWN_BATCHING):
        return OWN_BATCHING
    if "drop_last" in keywords and not _none(keywords["drop_last"]):
        return UNKNOWN_DROP_LAST
    dataset = _argument(call, "dataset", 0)
    if dataset is None or not map_style(plan.facts, plan, made.where, dataset):
        return NOT_MAP_STYLE
    shuffle = _argument(call, "shuffle", 2)
    if shuffle is not None and not isinstance(shuffle, cst.Name):
        return UNKNOWN_SHUFFLE
    if isinstance(shuffle, cst.Name) and shuffle.value not in ("True", "False"):
        return UNKNOWN_SHUFFLE
    generator = keywords.get("generator")
    if not _repeatable(_argument(call, "batch_size", 1)) or (
            _true(shuffle) and generator is not None and not _none(generator) and dotted(generator) is None):
        return NOT_REPEATABLE
    return None


def _walked_alike(plan: Plan, skips: list[Skip]) -> list[Skip]:
    """Each skip, with a problem where the same loader is walked by a loop without the test, or its length read."""
    out: list[Skip] = []
    for skip in skips:
        problem = skip.problem
        if problem is None and skip.loader is not None:
            tested = {id(s.loop) for s in skips if s.loader is skip.loader}
            if any(_built(plan, lp) is skip.loader and id(lp) not in tested for lp in plan.facts.loops):
                problem = WALKED_ELSEWHERE
            elif length_reads(plan, skip.loader):
                problem = LENGTH_READ
        out.append(Skip(skip.loop, skip.test, skip.loader, problem))
    return out


def _sampler_class(scope: Scope) -> str | None:
    """How the module names ``torch.utils.data.RandomSampler``."""
    aliases = scope.imports.aliases
    for local, full in aliases.items():
        if full in ("torch.utils.data.RandomSampler", "torch.utils.data.sampler.RandomSampler"):
            return local
    for local, full in aliases.items():
        if full == "torch.utils.data":
            return f"{local}.RandomSampler"
    for local, full in aliases.items():
        if full == "torch":
            return f"{local}.utils.data.RandomSampler"
    return None


def _in_comprehension(made: Binding, call: cst.Call) -> bool:
    """The call sits in a comprehension or lambda, where ``:=`` cannot name the data set for the function."""
    return any(isinstance(node, _COMPREHENSIONS) and any(inner is call for inner in descendants(node))
               for node in descendants(made.stmt))


def _full_batch_sampler(call: cst.Call) -> bool:
    """``sampler=range(len(d) // b * b)`` or ``sampler=RandomSampler(d, num_samples=len(d) // b * b)``, ``b`` the
    loader's batch size: full batches only (what ``rules/full_batches.py`` writes, or the same by hand)."""
    sampler, size = _argument(call, "sampler", 3), _argument(call, "batch_size", 1)
    if not isinstance(sampler, cst.Call) or size is None:
        return False
    name = dotted(sampler.func) or ""
    if name == "range" and len(sampler.args) == 1:
        count: cst.BaseExpression | None = sampler.args[0].value
    elif name.endswith("RandomSampler"):
        count = next((a.value for a in sampler.args if a.keyword is not None and a.keyword.value == "num_samples"), None)
    else:
        return False
    if not (isinstance(count, cst.BinaryOperation) and isinstance(count.operator, cst.Multiply)
            and isinstance(count.left, cst.BinaryOperation) and isinstance(count.left.operator, cst.FloorDivide)):
        return False
    length, divisor, factor = count.left.left, count.left.right, count.right
    wanted = code_of(size)
    return isinstance(length, cst.Call) and dotted(length.func) == "len" and code_of(divisor) == wanted \
        and code_of(factor) == wanted


def _built(plan: Plan, loop: Loop) -> Binding | None:
    prepared = plan.loader_of(loop)
    return plan.built_by(prepared) if prepared is not None else None


def _argument(call: cst.Call, keyword: str, position: int) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == keyword:
            return arg.value
    positional = [a.value for a in call.args if a.keyword is None]
    return positional[position] if len(positional) > position else None


def _is_loader(scope: Scope, call: cst.Call) -> bool:
    return (scope.imports.qualname(call.func) or "") in _LOADERS


def _repeatable(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Integer) or (expr is not None and dotted(expr) is not None)


def _true(expr: cst.BaseExpression | None) -> bool:
    return isinstance(expr, cst.Name) and expr.value == "True"


def _none(expr: cst.BaseExpression) -> bool:
    """``None`` or ``False``: the argument's default (no sampler, no collate function, no drop_last)."""
    return isinstance(expr, cst.Name) and expr.value in ("None", "False")


def _first_index(node: cst.Subscript) -> bool:
    return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) and _zero(node.slice[0].slice.value)


def _int_index(node: cst.Subscript) -> bool:
    return len(node.slice) == 1 and isinstance(node.slice[0].slice, cst.Index) \
        and isinstance(node.slice[0].slice.value, cst.Integer)


def _zero(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.Integer) and expr.evaluated_value == 0
