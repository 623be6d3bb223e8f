"""Running averages kept in meter objects of the program's own class, updated over a prepared (sharded) loader and
read after the loop: what to reduce, and how.

A meter (``AverageMeter`` of the PyTorch ImageNet example, DeiT's ``SmoothedValue``; ``meter_classes.py``) is an
instance of a class of the program whose ``update(val, n=1)`` only adds what it is fed to attributes of its own
(``self.sum += val * n``, ``self.count += n``) and may compute others from those sums (``self.avg = self.sum /
self.count``) or keep the last values (``self.val = val``, a window ``self.deque.append(value)``). On N processes
each process feeds its meters 1/N of the batches: what they hold after the loop is that process's share. Reducing every summed attribute across processes
(``"sum"``) and computing the derived ones again makes the meter the whole data set's, as one process would have it;
a value that every process feeds alike (the learning rate's meter) keeps its average, its sum and count both
multiplied by N.

The meters are found where they are held: one name (``meter = AverageMeter()``), a dict literal (``meters = {"loss":
AverageMeter(), "lr": AverageMeter()}``), a dict comprehension over literal names (``{k: AverageMeter() for k in
("loss", "acc")}``), a list literal (``[AverageMeter(), AverageMeter()]``), or the keyword arguments of a
``types.SimpleNamespace`` (attributes of one object: ``stats.loss.update(v)``), or an attribute of a trainer made
again before the loop in the same method (``self.losses = AverageMeter()``; made once in ``__init__`` it may sum over
several calls of the method, so it is reported). A holder is reduced only when every
read after the loop reads what the reduction makes global: a summed or derived attribute, or a property or method
that reads only those (``meters["loss"].global_avg``, ``{k: m.avg for k, m in meters.items()}``); the last value
(``.val``), the holder passed whole to a function, or a class that does more than add (a call in ``update``) are not
proven, and stay reported (ACC028) by ``shard_sums.py``.
"""

from __future__ import annotations

import re
import string
from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Loop, Scope
from accelify.codemods.analysis.loop_reads import reads_after
from accelify.codemods.analysis.meter_classes import MeterClass, adds_to_self, meter_class
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.sum_kinds import increment_kind, known_kinds

_NUMBER_KINDS = ("int", "float", "number")
_SUMMABLE = (*_NUMBER_KINDS, "tensor")


@dataclass(frozen=True)
class MeterSums:
    """The meters held by ``name``, fed over ``loop`` and complete after ``end``: each meter's code (``meters["loss"]``)
    with its summed attributes' kinds and its class."""

    name: str
    loop: Loop
    end: cst.For | cst.While
    updates: tuple[cst.BaseStatement, ...]
    values: tuple[tuple[cst.BaseStatement, cst.BaseExpression], ...]  # every value fed, with its update
    meters: tuple[tuple[str, MeterClass, tuple[tuple[str, str], ...]], ...]  # (code as spelled, class, ((attribute, kind), ...))


def meter_sums(plan: Plan, loop: Loop, name: str, updates: list[cst.BaseStatement],
               init: cst.BaseExpression, end: cst.For | cst.While) -> MeterSums | None:
    """The meters ``init`` (the holder's value, bound before ``loop``) makes, when each is a meter of the program's,
    every update of them is one of ``updates`` in ``loop`` and every read of ``name`` after ``end`` reads what the
    reduction makes global; else None (kept and reported)."""
    made = _made(plan, loop.scope, name, init)
    if made is None:
        return None
    fed: dict[str, list[cst.Call]] = {code: [] for code, _, _ in made}
    for stmt in updates:
        call = stmt.body[0].value  # type: ignore[attr-defined]
        code = _code(call.func.value)
        if code not in fed:
            return None
        fed[code].append(call)
    if _updated_elsewhere(plan, loop, name, updates) or not _reads_global(plan, loop, end, name, made):
        return None
    known = known_kinds(loop)
    meters = []
    for code, spelled, meter in made:
        kinds = _sum_kinds(meter, fed[code], known)
        if kinds is None:
            return None
        meters.append((spelled, meter, kinds))
    values = tuple((stmt, a.value) for stmt in updates for a in stmt.body[0].value.args)  # type: ignore[attr-defined]
    return MeterSums(name, loop, end, tuple(updates), values, tuple(meters))


