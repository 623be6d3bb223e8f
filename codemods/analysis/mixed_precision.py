"""What a script does by hand for automatic mixed precision, and the ``mixed_precision=`` that does the same.

Found once (``plan.analysis(find_amp)``) for what reads it: the accelerator's ``mixed_precision=`` argument
(``creation.py``) and the ``amp`` rule (the rewrites).

- scalers: ``torch.cuda.amp.GradScaler(...)`` / ``torch.amp.GradScaler("cuda", enabled=...)`` bindings;
- autocasts: ``with torch.autocast(...)`` / ``torch.cuda.amp.autocast(...)`` items, and ``ctx = nullcontext() if
  ... else torch.amp.autocast(...)`` bindings entered as ``with ctx:``;
- the precision: bf16 from ``dtype=torch.bfloat16``, fp16 from ``torch.float16`` (or a scaler, or CUDA autocast
  without a dtype); a dtype looked up from the script's own flag (``{"float16": torch.float16, ...}[dtype]``)
  gives the same lookup to ``mixed_precision``;
- when: the scaler's or autocast's ``enabled=`` condition, with the script's own names inlined and "the device
  is CUDA" stated the way the device was chosen (``torch.cuda.is_available()``), so the accelerator, created
  before the device variable is tied to it, reads the same flag. CUDA-only AMP (a GradScaler, ``torch.cuda.amp``)
  stays off on the CPU, as the original was.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.snippets import code_of, expression
from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import flags_from_test, strip_placement

AUTOCAST = {"torch.autocast", "torch.cuda.amp.autocast", "torch.amp.autocast", "torch.cpu.amp.autocast",
            "torch.amp.autocast_mode.autocast"}
_FP16 = {"torch.float16", "torch.half"}
_BF16 = {"torch.bfloat16"}
_FP32 = {"torch.float32", "torch.float"}


@dataclass
class Amp:
    """The script's hand-written mixed precision."""

    scalers: list[Binding] = field(default_factory=list)
    autocasts: list[CallSite] = field(default_factory=list)  # autocast calls entered directly by a `with`
    contexts: list[Binding] = field(default_factory=list)  # ``ctx = ... autocast(...)`` entered as ``with ctx:``
    precision: cst.BaseExpression | None = None  # "fp16" / "bf16", or an expression giving one
    enabled: cst.BaseExpression | None = None  # when it is on (None: always)
    depends: set[str] = field(default_factory=set)  # names the argument reads (the accelerator goes after them)
    where: Scope | None = None  # where ``enabled`` is read (a trainer's method: ``self.args.fp16``)
    off_first: bool = False  # the script says when it is off (``nullcontext() if <off> else autocast(...)``)

    def argument(self) -> str | None:
        """``mixed_precision="fp16"`` or ``mixed_precision="bf16" if <flag> else "no"`` (``"no" if <off> else ...``
        when the script put it that way), or None. Strings are written with double quotes, as black does."""
        if self.precision is None:
            return None
        precision = code_of(_double_quoted(self.precision))
        if self.enabled is None:
            return f"mixed_precision={precision}"
        if self.off_first:
            return f'mixed_precision="no" if {code_of(_double_quoted(negated(self.enabled)))} else {precision}'
        return f'mixed_precision={precision} if {code_of(_double_quoted(self.enabled))} else "no"'


