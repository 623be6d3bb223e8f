"""How and where the ``Accelerator`` is created: its name, its arguments and its place, decided once.

Asked by the rules through ``plan.analysis(Creation)``: the accelerator rule writes the constructor, the
imports rule imports what the arguments name (``DistributedDataParallelKwargs``), and a rule that must know
whether a statement runs after the accelerator exists reads ``anchor``.

- name: ``self.accelerator`` in a trainer class that builds its objects in ``__init__``, else ``accelerator``;
- arguments: ``cpu=<flag>`` from the script's device choice (none when it never chooses a device and the runtime
  places everything training touches, ``analysis/placed.py``; else ``cpu=True`` when it never chooses one),
  ``split_batches=True`` where DataParallel split each batch, ``mixed_precision=`` from its AMP,
  ``gradient_accumulation_steps=`` from its accumulation, ``kwargs_handlers=`` from its DDP options;
- place: as early as possible in the home block (the builder, or the caller that builds the objects), after
  the statements its arguments read (``args = parser.parse_args()``), before the first use of the objects
  and of the launcher's values.
"""

from __future__ import annotations

import copy
from typing import Callable

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.statement_shapes import is_docstring, is_import
from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.gradient_accumulation import find_accumulation
from accelify.codemods.analysis.mixed_precision import find_amp
from accelify.codemods.analysis.names import ImportMap, dotted
from accelify.codemods.analysis.placed import placed_by_runtime, split_batches
from accelify.codemods.analysis.plan import Plan
from accelify.codemods.analysis.roles import (
    AVAILABILITY,
    cpu_flag,
    flags_from_test,
    is_cpu_device,
    is_probe,
    is_cuda_flag,
    join_terms,
    split_terms,
)
from accelify.codemods.analysis.seen_from import Passed, seen_from, unseen
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.unused_submodules import unused_submodules

_REFS = m.Name() | m.Attribute(value=m.Name())
LINE_LENGTH = 88