def _made(plan: Plan, scope: Scope, name: str, value: cst.BaseExpression) -> list[tuple[str, str, MeterClass]] | None:
    """Each meter ``value`` makes, with its code under ``name``; None when one is not a meter of the program's."""
    items: list[tuple[str, str, cst.BaseExpression]] = []  # (code, as the program spells it, what makes it)
    if isinstance(value, cst.Call) and _dotted(value.func) in ("SimpleNamespace", "types.SimpleNamespace"):
        if any(a.keyword is None for a in value.args):
            return None
        items = [(f"{name}.{a.keyword.value}",) * 2 + (a.value,) for a in value.args]  # type: ignore[union-attr]
    elif isinstance(value, cst.Call):
        items = [(name, name, value)]
    elif isinstance(value, cst.Dict):
        for element in value.elements:
            if not isinstance(element, cst.DictElement) or not isinstance(element.key, cst.SimpleString):
                return None
            items.append((f"{name}[{element.key.evaluated_value!r}]", f"{name}[{element.key.value}]", element.value))
    elif isinstance(value, cst.DictComp) and isinstance(value.for_in.target, cst.Name) \
            and m.matches(value.key, m.Name(value.for_in.target.value)) and value.for_in.inner_for_in is None \
            and not value.for_in.ifs and isinstance(value.for_in.iter, (cst.Tuple, cst.List)):
        for element in value.for_in.iter.elements:
            if not isinstance(element.value, cst.SimpleString):
                return None
            items.append((f"{name}[{element.value.evaluated_value!r}]", f"{name}[{element.value.value}]", value.value))
    elif isinstance(value, cst.List):
        items = [(f"{name}[{i}]", f"{name}[{i}]", e.value) for i, e in enumerate(value.elements)]
    if not items:
        return None
    made = []
    for code, spelled, expr in items:
        cls = plan.classes.class_of(scope, expr.func) if isinstance(expr, cst.Call) else None
        meter = meter_class(plan, cls) if cls is not None else None
        if meter is None:
            return None
        made.append((code, spelled, meter))
    return made


def _sum_kinds(meter: MeterClass, calls: list[cst.Call], known: dict[str, str]) -> tuple[tuple[str, str], ...] | None:
    """The kind of each summed attribute of a meter fed by ``calls``: numbers, or a tensor where one is fed (L9's
    ``meter.update(g_loss.detach(), n)``: the sum is then a 0-d tensor, reduced as one)."""
    found: dict[str, set[str]] = {attr: set() for attr in meter.sums}
    for call in calls:
        bound = _bind(meter, call)
        if bound is None:
            return None
        kinds = {}
        for param, expr in bound.items():
            kind = _fed_kind(expr, known)
            if kind not in _SUMMABLE:
                return None
            kinds[param] = kind
        for attr, added in meter.sums.items():
            kind = increment_kind(added, kinds)
            if kind not in _SUMMABLE:
                return None
            found[attr].add(kind)  # type: ignore[arg-type]
    return tuple((a, "tensor" if "tensor" in k else "int" if k == {"int"} else "float" if "float" in k else "number")
                 for a, k in found.items())


def _bind(meter: MeterClass, call: cst.Call) -> dict[str, cst.BaseExpression] | None:
    """``update``'s parameters bound to the arguments of ``call`` (defaults filled), or None."""
    bound: dict[str, cst.BaseExpression] = {}
    names = [n for n, _ in meter.params]
    for i, arg in enumerate(call.args):
        if arg.star:
            return None
        if arg.keyword is not None:
            if arg.keyword.value not in names:
                return None
            bound[arg.keyword.value] = arg.value
        elif i < len(names):
            bound[names[i]] = arg.value
        else:
            return None
    for name, default in meter.params:
        if name not in bound:
            if default is None:
                return None
            bound[name] = default
    return bound