def find_amp(plan: Plan) -> Amp | None:
    """The script's AMP, or None when it has none."""
    facts = plan.facts
    amp = Amp()
    sites = [s for s in facts.calls if (s.qualname or "") in AUTOCAST]
    amp.scalers = [b for b in plan.bindings_with_role("scaler") if b.loop is None]
    for site in sites:
        stmt = site.stmt
        if isinstance(stmt, cst.With) and any(item.item is site.node for item in stmt.items):
            amp.autocasts.append(site)
            continue
        binding = _context_binding(site)
        if binding is not None and binding not in amp.contexts:
            amp.contexts.append(binding)
    if not (amp.scalers or amp.autocasts or amp.contexts):
        return _apex(facts)
    calls = [s.node for s in amp.autocasts] + [_autocast_in(b.value) for b in amp.contexts]  # type: ignore[arg-type]
    scopes = [s.scope for s in amp.autocasts] + [b.where for b in amp.contexts]
    amp.precision = _precision(plan, calls, scopes, bool(amp.scalers), amp)
    cuda_only = bool(amp.scalers) or any(_cuda_autocast(plan, c, s) for c, s in zip(calls, scopes))
    found = _enabled(amp, calls, scopes)
    enabled: cst.BaseExpression | None = None
    if found is not None:
        inlined, where = _inline(plan, found[1], found[0], amp)
        inlined = _string_choices(inlined, where)
        inlined = _dtype_tests(plan, inlined, where, amp)
        enabled, _ = _cuda_tests(plan, inlined, where, amp)
        amp.where = where
        enabled = enabled.with_changes(lpar=[], rpar=[]) if hasattr(enabled, "lpar") else enabled
    if cuda_only and (enabled is None or "cuda" not in code_of(enabled)):
        available = expression("torch.cuda.is_available()")
        enabled = available if enabled is None else cst.BooleanOperation(_paren(enabled), cst.And(), available)
    if enabled is not None and isinstance(amp.precision, cst.SimpleString) and amp.precision.evaluated_value == "no":
        enabled = None
    amp.enabled = enabled
    return amp


def _apex(facts: Facts) -> Amp | None:
    """NVIDIA apex: ``amp.initialize(...)`` is float16 mixed precision, on when the ``if`` around it says so."""
    for site in facts.calls:
        if site.qualname == "apex.amp.initialize":
            guard = facts.parent_stmt.get(site.stmt)
            enabled = guard.test if isinstance(guard, cst.If) and site.stmt in getattr(guard.body, "body", ()) else None
            return Amp(precision=expression('"fp16"'), enabled=enabled)
    return None


def _context_binding(site: CallSite) -> Binding | None:
    """``ctx = nullcontext() if cpu else torch.amp.autocast(...)`` (or just the autocast): that binding."""
    stmt = site.stmt
    if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
        return None
    assign = stmt.body[0]
    if len(assign.targets) != 1 or not isinstance(assign.targets[0].target, cst.Name):
        return None
    if _autocast_in(assign.value) is not site.node:
        return None
    name = assign.targets[0].target.value
    owner = site.scope.resolve(name)
    bindings = owner.bindings.get(name, []) if owner is not None else []
    return next((b for b in bindings if b.stmt is stmt), None)


def _autocast_in(value: cst.BaseExpression) -> cst.Call:
    """The autocast call of ``autocast(...)`` or ``nullcontext() if ... else autocast(...)``."""
    if isinstance(value, cst.IfExp):
        return value.orelse if isinstance(value.orelse, cst.Call) and "autocast" in code_of(value.orelse.func) else value.body  # type: ignore[return-value]
    return value  # type: ignore[return-value]


def _keyword(call: cst.Call, name: str, position: int | None = None) -> cst.BaseExpression | None:
    for arg in call.args:
        if arg.keyword is not None and arg.keyword.value == name:
            return arg.value
    positional = [a for a in call.args if a.keyword is None]
    if position is not None and len(positional) > position:
        return positional[position].value
    return None


def _cuda_autocast(plan: Plan, call: cst.Call, scope: Scope) -> bool:
    qualname = scope.imports.qualname(call.func) or ""
    if qualname == "torch.cuda.amp.autocast":
        return True
    device_type = _keyword(call, "device_type", 0)
    return isinstance(device_type, cst.SimpleString) and device_type.evaluated_value == "cuda"


