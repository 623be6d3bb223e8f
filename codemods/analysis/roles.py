"""What kind of object an expression builds: model, optimizer, scheduler, data loader, device, scaler.

Matching is by qualified name (``names.ImportMap``), so every import spelling and alias works.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Scope, defined_class
from accelify.codemods.analysis.names import ImportMap, dotted

if TYPE_CHECKING:
    from accelify.codemods.analysis.facts import Binding

LOADERS = {"torch.utils.data.DataLoader"}
SCALERS = {"torch.cuda.amp.GradScaler", "torch.amp.GradScaler", "torch.amp.grad_scaler.GradScaler"}
# Optimizers and learning-rate schedules of Hugging Face transformers (and its forerunners) that fine-tuning scripts
# written without its Trainer build: ``AdamW(optimizer_parameters, lr=3e-5)`` over grouped parameters, then
# ``get_linear_schedule_with_warmup(optimizer, 0, num_train_steps)``, a LambdaLR stepped once per batch.
_HF_MODULES = ("transformers", "transformers.optimization", "pytorch_transformers", "pytorch_transformers.optimization",
               "pytorch_pretrained_bert", "pytorch_pretrained_bert.optimization")
LIBRARY_OPTIMIZERS = frozenset(f"{mod}.{name}" for mod in _HF_MODULES for name in ("AdamW", "Adafactor", "BertAdam"))
LIBRARY_SCHEDULERS = frozenset(
    f"{mod}.{name}"
    for mod in _HF_MODULES
    for name in ("get_scheduler", "get_linear_schedule_with_warmup", "get_cosine_schedule_with_warmup",
                 "get_cosine_with_hard_restarts_schedule_with_warmup", "get_polynomial_decay_schedule_with_warmup",
                 "get_constant_schedule", "get_constant_schedule_with_warmup", "get_inverse_sqrt_schedule",
                 "WarmupLinearSchedule", "WarmupCosineSchedule", "WarmupConstantSchedule")
)
AVAILABILITY = {
    "torch.cuda.is_available",
    "torch.accelerator.is_available",
    "torch.backends.mps.is_available",
    "torch.xpu.is_available",
    # probes of how torch was built: they describe the machine too, never a user's switch (set I's I4)
    "torch.backends.mps.is_built",
    "torch.backends.cuda.is_built",
}
Probe = Callable[[cst.BaseExpression], bool]  # a term that probes the machine (``has_mps`` bound to a probe)
CURRENT_ACCELERATOR = "torch.accelerator.current_accelerator"
CLIPPING = {"torch.nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_value_"}
_NOT_MODELS = {"torch.nn.Parameter", "torch.nn.Module", "torch.nn.ModuleList", "torch.nn.ModuleDict", "torch.nn.ParameterList"}
_PARAMETERS = m.Call(func=m.Attribute(attr=m.Name("parameters") | m.Name("named_parameters")))
PLACEMENT_METHODS = ("to", "cuda")
# Calls that return the module they receive, wrapped: the object is still the model (prepare wraps it instead).
WRAPPERS = {"torch.compile", "torch.nn.parallel.DistributedDataParallel"}
# Calls that return the objects they receive, in order: ``model, optimizer = amp.initialize(model, optimizer)``.
PASS_THROUGH = {"apex.amp.initialize"}


# What a DistributedDataParallel wrapper has too: nn.Module's public API (torch 2.x) and its instance attributes.
MODULE_API = frozenset({
    "T_destination", "add_module", "apply", "bfloat16", "buffers", "call_super_init", "children", "compile", "cpu",
    "cuda", "double", "dump_patches", "eval", "extra_repr", "float", "forward", "get_buffer", "get_extra_state",
    "get_parameter", "get_submodule", "half", "ipu", "load_state_dict", "modules", "mtia", "named_buffers",
    "named_children", "named_modules", "named_parameters", "parameters", "register_backward_hook", "register_buffer",
    "register_forward_hook", "register_forward_pre_hook", "register_full_backward_hook",
    "register_full_backward_pre_hook", "register_load_state_dict_post_hook", "register_load_state_dict_pre_hook",
    "register_module", "register_parameter", "register_state_dict_post_hook", "register_state_dict_pre_hook",
    "requires_grad_", "set_extra_state", "set_submodule", "share_memory", "state_dict", "to", "to_empty", "train",
    "type", "xpu", "zero_grad", "training", "module", "no_sync",
})


def tensor_backward(call: cst.Call, imports: ImportMap) -> bool:
    """``loss.backward(...)``: a tensor's backward. ``scaler.scale(loss).backward()`` is AMP's; ``self.backward()``,
    ``super().backward(...)`` and ``torch.autograd.backward(...)`` (a module function) call no tensor's."""
    func = call.func
    if not (isinstance(func, cst.Attribute) and func.attr.value == "backward"):
        return False
    receiver = func.value
    if isinstance(receiver, cst.Call) and isinstance(receiver.func, cst.Attribute) and receiver.func.attr.value == "scale":
        return False
    if isinstance(receiver, cst.Name) and receiver.value in ("self", "cls"):
        return False
    if isinstance(receiver, cst.Call):
        return not (isinstance(receiver.func, cst.Name) and receiver.func.value == "super")
    name = dotted(receiver)
    return name is None or name.split(".")[0] not in imports.aliases


