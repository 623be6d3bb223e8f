"""Which devices a launch uses, and which device, backend and data transfer each process uses.

Every choice the runtime and the launchers make from the device situation is a pure function here, of a small
frozen description of the machine (:class:`DeviceFacts`: is CUDA usable, how many GPUs are visible, which
process-group backends this torch has) and of plain arguments (local rank, ``cpu``, the GPU ids a launch
asked for). :func:`read_device_facts` (and :func:`read_gpu` for one GPU's own properties) is the one place
that asks torch for the facts; the process state, the process group, ``notebook_launcher``, the launch plan
and ``accelify env`` call it and hand the facts to these functions, which the tests call with plain inputs.

The mixed-precision decisions (may this device run bf16? is a ``GradScaler`` created?) are
:mod:`.precision_rules`'; which errors the batch-size finder treats as out of memory is
:func:`.memory.is_out_of_memory` (a function of the exception).

Nothing here imports torch at module level, and only :func:`read_gpu` initialises CUDA: a launcher never does.
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import ConfigurationError, DistributedSetupError

NCCL_WITH_GLOO = "cpu:gloo,cuda:nccl"  # NCCL for CUDA tensors, Gloo for the CPU ones (object collectives)


@dataclass(frozen=True)
class DeviceFacts:
    """What this machine offers a process, as torch reports it (see :func:`read_device_facts`).

    A machine with two GPUs and a CUDA build of torch reads as
    ``DeviceFacts(cuda_available=True, gpu_count=2, nccl_available=True, gloo_available=True)``.
    """

    cuda_available: bool = False
    gpu_count: int = 0  # GPUs visible to this process (after CUDA_VISIBLE_DEVICES)
    nccl_available: bool = False
    gloo_available: bool = True
    mps_available: bool = False


@dataclass(frozen=True)
class GpuFacts:
    """One GPU's own properties (reading them initialises CUDA: training processes and ``accelify env`` only)."""

    index: int
    name: str
    total_memory: int  # bytes
    bf16: bool  # torch.cuda.is_bf16_supported() on this GPU


def read_device_facts() -> DeviceFacts:
    """The facts, from torch; does not initialise CUDA (a launcher calls it before forking its workers)."""
    import torch
    import torch.distributed as dist

    count = torch.cuda.device_count()
    cuda = bool(count) and torch.cuda.is_available()
    distributed = dist.is_available()
    mps = getattr(torch.backends, "mps", None)
    return DeviceFacts(
        cuda_available=cuda,
        gpu_count=count if cuda else 0,
        nccl_available=distributed and dist.is_nccl_available(),
        gloo_available=distributed and dist.is_gloo_available(),
        mps_available=bool(mps is not None and mps.is_available()),
    )


def read_gpu(index: int) -> GpuFacts:
    """GPU ``index``'s name, memory and bfloat16 support (initialises CUDA)."""
    import torch

    props = torch.cuda.get_device_properties(index)
    with torch.cuda.device(index):
        bf16 = bool(torch.cuda.is_bf16_supported())
    return GpuFacts(index=index, name=props.name, total_memory=int(props.total_memory), bf16=bf16)


# ------------------------------------------------------------------------------------------------
# What a launch uses (the launch plan, notebook_launcher, write_basic_config, the questionnaire).


def default_device(gpu_count: int) -> str:
    """The device a launch uses when nobody chose one: ``"cuda"`` when a GPU is visible, else ``"cpu"``."""
    return "cuda" if gpu_count > 0 else "cpu"


def default_process_count(device: str, gpu_count: int) -> int:
    """Processes per machine when nobody chose: one per (selected) GPU on ``"cuda"``, one on ``"cpu"``."""
    return max(gpu_count, 1) if device == "cuda" else 1


def processes_fit(per_machine: int, device: str, gpu_count: int) -> bool:
    """Whether ``per_machine`` processes can run: on ``"cuda"`` each needs its own GPU; on ``"cpu"`` any number."""
    return device != "cuda" or per_machine <= gpu_count


