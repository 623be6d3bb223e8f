"""What the recorder wrote, read back: one frozen :class:`ProcessRecord` per process of a run.

The recorder (``hook/accelify_verify_recorder.py``) writes ``<prefix>.rank<R>.pid<P>.jsonl`` and
``<prefix>.rank<R>.pid<P>.stack`` for every process it ran in. :func:`read_records` turns them into records, one per
rank: when several processes of one rank recorded (a script that starts Python subprocesses), the one whose parent
is not among them is the rank's process. A line cut short by a killed process is ignored.
"""

from __future__ import annotations

import base64
import json
import re
from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

_NAME = re.compile(r"\.rank(\d+)\.pid(\d+)\.jsonl$")


@dataclass(frozen=True)
class Backward:
    """One call of ``torch.autograd.backward``: the loss value (None unless it had one element)."""

    n: int
    loss: float | None
    shape: tuple[int, ...] | None
    loader: str | None  # key of the data loader that yielded the last batch before it
    after_step: int  # optimizer steps taken before it
    group: "Group | None" = None  # the process group joined at that moment


@dataclass(frozen=True)
class Parameter:
    """A parameter's fingerprint after a step: its values (all, or an even sample when ``sampled``) and exact sum."""

    shape: tuple[int, ...]
    numel: int
    total: float
    values: tuple[float, ...]
    sampled: bool
    grad: bool  # it had a gradient at this step (it was trained)
    wrapper: int | str | None  # index of the DDP wrapper holding it, "sharded" (FSDP2 DTensor), or None
    grads: tuple[float, ...] = ()  # up to 1024 evenly spaced values of its gradient at this step

    def describe(self, index: int) -> str:
        """``parameter 2 (64x20)``."""
        return f"parameter {index} ({'x'.join(map(str, self.shape)) or 'scalar'})"


@dataclass(frozen=True)
class Group:
    """The process group this process had joined at a step."""

    initialized: bool
    world_size: int | None = None
    rank: int | None = None
    backend: str | None = None


@dataclass(frozen=True)
class Wrapper:
    """A DistributedDataParallel wrapper, and how often its forward ran so far."""

    index: int
    forward_calls: int
    module: str


@dataclass(frozen=True)
class Loader:
    """A data loader, as iterated at one place in the script (``site`` is ``file:line``)."""

    key: str
    site: str
    cls: str
    length: int | None  # batches per epoch for this process (len of the loader); None when unknown
    batch: int | None  # samples in the first batch it yielded
    iterations: int
    draws: int
    epoch_draws: tuple[int, ...]  # batches drawn in each of the first epochs that ran to their end (up to 4)
    training: bool  # a backward followed one of its batches


@dataclass(frozen=True)
class Step:
    """After one optimizer step: that optimizer's parameters, and the state of the process."""

    n: int
    optimizer: int
    params: tuple[Parameter, ...]
    group: Group
    wrappers: tuple[Wrapper, ...]
    loaders: Mapping[str, Loader]
    backwards: int
    name: str | None = None  # the optimizer's variable in the script
    model: str | None = None  # the variable of the model holding its first parameter
    lrs: tuple[float | None, ...] = ()  # learning rate of each param group after the step
    inexact: tuple[str, ...] = ()  # exact mode: why this step is not comparable with the original's
    kind: str | None = None  # the optimizer's class (``Adam``): an adaptive one amplifies float differences

    @property
    def label(self) -> str:
        """```optimizer_G``` or ``optimizer 1``: how messages name the optimizer."""
        return f"`{self.name}`" if self.name else f"optimizer {self.optimizer}"


@dataclass(frozen=True)
class SchedulerCall:
    """Exact mode: a call of a prepared scheduler's ``step()``, with the optimizer steps and epochs before it."""

    name: str | None
    steps: int
    epochs: int


@dataclass(frozen=True)
class BatchMark:
    """Exact mode: the sum of every number of one whole batch a prepared loader yielded on this process."""

    loader: int  # the loader's order of preparation
    epoch: int
    index: int
    total: float


@dataclass(frozen=True)
class ReduceMark:
    """Exact mode: a reduce over the processes of a tensor holding a sum of this process's per-batch means (see
    ``hook/accelify_verify_epochsums.py``): a real launch reduces 1/N of it there."""

    op: str
    values: tuple[float, ...]  # every element of the result
    batch_sums: tuple[bool, ...]  # which elements were such sums
    steps: int  # optimizer steps taken before it


