"""What kind of number a running sum over a loader holds (``int``, ``float``, ``number``, ``tensor``), read from
what is added to it at each batch: how ``analysis/shard_sums.py`` has it reduced."""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Loop, Scope
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan

_INT_CALLS = ("size", "numel", "nelement", "dim")
_NUMPY_REDUCTIONS = ("mean", "average", "median", "max", "min", "amax", "amin", "std", "var", "sqrt", "exp", "log",
                     "log10", "fsum", "prod", "nanmean", "nansum")


def helper_kinds(plan: Plan, values: list[cst.BaseExpression]) -> dict[int, str]:
    """What the program's own functions called in ``values`` return (``acc += get_accuracy(SR, GT)`` where
    ``get_accuracy`` returns ``float(corr) / float(size)``), by the call's ``id``: only where every ``return`` of the
    function says the same kind of number or tensor."""
    kinds: dict[int, str] = {}
    for value in values:
        for call in [value] if isinstance(value, cst.Call) else m.findall(value, m.Call()):
            site = plan.facts.sites.get(call)  # type: ignore[arg-type]
            function = plan.callee(site) if site is not None else None
            kind = _returned_kind(function) if function is not None else None
            if kind is not None:
                kinds[id(call)] = kind
    return kinds


def _returned_kind(function: Scope) -> str | None:
    found: set[str | None] = set()
    for ret in function.returns:
        if ret.value is None:
            return None
        if isinstance(ret.value, cst.Name):  # ``acc = float(corr) / float(size); return acc``
            bindings = function.bindings.get(ret.value.value, [])
            if not bindings or any(b.value is None or b.aug for b in bindings):
                return None
            found |= {_value_kind(b.value) for b in bindings if b.value is not None}
        else:
            found.add(_value_kind(ret.value))
    return found.pop() if len(found) == 1 and None not in found else None


def _value_kind(expr: cst.BaseExpression) -> str | None:
    """``increment_kind`` of a value a helper computes and returns, where a true division of numbers is a float."""
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide):
        sides = {_value_kind(expr.left), _value_kind(expr.right)}
        return None if None in sides else "tensor" if "tensor" in sides else "float"
    return increment_kind(expr, {})


def unpacked_kinds(plan: Plan, loop: Loop) -> dict[str, str]:
    """Names the loop unpacks from a call of a program's function whose every ``return`` is a tuple (``loss, n =
    online_contrastive(out, y)`` where it returns ``loss, int(pos.sum())``, a loss that mines within the batch and
    counts what it mined): the kind of each position, where every ``return`` says the same kind there."""
    known: dict[str, str] = {}
    for stmt in loop.stmts:
        if not (isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign)):
            continue
        assign = stmt.body[0]
        target = assign.targets[0].target if len(assign.targets) == 1 else None
        if not isinstance(target, cst.Tuple) or not isinstance(assign.value, cst.Call):
            continue
        site = plan.facts.sites.get(assign.value)
        function = plan.callee(site) if site is not None else None
        if function is None or not function.returns:
            continue
        for index, element in enumerate(target.elements):
            if isinstance(element.value, cst.Name):
                kind = _returned_at(function, index, len(target.elements))
                if kind is not None:
                    known[element.value.value] = kind
    return known


def _returned_at(function: Scope, index: int, size: int) -> str | None:
    found: set[str | None] = set()
    for ret in function.returns:
        if not isinstance(ret.value, cst.Tuple) or len(ret.value.elements) != size:
            return None
        found.add(_value_kind(ret.value.elements[index].value))
    return found.pop() if len(found) == 1 and None not in found else None


