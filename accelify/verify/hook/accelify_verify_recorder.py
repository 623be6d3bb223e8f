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
              name of the model holding its first parameter, a fingerprint of every parameter of that
              optimizer (all values up to a per-tensor budget, evenly spaced ones beyond, and the exact sum,
              with up to ``GRADS_PER_TENSOR`` gradient values; after step ``FULL_STEPS``, except at powers of
              two and at the step limit, ``SPARSE_VALUES`` values and the sum only: verify compares parameters
              step by step for the first 64 steps, and recording every value of every step cost more than the
              training), in exact mode why the step is not comparable,
              whether each is owned by a DistributedDataParallel wrapper or sharded (DTensor), the wrappers and
              how often their forward ran, the process group joined, and every iterated data loader
              (iteration site, batches per epoch, samples in its first batch, batches drawn, the batches of each
              of its first ``EPOCHS_KEPT`` epochs and how many epochs ended, whether a backward followed its
              batches)
``scheduler`` (exact mode) a prepared scheduler's ``step()`` call: its name, optimizer steps and epochs before it
``batch``     (exact mode) the sum of every number of one of the first batches of a prepared loader, per epoch
``line``      a line the script printed to stdout holding a digit (``accelify_verify_stdout.py``): its text, the
              script's ``file:line`` that printed it, whether a DataLoader epoch was in progress (a batch drawn and
              its epoch not ended: a per-step value), the backwards and optimizer steps taken before it
``error``     the script raised an exception it did not catch (written by ``sys.excepthook``)
``stop``      the step limit was reached: the process ends with exit code 0 right after writing it
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

ENV_RECORD = "ACCELIFY_VERIFY_RECORD"
ENV_STEPS = "ACCELIFY_VERIFY_STEPS"
ENV_SEED = "ACCELIFY_VERIFY_SEED"
ENV_PROCESSES = "ACCELIFY_VERIFY_PROCESSES"
ENV_ROOT = "ACCELIFY_VERIFY_ROOT"
ENV_EXACT = "ACCELIFY_VERIFY_EXACT"

STACK_SIGNAL = signal.SIGUSR1
VALUES_PER_TENSOR = 4096  # fingerprint budget per parameter tensor ...
VALUES_PER_STEP = 1 << 18  # ... and per step, shared between the tensors of a large model
GRADS_PER_TENSOR = 1024  # gradient values recorded per parameter tensor (evenly spaced)
FULL_STEPS = 64  # steps fingerprinted in full (verify compares parameters step by step this far) ...
EPOCHS_KEPT = 4  # batches drawn per epoch, kept for this many first epochs of each loader
SPARSE_VALUES = 4  # ... later steps, except powers of two and the step limit: this many values per tensor, no grads
PEER_WAIT = 30.0  # seconds a process at the step limit waits for the others of its group

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
    )
    _recorder.start()
    return True


