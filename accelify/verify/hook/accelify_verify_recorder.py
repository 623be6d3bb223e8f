"""Instrumentation that ``accelify verify`` loads into a training script's process, from outside the script.

It records what the training does and never changes what it computes: it reads losses and parameters, counts
calls, and, at the step limit, ends the process. It is activated by ``sitecustomize.py`` in this folder (the
folder is first on ``PYTHONPATH``) or, in a process forked from the verify fork server, by a direct call to
:func:`install_from_environment`; either way before the script's first line. torch is patched when it is
imported (at once if it already is), by ``accelify_verify_patches.py`` next to this file. The runner configures it
through these variables:

``ACCELIFY_VERIFY_RECORD``     path prefix of this process's files: ``<prefix>.rank<R>.pid<P>.jsonl`` (the record)
                               and ``<prefix>.rank<R>.pid<P>.stack`` (Python stacks dumped on SIGUSR1)
``ACCELIFY_VERIFY_STEPS``      end the process after this many optimizer steps, all optimizers counted (0: never)
``ACCELIFY_VERIFY_BATCHES``    end every DataLoader epoch after this many batches (0: never; the epoch limit)
``ACCELIFY_VERIFY_EPOCHS``     with a batch limit: end the process when a training loader starts this many + 1 epochs
``ACCELIFY_VERIFY_SEED``       seed for ``random``, numpy and torch, set before the script runs (default 0)
``ACCELIFY_VERIFY_PROCESSES``  processes in the run; with more than one only torchrun's workers (``RANK`` set)
                               record, not its agent
``ACCELIFY_VERIFY_ROOT``       folder of the script and its local modules: loops are named ``file:line`` from it
``ACCELIFY_VERIFY_EXACT``      1: exact mode (``accelify_verify_exact.py``): per-process seeds, split batches
``ACCELIFY_VERIFY_REFERENCE``  exact mode: the original run's record prefix (its losses tell a summed loss from a mean)

The record is one JSON object per line, written as it happens:

``start``     pid, parent pid, rank
``backward``  the value of the loss handed to ``torch.autograd.backward`` (``loss.backward()``,
              ``accelerator.backward(loss)``), the data loader that yielded the last batch, the process group
``step``      after each optimizer step (a global step post-hook): the optimizer's name in the script (the
              variable bound to it in a calling frame) and the learning rate of each of its param groups, the
              name of the model holding its first parameter, a fingerprint of every parameter of that optimizer
              (``accelify_verify_fingerprint.py``; after step ``FULL_STEPS``, except at powers of two and at the
              step limit, ``SPARSE_VALUES`` values and the sum only: verify compares parameters step by step for
              the first 64 steps, and recording every value of every step cost more than the training), in exact
              mode why the step is not comparable, the wrappers and how often their forward ran, the process
              group joined, and every iterated data loader (iteration site, batches per epoch, samples in its
              first batch, batches drawn, the batches of each of its first epochs (``accelify_verify_loaders.py``),
              how many epochs ended, whether a backward followed its batches)
``scheduler`` (exact mode) a prepared scheduler's ``step()`` call: its name, optimizer steps and epochs before it
``batch``     (exact mode) the sum of every number of one of the first batches of a prepared loader, per epoch
``reduce``    (exact mode) a reduce of a tensor holding a sum of per-batch means (``accelify_verify_epochsums.py``)
``line``      a line the script printed to stdout holding a digit (``accelify_verify_stdout.py``), a value it
              logged (``accelify_verify_logged.py``: a tracker, ``accelerator.log``, ``logging``) or one its own
              function returned after a loader's epoch ran inside it (``accelify_verify_returns.py``): its text,
              how (``via``), the script's ``file:line``, whether a DataLoader epoch was in progress (a batch drawn
              and its epoch not ended: a per-step value), the backwards and optimizer steps taken before it
``error``     the script raised an exception it did not catch (written by ``sys.excepthook``): the script's
              innermost line in its traceback and, in exact mode, the share of the batch this process held
``stop``      a limit was reached (``why``: ``steps``, ``epochs``, or ``backstop``: the epoch limit's cap on optimizer
              steps, for loaders the script wraps, whose epochs never end): the process ends with exit code 0 right
              after writing it
``exit``      the interpreter is exiting normally

All processes of a data-parallel run step in lockstep, so they all reach the limit at the same step; each waits
there until all have arrived (through the group's store, not a collective), so none leaves while another may still
be reading the last gradient all-reduce from it.
"""