@dataclass(frozen=True)
class PaddedGather:
    """Exact mode: the script gathered (``accelerator.gather``, not ``gather_for_metrics``) this process's share of a
    batch padded to split evenly over the processes: the rows duplicated to pad it are in what it got
    (``hook/accelify_verify_gathered.py``)."""

    site: str  # the script's ``file:line``
    rows: int  # rows of the batch
    gathered: int  # rows gathered, duplicates included
    steps: int  # optimizer steps taken before it


@dataclass(frozen=True)
class PrintedLine:
    """A line the script printed to stdout (holding a digit), a value it logged, or one its function returned
    (``via``), and when: inside a DataLoader epoch or after one."""

    text: str
    site: str  # the script's ``file:line`` that printed it
    in_epoch: bool  # a batch was drawn and its loader's epoch had not ended: a per-step value
    backwards: int  # backwards taken before it
    steps: int  # optimizer steps taken before it
    silent: bool = False  # exact mode: what accelerator.print would have printed on a process that prints nothing
    via: str = "print"  # how: print (stdout), logging, add_scalar, accelerator.log, wandb.log, return (a function's)


@dataclass(frozen=True)
class ProcessRecord:
    """Everything one process recorded, in order."""

    rank: int
    pid: int
    ppid: int
    started: float = 0.0  # when it wrote its first event (seconds since the epoch)
    backwards: tuple[Backward, ...] = ()
    steps: tuple[Step, ...] = ()
    stopped: bool = False  # reached the step limit and ended itself
    stop_reason: str = ""  # which limit: "steps", "epochs", "backstop" (the epoch limit's cap on steps)
    exited: bool = False  # the interpreter exited (after the script ended or raised)
    error: str | None = None  # the uncaught exception, ``Type: message``
    error_site: str | None = None  # the script's innermost ``file:line`` in its traceback
    error_share: tuple[int, int, int] | None = None  # exact mode: (batch rows, first row, end row) held when it raised
    hook_errors: tuple[str, ...] = ()
    schedulers: tuple[SchedulerCall, ...] = ()
    batches: tuple[BatchMark, ...] = ()
    lines: tuple[PrintedLine, ...] = ()
    reduces: tuple[ReduceMark, ...] = ()
    padded_gathers: tuple[PaddedGather, ...] = ()
    stack: str = field(default="", repr=False)  # Python stacks dumped when the run was ended at the timeout

    @property
    def finished(self) -> bool:
        """It stopped at the step limit or ran to its end without an uncaught exception."""
        return self.stopped or (self.exited and self.error is None)

    @property
    def ending(self) -> str:
        """How the run ended, in words: which limit stopped it, or that it ran to its end."""
        return {"epochs": "stopped at the epoch limit", "backstop": "stopped at the epoch limit's step cap"}.get(
            self.stop_reason, "stopped at the limit") if self.stopped else "ran to its end"

    @property
    def group(self) -> Group | None:
        """The process group as first recorded (at the first optimizer step, else at the first backward)."""
        if self.steps:
            return self.steps[0].group
        return next((b.group for b in self.backwards if b.group is not None), None)

    @property
    def loaders(self) -> Mapping[str, Loader]:
        """The data loaders as of the last step (empty before any step)."""
        return self.steps[-1].loaders if self.steps else {}


def read_records(prefix: Path) -> tuple[ProcessRecord, ...]:
    """The records of the processes that wrote ``<prefix>.rank*.pid*.jsonl``, one per rank, by rank."""
    found: dict[int, list[ProcessRecord]] = {}
    for path in sorted(prefix.parent.glob(prefix.name + ".rank*.pid*.jsonl")):
        match = _NAME.search(path.name)
        if match is None:
            continue
        record = _read(path, int(match.group(1)), int(match.group(2)))
        found.setdefault(record.rank, []).append(record)
    chosen = []
    for rank in sorted(found):
        records = found[rank]
        pids = {r.pid for r in records}
        roots = [r for r in records if r.ppid not in pids] or records
        chosen.append(roots[0])
    return tuple(chosen)