def strip_placement(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``Net().to(device).cuda()`` -> ``Net()``; ``Net().cuda() if args.cuda else Net()`` (the same object, placed
    or not) -> ``Net()``."""
    if isinstance(expr, cst.IfExp):
        placed, plain = strip_placement(expr.body), strip_placement(expr.orelse)
        if placed.deep_equals(plain) and not (expr.body.deep_equals(plain) and expr.orelse.deep_equals(plain)):
            return plain
        return expr
    while (
        isinstance(expr, cst.Call)
        and isinstance(expr.func, cst.Attribute)
        and expr.func.attr.value in PLACEMENT_METHODS
    ):
        expr = expr.func.value
    return expr


MODE_METHODS = ("train", "eval")  # a module's methods that return the module itself (tensors have none of them)


def same_module(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``student.to(device).train()`` -> ``student``: placements and mode switches return the module they are
    called on, so the name bound to the result holds the same object (never used to remove code: ``.eval()``
    stays in the program)."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and (expr.func.attr.value in PLACEMENT_METHODS or (expr.func.attr.value in MODE_METHODS and _mode_args(expr))):
        expr = expr.func.value
    return expr


def mode_switched(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``model.train()`` / ``model.eval()`` -> ``model``: a mode switch returns the module itself. Placements are kept
    (a tensor's ``.to(...)`` may return another tensor)."""
    while isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) \
            and expr.func.attr.value in MODE_METHODS and _mode_args(expr):
        expr = expr.func.value
    return expr


def _mode_args(call: cst.Call) -> bool:
    """``.train()``, ``.train(False)``, ``.train(mode=True)``, ``.eval()``: nn.Module's mode switch, not a method of the
    program's own named ``train`` that takes its data (``agent.train(loader)``) and hands back what it computed."""
    return not call.args or (len(call.args) == 1 and isinstance(call.args[0].value, cst.Name)
                             and call.args[0].value.value in ("True", "False")
                             and (call.args[0].keyword is None or call.args[0].keyword.value == "mode"))


def strip_wrapper(expr: cst.BaseExpression, imports: ImportMap) -> cst.BaseExpression:
    """``torch.compile(model)`` / ``DistributedDataParallel(model, ...)`` -> ``model``."""
    core = strip_placement(expr)
    if isinstance(core, cst.Call) and core.args and core.args[0].keyword is None and imports.qualname(core.func) in WRAPPERS:
        return core.args[0].value
    return expr


def removed_wrap(binding: "Binding", imports: ImportMap) -> bool:
    """A rewrap the conversion removes (DDP, DataParallel, apex's ``amp.initialize``): not where the object is
    complete, so not where ``prepare`` goes (``torch.compile`` stays, and so does its binding)."""
    if not rewraps(binding, imports):
        return False
    call = binding.unpacked[0] if binding.unpacked is not None else strip_placement(binding.value)  # type: ignore[arg-type]
    return isinstance(call, cst.Call) and imports.qualname(call.func) != "torch.compile"


