"""Launch a function on several local processes from Python: ``notebook_launcher`` and ``debug_launcher``.

Both run ``function(*args)`` on N processes through torch elastic (``elastic_launch``), with the
run settings handed over as ``accelify launch`` does, by the same helper
(:func:`.launch_session.launch_session`: a launch file named by ``ACCELIFY_LAUNCH_CONFIG``, the parent's
environment and signal handlers restored afterwards), and a failure summarised by the same reader
(:func:`.failure_report.summarise_failure`). The ``Accelerator`` must be
created inside ``function``: the launchers refuse to start when this process already holds an
``Accelerator``/``PartialState``, a process group, or (with the fork start method) an initialised
CUDA context, because forked workers would inherit them broken.
(``accelify launch`` itself is in the tool, not here.)
"""

from __future__ import annotations

import multiprocessing
import socket
import sys
import uuid
from typing import Any, Callable, Sequence

from .errors import AccelifyRuntimeError, ConfigurationError
from .failure_report import how_it_ended, summarise_failure
from .launch_session import launch_session, write_launch_file  # noqa: F401  (write_launch_file: its old home)
from .devices import default_device, default_process_count, processes_fit, read_device_facts
from .launch_options import OPTIONS
from .launch_settings import LaunchSettings
from .precision_rules import check_mixed_precision
from .process_group import declared_processes


class WorkerFailedError(AccelifyRuntimeError):
    """A launched worker failed; ``rank`` is the first that did, the message ends with its traceback."""

    def __init__(self, rank: int, exit_code: int, detail: str) -> None:
        self.rank, self.exit_code = rank, exit_code
        how = f" (exit code {exit_code})" if exit_code >= 0 else f": it {how_it_ended(exit_code)}"
        super().__init__(f"process {rank} failed{how}; its error:\n{detail}")


def _accelerator_exists() -> bool:
    """Whether this process already created an Accelerator/PartialState (read from the state module)."""
    state = sys.modules.get(f"{__package__}.state")
    if state is None:  # never imported: nothing was created
        return False
    probe = getattr(state, "is_initialized", None)
    if callable(probe):
        return bool(probe())
    partial = getattr(state, "PartialState", None)
    return bool(getattr(partial, "_shared", None) or getattr(partial, "_shared_state", None))


def _check_parent(start_method: str) -> None:
    import torch
    import torch.distributed as dist

    if _accelerator_exists():
        raise AccelifyRuntimeError(
            "An Accelerator (or PartialState) was already created in this process. To launch several processes, "
            "create the Accelerator only inside the function you pass to notebook_launcher; restart the notebook "
            "(kernel) and make sure no cell creates one."
        )
    if dist.is_available() and dist.is_initialized():
        raise AccelifyRuntimeError(
            "A torch.distributed process group is already initialised in this process; restart the notebook "
            "(kernel) and initialise it only inside the launched function."
        )
    if start_method == "fork" and torch.cuda.is_initialized():
        raise AccelifyRuntimeError(
            "CUDA was already initialised in this process, and forked workers cannot use it. Restart the notebook "
            "(kernel) and make sure no cell runs anything on the GPU (torch.cuda, .cuda(), .to('cuda')) before "
            "notebook_launcher; do that inside the launched function instead."
        )


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _start_method() -> str:
    # fork runs functions defined in a notebook (spawn would need to pickle them by module path).
    return "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"


def _summarise(error: Any) -> WorkerFailedError:
    """The worker that failed first by cause (see :mod:`.failure_report`), with its whole traceback."""
    first = summarise_failure(error.failures)
    return WorkerFailedError(first.rank, first.exit_code, (first.callstack or first.message).rstrip())