def _fed_kind(expr: cst.BaseExpression, known: dict[str, str]) -> str | None:
    """``increment_kind`` of a value fed, where an optimizer's learning rate (``opt.param_groups[0]["lr"]``) is a float."""
    if m.matches(expr, m.Subscript(value=m.Subscript(value=m.Attribute(attr=m.Name("param_groups"))),
                                   slice=[m.SubscriptElement(m.Index(m.SimpleString('"lr"') | m.SimpleString("'lr'")))])):
        return "float"
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Divide, cst.Add, cst.Subtract, cst.Multiply)):
        sides = {_fed_kind(expr.left, known), _fed_kind(expr.right, known)}
        if not sides <= set(_NUMBER_KINDS):
            return None
        if isinstance(expr.operator, cst.Divide) or "float" in sides:  # a true division of numbers is a float
            return "float"
        return "number" if "number" in sides else "int"
    return increment_kind(expr, known)


def _updated_elsewhere(plan: Plan, loop: Loop, name: str, updates: list[cst.BaseStatement]) -> bool:
    """Whether ``name`` is bound again in ``loop`` or its meters updated outside ``updates`` in the loop's scope."""
    if any(not b.aug and any(n is loop.node for n in plan.facts.chain(b.stmt)) for b in loop.scope.bindings.get(name, [])):
        return True
    ours = {id(u) for u in updates}
    limit = _made_again(plan, loop, name)
    for site in loop.scope.calls:
        if site.method == "update" and id(site.stmt) not in ours and name in (_root(site.node.func), _code(site.node.func.value)) \
                and plan.facts.order[site.stmt][0] < limit:  # type: ignore[attr-defined]
            return True  # (the updates of a new meter made under the name after the loop are that meter's)
    return False


def _made_again(plan: Plan, loop: Loop, name: str) -> float:
    """Where ``name`` is next bound to something new after ``loop``, in the block the loop is in (L9's
    ``avg_prob = AverageMeter()`` again before the validation pass), as a position in source order; what comes after
    reads and updates that new value. Infinity when it is not."""
    block = plan.facts.parent_stmt.get(loop.node)
    after = [plan.facts.order[b.stmt][0] for b in loop.scope.bindings.get(name, [])
             if not b.aug and plan.facts.after(b.stmt, loop.node) and plan.facts.parent_stmt.get(b.stmt) is block]
    return min(after, default=float("inf"))


def _reads_global(plan: Plan, loop: Loop, end: cst.For | cst.While, name: str,
                  made: list[tuple[str, str, MeterClass]]) -> bool:
    """Whether every read of ``name`` after ``end`` reads a member the reduction makes global."""
    readable = frozenset.intersection(*(meter.readable for _, _, meter in made))
    limit = _made_again(plan, loop, name) if end is loop.node else float("inf")
    reads = [r for r in reads_after(plan, end, loop.scope, name) if plan.facts.order[r][0] < limit]
    if end is not loop.node and any(not plan.facts.after(r, end) for r in reads_after(plan, loop.node, loop.scope, name)):
        return False  # read between the passes and summed on
    codes = {code for code, _, _ in made}
    for stmt in reads:
        checker = _ReadChecker(name, codes, readable)
        stmt.visit(checker)
        if not checker.ok:
            return False
    return True