def _precision(plan: Plan, calls: list[cst.Call], scopes: list[Scope], scaled: bool, amp: Amp) -> cst.BaseExpression:
    for call, scope in zip(calls, scopes):
        qualname = scope.imports.qualname(call.func) or ""
        dtype = _keyword(call, "dtype", None if qualname != "torch.autocast" and "amp.autocast" not in qualname else 1)
        if dtype is None:
            continue
        name = scope.imports.qualname(dtype) or ""
        if name in _BF16:
            return expression('"bf16"')
        if name in _FP16:
            return expression('"fp16"')
        lookup = _dtype_lookup(plan, scope, dtype, amp)
        if lookup is not None:
            return lookup
    return expression('"fp16"') if scaled or any(_cuda_autocast(plan, c, s) for c, s in zip(calls, scopes)) else expression('"bf16"')


def _dtype_lookup(plan: Plan, scope: Scope, dtype: cst.BaseExpression, amp: Amp) -> cst.BaseExpression | None:
    """``ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, ...}[dtype]`` -> the same lookup
    giving ``"no"``/``"bf16"``/``"fp16"``."""
    key = dotted(dtype)
    binding = plan.binding_of(scope, key) if key is not None else None
    value = binding.value if binding is not None else None
    if not (isinstance(value, cst.Subscript) and isinstance(value.value, cst.Dict) and len(value.slice) == 1):
        return None
    entries = []
    for element in value.value.elements:
        if not isinstance(element, cst.DictElement):
            return None
        name = scope.imports.qualname(element.value) or ""
        mode = "bf16" if name in _BF16 else "fp16" if name in _FP16 else "no" if name in _FP32 else None
        if mode is None:
            return None
        entries.append(f'{code_of(element.key)}: "{mode}"')
    index = value.slice[0].slice
    if not isinstance(index, cst.Index):
        return None
    amp.depends |= {n.value for n in m.findall(index.value, m.Name()) if isinstance(n, cst.Name)}
    return expression("{" + ", ".join(entries) + "}[" + code_of(index.value) + "]")


def _enabled(amp: Amp, calls: list[cst.Call], scopes: list[Scope]) -> tuple[Scope, cst.BaseExpression] | None:
    """When the script autocasts: the autocast's ``enabled=``, or the test that chose a stored autocast context,
    else the scaler's ``enabled=`` (autocast decides the precision: nanoGPT's scaler is on for float16 only,
    its autocast for bfloat16 too)."""
    for call, scope in zip(calls, scopes):
        flag = _keyword(call, "enabled")
        if flag is not None:
            return scope, flag
    for context in amp.contexts:
        if isinstance(context.value, cst.IfExp):  # nullcontext() if <test> else autocast(...): on when not <test>
            test = context.value.test
            off = context.value.orelse is _autocast_in(context.value)
            amp.off_first = off
            return context.where, negated(test) if off else test
    for scaler in amp.scalers:
        call = strip_placement(scaler.value) if scaler.value is not None else None
        if isinstance(call, cst.Call):
            flag = _keyword(call, "enabled")
            if flag is not None:
                return scaler.where, flag
    return None


