"""Sentinels: cheap checks, on by default, of mistakes that let a run on N processes exit 0 and train wrongly.

* **Parameters agree** (N > 1): after optimizer steps 1, 2, 4, 8, ... of each prepared optimizer and at
  ``end_training``, a fingerprint of each DDP-wrapped model it trains (float64 sum and sum of squares of
  a strided sample of at most 64 values per tensor, in at most 64 groups of tensors) is written to the
  process group's store under ``accelify/sentinel/<accelerator>/<model>/<step>/<rank>``. Process 0
  compares it with every other process's, the others with process 0's, at the next check, when the keys
  are there (``store.check``: nothing waits, no collective is added, the script's collective order is
  untouched); ``end_training`` compares what is left after its own barrier. A difference raises
  :class:`~.errors.ParametersDifferError` naming the model (its variable name when ``prepare`` could
  see it), the step and the first differing parameter.
* **An optimizer stepping without gradients** (any N): when none of a prepared optimizer's parameters
  has a ``.grad`` at its steps 2, 3 and 4 (steps skipped under accumulation or by the fp16 scaler do
  not count), while some of them require one, a :class:`~.errors.SentinelWarning` names it.
* **A prepared scheduler stepped per epoch** (N > 1, batches not split, ``step_scheduler_with_optimizer``):
  when two consecutive ``scheduler.step()`` calls among its first four each come one pass over a
  prepared loader after the previous one (the loader's epoch moved by one, the optimizer's steps equal
  its steps per epoch, at least 2, and the loader is not being iterated at the call), a
  :class:`~.errors.SentinelWarning` says it moves N steps per call.

Each check fails once. What they cost per step is an integer increment and one comparison with the
next step to check, in ``AcceleratedOptimizer.step`` / ``AcceleratedScheduler.step``; the work itself
runs at a logarithmic number of steps (``benchmarks/step_overhead.py`` prints the on/off ratio).
``Accelerator(sentinels=False)`` or ``ACCELIFY_SENTINELS=0`` turns them all off.
"""

from __future__ import annotations

import itertools
import math
import pickle
import sys
import warnings
import weakref
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel

from .debug_exchange import default_store
from .errors import ParametersDifferError, SentinelWarning

_PREFIX = "accelify/sentinel"
_SAMPLE = 64  # values sampled per tensor, at a fixed stride
_GROUPS = 64  # a model's tensors are fingerprinted in at most this many consecutive groups
_RTOL = 1e-6  # processes of one DDP model are bitwise equal; this only absorbs summation order on a GPU
_NO_GRAD_STEPS = (2, 3, 4)  # the first step is left out: some scripts step once before training
_PENDING_MAX = 32
_PACKAGE = __name__.rpartition(".")[0]
_INSTANCES = itertools.count()  # one number per Accelerator with sentinels, the same on every process
_OFF_HINT = "(A runtime sentinel: `Accelerator(sentinels=False)` or ACCELIFY_SENTINELS=0 turns these checks off.)"


def caller_name(obj: Any) -> str:
    """The variable (or ``self.<attribute>``) that holds ``obj`` in the nearest frame outside the runtime,
    else its class name. Called at ``prepare``, once per object."""
    frame = sys._getframe(1)
    while frame is not None and (frame.f_globals.get("__name__") or "").startswith(_PACKAGE + "."):
        frame = frame.f_back
    if frame is not None:
        scope = frame.f_locals
        for name, value in scope.items():
            if value is obj and name != "self":
                return name
        owner = scope.get("self")
        try:
            attributes = vars(owner) if owner is not None else {}
        except TypeError:
            attributes = {}
        for name, value in attributes.items():
            if value is obj:
                return f"self.{name}"
    return type(obj).__name__