class _ReadChecker(cst.CSTVisitor):
    """Every use of the holder in a statement is ``<meter>.<readable member>``, or a comprehension over its meters
    (``{k: meter.avg for k, meter in meters.items()}``) whose variable is only read that way."""

    def __init__(self, name: str, codes: set[str], readable: frozenset[str]) -> None:
        self.name, self.codes, self.readable = name, codes, readable
        self.ok = True
        self.allowed: set[int] = set()  # the holder's nodes whose use is proven
        owner, _, attribute = name.partition(".")  # ``self.losses``: a trainer's attribute
        self.holder = m.Attribute(value=m.Name(owner), attr=m.Name(attribute)) if attribute else m.Name(name)

    def visit_Attribute(self, node: cst.Attribute) -> None:
        if _code(node.value) in self.codes and node.attr.value in self.readable:
            self._allow(node.value)
        elif "." in self.name and m.matches(node, self.holder) and id(node) not in self.allowed:
            self.ok = False

    def visit_Arg(self, node: cst.Arg) -> None:
        if node.keyword is not None:
            self.allowed.add(id(node.keyword))  # ``losses=`` names a parameter, it does not read the holder

    def visit_Call(self, node: cst.Call) -> None:
        """``' * Acc@1 {top1.avg:.3f}'.format(top1=top1)``: a meter handed to ``str.format`` whose fields read it."""
        if not (isinstance(node.func, cst.Attribute) and node.func.attr.value == "format"
                and isinstance(node.func.value, (cst.SimpleString, cst.ConcatenatedString))):
            return
        read = _format_reads(node.func.value.evaluated_value)
        if read is None:
            return
        for i, arg in enumerate(node.args):
            key = arg.keyword.value if arg.keyword is not None else str(i)
            if not arg.star and _code(arg.value) in self.codes and all(a in self.readable for a in read.get(key, [])):
                self._allow(arg.value)

    def visit_DictComp(self, node: cst.DictComp) -> None:
        self._comprehension(node.for_in, [node.key, node.value])

    def visit_ListComp(self, node: cst.ListComp) -> None:
        self._comprehension(node.for_in, [node.elt])

    def visit_GeneratorExp(self, node: cst.GeneratorExp) -> None:
        self._comprehension(node.for_in, [node.elt])

    def _comprehension(self, for_in: cst.CompFor, exprs: list[cst.BaseExpression]) -> None:
        it = for_in.iter
        if for_in.inner_for_in is not None or for_in.ifs:
            return
        if m.matches(it, m.Call(func=m.Attribute(value=m.Name(self.name), attr=m.Name("items")), args=[])) \
                and m.matches(for_in.target, m.Tuple([m.Element(m.Name()), m.Element(m.Name())])):
            var = for_in.target.elements[1].value.value  # type: ignore[attr-defined]
        elif m.matches(it, m.Call(func=m.Attribute(value=m.Name(self.name), attr=m.Name("values")), args=[])) \
                or (m.matches(it, m.Name(self.name)) and self.name + "[0]" in self.codes):  # a list's meters
            if not isinstance(for_in.target, cst.Name):
                return
            var = for_in.target.value
        else:
            return
        uses = [n for e in exprs for n in m.findall(e, m.Name(var))]
        read = {id(a.value) for e in exprs for a in m.findall(e, m.Attribute(value=m.Name(var)))
                if a.attr.value in self.readable}  # type: ignore[attr-defined]
        if all(id(n) in read for n in uses):
            self._allow(it)

    def visit_Name(self, node: cst.Name) -> None:
        if node.value == self.name and id(node) not in self.allowed:
            self.ok = False

    def _allow(self, node: cst.BaseExpression) -> None:
        for found in [node, *m.findall(node, self.holder)] if m.matches(node, self.holder) else m.findall(node, self.holder):
            self.allowed.add(id(found))


def _format_reads(text: object) -> dict[str, list[str | None]] | None:
    """The first attribute each field of a format string reads, by argument (``{top1.avg}`` -> ``{"top1": ["avg"]}``,
    ``{}``/``{0}`` by position, None for a field that reads the argument itself); None when it cannot be parsed."""
    if not isinstance(text, str):
        return None
    try:
        fields = [f for _, f, _, _ in string.Formatter().parse(text) if f is not None]
    except ValueError:
        return None
    reads: dict[str, list[str | None]] = {}
    auto = 0
    for field in fields:
        match = re.match(r"([^.\[]*)(.*)", field)
        head, rest = match.group(1), match.group(2)  # type: ignore[union-attr]
        if head == "":
            head, auto = str(auto), auto + 1
        attr = re.match(r"\.([A-Za-z_][A-Za-z0-9_]*)", rest)
        reads.setdefault(head, []).append(attr.group(1) if attr else None)
    return reads