def known_kinds(loop: Loop, plan: Plan | None = None) -> dict[str, str]:
    """What names bound in the loop hold: ``loss`` whose ``backward()`` is called is a tensor, ``l = loss.item()``
    a float, ``gold = heads.numpy()`` (or what a function of the program returns as ``np.array(...)``, with
    ``plan``) a NumPy array."""
    known = {dotted(s.node.func.value): "tensor" for s in loop.calls  # type: ignore[attr-defined]
             if s.method == "backward" and isinstance(s.node.func, cst.Attribute) and isinstance(s.node.func.value, cst.Name)}
    for name, bindings in loop.scope.bindings.items():  # ``length_images = 101 * 101`` once in the function: a number
        if len(bindings) == 1 and bindings[0].value is not None and _literal_number(bindings[0].value):
            known[name] = "float" if m.findall(bindings[0].value, m.Float()) else "int"
    for site in loop.calls:  # ``metric += accuracy_score(y, p)``, or through ``metric_func = lambda p, y: ...``
        func = dotted(site.node.func)
        if func is not None and (_metric_score(site.scope, site.node) or _metric_lambda(site.scope, site.node.func)):
            known[f"{func}()"] = "float"
    for stmt in loop.stmts:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            assign = stmt.body[0]
            if len(assign.targets) == 1 and isinstance(assign.targets[0].target, cst.Name):
                array = _numpy(assign.value, known) or (plan is not None and _returns_array(plan, assign.value))
                kind = ARRAY if array else "float" if _metric_score(loop.scope, assign.value) else \
                    increment_kind(assign.value, known)
                if kind is not None:
                    known.setdefault(assign.targets[0].target.value, kind)
    return {k: v for k, v in known.items() if k is not None}


def _metric_score(scope: Scope, expr: cst.BaseExpression) -> bool:
    """``metrics.accuracy_score(pred, y)``, ``f1_score(...)``, ``mean_squared_error(...)``: scikit-learn's score of
    one batch, a Python float (not with ``average=None`` or ``multioutput="raw_values"``: an array per class)."""
    if not isinstance(expr, cst.Call):
        return False
    name = scope.imports.qualname(expr.func) or ""
    if any(a.keyword is not None and a.keyword.value in ("average", "multioutput") and not (
            isinstance(a.value, cst.SimpleString) and a.value.evaluated_value != "raw_values") for a in expr.args):
        return False
    return name.startswith("sklearn.metrics.") and name.rsplit(".", 1)[-1].endswith(("_score", "_error"))


def _metric_lambda(scope: Scope, func: cst.BaseExpression) -> bool:
    """``metric_func(predictions, labels)`` where ``metric_func = lambda y_pred, y_true: accuracy_score(...)`` is
    bound once, here or at the module's top level (set W's W11, the "eat PyTorch in 20 days" course)."""
    where = scope.resolve(func.value) if isinstance(func, cst.Name) else None
    bindings = where.bindings.get(func.value, []) if where is not None else []  # type: ignore[union-attr]
    return len(bindings) == 1 and isinstance(bindings[0].value, cst.Lambda) \
        and _metric_score(where, bindings[0].value.body)  # type: ignore[arg-type]


def sum_kind(init: Binding, increments: list[cst.BaseExpression], known: dict[str, str],
             helpers: dict[int, str] | None = None) -> str | None:
    """The kind of the whole sum, from its first value and what each update adds; None when one is unknown or a
    tensor is added with a float."""
    kinds = {increment_kind(v, known, helpers) for v in increments}
    if None in kinds:
        return None
    if init.value is not None and zero_tensor(init.where, init.value):
        return MADE_TENSOR  # ``total = torch.Tensor([0])``: whatever is added, a tensor where it was made
    if "tensor" in kinds:
        return "tensor" if kinds == {"tensor"} or kinds <= {"tensor", "int"} else None
    if "float" in kinds or isinstance(init.value, cst.Float):
        return "float"
    return "number" if "number" in kinds else "int"


MADE_TENSOR = "made tensor"
_ZERO_TENSORS = ("torch.Tensor", "torch.FloatTensor", "torch.DoubleTensor", "torch.zeros", "torch.tensor")
_FLOAT_TYPES = ("torch.float", "torch.float32", "torch.float64", "torch.double")


