"""Who am I: the shared process state and process-level coordination.

:class:`~.process_group.ProcessInfo` (the only reader of the launcher's environment variables) is
built once, by the first :class:`PartialState`. With ``WORLD_SIZE > 1`` the first
:class:`PartialState` initialises the process group (NCCL plus Gloo when CUDA is usable, Gloo
otherwise) or raises :class:`DistributedSetupError`: a process never silently trains alone.
(Hugging Face Accelerate 1.15 run by torchrun on a CPU-only machine reports one process per rank
unless ``cpu=True``; accelify does not.)
"""

from __future__ import annotations

import atexit
import builtins
import contextlib
import enum
import functools
import gc
from datetime import timedelta
from typing import Any, Callable, Iterator, TypeVar

import torch

from .debug import debug_checkpoint, debug_enabled, set_debug_mode
from .errors import ConfigurationError, DistributedSetupError
from .devices import process_device, process_group_backend, read_device_facts
from .gradient_state import GradientState  # noqa: F401  (re-exported: accelify.runtime.state.GradientState)
from .process_group import ProcessInfo, from_existing_group, init_process_group
from .process_split import split_inputs as _split

F = TypeVar("F", bound=Callable[..., Any])


class DistributedType(str, enum.Enum):
    """How the processes train together (compare with ``accelerator.distributed_type``).

    accelify reports ``NO``, ``MULTI_CPU``, ``MULTI_GPU`` or ``FSDP``. The other members are Hugging
    Face Accelerate's, kept so that scripts comparing against them (``distributed_type in
    (DistributedType.MULTI_GPU, DistributedType.MULTI_NPU)``) run; accelify never reports them.
    """

    NO = "NO"
    MULTI_CPU = "MULTI_CPU"
    MULTI_GPU = "MULTI_GPU"
    FSDP = "FSDP"
    # Hugging Face Accelerate's other kinds: never reported here
    MULTI_NPU = "MULTI_NPU"
    MULTI_MLU = "MULTI_MLU"
    MULTI_SDAA = "MULTI_SDAA"
    MULTI_MUSA = "MULTI_MUSA"
    MULTI_XPU = "MULTI_XPU"
    MULTI_HPU = "MULTI_HPU"
    MULTI_NEURON = "MULTI_NEURON"
    DEEPSPEED = "DEEPSPEED"
    XLA = "XLA"
    MEGATRON_LM = "MEGATRON_LM"


# The process-wide record every PartialState reads: the process group is process-global.
# Keys: "info" (ProcessInfo), "cpu" (bool, the first creator's choice), "backend" (str | None).
# Empty until the first PartialState; see is_initialized(). Debug mode, process-wide too, is
# :mod:`.debug`'s flag (set here: the state imports the debug checks, never the other way round).
_SHARED: dict[str, Any] = {}
_CLOSED = "closed"  # the "backend" once destroy_process_group() ran


def _close_at_exit() -> None:
    """At interpreter exit, close the group this runtime opened (unless the script already did).

    torch 2.13 + Gloo abort a process at exit ("terminate called without an active exception") when
    a DDP model's reducer outlives the group or goes down with it in the interpreter's teardown.
    Measured on a loaded machine with a plain-torch script whose DDP model is a module global:
    destroying the group under the live model aborted 13 of 40 runs, leaving both to the teardown
    2 of 30, dropping the live models' reducers first and then destroying 0 of 30. So: collect
    garbage (a DDP model in a reference cycle), drop the reducer of every DDP model still alive (the
    script is over; nothing calls backward again), then destroy the group.
    """
    import sys

    import torch.distributed as dist

    if _SHARED.get("backend") in (None, _CLOSED) or not (dist.is_available() and dist.is_initialized()):
        return
    gc.collect()
    ddp_module = sys.modules.get("torch.nn.parallel.distributed")
    ddp_type = getattr(ddp_module, "DistributedDataParallel", None)
    if ddp_type is not None:
        for obj in gc.get_objects():
            try:
                # type(), not isinstance(): isinstance reads obj.__class__, which runs the
                # __getattribute__ of objects such as torch.distributed.reduce_op (a FutureWarning)
                if issubclass(type(obj), ddp_type) and "reducer" in vars(obj):
                    del obj.reducer
            except Exception:  # an odd proxy object: not a DDP model
                continue
        gc.collect()
    dist.destroy_process_group()
    _SHARED["backend"] = _CLOSED


def is_initialized() -> bool:
    """True once a ``PartialState`` or ``Accelerator`` has been created in this process."""
    return bool(_SHARED)