def negated(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``not expr``, simplified: ``a in b`` <-> ``a not in b``, ``==`` <-> ``!=``, ``not x`` -> ``x``."""
    if isinstance(expr, (cst.Comparison, cst.UnaryOperation)):
        expr = expr.with_changes(lpar=[], rpar=[])
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Not):
        inner = expr.expression
        return inner.with_changes(lpar=[], rpar=[]) if isinstance(inner, (cst.Comparison, cst.BooleanOperation)) else inner
    if isinstance(expr, cst.Comparison) and len(expr.comparisons) == 1:
        opposite = {cst.In: cst.NotIn, cst.NotIn: cst.In, cst.Equal: cst.NotEqual, cst.NotEqual: cst.Equal,
                    cst.Is: cst.IsNot, cst.IsNot: cst.Is}.get(type(expr.comparisons[0].operator))
        if opposite is not None:
            return expr.with_changes(comparisons=[expr.comparisons[0].with_changes(operator=opposite())])
    return cst.UnaryOperation(cst.Not(), _paren(expr))


def _string_choices(expr: cst.BaseExpression, scope: Scope) -> cst.BaseExpression:
    """``device_type == 'cpu'`` where ``device_type = 'cuda' if 'cuda' in device else 'cpu'`` (assigned once)
    -> ``'cuda' not in device``: the accelerator may be created before such a name is."""

    class Swap(cst.CSTTransformer):
        def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
            if len(updated.comparisons) != 1 or not isinstance(updated.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
                return updated
            left, right = updated.left, updated.comparisons[0].comparator
            if not (isinstance(left, cst.Name) and isinstance(right, cst.SimpleString)):
                return updated
            owner = scope.resolve(left.value)
            bindings = owner.bindings.get(left.value, []) if owner is not None else []
            value = bindings[0].value if len(bindings) == 1 else None
            if not (isinstance(value, cst.IfExp) and isinstance(value.body, cst.SimpleString)
                    and isinstance(value.orelse, cst.SimpleString)):
                return updated
            if right.evaluated_value not in (value.body.evaluated_value, value.orelse.evaluated_value):
                return updated
            holds = (right.evaluated_value == value.body.evaluated_value) == isinstance(updated.comparisons[0].operator, cst.Equal)
            test = value.test
            return _paren(test.with_changes(lpar=[], rpar=[])) if holds else _paren(negated(test))

    return expr.visit(Swap())  # type: ignore[return-value]


def _double_quoted(expr: cst.BaseExpression) -> cst.BaseExpression:
    """Single-quoted literals written with double quotes (``'cuda'`` -> ``"cuda"``) where that is the same string."""

    class Quote(cst.CSTTransformer):
        def leave_SimpleString(self, original: cst.SimpleString, updated: cst.SimpleString) -> cst.SimpleString:
            text = updated.value
            if text[:1] == "'" and text[:3] != "'" * 3 and '"' not in text and "\\" not in text:
                return updated.with_changes(value='"' + text[1:-1] + '"')
            return updated

    return expr.visit(Quote())  # type: ignore[return-value]


def _inline(plan: Plan, expr: cst.BaseExpression, scope: Scope, amp: Amp, depth: int = 0) -> tuple[cst.BaseExpression, Scope]:
    """``use_amp`` -> ``args.amp and device.type == "cuda"`` (a name assigned once, in the same function)."""
    if isinstance(expr, cst.Name) and depth < 4:
        owner = scope.resolve(expr.value)
        bindings = owner.bindings.get(expr.value, []) if owner is not None else []
        if len(bindings) == 1 and bindings[0].value is not None and bindings[0].role is None:
            return _inline(plan, bindings[0].value, bindings[0].where, amp, depth + 1)
    return expr, scope


def _dtype_tests(plan: Plan, expr: cst.BaseExpression, scope: Scope, amp: Amp) -> cst.BaseExpression:
    """``ptdtype == torch.bfloat16`` where ``ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16}[args.dtype]``
    -> ``args.dtype == "bfloat16"`` (the script's own flag, readable before the accelerator exists)."""

    class Swap(cst.CSTTransformer):
        def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
            if len(updated.comparisons) != 1 or not isinstance(updated.comparisons[0].operator, (cst.Equal, cst.NotEqual)):
                return updated
            left, right = updated.left, updated.comparisons[0].comparator
            key = dotted(left)
            wanted = scope.imports.qualname(right) or ""
            binding = _value_binding(plan, scope, key) if key is not None else None
            value = binding.value if binding is not None else None
            if not (isinstance(value, cst.Subscript) and isinstance(value.value, cst.Dict) and len(value.slice) == 1):
                return updated
            index = value.slice[0].slice
            keys = [
                e.key for e in value.value.elements
                if isinstance(e, cst.DictElement) and (scope.imports.qualname(e.value) or "") == wanted
            ]
            if len(keys) != 1 or not isinstance(index, cst.Index):
                return updated
            amp.depends |= {n.value for n in m.findall(index.value, m.Name()) if isinstance(n, cst.Name)}
            return updated.with_changes(left=index.value, comparisons=[updated.comparisons[0].with_changes(comparator=keys[0])])

    return expr.visit(Swap())  # type: ignore[return-value]


def _value_binding(plan: Plan, scope: Scope, key: str) -> Binding | None:
    """The assignment ``key`` holds in ``scope``, following a parameter back to its call sites while they all
    pass the same name (``evaluate(model, loader, ptdtype)`` -> ``main``'s ``ptdtype = ...``)."""
    seen: set[int] = set()
    while scope.kind == "function" and key in scope.param_names and key not in scope.bindings and id(scope) not in seen:
        seen.add(id(scope))
        outer = set()
        for site in plan.call_sites(scope):
            arg = plan.arg_for(site, scope, key)
            if arg is None or not isinstance(arg.value, cst.Name):
                return None
            outer.add((id(site.scope), arg.value.value, site.scope))
        if len({(a, b) for a, b, _ in outer}) != 1:
            return None
        _, key, scope = outer.pop()
    return plan.binding_of(scope, key)


def _cuda_tests(plan: Plan, expr: cst.BaseExpression, scope: Scope, amp: Amp) -> tuple[cst.BaseExpression, Scope]:
    """``device.type == "cuda"`` (the device variable's, about to become the accelerator's) -> the condition
    under which the script chose CUDA (``torch.cuda.is_available()``)."""

    class Swap(cst.CSTTransformer):
        def leave_Comparison(self, original: cst.Comparison, updated: cst.Comparison) -> cst.BaseExpression:
            if len(updated.comparisons) != 1:
                return updated
            target = updated.comparisons[0]
            left, right = updated.left, target.comparator
            device, text = (left, right) if isinstance(right, cst.SimpleString) else (right, left)
            if not isinstance(text, cst.SimpleString) or text.evaluated_value not in ("cuda", "cpu"):
                return updated
            base = device.value if isinstance(device, cst.Attribute) and device.attr.value == "type" else device
            found = plan.origin(scope, base)
            if found is None or found.role != "device" or found.value is None:
                return updated
            cuda = _cuda_condition(found)
            if cuda is None:
                return updated
            wants_cuda = (text.evaluated_value == "cuda") == isinstance(target.operator, (cst.Equal, cst.In))
            return cuda if wants_cuda else cst.UnaryOperation(cst.Not(), _paren(cuda))

    return expr.visit(Swap()), scope  # type: ignore[return-value]


def _cuda_condition(device: Binding) -> cst.BaseExpression | None:
    """When the device variable is CUDA: ``torch.cuda.is_available()`` (and ``not <cpu flag>``)."""
    value = device.value
    assert value is not None
    if isinstance(value, cst.Call) and value.args:
        value = value.args[0].value
    if isinstance(value, cst.IfExp) and _other_accelerator(value.body) and isinstance(value.orelse, cst.IfExp):
        # ``"mps" if has_mps else "cuda" if torch.cuda.is_available() else "cpu"``: CUDA when the first test fails
        rest = _cuda_condition(replace(device, value=value.orelse))
        if rest is None:
            return None
        return cst.BooleanOperation(negated(value.test), cst.And(), _paren(rest))
    if isinstance(value, cst.IfExp):
        flag = flags_from_test(value.test, device.where.imports) if not _is_cpu(value.body) else None
        available = expression("torch.cuda.is_available()")
        if _is_cpu(value.body) or _other_accelerator(value.body):
            return None
        if flag is None:
            return available
        return cst.BooleanOperation(cst.UnaryOperation(cst.Not(), _paren(flag)), cst.And(), available)
    return None


def _other_accelerator(expr: cst.BaseExpression) -> bool:
    """``"mps"``, ``"xpu"``: a device string that is neither CUDA nor the CPU."""
    return isinstance(expr, cst.SimpleString) and str(expr.evaluated_value).split(":")[0] in ("mps", "xpu", "npu", "hpu")


def _is_cpu(expr: cst.BaseExpression) -> bool:
    return isinstance(expr, cst.SimpleString) and expr.evaluated_value == "cpu"


def _paren(expr: cst.BaseExpression) -> cst.BaseExpression:
    if isinstance(expr, (cst.BooleanOperation, cst.IfExp, cst.Comparison)) and not expr.lpar:
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr
