"""Distributed code written by hand, found once for the plan and the rules that give it to the runtime.

What a script does to run on several processes by itself, and what each piece means in the runtime's terms:

- values the launcher sets: ``int(os.environ["RANK"])`` / ``LOCAL_RANK`` / ``WORLD_SIZE``, ``dist.get_rank()``,
  ``dist.get_world_size()``, the ``rank=`` given to ``init_process_group``, a ``--local_rank`` option (-1 when
  the script runs alone): ``accelerator.process_index`` / ``local_process_index`` / ``num_processes``;
- tests on them: ``rank == 0`` -> ``accelerator.is_main_process``, ``args.local_rank in [-1, 0]`` ->
  ``accelerator.is_local_main_process``, ``args.local_rank != -1`` (or ``int(os.environ.get("RANK", -1)) != -1``)
  -> ``accelerator.num_processes > 1``; a key every binding of which is such a test (``master_process = rank
  == 0``, else ``True``) is a *main flag*;
- *mode flags*: an option or variable that chooses whether the script distributes itself (``args.distributed``,
  ``args.multiprocessing_distributed``): a name an ``if`` tests to run the set-up, with no runtime counterpart;
- the set-up itself: ``init_process_group`` / ``destroy_process_group``, ``DistributedDataParallel(...)``,
  ``DistributedSampler``, ``mp.spawn``, collectives (``barrier``, ``all_reduce``);
- device indexes: what ``torch.cuda.set_device(i)``, ``device_ids=[i]``, ``torch.device("cuda", i)`` or
  ``f"cuda:{i}"`` name: this process's own device (``x.cuda(i)`` is placement there);
- main-only code: under a test that is true on the main process only (``if master_process:``), or in a function
  (or a method, by its name) only such code calls: it runs on one process, so it keeps its unprepared loaders and
  ``torch.save``, and no collective may go there.

The launcher's values and their terms are in ``launcher_values.py``; the tests on them (``rank == 0`` ->
``is_main_process``) in ``rank_tests.py``. ``Distributed.refusals`` lists the ``torch.distributed`` calls that
have no counterpart in the accelerator (``broadcast``, ``all_gather``, ``new_group``, ...); the rules refuse the
shapes they cannot convert themselves.
The plan builds one ``Distributed`` (it needs the device indexes and the code only the main process runs);
the rules read ``ctx.plan.distributed``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.tree_walk import descendants
from accelify.codemods.analysis.facts import Binding, CallSite, Facts, Scope
from accelify.codemods.analysis.launcher_values import (
    LAUNCH_VARIABLES, MAIN_TESTS, QUERIES, SINGLE_TESTS, SINGLE_VALUE, Rank, constant, env_read, source,
)
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.analysis.rank_tests import mode_test, rank_test, spawn_test

if TYPE_CHECKING:
    from accelify.codemods.analysis.flow import Flow

INIT = "torch.distributed.init_process_group"
DESTROY = "torch.distributed.destroy_process_group"
BARRIER = "torch.distributed.barrier"
ALL_REDUCE = "torch.distributed.all_reduce"
IS_INITIALIZED = "torch.distributed.is_initialized"
LEFT_ALONE = {"torch.distributed.is_available", "torch.distributed.is_nccl_available", "torch.distributed.is_gloo_available"}
WRAPPER = "torch.nn.parallel.DistributedDataParallel"
SAMPLER = "torch.utils.data.DistributedSampler"
SPAWN = {"torch.multiprocessing.spawn", "torch.multiprocessing.spawn.spawn"}
SET_DEVICE = "torch.cuda.set_device"
DDP_OPTIONS = ("dim", "broadcast_buffers", "bucket_cap_mb", "find_unused_parameters", "check_reduction",
               "gradient_as_bucket_view", "static_graph")  # what DistributedDataParallelKwargs carries
DDP_PLACEMENT = ("device_ids", "output_device")  # this process's device: prepare places the model there
REDUCTIONS = {"SUM": None, "AVG": '"mean"'}  # ReduceOp -> accelerator.reduce's reduction (None: its default, "sum")
DATA_PARALLEL = "torch.nn.parallel.DataParallel"  # one process's GPUs splitting each batch (``split_batches=True``)
DATA_PARALLEL_CALLS = {"torch.nn.parallel.data_parallel", "torch.nn.parallel.data_parallel.data_parallel"}


def data_parallel_sites(facts: Facts) -> list[CallSite]:
    """Every DataParallel wrap and functional ``data_parallel`` call of the program."""
    return [s for s in facts.calls if s.qualname == DATA_PARALLEL or s.qualname in DATA_PARALLEL_CALLS]


@dataclass
class Distributed:
    """The hand-written distributed code of one program (see the module docstring)."""

    setup: list[CallSite] = field(default_factory=list)  # init_process_group / destroy_process_group
    barriers: list[CallSite] = field(default_factory=list)
    reductions: list[CallSite] = field(default_factory=list)  # all_reduce
    queries: list[CallSite] = field(default_factory=list)  # get_rank / get_world_size / is_initialized
    wrappers: list[CallSite] = field(default_factory=list)  # DistributedDataParallel(...)
    samplers: list[CallSite] = field(default_factory=list)  # DistributedSampler(...)
    spawns: list[CallSite] = field(default_factory=list)  # mp.spawn(...)
    sync_toggles: list[cst.BaseStatement] = field(default_factory=list)  # model.require_backward_grad_sync = ...
    keys: dict[str, Rank] = field(default_factory=dict)  # names and ``args.x`` holding a launcher value
    modes: set[str] = field(default_factory=set)  # mode flags
    device_indexes: set[str] = field(default_factory=set)  # keys naming this process's device
    spawn_indexes: set[str] = field(default_factory=set)  # the index mp.spawn gives its worker (None when not spawned)
    refusals: list[tuple[cst.CSTNode, str, str]] = field(default_factory=list)  # (node, code shown, manual fix)
    local_nodes: set[cst.CSTNode] = field(default_factory=set)  # expressions whose value differs by process
    uses: set[cst.BaseStatement] = field(default_factory=set)  # statements that will read the accelerator
    main_only_stmts: dict[cst.BaseStatement, str] = field(default_factory=dict)  # ``if``s only the main runs -> its test
    main_only_scopes: dict[int, str] = field(default_factory=dict)  # functions only such code calls (ids) -> the test
    scopes: dict[int, Scope] = field(default_factory=dict)  # the scope of each statement, by the statement's id

    def __bool__(self) -> bool:
        return bool(self.setup or self.wrappers or self.samplers or self.spawns or self.barriers or self.reductions)

    def ddp_options(self) -> list[cst.Arg]:
        """The options the script gave ``DistributedDataParallel`` that the accelerator takes through
        ``DistributedDataParallelKwargs`` (``find_unused_parameters=True``), from the first wrap that has any."""
        for site in self.wrappers:
            options = [a for a in site.node.args if a.keyword is not None and a.keyword.value in DDP_OPTIONS]
            if options:
                return options
        return []

    def global_batch(self, facts: Facts, data_parallel: bool) -> bool:
        """Whether the script's batch size is the batch of all its GPUs together (``split_batches=True``): with
        DataParallel and no distributed code of its own (DataParallel splits it), or when its distributed path
        divides it among the processes (ImageNet's ``args.batch_size = int(args.batch_size / ngpus_per_node)``);
        not when that path gives each process its own (run_glue's per-GPU batch, nanoGPT)."""
        if not self:
            return data_parallel
        keys = {dotted(a.value) for s in facts.calls if s.qualname == "torch.utils.data.DataLoader"
                for a in s.node.args if a.keyword is not None and a.keyword.value == "batch_size"}
        for binding in facts.bindings():
            in_setup = any(isinstance(s, cst.If) and dotted(s.test) in self.modes for s in facts.chain(binding.stmt)[1:])
            if binding.key in keys and binding.value is not None and in_setup:
                if binding.aug and isinstance(binding.stmt, cst.SimpleStatementLine) and isinstance(
                    binding.stmt.body[0], cst.AugAssign
                ) and isinstance(binding.stmt.body[0].operator, (cst.DivideAssign, cst.FloorDivideAssign)):
                    return True
                if m.findall(binding.value, m.BinaryOperation(operator=m.Divide() | m.FloorDivide())):
                    return True
        return False

    def keeps_save(self, facts: Facts, site: CallSite) -> bool:
        """Whether a ``torch.save`` stays as it is: only the main process of each machine runs it (a per-machine
        cache: ``accelerator.save`` writes on the global main process only), or it is in a helper only the main
        process calls (it saves what the caller hands it; the caller's models are unwrapped there)."""
        if id(site.scope) in self.main_only_scopes:
            return True
        return self.main_only(facts, site.stmt, site.scope) == MAIN_TESTS[1]

    def scope_of(self, stmt: cst.BaseStatement) -> Scope | None:
        """The function, class or module ``stmt`` is in."""
        return self.scopes.get(id(stmt))

    def follows_device(self, value: cst.BaseExpression | None) -> bool:
        """``'cuda' if 'cuda' in device else 'cpu'`` where ``device`` names this process's device: a value derived
        from it, which stays right when the device becomes the accelerator's."""
        return isinstance(value, cst.IfExp) and any(
            dotted(n) in self.device_indexes for n in m.findall(value.test, m.Name() | m.Attribute())  # type: ignore[arg-type]
        )

    def main_only(self, facts: Facts, stmt: cst.BaseStatement, scope: Scope) -> str | None:
        """Whether only the main process runs ``stmt`` (under a main-process test, or in a function only such
        code calls): the test that says so (``{a}.is_main_process``, or ``{a}.is_local_main_process`` when it
        is the main process of each machine), else None."""
        for outer in facts.chain(stmt)[1:]:
            if outer in self.main_only_stmts and _in_body(outer, stmt, facts):
                return self.main_only_stmts[outer]
        return self.main_only_scopes.get(id(scope))


# Hogwild training (PyTorch's mnist_hogwild, A3C): processes the script starts itself share one model's memory
# (``model.share_memory()``) and step it in turn; no launcher-started data parallelism stands in for that.
_HOGWILD = ("torch.multiprocessing.Process", "torch.multiprocessing.Pool", "multiprocessing.Process")
_HOGWILD_FIX = ("the script starts its own processes that train one model in shared memory (Hogwild); data-parallel "
                "training replaces them: train one model per process (drop the workers and `share_memory()`, "
                "`accelify launch` starts the processes)")


def find_distributed(facts: Facts, flow: "Flow") -> Distributed:
    """The hand-written distributed code of the program (empty when it has none)."""
    found = Distributed()
    for site in facts.calls:
        q = site.qualname or ""
        if q in (INIT, DESTROY):
            found.setup.append(site)
        elif q == BARRIER:
            found.barriers.append(site)
        elif q == ALL_REDUCE:
            found.reductions.append(site)
        elif q in QUERIES or q == IS_INITIALIZED:
            found.queries.append(site)
        elif q == WRAPPER:
            found.wrappers.append(site)
        elif q == SAMPLER:
            found.samplers.append(site)
        elif q in SPAWN:
            found.spawns.append(site)
        elif q in _HOGWILD or (site.method == "share_memory" and not site.node.args
                               and facts.unit_of(site.scope).imports.imports_any("torch.multiprocessing")):
            name = code_of(site.node.func)
            found.refusals.append((site.node, name, _HOGWILD_FIX))
        elif q.startswith("torch.distributed.") and q not in LEFT_ALONE and not q.startswith(("torch.distributed.run", "torch.distributed.ReduceOp")):
            name = code_of(site.node.func)
            found.refusals.append((site.node, name, "it has no counterpart in the accelerator (use `accelerator.gather`, `reduce` or `wait_for_everyone`)"))
    if not found:
        return found
    found.scopes = scopes_of(facts)
    _find_keys(facts, found)
    _find_spawn_indexes(facts, flow, found)
    _find_device_indexes(facts, found)
    _find_modes(facts, found)
    _find_local(facts, found)
    _find_main_only(facts, flow, found)
    for stmt in facts.order:
        if isinstance(stmt, cst.SimpleStatementLine) and len(stmt.body) == 1 and isinstance(stmt.body[0], cst.Assign):
            target = stmt.body[0].targets[0].target
            if isinstance(target, cst.Attribute) and target.attr.value == "require_backward_grad_sync":
                found.sync_toggles.append(stmt)
    return found


def _find_keys(facts: Facts, found: Distributed) -> None:
    """Keys that hold a launcher value: every binding a read of it, or what one process sees."""
    candidates: dict[tuple[int, str], list[Binding]] = {}
    for scope in facts.scopes:
        for key, bindings in scope.bindings.items():
            candidates[(id(scope), key)] = bindings
    for (_, key), bindings in candidates.items():
        kinds = {source(b.value, b.where.imports) for b in bindings if b.value is not None}
        ranks = {k for k in kinds if k is not None}
        if len(ranks) != 1:
            continue
        rank = ranks.pop()
        if all(b.value is not None and (source(b.value, b.where.imports) == rank or constant(b.value) == SINGLE_VALUE[rank.kind])
               for b in bindings):
            found.keys[key] = rank
    for site in facts.calls:
        if (site.qualname or "") == INIT:
            for arg in site.node.args:
                if arg.keyword is not None and arg.keyword.value == "rank" and dotted(arg.value):
                    found.keys.setdefault(dotted(arg.value) or "", Rank("process_index"))
        if site.method == "add_argument" and site.node.args:
            flag = site.node.args[0].value
            if isinstance(flag, cst.SimpleString) and flag.evaluated_value in ("--local_rank", "--local-rank"):
                for scope in facts.scopes:
                    for key in scope.refs:
                        if key.endswith(".local_rank") and key.count(".") == 1:
                            found.keys[key] = Rank("local_process_index", sentinel=True)


def _find_spawn_indexes(facts: Facts, flow: "Flow", found: Distributed) -> None:
    """The spawned worker's first parameter (``gpu`` of ``main_worker(gpu, ngpus_per_node, args)``) and what it is
    stored in (``args.gpu = gpu``): the process's index on its machine when spawned, else what the script passed."""
    for site in found.spawns:
        function = site.node.args[0].value if site.node.args else None
        owner = site.scope.resolve(function.value) if isinstance(function, cst.Name) else None
        worker = facts.function(function.value, owner) if owner is not None and isinstance(function, cst.Name) else None
        if worker is None or not worker.param_names:
            continue
        index = worker.param_names[0]
        found.spawn_indexes.add(index)
        for bindings in worker.bindings.values():
            found.spawn_indexes |= {b.key for b in bindings if b.value is not None and dotted(b.value) == index}


def _find_device_indexes(facts: Facts, found: Distributed) -> None:
    """What names this process's device: ``set_device(i)``, ``device_ids=[i]``, ``output_device=i``,
    ``torch.device("cuda", i)``; and the local-rank keys."""
    found.device_indexes |= {k for k, r in found.keys.items() if r.kind == "local_process_index"}
    for site in facts.calls:
        q = site.qualname or ""
        values: list[cst.BaseExpression] = []
        if q == SET_DEVICE and site.node.args:
            values.append(site.node.args[0].value)
        elif q == WRAPPER:
            for arg in site.node.args:
                if arg.keyword is not None and arg.keyword.value == "device_ids" and isinstance(arg.value, (cst.List, cst.Tuple)):
                    values += [e.value for e in arg.value.elements]
                elif arg.keyword is not None and arg.keyword.value == "output_device":
                    values.append(arg.value)
        elif q == "torch.device" and len(site.node.args) == 2:
            values.append(site.node.args[1].value)
        found.device_indexes |= {dotted(v) or "" for v in values if dotted(v)}


def _find_modes(facts: Facts, found: Distributed) -> None:
    """Flags an ``if`` tests to run the hand-written set-up, with no counterpart in the runtime."""
    setup = {id(s.stmt) for s in [*found.setup, *found.wrappers, *found.samplers, *found.spawns]}
    for stmt in facts.order:
        if not isinstance(stmt, cst.If):
            continue
        key = dotted(stmt.test)
        if key is None or key in found.keys or _mapped_flag(facts, key):
            continue
        first, last = facts.order[stmt]
        if any(id(s) in setup and first < facts.order[s][0] <= last for s in facts.order if id(s) in setup):
            found.modes.add(key)
    grown = True
    while grown:  # ``args.distributed = args.world_size > 1 or args.multiprocessing_distributed``
        grown = False
        for binding in facts.bindings():
            if binding.key not in found.modes and binding.value is not None and any(
                dotted(n) in found.modes for n in m.findall(binding.value, m.Name() | m.Attribute())  # type: ignore[arg-type]
            ):
                found.modes.add(binding.key)
                grown = True


def _mapped_flag(facts: Facts, key: str) -> bool:
    """A flag bound to a test on a launcher value (``ddp = int(os.environ.get("RANK", -1)) != -1``)."""
    for binding in facts.bindings():
        if binding.key == key and binding.value is not None and isinstance(binding.value, cst.Comparison):
            if source(binding.value.left, binding.where.imports) is not None:
                return True
    return False


def _find_local(facts: Facts, found: Distributed) -> None:
    """The expressions whose value differs between processes: launcher values and every load of a key holding
    one; ``found.uses``: the statements that directly hold them."""
    uses: set[cst.BaseStatement] = set()
    for site in facts.calls:
        rank = source(site.node, site.scope.imports)
        if rank is not None and rank.kind != "num_processes":  # the world size agrees
            found.local_nodes.add(site.node)
            uses.add(site.stmt)
    for scope in facts.scopes:
        for binding in (b for bs in scope.bindings.values() for b in bs):
            if binding.value is not None:
                for node in descendants(binding.value):
                    read = env_read(node, binding.where.imports) if isinstance(node, cst.BaseExpression) else None
                    if read is not None and LAUNCH_VARIABLES[read[0]] != "num_processes":
                        found.local_nodes.add(node)
                        uses.add(binding.stmt)
        for key, refs in scope.refs.items():
            if key in found.keys and found.keys[key].kind != "num_processes":
                found.local_nodes.update(refs)
                uses.update(scope.holders[id(r)] for r in refs if id(r) in scope.holders)
    found.uses = uses | {s.stmt for s in [*found.barriers, *found.reductions, *found.queries]}


# helpers --------------------------------------------------------------------------------------------
def scopes_of(facts: Facts) -> dict[int, Scope]:
    """The scope (function, class or module) each statement is in, by the statement's id."""
    by_node = {id(s.node): s for s in facts.scopes}
    tops = {id(stmt): f.module_scope for f in facts.units.values() for stmt in f.module.body}
    out: dict[int, Scope] = {}
    for stmt in facts.order:
        chain = facts.chain(stmt)
        owner = next((by_node[id(n)] for n in chain[1:] if id(n) in by_node), None)
        found = owner or tops.get(id(chain[-1]))
        if found is not None:
            out[id(stmt)] = found
    return out


def _in_body(outer: cst.BaseStatement, stmt: cst.BaseStatement, facts: Facts) -> bool:
    """Whether ``stmt`` is in the body of ``outer`` (an ``if``), not in its ``else``/``elif``."""
    assert isinstance(outer, cst.If)
    body = outer.body.body if isinstance(outer.body, cst.IndentedBlock) else []
    return facts.top_in(stmt, list(body)) is not None


def _main_test(test: cst.BaseExpression, scope: Scope, found: Distributed, facts: Facts, depth: int = 0) -> str | None:
    """Whether ``test`` is true only on the main process (or the main process of each machine) when there are
    several: the accelerator's test it amounts to (one of ``MAIN_TESTS``), else None."""
    if depth > 4:
        return None
    whole = mode_test(test, scope, found) or spawn_test(test, found)  # ``not args.distributed or args.rank % n == 0``
    if whole is not None:
        return whole if whole in MAIN_TESTS else None
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.And):
        return _main_test(test.left, scope, found, facts, depth + 1) or _main_test(test.right, scope, found, facts, depth + 1)
    if isinstance(test, cst.BooleanOperation) and isinstance(test.operator, cst.Or):  # ``alone or rank == 0``
        sides = [_main_test(s, scope, found, facts, depth + 1) for s in (test.left, test.right)]
        alone = [rank_test(s, scope, found) in SINGLE_TESTS for s in (test.left, test.right)]
        if all(t is not None or a for t, a in zip(sides, alone)) and any(sides):
            return next(t for t in sides if t is not None)
        return None
    mapped = rank_test(test, scope, found) or mode_test(test, scope, found)
    if mapped is not None:
        return mapped if mapped in MAIN_TESTS else None
    key = dotted(test)
    if key is None or key.count(".") > 1:
        return None
    bindings = [b for b in facts.bindings() if b.key == key]
    tests = {constant(b.value) is True or _main_test(b.value, b.where, found, facts, depth + 1) if b.value is not None else None
             for b in bindings}
    tests.discard(True)  # ``master_process = True`` where the script runs alone
    return tests.pop() if len(tests) == 1 and None not in tests and False not in tests else None


def _find_main_only(facts: Facts, flow: "Flow", found: Distributed) -> None:
    scopes = found.scopes
    for stmt in facts.order:
        if isinstance(stmt, cst.If) and id(stmt) in scopes:
            test = _main_test(stmt.test, scopes[id(stmt)], found, facts)
            if test is not None:
                found.main_only_stmts[stmt] = test
    grown = True
    while grown:
        grown = False
        for scope in facts.scopes:
            if scope.kind != "function" or id(scope) in found.main_only_scopes:
                continue
            sites = flow.call_sites(scope)
            if not sites and scope.class_scope is not None:  # ``model_to_save.save_pretrained(d)``: by the method's name
                sites = [s for s in facts.calls if s.method == scope.name and flow.callee(s) is None]
            tests = {found.main_only(facts, s.stmt, s.scope) for s in sites}
            if sites and None not in tests:
                found.main_only_scopes[id(scope)] = MAIN_TESTS[1] if MAIN_TESTS[1] in tests else MAIN_TESTS[0]
                grown = True