class PartialState:
    """Process information and process-level coordination, without any training settings.

    All instances share one process-wide record (rank, world size, the process group); the only
    per-instance setting is ``cpu``, which picks the device. Creating one is cheap.

    Example (with two processes)::

        state = PartialState()
        state.process_index    # 0 on the first process, 1 on the second
        state.num_processes    # 2
        state.distributed_type # DistributedType.MULTI_CPU without GPUs
    """

    def __init__(self, cpu: bool | None = None, *, backend: str | None = None, timeout: timedelta | None = None) -> None:
        if not _SHARED:
            from .launch_settings import load_launch_settings

            settings = load_launch_settings()
            info = ProcessInfo.from_environ()
            if info.world_size == 1:
                info = from_existing_group(info)
            default_cpu = bool(settings.cpu) if cpu is None else cpu
            _SHARED.update(info=info, cpu=default_cpu, backend=None)
            set_debug_mode(bool(settings.debug))
        self._cpu: bool = _SHARED["cpu"] if cpu is None else bool(cpu)
        self._init_kwargs = (backend, timeout)
        info: ProcessInfo = _SHARED["info"]
        self.info = info
        if info.world_size > 1:
            try:
                self._ensure_group()
            except DistributedSetupError:
                if _SHARED.get("backend") is None:
                    _SHARED.clear()  # the next attempt reads the environment afresh
                raise
        self.device: torch.device = self._pick_device()

    def _ensure_group(self) -> None:
        backend = _SHARED.get("backend")
        if backend == _CLOSED:
            return  # destroy_process_group() closed it; never silently rejoin (the peers may be gone)
        if backend is None:
            import torch.distributed as dist

            adopted = dist.is_available() and dist.is_initialized()  # the script's own group: its to close
            _SHARED["backend"] = init_process_group(self.info, self._cpu, *self._init_kwargs)
            if not adopted:
                atexit.register(_close_at_exit)
            if debug_enabled():
                from .debug_exchange import watch_exits

                watch_exits()  # after _close_at_exit: atexit runs it first, while the group is still up
        elif "nccl" in process_group_backend(read_device_facts(), cpu=self._cpu) and "nccl" not in str(backend):
            raise DistributedSetupError(
                f"The process group was created for the CPU (backend {_SHARED['backend']}) by an earlier "
                "Accelerator(cpu=True); this one wants the GPU. Use the same `cpu` setting for every Accelerator."
            )

    def _pick_device(self) -> torch.device:
        kind, index = process_device(read_device_facts(), cpu=self._cpu, local_rank=self.info.local_rank,
                                     world_size=self.info.world_size)
        return torch.device(kind, index) if index is not None else torch.device(kind)

    # -- who am I ---------------------------------------------------------------------------
    @property
    def process_index(self) -> int:
        return self.info.rank

    @property
    def local_process_index(self) -> int:
        return self.info.local_rank

    @property
    def num_processes(self) -> int:
        return self.info.world_size

    @property
    def use_distributed(self) -> bool:
        return self.info.world_size > 1

    @property
    def distributed_type(self) -> DistributedType:
        if self.info.world_size == 1:
            return DistributedType.NO
        return DistributedType.MULTI_GPU if self.device.type == "cuda" else DistributedType.MULTI_CPU

    @property
    def backend(self) -> str | None:
        backend = _SHARED.get("backend")
        return None if backend == _CLOSED else backend

    @property
    def debug(self) -> bool:
        """Debug mode for collectives (process-wide; the latest ``Accelerator(debug=...)`` sets it)."""
        return debug_enabled()

    @debug.setter
    def debug(self, value: bool) -> None:
        set_debug_mode(value)
        if value and self.use_distributed and _SHARED.get("backend") not in (None, _CLOSED):
            from .debug_exchange import watch_exits

            watch_exits()  # a process leaving early is then named to the others at once

    @property
    def is_main_process(self) -> bool:
        return self.info.rank == 0

    @property
    def is_local_main_process(self) -> bool:
        return self.info.local_rank == 0

    @property
    def is_last_process(self) -> bool:
        return self.info.rank == self.info.world_size - 1

    def __repr__(self) -> str:
        return (
            f"{type(self).__name__}(process {self.process_index} of {self.num_processes}, "
            f"local {self.local_process_index}, device {self.device}, {self.distributed_type.value})"
        )

    # -- coordination -----------------------------------------------------------------------
    def wait_for_everyone(self) -> None:
        """Block until every process reaches this line (no-op with one process).

        With two processes, a process that gets here first waits for the other.
        """
        if not self.use_distributed:
            return
        import torch.distributed as dist

        if _SHARED.get("backend") == _CLOSED:
            raise DistributedSetupError(
                "wait_for_everyone() after destroy_process_group(): the process group is closed; destroy it last."
            )
        if self.debug:
            debug_checkpoint("wait_for_everyone")
        if self.device.type == "cuda":
            dist.barrier(device_ids=[self.device.index])
        else:
            dist.barrier()

    def destroy_process_group(self) -> None:
        """Leave the process group for good; delete prepared DDP models first (their destructors use the group)."""
        import torch.distributed as dist

        if self.use_distributed and dist.is_available() and dist.is_initialized():
            dist.destroy_process_group()
            _SHARED["backend"] = _CLOSED

    @contextlib.contextmanager
    def _first(self, is_first: bool) -> Iterator[None]:
        if not is_first:
            self.wait_for_everyone()
        yield
        if is_first:
            self.wait_for_everyone()

    def main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Run the block on the main process first, then on the others (e.g. download, then read).

        With two processes, process 1 enters the block only after process 0 has left it.
        """
        return self._first(self.is_main_process)

    def local_main_process_first(self) -> contextlib.AbstractContextManager[None]:
        """Like :meth:`main_process_first`, once per machine (local rank 0 first)."""
        return self._first(self.is_local_main_process)

    def print(self, *args: Any, **kwargs: Any) -> None:
        """``print`` on the local main process only: once per machine."""
        if self.is_local_main_process:
            builtins.print(*args, **kwargs)

    def _only_if(self, condition: Callable[[], bool], function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            return function(*args, **kwargs) if condition() else None

        return wrapper  # type: ignore[return-value]

    def on_main_process(self, function: F) -> F:
        """Decorator: run ``function`` on the main process only (others get ``None``)."""
        return self._only_if(lambda: self.is_main_process, function)

    def on_local_main_process(self, function: F) -> F:
        """Decorator: run ``function`` on each machine's local main process only."""
        return self._only_if(lambda: self.is_local_main_process, function)

    def on_last_process(self, function: F) -> F:
        """Decorator: run ``function`` on the last process only."""
        return self._only_if(lambda: self.is_last_process, function)

    def on_process(self, function: F | None = None, process_index: int | None = None) -> Any:
        """Decorator: run on process ``process_index`` only: ``@state.on_process(process_index=1)``."""
        if function is None:
            return functools.partial(self.on_process, process_index=process_index)
        if process_index is None:
            raise ConfigurationError("on_process needs process_index=<int>, e.g. @accelerator.on_process(process_index=1).")
        return self._only_if(lambda: self.process_index == process_index, function)

    def on_local_process(self, function: F | None = None, local_process_index: int | None = None) -> Any:
        """Decorator: run on local process ``local_process_index`` of each machine only."""
        if function is None:
            return functools.partial(self.on_local_process, local_process_index=local_process_index)
        if local_process_index is None:
            raise ConfigurationError("on_local_process needs local_process_index=<int>.")
        return self._only_if(lambda: self.local_process_index == local_process_index, function)

    @contextlib.contextmanager
    def split_between_processes(self, inputs: Any, apply_padding: bool = False) -> Iterator[Any]:
        """Give each process its contiguous share of ``inputs`` (list, tuple, dict of those, tensor).

        With two processes, ``with state.split_between_processes(["a", "b", "c"]) as part:`` gives
        process 0 ``["a", "b"]`` and process 1 ``["c"]`` (``["c", "c"]`` with ``apply_padding=True``,
        so every process gets the same length). A dict splits each of its values.
        """
        yield _split(inputs, self.num_processes, self.process_index, apply_padding)


class AcceleratorState(PartialState):
    """One ``Accelerator``'s view of the process: :class:`PartialState` plus its training settings.

    Unlike Hugging Face Accelerate's singleton, each ``Accelerator`` has its own, so two instances
    with different ``mixed_precision`` coexist in one process (the process group stays shared).
    """

    def __init__(
        self,
        cpu: bool | None = None,
        *,
        mixed_precision: str = "no",
        use_fsdp: bool = False,
        backend: str | None = None,
        timeout: timedelta | None = None,
    ) -> None:
        super().__init__(cpu, backend=backend, timeout=timeout)
        self.mixed_precision = mixed_precision
        self.use_fsdp = use_fsdp

    @property
    def distributed_type(self) -> DistributedType:
        if self.use_fsdp:
            return DistributedType.FSDP
        return super().distributed_type
