"""Where this process sits in the job, and joining the job's process group.

Environment variables are read here and nowhere else: :class:`ProcessInfo` is built from what
``torch.distributed.run`` (or ``srun`` / ``mpirun``) sets. :func:`init_process_group` joins the
group (NCCL plus Gloo when CUDA is usable, Gloo otherwise: :func:`.devices.process_group_backend`) or
raises :class:`DistributedSetupError` saying what is missing: a process never silently trains alone. ``state.PartialState`` calls these once.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Mapping, NamedTuple

import torch

from .devices import process_group_backend, read_device_facts, uses_cuda
from .errors import ConfigurationError, DistributedSetupError


def _env_int(env: Mapping[str, str], names: tuple[str, ...], default: int | None) -> int | None:
    for name in names:
        raw = env.get(name)
        if raw not in (None, ""):
            try:
                return int(raw)  # type: ignore[arg-type]
            except ValueError:
                raise ConfigurationError(f"{name}={raw!r} is not a whole number; fix or unset it.") from None
    return default


@dataclass(frozen=True)
class ProcessInfo:
    """This process's place in the job, as the launcher described it.

    With two processes on one machine started by ``torchrun --nproc-per-node 2``, process 1 sees
    ``ProcessInfo(rank=1, world_size=2, local_rank=1, local_world_size=2, node_rank=0, ...)``.
    """

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    local_world_size: int = 1
    node_rank: int = 0
    master_addr: str | None = None
    master_port: int | None = None

    @classmethod
    def from_environ(cls, environ: Mapping[str, str] | None = None) -> "ProcessInfo":
        """Read torchrun's variables (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK``...), else srun's or mpirun's."""
        env = os.environ if environ is None else environ
        found = _launcher_values(env)
        if found is None:
            return cls()
        source, world, rank, local_rank, local_world, node = found
        if world < 1:
            raise DistributedSetupError(f"{source} set a world size of {world}; it must be at least 1.")
        if rank is None:
            if world > 1:
                raise DistributedSetupError(
                    f"The world size is {world} but this process has no rank (RANK is unset); "
                    "start the script with `accelify launch` or `torchrun`, which set both."
                )
            rank = 0
        if not 0 <= rank < world:
            raise DistributedSetupError(f"Rank {rank} is outside the world of {world} processes set by {source}.")
        local_rank = rank if local_rank is None else local_rank
        local_world = local_world or world
        node = rank // local_world if node is None else node
        port = _env_int(env, ("MASTER_PORT",), None)
        return cls(rank, world, local_rank, local_world, node, env.get("MASTER_ADDR") or None, port)


def _world(env: Mapping[str, str], names: tuple[str, ...]) -> int:
    value = _env_int(env, names, 1)
    return 1 if value is None else value


class _Declared(NamedTuple):
    """What a launcher set, unvalidated (``None``: not set)."""

    launcher: str
    world_size: int
    rank: int | None
    local_rank: int | None
    local_world_size: int | None
    node_rank: int | None


def _launcher_values(env: Mapping[str, str]) -> _Declared | None:
    """The variables of torchrun, else srun, else mpirun, as set (no consistency checks); None without a launcher."""
    if "WORLD_SIZE" in env or "RANK" in env:
        world, rank = _world(env, ("WORLD_SIZE",)), _env_int(env, ("RANK",), None)
        return _Declared("torchrun", world, rank, _env_int(env, ("LOCAL_RANK",), rank),
                         _env_int(env, ("LOCAL_WORLD_SIZE",), world), _env_int(env, ("GROUP_RANK", "NODE_RANK"), None))
    if "SLURM_STEP_NUM_TASKS" in env:  # inside an `srun` step, not a bare sbatch script
        return _Declared("srun", _world(env, ("SLURM_STEP_NUM_TASKS",)), _env_int(env, ("SLURM_PROCID",), None),
                         _env_int(env, ("SLURM_LOCALID",), 0),
                         _env_int(env, ("SLURM_STEP_TASKS_PER_NODE", "SLURM_NTASKS_PER_NODE"), None),
                         _env_int(env, ("SLURM_NODEID",), None))
    if "OMPI_COMM_WORLD_SIZE" in env or "PMI_SIZE" in env:
        return _Declared("mpirun", _world(env, ("OMPI_COMM_WORLD_SIZE", "PMI_SIZE")),
                         _env_int(env, ("OMPI_COMM_WORLD_RANK", "PMI_RANK"), None),
                         _env_int(env, ("OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"), 0),
                         _env_int(env, ("OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"), None), None)
    return None