def rewraps(binding: "Binding", imports: ImportMap) -> bool:
    """``model = DataParallel(model)``, ``model = DDP(model, ...)``, ``model, opt = amp.initialize(model, opt)``:
    the name still holds the same module, wrapped (the conversion removes the wrapper)."""
    if binding.unpacked is not None:
        call, index = binding.unpacked
        return (isinstance(call, cst.Call) and imports.qualname(call.func) in PASS_THROUGH and index < len(call.args)
                and dotted(call.args[index].value) == binding.key)
    core = strip_placement(binding.value) if binding.value is not None else None
    return (
        isinstance(core, cst.Call) and bool(core.args) and dotted(core.args[0].value) == binding.key
        and imports.qualname(core.func) in (*WRAPPERS, "torch.nn.parallel.DataParallel")
    )


def is_cuda_string(expr: cst.BaseExpression) -> bool:
    """``"cuda"`` or ``"cuda:0"``."""
    if not isinstance(expr, cst.SimpleString):
        return False
    text = expr.evaluated_value
    return isinstance(text, str) and (text == "cuda" or text.startswith("cuda:"))


def is_cuda_choice(expr: cst.BaseExpression) -> bool:
    """A CUDA device string, or one with a GPU index put into it: ``"cuda:{}".format(gpu)``, ``f"cuda:{args.gpu}"``,
    ``"cuda:" + str(gpu)``, ``"cuda:%d" % gpu`` (in ``torch.device(...)`` or beside a CPU fallback: a device choice all
    the same, as under the launcher each process has its own GPU; a bare ``f"cuda:{local_rank}"`` string is the
    hand-written DDP set-up's, which ``ranks`` converts)."""
    if isinstance(expr, cst.Call) and isinstance(expr.func, cst.Attribute) and expr.func.attr.value == "format":
        return _string_is(expr.func.value, ("cuda:{}", "cuda:{0}"))
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Add):
        return _string_is(expr.left, ("cuda:",))
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, cst.Modulo):
        return _string_is(expr.left, ("cuda:%d", "cuda:%s", "cuda:%i"))
    if isinstance(expr, cst.FormattedString):
        parts = expr.parts
        return (len(parts) == 2 and isinstance(parts[0], cst.FormattedStringText) and parts[0].value == "cuda:"
                and isinstance(parts[1], cst.FormattedStringExpression))
    return is_cuda_string(expr)


def _string_is(expr: cst.BaseExpression, texts: tuple[str, ...]) -> bool:
    """A string literal whose value is one of ``texts``."""
    return isinstance(expr, cst.SimpleString) and expr.evaluated_value in texts


def is_cpu_device(expr: cst.BaseExpression, imports: ImportMap) -> bool:
    """``"cpu"`` or ``torch.device("cpu")``."""
    if isinstance(expr, cst.Call) and imports.qualname(expr.func) == "torch.device" and expr.args:
        expr = expr.args[0].value
    return isinstance(expr, cst.SimpleString) and expr.evaluated_value == "cpu"


def is_device_expr(expr: cst.BaseExpression, imports: ImportMap, nested: bool = False) -> bool:
    """An expression that picks the accelerator device (possibly falling back to the CPU); ``nested``: inside
    ``torch.device(...)`` or a choice, where a string with a GPU index put into it counts (``is_cuda_choice``)."""
    if isinstance(expr, cst.Attribute) and expr.attr.value == "type":
        expr = expr.value  # torch.accelerator.current_accelerator().type
    if isinstance(expr, cst.Call):
        q = imports.qualname(expr.func)
        if q == "torch.device":
            # torch.device("cuda" if ...), or torch.device(args.device): the device the user chose on the command line
            return bool(expr.args) and (is_device_expr(expr.args[0].value, imports, True) or dotted(expr.args[0].value) is not None)
        return q in (CURRENT_ACCELERATOR, "torch.cuda.current_device")  # the current GPU's index: ``.to(0)``
    if isinstance(expr, cst.IfExp):
        if is_cpu_device(expr.body, imports):  # "cpu" if args.cpu or not torch.cuda.is_available() else "cuda"
            return is_device_expr(expr.orelse, imports, True)
        body = expr.body  # ``torch.device("mps") if torch.backends.mps.is_available() else torch.device("cpu")``
        if isinstance(body, cst.Call) and imports.qualname(body.func) == "torch.device" and len(body.args) == 1:
            body = body.args[0].value
        if _accelerator_name(body):  # "mps" if has_mps else "cuda" if ... else "cpu"
            return is_cpu_device(expr.orelse, imports) or is_device_expr(expr.orelse, imports, True)
        return is_device_expr(expr.body, imports, True) and (
            is_cpu_device(expr.orelse, imports) or is_device_expr(expr.orelse, imports, True)
        )
    return is_cuda_choice(expr) if nested else is_cuda_string(expr)