def _read(path: Path, rank: int, pid: int) -> ProcessRecord:
    fields: dict[str, Any] = {"rank": rank, "pid": pid, "ppid": 0}
    backwards: list[Backward] = []
    steps: list[Step] = []
    hook_errors: list[str] = []
    schedulers: list[SchedulerCall] = []
    batches: list[BatchMark] = []
    lines: list[PrintedLine] = []
    reduces: list[ReduceMark] = []
    padded: list[PaddedGather] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            event = json.loads(line)
        except ValueError:
            continue  # the last line of a killed process
        kind = event.get("event")
        if kind == "start":
            fields["ppid"] = int(event.get("ppid", 0))
            fields["started"] = float(event.get("time", 0.0))
        elif kind == "backward":
            shape = event.get("shape")
            group = Group(**event["group"]) if event.get("group") else None
            backwards.append(Backward(int(event["n"]), event.get("loss"), tuple(shape) if shape is not None else None,
                                      event.get("loader"), int(event.get("after_step", 0)), group))
        elif kind == "step":
            steps.append(_step(event, steps[-1].group if steps else None))
        elif kind == "stop":
            fields["stopped"] = True
            fields["stop_reason"] = str(event.get("why", "steps"))
        elif kind == "exit":
            fields["exited"] = True
        elif kind == "error":
            fields["error"] = str(event.get("error"))
            fields["error_site"] = event.get("site")
            share = event.get("share")
            fields["error_share"] = tuple(int(v) for v in share) if share else None
        elif kind == "scheduler":
            schedulers.append(SchedulerCall(event.get("name"), int(event["steps"]), int(event["epochs"])))
        elif kind == "batch":
            batches.append(BatchMark(int(event["loader"]), int(event["epoch"]), int(event["index"]),
                                     float(event["sum"])))
        elif kind == "line":
            lines.append(PrintedLine(str(event["text"]), str(event.get("site", "")), bool(event.get("in_epoch")),
                                     int(event.get("backwards", 0)), int(event.get("steps", 0)),
                                     bool(event.get("silent", False)), str(event.get("via", "print"))))
        elif kind == "reduce":
            reduces.append(ReduceMark(str(event.get("op")), tuple(float(v) for v in event.get("values", ())),
                                      tuple(bool(f) for f in event.get("batch_sums", ())), int(event.get("steps", 0))))
        elif kind == "padded_gather":
            padded.append(PaddedGather(str(event.get("site", "")), int(event.get("rows", 0)),
                                       int(event.get("gathered", 0)), int(event.get("steps", 0))))
        elif kind == "hook_error":
            hook_errors.append(str(event.get("traceback") or event.get("error")))
    stack_path = path.with_suffix(".stack")
    stack = stack_path.read_text(encoding="utf-8", errors="replace") if stack_path.exists() else ""
    return ProcessRecord(backwards=tuple(backwards), steps=tuple(steps), hook_errors=tuple(hook_errors),
                         schedulers=tuple(schedulers), batches=tuple(batches), lines=tuple(lines),
                         reduces=tuple(reduces), padded_gathers=tuple(padded), stack=stack, **fields)


def _step(event: Mapping[str, Any], group: Group | None = None) -> Step:
    """A ``step`` event; ``group``: the process group of the step before (a step writes it only when it changed)."""
    fingerprints = event.get("params", ())
    if isinstance(fingerprints, dict):
        params = _columns(fingerprints)
    else:
        params = tuple(
            Parameter(tuple(p["shape"]), int(p["numel"]), float(p["sum"]), _floats(p["values"]), bool(p["sampled"]),
                      bool(p["grad"]), p.get("wrapper"), _floats(p.get("grads", ())))
            for p in fingerprints
        )
    if "group" in event or group is None:
        group = Group(**event.get("group", {"initialized": False}))
    wrappers = tuple(Wrapper(int(w["index"]), int(w["forward_calls"]), str(w["module"]))
                     for w in event.get("wrappers", ()))
    loaders = {
        key: Loader(key, str(info["site"]), str(info["class"]), info.get("len"), info.get("batch"),
                    int(info["iterations"]),
                    int(info["draws"]), tuple(info.get("epoch_draws", ())), bool(info["training"]))
        for key, info in event.get("loaders", {}).items()
    }
    return Step(int(event["n"]), int(event["optimizer"]), params, group, wrappers, loaders,
                int(event.get("backwards", 0)), event.get("name"), event.get("model"),
                tuple(event.get("lrs", ())), tuple(event.get("inexact", ())), event.get("kind"))


def _columns(sparse: Mapping[str, Any]) -> tuple[Parameter, ...]:
    """The parameters of a sparse fingerprint written by columns (``hook/accelify_verify_fingerprint.py``)."""
    budget, values, start, found = int(sparse["budget"]), sparse["values"], 0, []
    for shape, count, total, grad, wrapper in zip(sparse["shape"], sparse["numel"], sparse["sum"], sparse["grad"],
                                                  sparse["wrapper"]):
        taken = min(count, budget)
        found.append(Parameter(tuple(shape), count, float(total), tuple(values[start:start + taken]), count > budget,
                               bool(grad), wrapper))
        start += taken
    return tuple(found)


def _floats(values: Any) -> tuple[float, ...]:
    """Values as the recorder wrote them: float64 bytes in base64 (a string), or a JSON list."""
    if isinstance(values, str):
        raw = base64.b64decode(values)
        return tuple(array("d", raw).tolist()) if raw else ()
    return tuple(values)