from __future__ import annotations

import atexit
import faulthandler
import json
import os
import random
import signal
import sys
import threading
import time
from types import ModuleType
from typing import Any, Callable

try:
    from accelify_verify_loaders import LoaderEvents
    from accelify_verify_names import ScriptPlaces
except ImportError:  # imported from the package by the tool (the runner reads the ENV_* names below)
    from accelify.verify.hook.accelify_verify_loaders import LoaderEvents
    from accelify.verify.hook.accelify_verify_names import ScriptPlaces

ENV_RECORD = "ACCELIFY_VERIFY_RECORD"
ENV_STEPS = "ACCELIFY_VERIFY_STEPS"
ENV_SEED = "ACCELIFY_VERIFY_SEED"
ENV_PROCESSES = "ACCELIFY_VERIFY_PROCESSES"
ENV_ROOT = "ACCELIFY_VERIFY_ROOT"
ENV_EXACT = "ACCELIFY_VERIFY_EXACT"
ENV_BATCHES = "ACCELIFY_VERIFY_BATCHES"
ENV_EPOCHS = "ACCELIFY_VERIFY_EPOCHS"

STACK_SIGNAL = signal.SIGUSR1
VALUES_PER_TENSOR = 4096  # fingerprint budget per parameter tensor ...
VALUES_PER_STEP = 1 << 18  # ... and per step, shared between the tensors of a large model
FULL_STEPS = 64  # steps fingerprinted in full (verify compares parameters step by step this far) ...
SPARSE_VALUES = 4  # ... later steps, except powers of two and the step limit: this many values per tensor, no grads
PEER_WAIT = 30.0  # seconds a process at the step limit waits for the others of its group

_LIVE = ("current", "backwards_at_start")  # loader state the step events leave out

_recorder: "_Recorder | None" = None


def install_from_environment() -> bool:
    """Activate recording as the ``ACCELIFY_VERIFY_*`` variables say; False when this process must not record."""
    global _recorder
    prefix = os.environ.get(ENV_RECORD)
    if not prefix or _recorder is not None:
        return False
    import accelify_verify_sandbox

    accelify_verify_sandbox.install_from_environment()  # every process of the run writes copy-on-write
    if int(os.environ.get(ENV_PROCESSES, "1") or 1) > 1 and "RANK" not in os.environ:
        return False  # torchrun's agent: it runs no training
    _recorder = _Recorder(
        prefix=prefix,
        rank=int(os.environ.get("RANK", "0") or 0),
        steps=int(os.environ.get(ENV_STEPS, "0") or 0),
        seed=int(os.environ.get(ENV_SEED, "0") or 0),
        root=os.environ.get(ENV_ROOT) or os.getcwd(),
        exact=os.environ.get(ENV_EXACT, "") not in ("", "0"),
        batches=int(os.environ.get(ENV_BATCHES, "0") or 0),
        epochs=int(os.environ.get(ENV_EPOCHS, "0") or 0),
    )
    _recorder.start()
    return True