def _run(function: Callable[..., Any], args: Sequence[Any], num_processes: int, settings: LaunchSettings,
         port: int, max_restarts: int, monitor_interval: float) -> dict[int, Any]:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError
    from torch.distributed.launcher.api import LaunchConfig, elastic_launch

    start_method = _start_method()
    _check_parent(start_method)
    config = LaunchConfig(
        min_nodes=1, max_nodes=1, nproc_per_node=num_processes, run_id=str(uuid.uuid4()),
        rdzv_backend="static", rdzv_endpoint=f"127.0.0.1:{port}", rdzv_configs={"rank": 0},
        max_restarts=max_restarts, monitor_interval=monitor_interval, start_method=start_method,
    )
    try:
        with launch_session(settings, processes=num_processes):
            return dict(elastic_launch(config, entrypoint=function)(*args))
    except ChildFailedError as error:
        raise _summarise(error) from None


def notebook_launcher(function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int | None = None,
                      mixed_precision: str = "no", use_port: str | int = "29500", master_addr: str = "127.0.0.1",
                      max_restarts: int = 0, monitor_interval: float = 0.1) -> dict[int, Any] | Any:
    """Run ``function(*args)`` on ``num_processes`` local processes (default: one per GPU, else one).

    Create the ``Accelerator`` inside ``function``. With two processes,
    ``notebook_launcher(train, (cfg,), num_processes=2)`` runs ``train(cfg)`` twice, as ranks 0
    and 1 (on CPU with Gloo when there is no GPU), and returns ``{0: result0, 1: result1}``.
    With one process the function runs here and its result is returned as it is; so it does in each process of a
    launch (``accelify launch -n 2 nb.ipynb``: the launch made the processes). ``use_port``
    ``0`` picks a free port. A failing worker raises :class:`WorkerFailedError` naming it.
    """
    if _launched():
        # already one of N launched processes (`accelify launch nb.ipynb`, torchrun): the launch made the processes,
        # so each runs the function here, in the group the launch set up, whatever num_processes says
        return function(*args)
    gpus = read_device_facts().gpu_count
    device = default_device(gpus)  # the GPUs when there are any (like `accelify launch` without --cpu)
    precision = check_mixed_precision(mixed_precision, device, where="notebook_launcher")
    count = default_process_count(device, gpus) if num_processes is None else \
        OPTIONS["num_processes"].validate(num_processes, "notebook_launcher")
    if not processes_fit(count, device, gpus):
        raise ConfigurationError(f"num_processes={count} needs {count} GPUs, but {gpus} are visible; lower it.")
    cpu = device == "cpu"
    if master_addr not in ("127.0.0.1", "localhost"):
        raise ConfigurationError(f"master_addr={master_addr!r}: notebook_launcher runs on this machine only; "
                                 "use `accelify launch --num-machines` for several machines.")
    settings = LaunchSettings(mixed_precision=precision, cpu=True if cpu else None)
    if count == 1:
        return _run_here(function, args, settings)
    port = int(use_port) or _free_port()
    return _run(function, args, count, settings, port, max_restarts, monitor_interval)


def _launched() -> bool:
    """Whether this process is a worker of a launch (a launcher declared more than one process, and this one's rank)."""
    _, world, rank = declared_processes()
    return world > 1 and rank is not None


def _run_here(function: Callable[..., Any], args: Sequence[Any], settings: LaunchSettings) -> Any:
    """One process: call the function in this process, with the settings in place for its Accelerator."""
    with launch_session(settings, restore_all=False):  # variables the function sets stay, as after a call
        return function(*args)


def debug_launcher(function: Callable[..., Any], args: Sequence[Any] = (), num_processes: int = 2) -> dict[int, Any]:
    """Run ``function(*args)`` on ``num_processes`` CPU processes (Gloo), for tests without GPUs.

    With two processes, each call sees ``PartialState().num_processes == 2`` and a CPU device;
    the result is ``{0: result0, 1: result1}``.
    """
    count = OPTIONS["num_processes"].validate(num_processes, "debug_launcher")
    return _run(function, args, count, LaunchSettings(cpu=True), _free_port(), 0, 0.1)