class _Recorder:
    """The per-process recording state; all torch patches call into the one instance."""

    def __init__(self, *, prefix: str, rank: int, steps: int, seed: int, root: str, exact: bool = False) -> None:
        self.prefix = f"{prefix}.rank{rank}.pid{os.getpid()}"
        self.rank = rank
        self.limit = steps
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
        self.in_epoch = False  # a batch was drawn and its loader's epoch has not ended (see on_line)
        self._paths: dict[str, str | None] = {}
        self._file = open(self.prefix + ".jsonl", "w", encoding="utf-8", buffering=1)
        self._stack = open(self.prefix + ".stack", "w", encoding="utf-8")

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self) -> None:
        self.write({"event": "start", "pid": os.getpid(), "ppid": os.getppid(), "rank": self.rank})
        faulthandler.register(STACK_SIGNAL, file=self._stack, all_threads=True, chain=False)
        os.register_at_fork(after_in_child=self._forked)
        atexit.register(self._at_exit)
        previous_hook = sys.excepthook

        def excepthook(kind: Any, value: Any, traceback: Any) -> None:
            if self.active:
                self.write({"event": "error", "error": f"{kind.__name__}: {value}"})
            previous_hook(kind, value, traceback)

        sys.excepthook = excepthook
        from accelify_verify_stdout import install

        install(self.on_line, lambda: self.active)
        random.seed(self.seed)
        waiting: dict[str, Callable[[ModuleType], None]] = {}
        for name, callback in (("numpy", self._seed_numpy), ("torch", self._patch_torch)):
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

    def _at_exit(self) -> None:
        if self.active:
            self.write({"event": "exit", "steps": self.steps, "backwards": self.backwards})

    def write(self, event: dict[str, Any]) -> None:
        event["time"] = time.time()
        with self.lock:
            self._file.write(json.dumps(event) + "\n")

    def stop(self) -> None:
        """End the process at the step limit: flush everything, wait for the other processes of the group to get
        there too, exit 0 without running the script further."""
        self.write({"event": "stop", "steps": self.steps})
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
        self.site_objects: dict[str, Any] = {}  # iteration site -> WeakIdKeyDictionary(loader -> ordinal)
        self.batches_per_epoch, self.leading_size = batches_per_epoch, leading_size
        patch_torch(torch, self)
        self.names: Any = WeakIdKeyDictionary()  # object -> its variable name in the script (None: not found)
        self.models: Any = WeakIdKeyDictionary()  # optimizer -> name of the model holding its first parameter
        if self.exact_asked:
            import accelify_verify_exact as exact

            from accelify_verify_patches import AfterImport

            self.exact = exact.ExactMode(self)
            exact.patch_torch(torch, self.exact)
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

    def on_iter(self, loader: Any, caller: Any) -> str:
        """The key of ``loader`` iterated from frame ``caller``: ``file:line#k``, the k-th loader seen there."""
        site = self._site(caller)
        with self.lock:
            objects = self.site_objects.get(site)
            if objects is None:
                from torch.utils.weak import WeakIdKeyDictionary

                objects = self.site_objects[site] = WeakIdKeyDictionary()
            if loader not in objects:
                objects[loader] = len(objects)
            key = f"{site}#{objects[loader]}"
            info = self.loaders.get(key)
            if info is None:
                info = self.loaders[key] = {"site": site, "class": type(loader).__name__, "len": None,
                                            "iterations": 0, "draws": 0, "epoch_draws": [], "epochs": 0, "current": 0,
                                            "batch": None, "training": False}
            info["iterations"] += 1
            info["current"] = 0
            info["split"] = getattr(loader, "_accelify_verify_split", 1)  # exact mode: a share of each batch
            info["len"] = self.batches_per_epoch(loader)
        return key

    def on_draw(self, key: str, batch: Any) -> None:
        with self.lock:
            info = self.loaders.get(key)
            if info is not None:
                info["draws"] += 1
                info["current"] += 1
                if info["batch"] is None:
                    rows = self.leading_size(batch, self.torch.Tensor)
                    split = info.get("split", 1)
                    info["batch"] = -(-rows // split) if rows is not None and split > 1 else rows
            self.last_loader = key
            self.in_epoch = True

    def on_epoch_end(self, key: str) -> None:
        with self.lock:
            info = self.loaders.get(key)
            if info is not None:
                info["epochs"] += 1
                if len(info["epoch_draws"]) < EPOCHS_KEPT:  # written with every step: kept short
                    info["epoch_draws"].append(info["current"])
                info["current"] = 0
            self.in_epoch = False

    def on_line(self, text: str, caller: Any, silent: bool = False) -> None:
        """A line printed to stdout (holding a digit; ``silent``: one ``accelerator.print`` would have printed on
        this process, exact mode): recorded with where and when it was printed."""
        with self.lock:
            event = {"event": "line", "text": text, "site": self._site(caller), "in_epoch": self.in_epoch,
                     "backwards": self.backwards, "steps": self.steps, "silent": silent}
        self.write(event)

    def on_step(self, optimizer: Any, args: Any, kwargs: Any) -> None:
        if not self.active:
            return
        from accelify_verify_names import number
        with self.lock:
            index = self.optimizers.get(optimizer)
            if index is None:
                index = self.optimizers[optimizer] = len(self.optimizers)
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
                "model": self._model_name(optimizer, params),
                "lrs": [number(group.get("lr")) for group in optimizer.param_groups],
                "inexact": self.exact.take_inexact() if self.exact is not None else [],
                "params": [self._parameter(p, budget, full) for p in params],
                "group": self._group(),
                "wrappers": sorted((dict(w) for w in self.wrappers.values()), key=lambda w: w["index"]),
                "loaders": {k: {n: v for n, v in info.items() if n != "current"} for k, info in self.loaders.items()},
                "backwards": self.backwards,
            }
        self.write(event)
        if self.limit and self.steps >= self.limit:
            self.stop()

    # -- helpers -----------------------------------------------------------------------------------------------
    def _parameter(self, parameter: Any, budget: int, grads_too: bool = True) -> dict[str, Any]:
        torch = self.torch
        tensor = parameter.detach()
        sharded = type(tensor).__name__ == "DTensor"
        if sharded:
            tensor = tensor.to_local()
        flat = tensor.reshape(-1)
        count = flat.numel()
        if count > budget:
            index = torch.linspace(0, count - 1, budget, device=flat.device).round().long()
            sample = flat.index_select(0, index)
        else:
            sample = flat
        grads = ""
        if grads_too and parameter.grad is not None and type(parameter.grad).__name__ != "DTensor":
            grad = parameter.grad.detach().reshape(-1)
            if grad.numel() > GRADS_PER_TENSOR:
                grad = grad.index_select(0, torch.linspace(0, count - 1, GRADS_PER_TENSOR,
                                                           device=grad.device).round().long())
            grads = _packed(grad)
        owner = "sharded" if sharded else self.owner.get(parameter)
        return {
            "shape": list(parameter.shape),
            "numel": count,
            "sum": float(flat.double().sum().item()) if count else 0.0,
            "values": _packed(sample),
            "sampled": count > budget,
            "grad": parameter.grad is not None,
            "grads": grads,
            "wrapper": owner,
        }

    def _group(self) -> dict[str, Any]:
        dist = self.torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            return {"initialized": False}
        return {"initialized": True, "world_size": dist.get_world_size(), "rank": dist.get_rank(),
                "backend": str(dist.get_backend())}

    def training_epochs(self) -> int:
        """Epochs run to their end so far by the loaders whose batches fed a backward."""
        with self.lock:
            return sum(info["epochs"] for info in self.loaders.values() if info["training"])

    def name_of(self, target: Any) -> str | None:
        """The name a frame of the script binds to ``target`` (or to a wrapper of it), looked up once per object."""
        from accelify_verify_names import bound_name

        try:
            if target in self.names:
                return self.names[target]
        except TypeError:
            return None
        found = self.names[target] = bound_name(sys._getframe(1), target, self._relative)
        return found

    def _model_name(self, optimizer: Any, params: list[Any]) -> str | None:
        """The name of the module (or its wrapper) in the script holding the optimizer's first parameter."""
        from accelify_verify_names import model_name

        if optimizer not in self.models:
            self.models[optimizer] = model_name(sys._getframe(1), params[0], self._relative, self.torch.nn.Module) \
                if params else None
        return self.models[optimizer]

    def _relative(self, filename: str) -> str | None:
        relative = self._paths.get(filename, "")
        if relative == "":
            real = os.path.realpath(filename) if not filename.startswith("<") else ""
            relative = self._paths[filename] = real[len(self.root):] if real.startswith(self.root) else None
        return relative

    def _site(self, frame: Any) -> str:
        """``file:line`` of the innermost frame in the script's folder (the loop that iterates the loader)."""
        while frame is not None:
            relative = self._relative(frame.f_code.co_filename)
            if relative:
                return f"{relative}:{frame.f_lineno}"
            frame = frame.f_back
        return "<outside the script>"


def _packed(tensor: Any) -> str:
    """A tensor's values as float64 bytes (this machine's order) in base64: JSON floats cost more than the training
    step when written for thousands of values a step; ``records.py`` unpacks them."""
    import base64

    data = tensor.detach().double().cpu().contiguous()
    try:
        raw = data.numpy().tobytes()
    except Exception:  # torch without numpy
        from array import array

        raw = array("d", data.tolist()).tobytes()
    return base64.b64encode(raw).decode("ascii")