_DEVICE_NAMES = ("cpu", "cuda", "mps", "xpu", "npu", "hpu", "meta")


def names_a_device(expr: cst.BaseExpression, imports: ImportMap) -> bool:
    """``torch.device(...)`` or a device string (``"cpu"``, ``"mps"``, ``"cuda:0"``), or a choice between
    them: any value a device variable takes in one branch or another."""
    if isinstance(expr, cst.Call):
        return imports.qualname(expr.func) == "torch.device"
    if isinstance(expr, cst.IfExp):
        return names_a_device(expr.body, imports) and names_a_device(expr.orelse, imports)
    if isinstance(expr, cst.SimpleString):
        text = expr.evaluated_value
        return isinstance(text, str) and text.split(":")[0] in _DEVICE_NAMES
    return False


def _accelerator_name(expr: cst.BaseExpression) -> bool:
    """``"mps"``, ``"cuda"``, ``"xpu"``, ``"cuda:0"``: a string naming a device that is not the CPU."""
    if not isinstance(expr, cst.SimpleString):
        return is_cuda_choice(expr)
    text = expr.evaluated_value
    return isinstance(text, str) and text.split(":")[0] in _DEVICE_NAMES and text.split(":")[0] not in ("cpu", "meta")


def cpu_flag(expr: cst.BaseExpression, imports: ImportMap, probe: Probe | None = None) -> cst.BaseExpression | None:
    """The ``cpu=`` argument a device expression implies: ``args.no_cuda`` for
    ``"cuda" if torch.cuda.is_available() and not args.no_cuda else "cpu"``; None when only availability decides.
    A chain (``"mps" if has_mps else "cuda" if torch.cuda.is_available() else "cpu"``) is the CPU only when every
    test fails: forced only when each test holds a user's switch (``probe`` says which names probe the machine)."""
    if isinstance(expr, cst.Call) and imports.qualname(expr.func) == "torch.device" and expr.args:
        expr = expr.args[0].value
        if dotted(expr) is not None:  # torch.device(args.device): the CPU when the user asks for it
            return cst.Comparison(expr, [cst.ComparisonTarget(cst.Equal(), cst.SimpleString('"cpu"'))])
    if not isinstance(expr, cst.IfExp):
        return None
    if is_cpu_device(expr.body, imports):
        return _cpu_terms(expr.test, imports, probe)
    first = flags_from_test(expr.test, imports, probe)
    if isinstance(expr.orelse, cst.IfExp):
        rest = cpu_flag(expr.orelse, imports, probe)
        if first is None or rest is None:
            return None  # one of the devices is chosen by availability alone: the accelerator decides the same way
        return cst.BooleanOperation(_grouped(first), cst.And(), _grouped(rest))
    return first


def _grouped(expr: cst.BaseExpression) -> cst.BaseExpression:
    """``a or b`` in parentheses (a term of an ``and``)."""
    if isinstance(expr, cst.BooleanOperation) and isinstance(expr.operator, cst.Or) and not expr.lpar:
        return expr.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
    return expr


def is_probe(term: cst.BaseExpression, imports: ImportMap, probe: Probe | None = None) -> bool:
    """``torch.cuda.is_available()``, ``torch.backends.mps.is_built()``, or a term ``probe`` says probes the
    machine: never a user's switch."""
    if isinstance(term, cst.Call) and imports.qualname(term.func) in AVAILABILITY:
        return True
    return probe is not None and probe(term)


def is_cuda_flag(value: cst.BaseExpression, imports: ImportMap) -> bool:
    """``not args.no_cuda and torch.cuda.is_available()``: a condition that enables CUDA when available."""
    if not isinstance(value, cst.BooleanOperation):
        return False
    return any(
        isinstance(term, cst.Call) and imports.qualname(term.func) in AVAILABILITY for term in split_terms(value, cst.And)
    )