def fingerprint(module: torch.nn.Module) -> tuple[list[str], list[float]]:
    """``(names, values)``: per group of consecutive parameter tensors, the float64 sum, sum of squares and
    count of a strided sample of each tensor; ``names[g]`` names group ``g``'s parameter (``a` to `b`` for several)."""
    params = [(name, p) for name, p in module.named_parameters() if p.device.type != "meta"]
    if not params:
        return [], []
    per = math.ceil(len(params) / _GROUPS)
    with torch.no_grad():
        samples = []
        for _, p in params:
            flat = p.detach().reshape(-1)
            if flat.is_complex():
                flat = torch.view_as_real(flat).reshape(-1)
            samples.append(flat[:: max(1, flat.numel() // _SAMPLE)].to(torch.float64))
        data = torch.cat(samples)
        groups = math.ceil(len(params) / per)
        counts = [sum(s.numel() for s in samples[g * per:(g + 1) * per]) for g in range(groups)]
        index = torch.repeat_interleave(torch.arange(groups), torch.tensor(counts)).to(data.device)
        sums = torch.zeros(groups, dtype=torch.float64, device=data.device).index_add_(0, index, data)
        squares = torch.zeros(groups, dtype=torch.float64, device=data.device).index_add_(0, index, data * data)
        rows = torch.stack([sums, squares]).cpu().tolist()
    values = [v for g in range(groups) for v in (rows[0][g], rows[1][g], float(counts[g]))]
    names = [params[g * per][0] if per == 1 else f"{params[g * per][0]}` to `{params[min(len(params), (g + 1) * per) - 1][0]}"
             for g in range(groups)]
    return names, values


def first_difference(mine: Sequence[float], theirs: Sequence[float]) -> int | None:
    """The first group whose fingerprint differs (0 when the models differ in shape), or None."""
    if len(mine) != len(theirs):
        return 0
    for g in range(0, len(mine), 3):
        (s1, q1, n), (s2, q2, _) = mine[g:g + 3], theirs[g:g + 3]
        if (s1 == s2 or _both_nan(s1, s2)) and (q1 == q2 or _both_nan(q1, q2)):
            continue  # equal, or diverged to inf/NaN everywhere alike: not a disagreement
        scale = max(q1, q2)
        if not all(map(math.isfinite, (s1, s2, scale))) or not (
                abs(s1 - s2) <= _RTOL * math.sqrt(n * scale) and abs(q1 - q2) <= _RTOL * scale):
            return g // 3
    return None


def _both_nan(a: float, b: float) -> bool:
    return math.isnan(a) and math.isnan(b)


def _has_gradients(param_groups: Iterable[dict[str, Any]]) -> bool | None:
    """True if a parameter has a ``.grad``; None if none requires one (frozen on purpose); else False."""
    wanted = False
    for group in param_groups:
        for p in group["params"]:
            if p.grad is not None:
                return True
            wanted = wanted or p.requires_grad
    return False if wanted else None


@dataclass
class _ModelCheck:
    """One model's fingerprint at one step, waiting for the other processes' to compare with."""

    serial: int  # the model's number among those this Accelerator checked: the same on every process
    name: str
    label: str  # "4" or "end"
    steps: int
    optimizer: str
    groups: list[str]
    values: list[float]


class _OptimizerWatch:
    """Called by ``AcceleratedOptimizer.step`` at the steps it asks for; returns the next one (0: never)."""

    def __init__(self, sentinels: "Sentinels", name: str) -> None:
        self.sentinels = sentinels
        self.name = name
        self.steps_without_gradients: int | None = 0  # None once gradients were seen (or nothing is trainable)
        self.models: list[weakref.ref[Any]] | None = None  # the DDP models this optimizer trains

    def __call__(self, optimizer: Any, step: int) -> int:
        if step in _NO_GRAD_STEPS and self.steps_without_gradients is not None:
            if _has_gradients(optimizer.param_groups) is False:
                self.steps_without_gradients += 1
                if self.steps_without_gradients == len(_NO_GRAD_STEPS):
                    self._warn_no_gradients(step)
            else:
                self.steps_without_gradients = None
        agree = self.sentinels.world > 1
        if agree and not step & (step - 1):
            self.sentinels.optimizer_stepped(self, optimizer, step)
        if step < _NO_GRAD_STEPS[-1]:
            return step + 1
        return 2 * step if agree else 0

    def _warn_no_gradients(self, step: int) -> None:
        where = f" on process {self.sentinels.rank}" if self.sentinels.world > 1 else ""
        warnings.warn(
            f"`{self.name}` stepped {len(_NO_GRAD_STEPS)} times{where} (its steps {_NO_GRAD_STEPS[0]} to {step}) "
            "with no gradients: its loss's backward never reached its parameters (a `.detach()`, a loss computed "
            "under `torch.no_grad()`, a backward through another model, or `zero_grad()` between `backward` and "
            f"`step`), so they do not train. Call `accelerator.backward(loss)` on a loss computed from the model "
            f"this optimizer holds, before `{self.name}.step()`. {_OFF_HINT}",
            SentinelWarning, stacklevel=4,
        )


class _SchedulerWatch:
    """Called by ``AcceleratedScheduler.step`` on its first calls; warns if they come once per epoch."""

    def __init__(self, sentinels: "Sentinels", name: str, optimizers: list[Any]) -> None:
        self.sentinels = sentinels
        self.name = name
        self.optimizers = optimizers
        self.loader = "the training loader"  # named once a loader's passes match the calls
        self.snapshots = [self._snapshot()]  # at prepare

    def _snapshot(self) -> tuple[int, dict[int, tuple[Any, int, bool]]]:
        steps = max(o._steps_taken for o in self.optimizers)
        loaders = {id(d): (d, d.epoch, d.iterating) for d in self.sentinels.prepared.dataloaders}
        return steps, loaders

    def __call__(self, scheduler: Any, call: int) -> int:
        self.snapshots.append(self._snapshot())
        if len(self.snapshots) >= 3 and self._per_epoch(*self.snapshots[-3:]):
            self._warn(self.snapshots[-1][0] - self.snapshots[-2][0])
            return 0
        return call + 1 if call < 4 else 0

    def _per_epoch(self, a: Any, b: Any, c: Any) -> bool:
        gaps = (b[0] - a[0], c[0] - b[0])
        for key, (loader, epoch, _) in a[1].items():
            if key not in b[1] or key not in c[1]:
                continue
            (_, epoch_b, iterating_b), (_, epoch_c, iterating_c) = b[1][key], c[1][key]
            if iterating_b or iterating_c or (epoch_b - epoch, epoch_c - epoch_b) != (1, 1):
                continue
            try:
                batches = len(loader)
            except TypeError:
                continue
            accumulation = self.sentinels.gradient_state.num_steps
            per_epoch = {batches, math.ceil(batches / accumulation), batches // accumulation}
            if all(gap >= 2 and gap in per_epoch for gap in gaps):
                self.loader = self.sentinels.names.get(id(loader), "the training loader")
                return True
        return False

    def _warn(self, gap: int) -> None:
        if self.sentinels.rank != 0:
            return  # every process sees it alike: say it once
        n = self.sentinels.world
        warnings.warn(
            f"Scheduler `{self.name}` is stepped once per epoch (every {gap} optimizer steps, once per pass over "
            f"`{self.loader}`) but was passed to prepare: on {n} processes it moves {n} steps per call, so its "
            f"schedule runs {n} times too fast. Do not pass it to prepare (or step it per batch). {_OFF_HINT}",
            SentinelWarning, stacklevel=4,
        )


class Sentinels:
    """The sentinels of one ``Accelerator`` (see the module docstring); ``prepare`` registers objects here."""

    def __init__(self, prepared: Any, *, num_processes: int, process_index: int, gradient_state: Any) -> None:
        self.prepared = prepared
        self.world, self.rank = num_processes, process_index
        self.gradient_state = gradient_state
        self.instance = next(_INSTANCES)
        self.names: dict[int, str] = {}  # id(prepared object) -> the user's name for it
        # id(DDP model) -> (the optimizer whose steps check it, the model): ids are reused once a model is freed
        self.owners: dict[int, tuple[_OptimizerWatch, weakref.ref[Any]]] = {}
        self.serials: dict[int, tuple[int, weakref.ref[Any]]] = {}  # id(DDP model) -> (its number in the keys, it)
        self.numbers = itertools.count()
        self.pending: list[_ModelCheck] = []
        self.failed = False  # a difference was raised: check no more

    # -- at prepare ----------------------------------------------------------------------------
    def remember(self, raw: Any, prepared: Any) -> None:
        """Record the user's name for ``raw`` (what ``prepare`` returned for it is ``prepared``)."""
        self.names[id(prepared)] = caller_name(raw)

    def watch_optimizer(self, optimizer: Any) -> None:
        """Check ``optimizer`` (an ``AcceleratedOptimizer``) at its steps 1, 2, 3, 4, 8, 16, ..."""
        optimizer._sentinel = _OptimizerWatch(self, self.names.get(id(optimizer), "optimizer"))
        optimizer._sentinel_at = 1

    def watch_scheduler(self, scheduler: Any) -> None:
        """Check ``scheduler`` (an ``AcceleratedScheduler``) on its first calls, where it moves N steps per call."""
        from torch.optim.lr_scheduler import ReduceLROnPlateau

        if (self.world == 1 or scheduler.split_batches or not scheduler.step_with_optimizer
                or isinstance(scheduler.scheduler, ReduceLROnPlateau)):
            return
        optimizers = [o for o in scheduler.optimizers if hasattr(o, "_steps_taken")]
        if optimizers:
            scheduler._sentinel = _SchedulerWatch(self, self.names.get(id(scheduler), "scheduler"), optimizers)
            scheduler._sentinel_at = 1

    # -- parameters agree ------------------------------------------------------------------------
    def optimizer_stepped(self, watch: _OptimizerWatch, optimizer: Any, step: int) -> None:
        """After step ``step`` (a power of two) of ``optimizer``: publish its models' fingerprints, compare what can be."""
        if self.failed or default_store() is None:
            return
        if watch.models is None:
            watch.models = self._claim(watch, optimizer)
        earlier = len(self.pending)
        for ref in watch.models:
            model = ref()
            if model is not None:
                self._publish(model, str(step), step, watch.name)
        # the peers are rarely done with this step yet, but always with the previous check: compare that
        self._compare(final=False, upto=earlier)

    def _claim(self, watch: _OptimizerWatch, optimizer: Any) -> list[weakref.ref[Any]]:
        params = {id(p) for group in optimizer.param_groups for p in group["params"]}
        claimed = []
        for model in self.prepared.models:
            if (isinstance(model, DistributedDataParallel) and self._owner(model) is None
                    and any(id(p) in params for p in model.parameters())):
                self.owners[id(model)] = (watch, weakref.ref(model))
                claimed.append(weakref.ref(model))
        return claimed

    def _owner(self, model: Any) -> _OptimizerWatch | None:
        owner = self.owners.get(id(model))
        return owner[0] if owner is not None and owner[1]() is model else None

    def _serial(self, model: Any) -> int:
        """The model's number in the store's keys: given in the order models are first checked, which is the
        script's order on every process (an index into the prepared models would be reused after free_memory)."""
        serial = self.serials.get(id(model))
        if serial is None or serial[1]() is not model:
            serial = self.serials[id(model)] = (next(self.numbers), weakref.ref(model))
        return serial[0]

    def _key(self, serial: int, label: str, rank: int) -> str:
        return f"{_PREFIX}/{self.instance}/{serial}/{label}/{rank}"

    def _publish(self, model: Any, label: str, steps: int, optimizer: str) -> None:
        groups, values = fingerprint(model.module)
        serial = self._serial(model)
        default_store().set(self._key(serial, label, self.rank), pickle.dumps((steps, values)))
        name = self.names.get(id(model), type(model.module).__name__)
        self.pending.append(_ModelCheck(serial, name, label, steps, optimizer, groups, values))
        if len(self.pending) > _PENDING_MAX:  # a process far behind: forget the oldest rather than grow
            self.pending.pop(0)

    def before_end(self) -> None:
        """``end_training``, before its barrier: publish every DDP model's fingerprint."""
        if self.world == 1 or self.failed or default_store() is None:
            return
        for model in self.prepared.models:
            if isinstance(model, DistributedDataParallel):
                owner = self._owner(model)
                self._publish(model, "end", self._steps_of(owner), owner.name if owner is not None else "")

    def after_end(self) -> None:
        """``end_training``, after its barrier (every process published): compare everything still pending."""
        if self.world == 1 or self.failed or default_store() is None:
            return
        self._compare(final=True)

    def _steps_of(self, owner: _OptimizerWatch | None) -> int:
        for optimizer in self.prepared.optimizers:
            if owner is not None and getattr(optimizer, "_sentinel", None) is owner:
                return int(optimizer._steps_taken)
        return 0

    def _compare(self, final: bool, upto: int | None = None) -> None:
        """Compare the pending fingerprints (the first ``upto`` of them) whose peers' keys are there. ``final``
        (after ``end_training``'s barrier): compare what is there and drop the rest. A key missing then belongs to
        a process with the sentinels off, another Accelerator numbering, or fewer steps; the last shows in the
        ``end`` comparison. Three store round trips at most per check: ``check``, ``multi_get`` (and the ``set``)."""
        store = default_store()
        peers = list(range(1, self.world)) if self.rank == 0 else [0]
        waiting = []
        for position, check in enumerate(self.pending):
            keys = [self._key(check.serial, check.label, r) for r in peers]
            if upto is not None and position >= upto or not final and not store.check(keys):
                waiting.append(check)  # a peer has not got there yet: look again at the next check
                continue
            present = [(r, key) for r, key in zip(peers, keys) if not final or store.check([key])]
            values = store.multi_get([key for _, key in present]) if present else []
            records = {r: pickle.loads(value) for (r, _), value in zip(present, values)}
            differing = {r: g for r, (_, values) in records.items()
                         if (g := first_difference(check.values, values)) is not None}
            if differing:
                self.failed = True
                self.pending = []
                raise ParametersDifferError(self._message(check, differing, records))
        self.pending = waiting

    def _message(self, check: _ModelCheck, differing: dict[int, int], records: dict[int, tuple[int, list[float]]]) -> str:
        if check.label != "end":
            when = f"after step {check.label} of `{check.optimizer}`"
        elif check.optimizer:
            when = f"at end_training (after {check.steps} steps of `{check.optimizer}` on process {self.rank})"
        else:
            when = "at end_training"
        lines = [f"Parameters of `{check.name}` differ between processes {when}:"]
        for r, g in sorted(differing.items()):
            where = f"first difference in `{check.groups[g]}`" if check.groups else "its parameters have different shapes"
            lines.append(f"  - process {r if self.rank == 0 else self.rank} differs from process 0 ({where})")
        steps = {r: s for r, (s, _) in records.items()}
        if check.label == "end" and any(s != check.steps for s in steps.values()):
            counts = ", ".join(f"process {r}: {s}" for r, s in sorted({self.rank: check.steps, **steps}.items()))
            lines.append(f"  - steps of `{check.optimizer}` taken ({counts})")
        lines.append(
            f"Either `{check.name}` was trained outside the prepared model (through `.module`, "
            "`accelerator.unwrap_model(...)` or another reference to the unwrapped module, or its weights were "
            "changed in place on some processes only), or a process skipped a step (`backward` or "
            "`optimizer.step()` under a condition on a process-local value, or a loader of a different length). "
            "Train only through the object `prepare` returned and take every step on every process. " + _OFF_HINT
        )
        return "\n".join(lines)