def _code(expr: cst.BaseExpression) -> str | None:
    """``meters["loss"]``, ``meters[0]``, ``stats.loss``, ``meter`` as source; None for anything else."""
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute) and isinstance(expr.value, cst.Name):
        return f"{expr.value.value}.{expr.attr.value}"
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Name) and len(expr.slice) == 1 \
            and isinstance(expr.slice[0].slice, cst.Index):
        key = expr.slice[0].slice.value
        if isinstance(key, cst.SimpleString):
            return f"{expr.value.value}[{key.evaluated_value!r}]"
        if isinstance(key, cst.Integer):
            return f"{expr.value.value}[{key.value}]"
    return None


def _root(expr: cst.BaseExpression) -> str | None:
    """The name at the root of ``meters["loss"].update`` (``meters``)."""
    while isinstance(expr, (cst.Attribute, cst.Subscript)):
        expr = expr.value
    return expr.value if isinstance(expr, cst.Name) else None


def _dotted(expr: cst.BaseExpression) -> str | None:
    if isinstance(expr, cst.Name):
        return expr.value
    if isinstance(expr, cst.Attribute):
        inner = _dotted(expr.value)
        return f"{inner}.{expr.attr.value}" if inner else None
    return None


def meter_update(stmt: cst.BaseStatement) -> str | None:
    """The holder's name when ``stmt`` is ``meter.update(...)``, ``meters["loss"].update(...)``, ``meters[0].update(...)``
    or ``stats.loss.update(...)`` alone on its line; else None."""
    if not m.matches(stmt, m.SimpleStatementLine([m.Expr(m.Call(func=m.Attribute(attr=m.Name("update"))))])):
        return None
    receiver = stmt.body[0].value.func.value  # type: ignore[attr-defined]
    return _root(receiver) if _code(receiver) is not None else None


def attribute_meter_sums(plan: Plan, loop: Loop, attribute: str, updates: list[cst.BaseStatement]) -> MeterSums | None:
    """A meter a trainer keeps (``self.losses``, from ``self_meter``) made again in the method right before the loop
    (``self.losses = AverageMeter()``, both statements of the method's own body, so each call sums only its own pass),
    updated nowhere else in the class and read after the loop as ``meter_sums`` proves: its ``MeterSums``; else None."""
    cls, scope = loop.scope.class_scope, loop.scope
    if cls is None or not any(s is loop.node for s in scope.body):
        return None
    here = [b for b in cls.bindings.get(attribute, []) if b.where is scope]
    if len(here) != 1 or here[0].aug or here[0].value is None or not any(s is here[0].stmt for s in scope.body) \
            or plan.facts.order[here[0].stmt][0] > plan.facts.order[loop.node][0]:
        return None
    ours = {id(u) for u in updates}
    if any(site.method == "update" and id(site.stmt) not in ours and site.scope.class_scope is cls
           and _code(site.node.func.value) == attribute for site in plan.facts.calls):  # type: ignore[attr-defined]
        return None
    return meter_sums(plan, loop, attribute, updates, here[0].value, loop.node)


def self_meter(plan: Plan, loop: Loop, stmt: cst.BaseStatement) -> str | None:
    """``self.losses`` when ``stmt`` is ``self.losses.update(...)`` in a method whose class binds ``self.losses`` to an
    object of the program's that adds what it is fed to its attributes (a meter a trainer keeps): what it holds after
    the loop is this process's share (reduced where ``attribute_meter_sums`` proves it, else reported); None
    otherwise."""
    if not m.matches(stmt, m.SimpleStatementLine([m.Expr(m.Call(func=m.Attribute(
            value=m.Attribute(value=m.Name("self"), attr=m.Name()), attr=m.Name("update"))))])):
        return None
    attribute = f"self.{stmt.body[0].value.func.value.attr.value}"  # type: ignore[attr-defined]
    cls = loop.scope.class_scope
    for binding in cls.bindings.get(attribute, []) if cls is not None else []:
        made = binding.value
        if isinstance(made, cst.Call):
            found = plan.classes.class_of(binding.where, made.func)
            if found is not None and adds_to_self(plan, found):
                return attribute
    return None