def _cpu_terms(test: cst.BaseExpression, imports: ImportMap, probe: Probe | None = None) -> cst.BaseExpression | None:
    """``args.cpu or not torch.cuda.is_available()`` -> ``args.cpu`` (the terms that force the CPU)."""
    terms = split_terms(test, cst.Or)
    kept = [
        t.with_changes(lpar=[], rpar=[])
        for t in terms
        if not (isinstance(t, cst.UnaryOperation) and isinstance(t.operator, cst.Not) and is_probe(t.expression, imports, probe))
    ]
    return join_terms(kept)


def split_terms(test: cst.BaseExpression, operator: type) -> list[cst.BaseExpression]:
    """The terms of ``a and b and c`` (for ``cst.And``; ``cst.Or`` likewise); a parenthesised group is one term."""
    terms: list[cst.BaseExpression] = []
    pending: list[cst.BaseExpression] = [test]
    while pending:
        term = pending.pop(0)
        if isinstance(term, cst.BooleanOperation) and isinstance(term.operator, operator) and not term.lpar:
            pending[:0] = [term.left, term.right]
        else:
            terms.append(term)
    return terms


def join_terms(terms: list[cst.BaseExpression], operator: cst.BaseBooleanOp | None = None) -> cst.BaseExpression | None:
    """``a or b or c`` (or with ``operator``, e.g. ``cst.And()``); None for no terms."""
    if not terms:
        return None
    result = terms[0]
    for term in terms[1:]:
        result = cst.BooleanOperation(result, operator or cst.Or(), term)
    return result


def flags_from_test(test: cst.BaseExpression, imports: ImportMap, probe: Probe | None = None) -> cst.BaseExpression | None:
    """``not args.no_cuda and torch.cuda.is_available()`` -> ``args.no_cuda`` (the condition that forces the CPU);
    an availability probe is never a CPU switch (``has_mps`` bound to ``torch.backends.mps.is_built()``, by ``probe``)."""
    flags: list[cst.BaseExpression] = []
    for term in split_terms(test, cst.And):
        if is_probe(term, imports, probe):
            continue
        if isinstance(term, cst.UnaryOperation) and isinstance(term.operator, cst.Not):
            flags.append(term.expression.with_changes(lpar=[], rpar=[]))
        else:
            flags.append(cst.UnaryOperation(cst.Not(), term.with_changes(lpar=[], rpar=[])))
    return join_terms(flags)