def selected_gpus(gpu_ids: str, gpu_count: int, where: str) -> tuple[int, ...] | None:
    """The GPUs ``--gpu-ids`` selects, as indices among the ``gpu_count`` visible ones; None for ``"all"``.

    ``gpu_ids`` is already checked for form (``"all"`` or distinct indices, see :mod:`.launch_options`);
    here an index must exist: ``selected_gpus("0,5", 2, "command line")`` raises ``ConfigurationError``.
    """
    if gpu_ids.strip().lower() == "all":
        return None
    ids = tuple(int(part) for part in gpu_ids.split(",") if part.strip())
    missing = [i for i in ids if not 0 <= i < gpu_count]
    if missing:
        raise ConfigurationError(
            f"{where}: GPU {', '.join(map(str, missing))} does not exist; this machine has {gpu_count} visible "
            f"GPU(s){f' (0 to {gpu_count - 1})' if gpu_count else ''}. Use existing ids or --cpu."
        )
    return ids


def visible_devices(gpu_ids: tuple[int, ...], launcher_visible: str | None) -> str:
    """``CUDA_VISIBLE_DEVICES`` for the workers of ``--gpu-ids``: the ids count among the GPUs the launcher sees.

    With ``CUDA_VISIBLE_DEVICES=4,5,6,7`` set for the launcher, ``--gpu-ids 1,3`` gives the workers ``"5,7"``
    (each worker then sees two GPUs, cuda:0 and cuda:1); without it, ``"1,3"``.
    """
    already = [d.strip() for d in (launcher_visible or "").split(",") if d.strip()]
    return ",".join(already[i] if i < len(already) else str(i) for i in gpu_ids)


# ------------------------------------------------------------------------------------------------
# What each training process uses (the process state, the process group, the data loaders).


def uses_cuda(facts: DeviceFacts, cpu: bool) -> bool:
    """Whether a process trains on CUDA: a GPU is usable and ``cpu`` was not asked for."""
    return not cpu and facts.cuda_available and facts.gpu_count > 0


def process_device(facts: DeviceFacts, *, cpu: bool, local_rank: int, world_size: int) -> tuple[str, int | None]:
    """The device of the process with ``local_rank``: ``("cuda", local_rank)``, ``("mps", None)`` or ``("cpu", None)``.

    One GPU per process, by local rank (torchrun's convention, which ``CUDA_VISIBLE_DEVICES`` narrows before
    the process starts). Apple's MPS only for a single process (it has no collectives). A local rank past the
    visible GPUs is a ``DistributedSetupError``: two processes never silently share a GPU.
    """
    if uses_cuda(facts, cpu):
        if local_rank >= facts.gpu_count:
            raise DistributedSetupError(
                f"Local rank {local_rank} needs GPU {local_rank}, but only {facts.gpu_count} are visible; "
                f"start at most {facts.gpu_count} processes per machine or pass cpu=True."
            )
        return "cuda", local_rank
    if not cpu and world_size == 1 and facts.mps_available:
        return "mps", None
    return "cpu", None


def process_group_backend(facts: DeviceFacts, *, cpu: bool, requested: str | None = None) -> str:
    """The ``torch.distributed`` backend to join with: the one asked for (``InitProcessGroupKwargs(backend=...)``),
    else NCCL for CUDA tensors with Gloo for CPU ones on GPUs, else Gloo.

    Without NCCL in this torch build GPU processes use Gloo (slower, but every collective accelify uses works);
    a build with no usable backend for the device is a ``DistributedSetupError``.
    """
    if requested:
        return requested
    if uses_cuda(facts, cpu) and facts.nccl_available:
        return NCCL_WITH_GLOO if facts.gloo_available else "nccl"
    if facts.gloo_available:
        return "gloo"
    raise DistributedSetupError(
        "This torch build has no Gloo backend" + (" and no NCCL" if uses_cuda(facts, cpu) else "")
        + ", so processes cannot join a group on this device; install a torch build with torch.distributed "
        "(the standard Linux and macOS wheels have Gloo), or pass InitProcessGroupKwargs(backend=...)."
    )


def loader_transfer(device_type: str | None, pin_memory: bool, non_blocking: bool) -> tuple[bool, bool]:
    """``(pin_memory, non_blocking)`` for a prepared loader whose batches go to ``device_type`` (None: left where
    they are).

    Pinning only speeds up copies from the CPU to a GPU: on a CPU run it is dropped (torch would warn every
    epoch). A non-blocking copy is only asynchronous from pinned memory, so it is used only with pinning, on CUDA.

    >>> loader_transfer("cuda", True, True), loader_transfer("cpu", True, True), loader_transfer("cuda", False, True)
    ((True, True), (False, False), (False, False))
    """
    pin = bool(pin_memory) and device_type != "cpu"
    return pin, bool(non_blocking) and pin and device_type == "cuda"