class Creation:
    """The accelerator of one program (``home`` None: nothing to create it for)."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.home: Scope | None = plan.home
        self.name = "accelerator"
        self.arguments: list[str] = []
        self.runtime_imports: tuple[str, ...] = ()  # names imported beside ``Accelerator``
        self.block: list[cst.BaseStatement] = []
        self.index = 0
        self.after = False  # ``(index, True)``: right after ``block[index - 1]``; else right before ``block[index]``
        self.late: str | None = None  # a value the arguments read, bound only after a launcher read needs the accelerator
        self.unseen: dict[str, str] | None = None  # an argument reading names the home does not have (ACC044's fields)
        self.bound_late: str | None = None  # a value an argument reads, bound after the accelerator's place (ACC046)
        self.callbacks: list[tuple[Scope, str]] = []  # functions a trainer calls with itself, and that parameter
        if self.home is not None:
            self._decide(self.home)
            self.callbacks = self._callbacks(self.home)

    @property
    def cpu_argument(self) -> str:
        """The ``cpu=...`` argument the accelerator is made with (``"cpu=True"``, ``"cpu=not args.cuda"``), or ``""``:
        what a ``PartialState`` made before it must be given (Hugging Face Accelerate keeps the first state's device)."""
        return next((a for a in self.arguments if a.startswith("cpu=")), "")

    @property
    def anchor(self) -> tuple[cst.BaseStatement, bool] | None:
        """Where the accelerator is created: ``(statement, True)`` right after it, ``(statement, False)`` right before."""
        if self.home is None or not self.block:
            return None
        return (self.block[self.index - 1], True) if self.after else (self.block[self.index], False)

    def code(self) -> str:
        """``accelerator = Accelerator(...)``, one argument per line (black's way) when it would pass 88 columns."""
        assert self.home is not None
        facts = self.plan.facts
        depth = len(facts.chain(self.block[0])) - 1
        indent = facts.unit_of(self.home).module.default_indent
        line = f"{self.name} = Accelerator({', '.join(self.arguments)})"
        if len(indent) * depth + len(line) <= LINE_LENGTH or len(self.arguments) < 2:
            return line
        return f"{self.name} = Accelerator(\n" + "".join(f"{indent}{a},\n" for a in self.arguments) + ")"

    # the decisions --------------------------------------------------------------------------------
    def _decide(self, home: Scope) -> None:
        plan = self.plan
        facts = plan.facts
        in_class = home.class_scope is not None and any(a.key.startswith("self.") for a in plan.aliases)
        self.name = "self.accelerator" if in_class else "accelerator"
        flag = self._cpu_flag(home)
        arguments = [f"cpu={code_of(flag)}"] if flag is not None else []
        self.unplaced_program = flag is None and not self._names_a_device()  # the runtime's to place, or the CPU
        if self.unplaced_program and not placed_by_runtime(plan):
            # the script never chooses a device and makes tensors training reads: they stay on the CPU, so the
            # conversion does too (cpu=True: a GPU would need the script to place them). When the runtime
            # places everything training touches (prepared model, prepared loaders' batches), no pin:
            # ``Accelerator()`` runs on the machine's device (analysis/placed.py)
            arguments = ["cpu=True"]
        if split_batches(plan):
            arguments.append("split_batches=True")  # DataParallel split each batch over the GPUs: so do the processes
        options = plan.distributed.ddp_options()  # DistributedDataParallel(model, find_unused_parameters=True)
        if plan.analysis(unused_submodules) and not any(a.keyword is not None and a.keyword.value == "find_unused_parameters" for a in options):
            # an EMA copy or a teacher the forward never runs, or a backbone's head it leaves out, gets no gradient:
            # DDP would stop at the second step
            options = [*options, cst.Arg(cst.Name("True"), keyword=cst.Name("find_unused_parameters"),
                                         equal=cst.AssignEqual(cst.SimpleWhitespace(""), cst.SimpleWhitespace("")))]
        amp = plan.analysis(find_amp)
        depends: list[cst.BaseExpression] = [flag] if flag is not None else []
        depends += [a.value for a in options]
        if amp is not None and amp.argument() is not None:
            amp = self._seen_from(home, amp)
            arguments.append(amp.argument())  # type: ignore[arg-type]
            depends += [e for e in (amp.precision, amp.enabled) if e is not None]
            missing = [n for e in (amp.precision, amp.enabled) if e is not None for n in unseen(home, e)]
            if missing:  # written in ``home`` it would be a NameError: the accelerator rule refuses, naming it
                read = amp.where or next((s.scope for s in amp.autocasts), None) or next((b.where for b in amp.scalers), home)
                self.unseen = {"argument": arguments[-1], "names": "`, `".join(dict.fromkeys(missing)),
                               "home": home.name, "where": _qualified(read)}
        accumulation = plan.analysis(find_accumulation)
        if accumulation.steps is not None:
            arguments.append(f"gradient_accumulation_steps={code_of(accumulation.steps)}")
            depends.append(accumulation.steps)
        if options:  # the accelerator wraps the model in DDP with the script's options
            handler = ", ".join(f"{a.keyword.value}={code_of(a.value)}" for a in options)  # type: ignore[union-attr]
            arguments.append(f"kwargs_handlers=[DistributedDataParallelKwargs({handler})]")
            self.runtime_imports = ("DistributedDataParallelKwargs",)
        self.arguments = arguments
        block = plan.home_block
        if any(facts.top_stmt(u, home) is not None and facts.top_in(u, block) is None for u in plan.distributed.uses):
            block = home.body  # a rank read outside the block that calls training reads the accelerator too
        self.block = block
        self.index, self.after = self._position(home, block, depends)
        if flag is not None and arguments and arguments[0].startswith("cpu="):
            flag = self._inline_late(home, block, flag)
            arguments[0] = f"cpu={code_of(flag)}"
        self.late = self._late(home, block, self.index, depends)
        self.bound_late = self._bound_late(home, block, [flag, *depends[1:]] if flag is not None else depends)

    def _callbacks(self, home: Scope) -> list[tuple[Scope, str]]:
        """minGPT's ``batch_end_callback(trainer)``: a function of the program handed to a method of the trainer
        class that makes ``self.accelerator`` (``trainer.set_callback('on_batch_end', batch_end_callback)``), where
        that class calls what it was handed with itself (``callback(self)`` in ``trigger_callbacks``), and that
        nothing else calls. Its first parameter is the trainer: it reads the accelerator as
        ``trainer.accelerator``."""
        cls = home.class_scope
        plan = self.plan
        if cls is None or self.name != "self.accelerator":
            return []
        methods = [s for s in plan.facts.scopes if s.class_scope is cls and s.parent is cls]
        if not any(plan.callee(site) is None and isinstance(site.node.func, cst.Name) and site.node.args
                   and m.matches(site.node.args[0].value, m.Name("self")) for method in methods for site in method.calls):
            return []  # (the class never calls a callable it holds with itself)
        found: dict[int, tuple[Scope, str]] = {}
        for site in plan.facts.calls:
            if plan.callee(site) not in methods:
                continue
            for arg in site.node.args:
                name = arg.value.value if isinstance(arg.value, cst.Name) else None
                owner = site.scope.resolve(name) if name is not None else None
                function = plan.facts.function(name, owner) if name is not None and owner is not None else None
                if function is not None and function.class_scope is None and function.param_names \
                        and not plan.call_sites(function):
                    found[id(function)] = (function, function.param_names[0])
        pending = list(found.values())
        while pending:  # adder's ``eval_split(trainer, 'train')``, called only by callbacks, each with its trainer
            callback, trainer = pending.pop()
            for site in callback.calls:
                function = plan.callee(site)
                if function is None or id(function) in found or function.class_scope is not None:
                    continue
                sites = plan.call_sites(function)
                passed = [plan.arg_for(s, function, function.param_names[0]) if function.param_names else None for s in sites]
                if all(id(s.scope) in found and a is not None and m.matches(a.value, m.Name(found[id(s.scope)][1]))
                       for s, a in zip(sites, passed)):
                    found[id(function)] = (function, function.param_names[0])
                    pending.append(found[id(function)])
        return list(found.values())

    def _seen_from(self, home: Scope, amp: "Amp") -> "Amp":
        """``amp`` with its on/off flag as ``home`` sees it (``analysis/seen_from.py``): a parameter of the function
        that trains (``train_model(..., amp=False)``) becomes what every call in ``home`` passes for it
        (``args.amp``), and a trainer's ``self.args.fp16`` what its construction in ``home`` passes for ``args``."""
        if amp.enabled is None:
            return amp
        where = amp.where or next((s.scope for s in amp.autocasts), None) or next((b.where for b in amp.scalers), None)
        if where is None:
            return amp
        seen = copy.copy(amp)
        seen.enabled = seen_from(self.plan, home, where, amp.enabled)
        if amp.precision is not None:
            seen.precision = seen_from(self.plan, home, where, amp.precision)
        return seen

    def _cpu_flag(self, home: Scope) -> cst.BaseExpression | None:
        """``cpu=...`` from the device expression, following ``use_cuda``/``args.cuda`` style flags."""
        imports = home.imports
        devices = [b for b in _bindings(home) if b.role == "device" and b.value is not None]
        flag = self._branch_flag(devices, imports)
        if flag is not None:
            return flag
        probe = self._probe(home)
        for device in devices:
            flag = cpu_flag(device.value, imports, probe)  # type: ignore[arg-type]
            if flag is not None:
                break
        if flag is None:
            # a `args.cuda = not args.no_cuda and torch.cuda.is_available()` flag with no device variable
            for b in _bindings(home):
                if b.value is not None and is_cuda_flag(b.value, imports):
                    flag = flags_from_test(b.value, imports, probe)
                    break
            # nanoGPT: `device = args.device` ("cpu", "cuda", "cuda:1"), the device hand-written DDP sets up
            for b in _bindings(home):
                if flag is None and b.key in self.plan.distributed.device_indexes and isinstance(b.value, cst.Attribute):
                    flag = cst.Comparison(cst.parse_expression(b.key), [cst.ComparisonTarget(cst.Equal(), cst.SimpleString('"cpu"'))])
            return flag
        return self._expand(home, flag)

    def _inline_late(self, home: Scope, block: list[cst.BaseStatement], flag: cst.BaseExpression) -> cst.BaseExpression:
        """``flag`` with each name that is bound only after the accelerator's place (it must come before the first
        ``prepare``) replaced by its value, when that value is a constant or a device-availability test: titanic's
        ``cuda_available = False`` set after the loader, which ``cpu=not cuda_available`` read before it existed
        (NameError). A name bound once, at the top of ``block``, is replaced; anything else is left as it is."""
        facts = self.plan.facts
        attributes = {id(a.attr) for a in m.findall(flag, m.Attribute()) if isinstance(a, cst.Attribute)}
        names = {n.value for n in m.findall(flag, m.Name()) if isinstance(n, cst.Name) and id(n) not in attributes}
        passed: dict[str, cst.BaseExpression] = {}
        for name in names:
            bindings = [b for b in _bindings(home) if b.key == name]
            if len(bindings) != 1 or bindings[0].value is None:
                continue
            top = facts.top_in(bindings[0].stmt, block)
            if top is None or block.index(top) < self.index or top is not bindings[0].stmt:
                continue
            if _constant(bindings[0].value, home.imports):
                passed[name] = bindings[0].value
        if not passed:
            return flag
        return cst.ensure_type(flag.visit(Passed(passed)), cst.BaseExpression)

    def _late(self, home: Scope, block: list[cst.BaseStatement], index: int, depends: list[cst.BaseExpression]) -> str | None:
        """A launcher read must see the accelerator, and the accelerator its arguments' values: a value the
        arguments read that is bound only after the first such read (``ddp = int(os.environ.get("RANK", -1)) != -1``
        above ``steps = 4``) leaves no right place. That value's name, or None."""
        if not self.plan.distributed or index >= len(block):
            return None
        facts = self.plan.facts
        before = {b.key for b in _bindings(home) if (top := facts.top_in(b.stmt, block)) is not None and block.index(top) < index}
        bound = {b.key for b in _bindings(home)}
        attributes = {id(a.attr) for d in depends for a in m.findall(d, m.Attribute()) if isinstance(a, cst.Attribute)}
        names = {dotted(r) for d in depends for r in m.findall(d, _REFS) if id(r) not in attributes}  # type: ignore[arg-type]
        late = sorted(n for n in names if n and n in bound and n not in before and n.split(".")[0] not in before)
        return late[0] if late else None

    def _bound_late(self, home: Scope, block: list[cst.BaseStatement], depends: list[cst.BaseExpression]) -> str | None:
        """A value the accelerator's arguments read that ``block`` binds only after the accelerator's place, which
        must come before the objects to prepare are made (Pytorch-Project-Template: ``self.cuda = self.is_cuda &
        self.config.cuda`` set after the model and loaders, ``Accelerator(cpu=not self.cuda)`` at the top of
        ``__init__``: an AttributeError at start). Its name, or None."""
        facts = self.plan.facts
        tops = {}
        for b in _bindings(home):
            top = facts.top_in(b.stmt, block)
            if top is not None:
                tops.setdefault(b.key, []).append(block.index(top))
        attributes = {id(a.attr) for d in depends for a in m.findall(d, m.Attribute()) if isinstance(a, cst.Attribute)}
        for d in depends:
            for ref in m.findall(d, _REFS):
                key = dotted(ref) if id(ref) not in attributes else None  # type: ignore[arg-type]
                if key and key in tops and min(tops[key]) >= self.index and (
                        "." in key or not any(i < self.index for i in tops.get(key.split(".")[0], []))):
                    return key
        return None

    def _position(self, home: Scope, block: list[cst.BaseStatement], depends: list[cst.BaseExpression]) -> tuple[int, bool]:
        """Where the accelerator goes in ``block``, as early as possible: ``(index, True)`` right after
        ``block[index - 1]``, the last statement its arguments depend on (``args = parser.parse_args()``),
        else ``(index, False)``: before ``block[index]``, the first statement that is not an import or a
        docstring."""
        plan = self.plan
        facts = plan.facts
        # an object imported from a local module (``from data import loader``) exists before any statement here
        uses = [a.stmt for a in plan.aliases if a.stmt is not None and plan.prepare_scope is home and not is_import(a.stmt)]
        uses += [o.stmt for o in plan.in_place if o.where is home]  # prepared where built: the accelerator exists by then
        if plan.home_call is not None:
            uses.append(plan.home_call.stmt)
        uses += plan.distributed.uses  # ``ddp = int(os.environ.get("RANK", -1)) != -1`` reads the accelerator once converted
        tops = [facts.top_in(stmt, block) for stmt in uses]
        first_use = min((block.index(t) for t in tops if t is not None), default=len(block) - 1)
        start = 1 if block and is_docstring(block[0]) else 0
        while start < first_use and _declares(block[start]):
            start += 1  # ``global best_acc1`` stays the first statement of the function
        if home.kind == "module":
            # after the imports at the top (a notebook imports again in later cells: the accelerator comes before
            # those, so that what runs first, a download at the top, runs after it and under its guard)
            while start < first_use and (is_import(block[start]) or is_docstring(block[start])):
                start += 1  # (a second string before the imports, a header copied from another file: set W's W6)
        after = False
        keys: set[str] = set()
        for flag in depends:
            names_of_attributes = {id(a.attr) for a in m.findall(flag, m.Attribute()) if isinstance(a, cst.Attribute)}
            for ref in m.findall(flag, _REFS):
                if id(ref) in names_of_attributes:
                    continue  # the `device` of `args.device` is no variable
                key = dotted(ref)  # type: ignore[arg-type]
                if key:
                    keys.update((key, key.split(".")[0]))
        for b in _bindings(home):
            if b.key in keys:
                top = facts.top_in(b.stmt, block)
                if top is not None and start <= block.index(top) < first_use:
                    start, after = block.index(top) + 1, True
        return start, after

    def _names_a_device(self) -> bool:
        """Whether the program places anything on a device: a device variable, ``.cuda()``, ``.to(<device>)``,
        ``device="cuda"``, or a ``torch.cuda``/``torch.accelerator`` call."""
        plan = self.plan
        if plan.bindings_with_role("device"):
            return True
        for site in plan.facts.calls:
            if site.method == "cuda" or (site.qualname or "").startswith(("torch.cuda.", "torch.accelerator.", "torch.backends.mps")):
                return True
            if site.method == "to" and plan.placement_device(site.scope, site.node) is not None:
                return True
            if any(a.keyword is not None and a.keyword.value == "device" for a in site.node.args):
                return True
        return False

    def _chosen_before(self, devices: list[Binding], override: Binding, branch: cst.If) -> bool:
        """Whether another device binding, in the block that holds ``branch`` and before it, picks the device
        that ``branch`` overrides with the CPU."""
        facts = self.plan.facts
        around = facts.chain(branch)[1:]
        return any(d is not override and facts.chain(d.stmt)[1:] == around and facts.after(branch, d.stmt)
                   and not is_cpu_device(d.value, override.where.imports) for d in devices)  # type: ignore[arg-type]

    def _branch_flag(self, devices: list[Binding], imports: ImportMap) -> cst.BaseExpression | None:
        """``if opt.cuda: device = torch.device("cuda:0") / elif use_mps: device = ... "mps" / else: device =
        torch.device("cpu")``: the CPU unless a branch picks another device, ``not (opt.cuda or use_mps)``."""
        for device in devices:
            chain = self.plan.facts.chain(device.stmt)
            if len(chain) > 1 and isinstance(chain[1], cst.If) and chain[1].orelse is None \
                    and is_cpu_device(device.value, imports) and self._chosen_before(devices, device, chain[1]):
                # ``device = torch.cuda.current_device()`` then ``if args.cpu: device = "cpu"``: the flag opts in
                return chain[1].test.with_changes(lpar=[], rpar=[])
            if len(chain) > 1 and isinstance(chain[1], cst.If):
                tests: list[cst.BaseExpression] = []
                branch: cst.If = chain[1]
                while True:
                    value = _assigned(branch.body, device.key)
                    if value is None or is_cpu_device(value, imports):
                        return None
                    test = self._enabling(device.where, branch.test, imports)
                    if test is None:
                        return None  # ``if torch.cuda.is_available():``: availability alone decides, as the accelerator does
                    tests.append(test)
                    if isinstance(branch.orelse, cst.If):
                        branch = branch.orelse
                        continue
                    last = _assigned(branch.orelse.body, device.key) if isinstance(branch.orelse, cst.Else) else None
                    if last is None or not is_cpu_device(last, imports):
                        return None
                    break
                if all(isinstance(t, cst.UnaryOperation) and isinstance(t.operator, cst.Not) for t in tests):
                    # ``not args.no_cuda`` / ``not args.no_mps``: the CPU when every opt-out is set
                    parts = [t.expression.with_changes(lpar=[], rpar=[]) for t in tests]  # type: ignore[attr-defined]
                    return join_terms(parts, cst.And())
                joined: cst.BaseExpression = join_terms(tests)  # type: ignore[assignment]
                if len(tests) > 1:
                    joined = joined.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                return cst.UnaryOperation(cst.Not(), joined)
        return None

    def _enabling(self, scope: Scope, test: cst.BaseExpression, imports: ImportMap) -> cst.BaseExpression | None:
        """What in a branch's test the user chose: ``opt.cuda`` of ``opt.cuda and torch.cuda.is_available()``, ``opt.mps``
        of ``use_mps`` bound to ``opt.mps and torch.backends.mps.is_available()``; None for availability alone."""
        key = dotted(test)
        if key is not None:
            found = self.plan.binding_of(scope, key)
            if found is not None and found.value is not None and is_cuda_flag(found.value, imports):
                test = found.value
        terms = [t for t in split_terms(test, cst.And) if not is_probe(t, imports, self._probe(scope))]
        return join_terms([terms[0].with_changes(lpar=[], rpar=[]), *terms[1:]], cst.And()) if terms else None

    def _probe(self, scope: Scope) -> Callable[[cst.BaseExpression], bool]:
        """Whether a term seen from ``scope`` probes the machine: a name bound only to availability probes
        (``has_mps = torch.backends.mps.is_built()``), never a user's switch (set I's I4)."""

        def probe(term: cst.BaseExpression, depth: int = 0) -> bool:
            if isinstance(term, cst.UnaryOperation) and isinstance(term.operator, cst.Not):
                return probe(term.expression, depth)
            if isinstance(term, cst.BooleanOperation):
                return probe(term.left, depth) and probe(term.right, depth)
            if isinstance(term, cst.Call):
                return is_probe(term, scope.imports)
            key = dotted(term)
            owner = scope.resolve(key) if key is not None and "." not in key else None
            bindings = owner.bindings.get(key, []) if owner is not None and key is not None else []
            return depth < 4 and bool(bindings) and all(
                b.value is not None and probe(b.value, depth + 1) for b in bindings)

        return probe

    def _expand(self, builder: Scope, flag: cst.BaseExpression) -> cst.BaseExpression:
        """``not use_cuda`` where ``use_cuda = not args.no_cuda and torch.cuda.is_available()`` -> ``args.no_cuda``."""
        if isinstance(flag, cst.UnaryOperation) and isinstance(flag.operator, cst.Not):
            key = dotted(flag.expression)
            if key is not None:
                found = self.plan.binding_of(builder, key)
                if found is not None and found.value is not None and is_cuda_flag(found.value, builder.imports):
                    expanded = flags_from_test(found.value, builder.imports)
                    if expanded is not None:
                        return expanded
        return flag


def _qualified(scope: Scope) -> str:
    """``SimCLR.train`` for a method, ``train`` for a function."""
    return f"{scope.parent.name}.{scope.name}" if scope.parent is not None and scope.parent.kind == "class" else scope.name


def _declares(stmt: cst.BaseStatement) -> bool:
    """``global x`` / ``nonlocal x``."""
    return isinstance(stmt, cst.SimpleStatementLine) and all(isinstance(s, (cst.Global, cst.Nonlocal)) for s in stmt.body)


def _constant(value: cst.BaseExpression, imports: ImportMap) -> bool:
    """A value that means the same wherever it is written: ``False``, ``0``, ``"cpu"``, ``torch.cuda.is_available()``,
    and ``not``/``and``/``or`` of those."""
    if isinstance(value, cst.Name):
        return value.value in ("True", "False", "None")
    if isinstance(value, (cst.Integer, cst.SimpleString)):
        return True
    if isinstance(value, cst.UnaryOperation):
        return _constant(value.expression, imports)
    if isinstance(value, cst.BooleanOperation):
        return _constant(value.left, imports) and _constant(value.right, imports)
    if isinstance(value, cst.Call):
        return not value.args and (imports.qualname(value.func) or "") in AVAILABILITY
    return False


def _bindings(scope: Scope) -> list[Binding]:
    """Bindings made by statements in ``scope`` (including ``self.x`` stored on its class)."""
    owners = [scope] + ([scope.class_scope] if scope.class_scope is not None else [])
    return [b for owner in owners for bs in owner.bindings.values() for b in bs if b.where is scope]


def _assigned(block: cst.BaseSuite, key: str) -> cst.BaseExpression | None:
    """The value ``key`` is set to in ``block`` (the only statement doing so), or None."""
    if not isinstance(block, cst.IndentedBlock):
        return None
    values = [
        small.value for stmt in block.body if isinstance(stmt, cst.SimpleStatementLine) for small in stmt.body
        if isinstance(small, cst.Assign) and any(dotted(t.target) == key for t in small.targets)
    ]
    return values[0] if len(values) == 1 else None