def declared_processes(environ: Mapping[str, str] | None = None) -> tuple[str, int, int | None]:
    """(launcher variable, world size, rank) the launcher declared, before any validation.

    For code that must not guess when no process group exists yet: with ``torchrun --nproc-per-node 2``
    it is ``("WORLD_SIZE", 2, <rank>)``; without a launcher ``("WORLD_SIZE", 1, None)``.
    """
    found = _launcher_values(os.environ if environ is None else environ)
    if found is None:
        return "WORLD_SIZE", 1, None
    variable = {"torchrun": "WORLD_SIZE", "srun": "SLURM_STEP_NUM_TASKS", "mpirun": "OMPI_COMM_WORLD_SIZE/PMI_SIZE"}
    return variable[found.launcher], found.world_size, found.rank


def init_process_group(info: ProcessInfo, cpu: bool, backend: str | None, timeout: timedelta | None) -> str:
    """Join the job's process group (or adopt one the script created) and return its backend."""
    import torch.distributed as dist

    if not dist.is_available():
        raise DistributedSetupError(
            f"WORLD_SIZE={info.world_size} but this torch build has no torch.distributed; install a build with it."
        )
    if dist.is_initialized():
        if dist.get_world_size() != info.world_size or dist.get_rank() != info.rank:
            raise DistributedSetupError(
                f"A process group already exists with rank {dist.get_rank()} of {dist.get_world_size()}, but the "
                f"environment says rank {info.rank} of {info.world_size}; create it from the same environment."
            )
        return str(dist.get_backend())
    if not info.master_addr or info.master_port is None:
        missing = [n for n, v in (("MASTER_ADDR", info.master_addr), ("MASTER_PORT", info.master_port)) if v in (None, "")]
        raise DistributedSetupError(
            f"WORLD_SIZE={info.world_size} asks for {info.world_size} processes, but {' and '.join(missing)} "
            "is not set, so this process cannot find its peers. Start the script with `accelify launch -n N` "
            "or `torchrun --nproc-per-node N`, or unset WORLD_SIZE to run one process."
        )
    _require_numpy(info)
    facts = read_device_facts()
    backend = process_group_backend(facts, cpu=cpu, requested=backend)
    if uses_cuda(facts, cpu):
        torch.cuda.set_device(info.local_rank)
    kwargs: dict[str, Any] = {"backend": backend, "rank": info.rank, "world_size": info.world_size}
    if timeout is not None:
        kwargs["timeout"] = timeout
    try:
        dist.init_process_group(**kwargs)
    except (RuntimeError, ValueError) as exc:  # DistStoreError / DistNetworkError are RuntimeErrors
        raise DistributedSetupError(
            f"Process {info.rank} of {info.world_size} could not join the process group at "
            f"{info.master_addr}:{info.master_port} (backend {backend}): {str(exc).rstrip('.')}. Check that all "
            f"{info.world_size} processes were started and can reach that address; it does not train alone."
        ) from exc
    return backend


def _require_numpy(info: ProcessInfo) -> None:
    """torch.distributed sends Python objects as byte tensors that it turns back into bytes with numpy."""
    try:
        import numpy  # noqa: F401
    except ImportError as exc:
        raise DistributedSetupError(
            f"Process {info.rank} of {info.world_size}: numpy is not installed, and torch.distributed needs it to "
            "send Python objects between processes (broadcast_object_list / all_gather_object, which share the "
            "data loaders' seeds, checkpoint folders and gather_object results). Install it: `pip install numpy` "
            "(accelify declares it as a dependency; it is missing only after `pip install --no-deps`)."
        ) from exc


def from_existing_group(info: ProcessInfo) -> ProcessInfo:
    """A process group the script created itself without torchrun's variables (e.g. ``tcp://`` init)."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1:
        rank, world = dist.get_rank(), dist.get_world_size()
        return ProcessInfo(rank=rank, world_size=world, local_rank=rank, local_world_size=world)
    return info