def zero_tensor(scope: Scope, value: cst.BaseExpression) -> bool:
    """``torch.Tensor([0])``, ``torch.zeros(1)``, ``torch.tensor(0.0)``: a floating-point tensor of zeros made to sum
    into (its values literal, its ``dtype`` a floating one where given; ``device=`` may place it)."""
    if not (isinstance(value, cst.Call) and scope.imports.qualname(value.func) in _ZERO_TENSORS):
        return False
    name = scope.imports.qualname(value.func)
    for arg in value.args:
        if arg.star:
            return False
        if arg.keyword is not None:
            if arg.keyword.value == "dtype" and scope.imports.qualname(arg.value) in _FLOAT_TYPES:
                continue
            if arg.keyword.value not in ("device", "requires_grad") or (
                    arg.keyword.value == "requires_grad" and not m.matches(arg.value, m.Name("False"))):
                return False
            continue
        numbers = arg.value.elements if isinstance(arg.value, (cst.List, cst.Tuple)) else [arg.value]
        literal = [n.value if isinstance(n, cst.Element) else n for n in numbers]
        if not all(isinstance(n, (cst.Integer, cst.Float)) for n in literal):
            return False
        if name == "torch.tensor" and not (any(isinstance(n, cst.Float) for n in literal)
                                           or any(a.keyword is not None and a.keyword.value == "dtype" for a in value.args)):
            return False  # ``torch.tensor(0)``: an integer tensor
        if any(isinstance(n, cst.Integer) and n.evaluated_value != 0 for n in literal) and name != "torch.zeros":
            return False
        if any(isinstance(n, cst.Float) and n.evaluated_value != 0 for n in literal):
            return False
    return True


# torch functions of tensors that return a tensor of the same kind (elementwise, or a reduction to a 0-d tensor)
_TORCH_TENSOR_FUNCTIONS = frozenset(("sqrt", "rsqrt", "exp", "log", "log2", "log10", "log1p", "abs", "square", "pow",
                                     "mean", "sum", "clamp", "sigmoid", "tanh", "norm", "dist"))
_LOSS_FUNCTIONS = ("_loss", "cross_entropy", "binary_cross_entropy", "binary_cross_entropy_with_logits", "kl_div")


def _torch_tensor_call(name: str | None) -> bool:
    """Whether ``name`` (dotted) is a torch function that returns a tensor: ``torch.sqrt``, ``torch.mean``, or a
    loss of ``torch.nn.functional`` (``F.mse_loss``, ``nn.functional.cross_entropy``)."""
    if not name or "." not in name:
        return False
    module, function = name.rsplit(".", 1)
    if module == "torch":
        return function in _TORCH_TENSOR_FUNCTIONS
    return module in ("F", "functional", "nn.functional", "torch.nn.functional") and function.endswith(_LOSS_FUNCTIONS)


def increment_kind(expr: cst.BaseExpression, known: dict[str, str], helpers: dict[int, str] | None = None) -> str | None:
    """``int`` for a count (``y.size(0)``, ``len(x)``, ``(pred == y).sum().item()``), ``float`` for a loss's
    ``.item()`` or a mean's (``loss.item() * x.size(0)``), ``number`` for another ``.item()`` (an int or a float:
    the reduction keeps its type), ``tensor`` for a tensor expression, None when unsure."""
    if isinstance(expr, cst.Integer):
        return "int"
    if isinstance(expr, cst.Name):
        if helpers and id(expr) in helpers:
            return helpers[id(expr)]  # a name the caller knows the kind of at this update
        kind = known.get(expr.value)
        return None if kind == ARRAY else kind  # (an array's sum may be an int or a float: unsure)
    if isinstance(expr, cst.Float):
        return "float"
    if isinstance(expr, cst.Call):
        if helpers and id(expr) in helpers:
            return helpers[id(expr)]  # what the program's own function returns
        func = expr.func
        name = dotted(func)
        if name is not None and f"{name}()" in known:
            return known[f"{name}()"]  # a scikit-learn score of the batch (``known_kinds``)
        if name in ("len", "int"):
            return "int"
        if name in ("np.sum", "numpy.sum", "np.count_nonzero", "numpy.count_nonzero"):
            return "number"  # ``np.sum(gold == pred)``: a NumPy number
        if name is not None and name.split(".", 1)[0] in ("np", "numpy", "math", "statistics"):
            # ``np.mean(np.exp(d) / norm)`` (set U's U13): a function of the module, not a tensor's ``.mean()``
            return "number" if name.rsplit(".", 1)[-1] in _NUMPY_REDUCTIONS else None
        if name == "float":
            return "float"
        if _torch_tensor_call(name):
            return "tensor"  # ``torch.sqrt(mse)``, ``F.mse_loss(out, y)``: a tensor
        if isinstance(func, cst.Attribute):
            method = func.attr.value
            if method in _INT_CALLS:
                return "int"
            if method == "item":
                if _counts(func.value):
                    return "int"
                return "float" if _floating(func.value, known) else "number"
            if method in ("sum", "mean") and _numpy(func.value, known):
                return "number"  # ``(pred == gold).sum()`` of NumPy arrays: a NumPy number, no tensor
            if method in ("sum", "mean", "detach", "float", "double", "norm"):
                return "tensor"
        return None
    if isinstance(expr, cst.Subscript) and isinstance(expr.value, cst.Attribute) and expr.value.attr.value == "shape":
        return "int"
    if isinstance(expr, cst.Attribute) and expr.attr.value == "size" and isinstance(expr.value, cst.Name) \
            and known.get(expr.value.value) == ARRAY:
        return "int"  # ``pred.size`` of a NumPy array: its element count
    if isinstance(expr, cst.Attribute) and expr.attr.value == "data":
        return "tensor" if increment_kind(expr.value, known) == "tensor" else None  # ``loss.data``: the loss, detached
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Divide):
        kinds = {increment_kind(expr.left, known, helpers), increment_kind(expr.right, known, helpers)}
        if None in kinds or ARRAY in kinds:
            return None
        return "tensor" if "tensor" in kinds else "float"  # ``np.sum(pred & mask) / length_images``
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Multiply, cst.Add, cst.Subtract)):
        kinds = {increment_kind(expr.left, known, helpers), increment_kind(expr.right, known, helpers)}
        if None in kinds:
            return None
        for kind in ("tensor", "float", "number"):
            if kind in kinds:
                return kind
        return "int"
    return None