def is_module_class(name: str, classes: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> bool:
    """Whether the class ``name`` defined in this file subclasses ``nn.Module``."""
    if name in seen or name not in classes:
        return False
    for base in classes[name]:
        if base == "torch.nn.Module" or is_module_class(base, classes, seen | {name}):
            return True
    return False


def is_module_scope(cls: Scope, classes: dict[str, list[str]]) -> bool:
    """Whether the class scope ``cls`` (in the script or in another module of the program, whose classes are keyed
    ``module.Name``) subclasses ``nn.Module``."""
    key = cls.name if cls.unit == "__main__" else f"{cls.unit}.{cls.name}"
    return is_module_class(key, classes) or is_module_class(cls.name, classes)


def module_method(function: Scope, classes: dict[str, list[str]]) -> bool:
    """Whether ``function`` is a method of an ``nn.Module`` subclass of the program other than ``__init__``."""
    cls = function.class_scope
    return cls is not None and function.name != "__init__" and is_module_scope(cls, classes)


def element_call(value: cst.BaseExpression | None) -> cst.BaseExpression | None:
    """``[optim.SGD(...) for b in blocks]`` / ``[optim.SGD(...), optim.Adam(...)]``: the (first) element built."""
    if isinstance(value, cst.ListComp):
        return value.elt
    if isinstance(value, (cst.List, cst.Tuple)) and value.elements:
        return value.elements[0].value
    return None


def classify(value: cst.BaseExpression | None, imports: ImportMap, classes: dict[str, list[str]]) -> str | None:
    """The role of the object ``value`` builds, or None. A list of optimizers is an optimizer (``Binding.many``)."""
    if value is None:
        return None
    element = element_call(value)
    if element is not None:
        if isinstance(value, (cst.List, cst.Tuple)) and not all(
            classify(e.value, imports, classes) == "optimizer" for e in value.elements
        ):
            return None
        return "optimizer" if classify(element, imports, classes) == "optimizer" else None
    if isinstance(value, cst.Dict) and value.elements and all(
        isinstance(e, cst.DictElement) and classify(e.value, imports, classes) == "loader" for e in value.elements
    ):
        return "loader"  # ``dataloaders = {"train": DataLoader(...), "val": DataLoader(...)}``, walked as ``dataloaders[phase]``
    if isinstance(value, cst.DictComp) and classify(value.value, imports, classes) == "loader":
        return "loader"  # the transfer-learning tutorial's ``{x: DataLoader(image_datasets[x], ...) for x in ["train", "val"]}``
    if is_device_expr(value, imports):
        return "device"
    core = strip_placement(value)
    if not isinstance(core, cst.Call):
        return None
    q = imports.qualname(core.func) or ""
    last = q.rsplit(".", 1)[-1]
    if q in LOADERS:
        return "loader"
    if q in SCALERS:
        return "scaler"
    if (q.startswith("torch.optim.lr_scheduler.") and last[:1].isupper()) or q in LIBRARY_SCHEDULERS:
        return "scheduler"
    if q in LIBRARY_OPTIMIZERS:
        return "optimizer"
    if q.startswith("torch.optim.") and last[:1].isupper() and last != "Optimizer":
        return "optimizer"
    if q.startswith("torch.nn.") and q.count(".") == 2 and last[:1].isupper():
        return None if last.endswith("Loss") or q in _NOT_MODELS else "model"
    if q.startswith("torchvision.models.") or is_module_class(q, classes):
        return "model"
    if last[:1].isupper() and any(m.findall(arg.value, _PARAMETERS) for arg in core.args):
        return "optimizer"
    return factory_role(core, imports, classes)


# Modules a factory is handed to build from, and what it then builds.
FACTORY_MODULES = {"torch.optim": "optimizer", "torch.optim.lr_scheduler": "scheduler", "torchvision.models": "model"}
_CLASS_ROLES = (("torch.nn.Module", "model"), ("torch.utils.data.DataLoader", "loader"))


def factory_role(call: cst.Call, imports: ImportMap, classes: dict[str, list[str]]) -> str | None:
    """What a factory that is handed a module builds: ``config.init_obj('optimizer', torch.optim, params)`` and
    ``getattr(torch.optim, name)(params)`` an optimizer, ``torch.optim.lr_scheduler`` a scheduler, and a module of
    the program whose classes are all DataLoaders (or all models) one of those (``config.init_obj('data_loader',
    module_data)``). Only an imported module counts (a variable named like one does not)."""
    func = call.func
    if isinstance(func, cst.Call) and imports.qualname(func.func) == "getattr" and func.args:
        handed = [func.args[0].value]
    else:
        handed = [arg.value for arg in call.args]
    for value in handed:
        name = dotted(value)
        if name is None or name.split(".")[0] not in imports.aliases:
            continue
        module = imports.qualname(value) or ""
        if module in FACTORY_MODULES:
            return FACTORY_MODULES[module]
        made = {_class_role(k, classes) for k in classes if k.rpartition(".")[0] == module}
        if len(made) == 1 and None not in made:
            return made.pop()
    return None


def _class_role(name: str, classes: dict[str, list[str]], seen: frozenset[str] = frozenset()) -> str | None:
    """``model`` or ``loader`` for a class of the program that subclasses ``nn.Module`` or ``DataLoader`` (through
    its own bases, re-exported by a package: ``from base import BaseDataLoader``)."""
    if name in seen:
        return None
    for base in classes.get(name, []):
        role = next((r for target, r in _CLASS_ROLES if base == target), None)
        found = role or _class_role(defined_class(base, classes), classes, seen | {name})
        if found is not None:
            return found
    return None


def parameter_owners(call: cst.Call) -> list[cst.BaseExpression]:
    """The ``x`` of every ``x.parameters()`` passed to ``call`` (the models an optimizer trains)."""
    return [owner for arg in call.args for owner in parameter_owners_in(arg.value)]


def parameter_owners_in(expr: cst.BaseExpression) -> list[cst.BaseExpression]:
    """The ``x`` of every ``x.parameters()`` / ``x.named_parameters()`` in ``expr``."""
    owners: list[cst.BaseExpression] = []
    for found in m.findall(expr, _PARAMETERS):
        assert isinstance(found, cst.Call) and isinstance(found.func, cst.Attribute)
        owners.append(found.func.value)
    return owners