class _Recorder(LoaderEvents, ScriptPlaces):
    """The per-process recording state; all torch patches call into the one instance."""

    def __init__(self, *, prefix: str, rank: int, steps: int, seed: int, root: str, exact: bool = False,
                 batches: int = 0, epochs: int = 0) -> None:
        self.prefix = f"{prefix}.rank{rank}.pid{os.getpid()}"
        self.rank = rank
        self.limit = steps
        self.batch_limit = batches  # batches per DataLoader epoch (0: the loader's own length)
        self.epoch_limit = epochs if batches else 0  # training epochs per run (0: no limit)
        self.exact: Any = None  # the ExactMode, once torch is imported (exact mode only)
        self.exact_asked = exact
        if exact:
            from accelify_verify_exact import rank_seed

            seed = rank_seed(seed, rank)
        self.seed = seed
        self.root = os.path.join(os.path.realpath(root), "")
        self.active = True
        self.lock = threading.RLock()
        self.backwards = 0
        self.steps = 0
        self.loaders: dict[str, dict[str, Any]] = {}
        self.last_loader: str | None = None
        self.draws = 0  # batches drawn from every loader
        self._in_epoch = False
        self.returns: Any = None  # the epoch-level return values' tracer (accelify_verify_returns.py)
        self._step_group: dict[str, Any] | None = None  # the process group as the last step event wrote it
        self._paths: dict[str, str | None] = {}
        self._file = open(self.prefix + ".jsonl", "w", encoding="utf-8", buffering=1)
        self._stack = open(self.prefix + ".stack", "w", encoding="utf-8")

    @property
    def in_epoch(self) -> bool:
        """A batch was drawn and its loader's epoch has not ended: what is printed, logged or returned now is a
        per-step value (see on_line); the return tracer is off meanwhile."""
        return self._in_epoch

    @in_epoch.setter
    def in_epoch(self, inside: bool) -> None:
        if inside != self._in_epoch:
            self._in_epoch = inside
            if self.returns is not None:
                self.returns.epoch(inside)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.write({"event": "start", "pid": os.getpid(), "ppid": os.getppid(), "rank": self.rank})
        faulthandler.register(STACK_SIGNAL, file=self._stack, all_threads=True, chain=False)
        os.register_at_fork(after_in_child=self._forked)
        atexit.register(self._at_exit)
        previous_hook = sys.excepthook

        def excepthook(kind: Any, value: Any, traceback: Any) -> None:
            if self.active:
                share = None  # the share held when it was raised (the loop's generator has let go of it since)
                if self.exact is not None:
                    share = self.exact.share or (self.exact.last_share if self.in_epoch else None)
                self.write({"event": "error", "error": f"{kind.__name__}: {value}", "site": self._raised(traceback),
                            "share": list(share) if share else None})
            previous_hook(kind, value, traceback)

        sys.excepthook = excepthook
        import accelify_verify_logged
        from accelify_verify_stdout import install

        install(self.on_line, lambda: self.active)
        trackers = accelify_verify_logged.install(self)
        random.seed(self.seed)
        waiting: dict[str, Callable[[ModuleType], None]] = {}
        for name, callback in (("numpy", self._seed_numpy), ("torch", self._patch_torch), *trackers().items()):
            callback = self._reporting(callback)
            if name in sys.modules:
                callback(sys.modules[name])
            else:
                waiting[name] = callback
        if waiting:
            from accelify_verify_patches import AfterImport  # see _patch_torch

            sys.meta_path.insert(0, AfterImport(waiting))

    def _reporting(self, callback: Callable[[ModuleType], None]) -> Callable[[ModuleType], None]:
        """``callback`` that records its own failure instead of breaking the script's imports."""

        def run(module: ModuleType) -> None:
            try:
                callback(module)
            except Exception as error:
                import traceback

                self.write({"event": "hook_error", "error": f"{type(error).__name__}: {error}",
                            "traceback": traceback.format_exc()})

        return run

    def _forked(self) -> None:
        self.active = False  # a forked child (a DataLoader worker) is not the process being verified
        if self.returns is not None:
            self.returns.stop()  # forked while tracing (a loader's __iter__ starts its workers): its work runs untraced

    def _at_exit(self) -> None:
        if self.returns is not None:
            self.returns.stop()  # nothing returns at epoch level any more: the interpreter's teardown runs untraced
        if self.active:
            self.write({"event": "exit", "steps": self.steps, "backwards": self.backwards})

    def write(self, event: dict[str, Any]) -> None:
        event["time"] = time.time()
        with self.lock:
            self._file.write(json.dumps(event) + "\n")

    def stop(self, why: str = "steps") -> None:
        """End the process at a limit (``why``): flush everything, wait for the other processes of the group to get
        there too, exit 0 without running the script further."""
        self.write({"event": "stop", "steps": self.steps, "why": why})
        self._meet_peers()
        for stream in (self._file, sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os._exit(0)

    def _meet_peers(self) -> None:
        """Wait (at most ``PEER_WAIT`` s) until every process of the group stopped, on the group's store (the
        launcher's TCP store, not a collective): no process leaves while another may still read the last
        all-reduce from its sockets."""
        dist = self.torch.distributed
        try:
            if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() < 2:
                return
            from datetime import timedelta

            store = dist.distributed_c10d._get_default_store()
            key = f"accelify_verify/stop/{self.steps}"
            if int(store.add(key, 1)) >= dist.get_world_size():
                store.set(key + "/all", "1")
            store.wait([key + "/all"], timedelta(seconds=PEER_WAIT))
        except Exception:  # a peer that never stops (it hangs elsewhere), or a store we cannot reach: leave
            pass

    # -- seeding and patching ----------------------------------------------------------------------------------
    def _seed_numpy(self, numpy: ModuleType) -> None:
        try:
            numpy.random.seed(self.seed)
        except Exception:  # a numpy without the legacy API: nothing of ours to seed
            pass

    def _patch_torch(self, torch: ModuleType) -> None:
        from torch.utils.weak import WeakIdKeyDictionary

        # this module's folder is on sys.path in the script's process (PYTHONPATH, or the fork server's child)
        from accelify_verify_patches import batches_per_epoch, leading_size, patch_torch

        import accelify_verify_sandbox

        accelify_verify_sandbox.patch_torch(torch)
        torch.manual_seed(self.seed)
        self.torch = torch
        self.owner: Any = WeakIdKeyDictionary()  # parameter -> index of the DDP wrapper that holds it
        self.wrappers: Any = WeakIdKeyDictionary()  # DDP wrapper -> {"index", "forward_calls", "module"}
        self.optimizers: Any = WeakIdKeyDictionary()  # optimizer -> index, in order of first step
        # optimizers that ever stepped: one a finished training function dropped (gone from the weak dictionary)
        # still counts, so the next one gets a new index (the original's and the conversion's then agree)
        self.optimizers_seen = 0
        self.site_objects: dict[str, Any] = {}  # iteration site -> WeakIdKeyDictionary(loader -> ordinal)
        self.batches_per_epoch, self.leading_size = batches_per_epoch, leading_size
        patch_torch(torch, self)
        from accelify_verify_returns import Returns

        self.returns = Returns(self)  # traces from the end of the first loader epoch on (see its module)
        self.names: Any = WeakIdKeyDictionary()  # object -> its variable name in the script (None: not found)
        self.models: Any = WeakIdKeyDictionary()  # optimizer -> name of the model holding its first parameter
        if self.exact_asked:
            import accelify_verify_draws
            import accelify_verify_exact as exact

            from accelify_verify_patches import AfterImport

            self.exact = exact.ExactMode(self)
            accelify_verify_draws.patch_torch(torch, self.exact)
            patch_runtime = self._reporting(lambda module: exact.patch_runtime(module, self.exact))
            name = "accelify.runtime.prepare"
            if name in sys.modules:
                patch_runtime(sys.modules[name])
            else:
                sys.meta_path.insert(0, AfterImport({name: patch_runtime}))

    # -- events ------------------------------------------------------------------------------------------------
    def on_backward(self, tensors: Any) -> float:
        """Record a backward; the factor its gradient must be scaled by (exact mode: N for a loss summed over a
        share of the batch, else 1)."""
        torch = self.torch
        loss = tensors
        if isinstance(tensors, (list, tuple)) and len(tensors) == 1:
            loss = tensors[0]
        value: float | None = None
        shape: list[int] | None = None
        if isinstance(loss, torch.Tensor):
            shape = list(loss.shape)
            if loss.numel() == 1:
                value = float(loss.detach().double().item())
        with self.lock:
            self.backwards += 1
            if self.last_loader is not None:
                self.loaders[self.last_loader]["training"] = True
            event = {"event": "backward", "n": self.backwards, "loss": value, "shape": shape,
                     "loader": self.last_loader, "after_step": self.steps, "group": self._group()}
        self.write(event)
        if self.exact is not None and value is not None:
            return self.exact.loss_scale(event["n"], value, self._site(sys._getframe(1)))
        return 1.0

    def on_wrapper_forward(self, module: Any) -> None:
        info = self.wrappers.get(module)
        if info is not None:
            info["forward_calls"] += 1

    def on_wrap(self, module: Any) -> None:
        with self.lock:
            index = len(self.wrappers)
            inner = getattr(module, "module", module)
            self.wrappers[module] = {"index": index, "forward_calls": 0, "module": type(inner).__name__}
            for parameter in inner.parameters():
                self.owner[parameter] = index

    def on_line(self, text: str, caller: Any, silent: bool = False, via: str = "print",
                site: str | None = None) -> None:
        """A line printed to stdout (holding a digit; ``silent``: one ``accelerator.print`` would have printed on
        this process, exact mode), or a value logged or returned (``via``): recorded with where and when."""
        from accelify_verify_logged import muted

        if via == "print" and muted():
            return  # a logging handler's output: recorded as logged
        with self.lock:
            event = {"event": "line", "text": text, "site": site or self._site(caller), "in_epoch": self.in_epoch,
                     "backwards": self.backwards, "steps": self.steps, "silent": silent, "via": via}
        self.write(event)

    def on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        from accelify_verify_fingerprint import fingerprint, sparse_fingerprints
        from accelify_verify_names import number

        torch = self.torch
        with self.lock:
            index = self.optimizers.get(optimizer)
            if index is None:
                index = self.optimizers[optimizer] = self.optimizers_seen
                self.optimizers_seen += 1
            self.steps += 1
            params = [p for group in optimizer.param_groups for p in group["params"]]
            n = self.steps
            full = n <= FULL_STEPS or n & (n - 1) == 0 or (self.limit and n >= self.limit)
            budget = max(16, min(VALUES_PER_TENSOR, VALUES_PER_STEP // max(1, len(params)))) if full else SPARSE_VALUES
            event = {
                "event": "step",
                "n": self.steps,
                "optimizer": index,
                "name": self.name_of(optimizer),
                "kind": type(optimizer).__name__,
                "model": self._model_name(optimizer, params),
                "lrs": [number(group.get("lr")) for group in optimizer.param_groups],
                "inexact": self.exact.take_inexact() if self.exact is not None else [],
                "params": [fingerprint(torch, p, budget, True, self.owner) for p in params] if full else
                sparse_fingerprints(torch, params, budget, self.owner),
                "wrappers": sorted((dict(w) for w in self.wrappers.values()), key=lambda w: w["index"]),
                "loaders": {k: {n: v for n, v in info.items() if n not in _LIVE} for k, info in self.loaders.items()},
                "backwards": self.backwards,
            }
            group = self._group()
            if group != self._step_group:  # written when it changes: records.py carries it to the next steps
                event["group"] = self._step_group = group
        self.write(event)
        if self.draws == 0 and self.returns is not None and not self.returns.stopped:
            self.returns.stop()  # no DataLoader feeds the training: no epoch-level function to trace
        if self.limit and self.steps >= self.limit:
            self.stop()
        elif self.epoch_limit and self.steps >= self.backstop():
            self.stop("backstop")

    # -- helpers -----------------------------------------------------------------------------------------------
    def _group(self) -> dict[str, Any]:
        dist = self.torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return {"initialized": False}
        return {"initialized": True, "world_size": dist.get_world_size(), "rank": dist.get_rank(),
                "backend": str(dist.get_backend())}