def _literal_number(expr: cst.BaseExpression) -> bool:
    """``101``, ``2.5``, ``101 * 101``: a number written out."""
    if isinstance(expr, (cst.Integer, cst.Float)):
        return True
    return isinstance(expr, cst.BinaryOperation) and _literal_number(expr.left) and _literal_number(expr.right)


ARRAY = "array"  # a name bound to a NumPy array (``gold = heads[0].numpy()``): known to ``known_kinds`` only


def _numpy(expr: cst.BaseExpression, known: dict[str, str]) -> bool:
    """Whether ``expr`` makes or reads a NumPy array: a ``.numpy()`` call in it, or a name bound to one."""
    if m.findall(expr, m.Call(func=m.Attribute(attr=m.Name("numpy")))):
        return True
    return any(isinstance(n, cst.Name) and known.get(n.value) == ARRAY for n in m.findall(expr, m.Name()))


def _returns_array(plan: Plan, expr: cst.BaseExpression) -> bool:
    """``predict_dep(scores)[:, 1:]``: a call of a function of the program every ``return`` of which makes a NumPy
    array (``np.array(...)``, ``x.numpy()``), or a slice of one."""
    while isinstance(expr, cst.Subscript):
        expr = expr.value
    site = plan.facts.sites.get(expr) if isinstance(expr, cst.Call) else None
    function = plan.callee(site) if site is not None else None
    if function is None or not function.returns:
        return False
    return all(ret.value is not None and (_numpy(ret.value, {}) or any(
        (function.imports.qualname(c.func) or "").startswith("numpy.") for c in m.findall(ret.value, m.Call())
        if isinstance(c, cst.Call))) for ret in function.returns)


def _floating(expr: cst.BaseExpression, known: dict[str, str]) -> bool:
    """A floating-point tensor: a loss (``loss``, whose ``backward()`` is called), a mean, ``.float()``."""
    if isinstance(expr, cst.Name):
        return known.get(expr.value) == "tensor"
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute):
        if expr.func.attr.value in ("mean", "float", "double", "norm", "std", "var"):
            return True
        if expr.func.attr.value in ("detach", "cpu", "squeeze"):
            return _floating(expr.func.value, known)
    return False


def _counts(expr: cst.BaseExpression) -> bool:
    """``(pred == y).sum()``, ``pred.eq(y).sum()``, ``torch.sum(pred == y)``: a count of matches."""
    if not (isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "sum"):
        return False
    inner = expr.func.value
    if dotted(inner) == "torch" and expr.args:
        inner = expr.args[0].value
    if isinstance(inner, cst.Comparison):
        return True
    return isinstance(inner, cst.Call) and isinstance(inner.func, cst.Attribute) and inner.func.attr.value in ("eq", "ne")
