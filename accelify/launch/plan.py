"""Resolve ``accelify launch``'s command line over the config file into a :class:`LaunchPlan`.

Precedence for every value: command line > config file > environment (``ACCELIFY_*`` then
``ACCELERATE_*``, see :mod:`accelify.runtime.settings`) > defaults. ``plan.sources`` says which
level each value came from. Impossible requests raise :class:`LaunchError` here, before anything
starts. Nothing here starts a process; :mod:`accelify.launch.run` runs the plan.

Defaults (no config, no flags): one process per visible GPU, else one process on CPU. There is
no silent fallback: ``--multi-gpu``/``--gpu-ids`` without GPUs and more processes than GPUs are
errors. The device rules and the mixed-precision rule are the runtime's
(:mod:`accelify.runtime.settings`: ``default_device``, ``default_process_count``, ``processes_fit``,
``check_mixed_precision``), the same ones ``notebook_launcher``, ``accelify config`` and the
``Accelerator`` apply. ``num_processes`` counts processes over all machines, as in Accelerate.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Mapping

from accelify.errors import LaunchError
from accelify.runtime.config import UserConfig, find_config_file, load_config
from accelify.runtime.settings import (
    LAUNCH_CONFIG_VAR,
    Settings,
    check_mixed_precision,
    default_device,
    default_process_count,
    load_settings,
    processes_fit,
)

DEFAULT_PORT = 29500
WORKER_MODULE = "accelify.launch.worker"  # what each process runs (python -m), around the user's script
LAUNCH_ENV_CPU = "ACCELIFY_USE_CPU/ACCELERATE_USE_CPU=0"


@dataclass(frozen=True)
class LaunchOptions:
    """What the command line asked for; ``None`` means "not given"."""

    script: str
    script_args: tuple[str, ...] = ()
    module: bool = False
    num_processes: int | None = None
    num_machines: int | None = None
    machine_rank: int | None = None
    main_process_ip: str | None = None
    main_process_port: int | None = None
    cpu: bool | None = None
    multi_gpu: bool | None = None
    gpu_ids: str | None = None
    mixed_precision: str | None = None
    gradient_accumulation_steps: int | None = None
    debug: bool | None = None
    config_file: str | None = None
    max_restarts: int | None = None
    monitor_interval: float | None = None
    rdzv_backend: str | None = None
    use_fsdp: bool | None = None


@dataclass(frozen=True)
class LaunchPlan:
    """Everything a launch will do, resolved and validated (inspect it in tests)."""

    script: str
    script_args: tuple[str, ...]
    module: bool
    nproc_per_machine: int
    num_machines: int
    machine_rank: int
    main_process_ip: str
    main_process_port: int | None  # None: a free port is picked (one machine only)
    rdzv_backend: str
    device: str  # "cpu" or "cuda"
    backend: str  # "gloo" or "nccl"
    gpu_ids: tuple[int, ...] | None  # indices among the GPUs visible to the launcher
    settings: Settings
    max_restarts: int
    monitor_interval: float | None
    config_path: str | None
    sources: Mapping[str, str] = field(default_factory=dict)
    warnings: tuple[str, ...] = ()
    visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES for the workers (gpu_ids, mapped)

    @property
    def world_size(self) -> int:
        return self.nproc_per_machine * self.num_machines

    def banner(self) -> str:
        """The one line printed before starting, e.g. ``2 processes x 1 machine, cpu (gloo), ...``."""
        procs = f"{self.nproc_per_machine} process{'es' if self.nproc_per_machine != 1 else ''}"
        machines = f"{self.num_machines} machine{'s' if self.num_machines != 1 else ''}"
        where = f" (machine {self.machine_rank}, {self.world_size} in total)" if self.num_machines > 1 else ""
        device = self.device if self.gpu_ids is None else f"cuda:{','.join(map(str, self.gpu_ids))}"
        backend = self.backend
        if self.device == "cpu" and self.sources.get("cpu") == "default":
            backend += ", no GPU visible"  # say why it runs on CPU when nobody asked for it
        extras = []
        if self.settings.gradient_accumulation_steps:
            extras.append(f"gradient accumulation {self.settings.gradient_accumulation_steps}")
        if self.settings.use_fsdp:
            extras.append("fsdp")
        if self.settings.debug:
            extras.append("debug")
        if self.max_restarts:
            extras.append(f"max restarts {self.max_restarts}")
        tail = "".join(f", {e}" for e in extras)
        return (f"accelify launch: {procs} x {machines}{where}, {device} ({backend}), "
                f"mixed precision {self.settings.mixed_precision or 'no'}{tail}")

    def torchrun_args(self) -> list[str]:
        """The ``torch.distributed.run`` arguments (``python -m torch.distributed.run <these>``)."""
        args = [f"--nproc-per-node={self.nproc_per_machine}", f"--nnodes={self.num_machines}"]
        if self.main_process_port is None:
            args.append("--standalone")
        elif self.rdzv_backend == "static":
            args += ["--rdzv-backend=static", f"--node-rank={self.machine_rank}",
                     f"--master-addr={self.main_process_ip}", f"--master-port={self.main_process_port}"]
        else:
            is_host = "true" if self.machine_rank == 0 else "false"
            args += ["--rdzv-backend=c10d", f"--rdzv-endpoint={self.main_process_ip}:{self.main_process_port}",
                     f"--rdzv-id=accelify-{self.main_process_port}", f"--rdzv-conf=is_host={is_host}"]
        args.append(f"--max-restarts={self.max_restarts}")
        if self.monitor_interval is not None:
            args.append(f"--monitor-interval={self.monitor_interval}")
        # Each worker runs through accelify.launch.worker, which records a failing rank's traceback
        # in torch elastic's error file so the launcher can name the rank and show it.
        args += ["--module", WORKER_MODULE]
        if self.module:
            args.append("-m")
        return [*args, self.script, *self.script_args]

    def worker_env(self, launch_file: str | None = None) -> dict[str, str]:
        """Variables set for the launch (the launcher's torch elastic agent and, through it, the workers).

        The launch file is the one settings channel (omitted when ``launch_file`` is None: the launch
        session sets it); the others are for torch itself.
        """
        env = {LAUNCH_CONFIG_VAR: launch_file} if launch_file is not None else {}
        if self.visible_devices is not None:
            env["CUDA_VISIBLE_DEVICES"] = self.visible_devices
        if self.max_restarts:
            # A fresh c10d store per restart round: the shared agent store keeps the killed workers'
            # addresses, and restarted Gloo/NCCL workers then fail to connect (torch 2.13).
            env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1"
        return env


class _Chooser:
    """Picks each value by precedence and remembers where it came from."""

    def __init__(self, config: UserConfig, env_settings: Settings) -> None:
        self.config, self.env, self.sources = config, env_settings, {}
        self.config_label = f"config file {config.path}" if config.path else "config file"

    def pick(self, name: str, cli: Any, config_key: str | None = None, env_key: str | None = None,
             default: Any = None) -> Any:
        candidates = [
            (cli, "command line"),
            (getattr(self.config, config_key or name, None) if config_key != "" else None, self.config_label),
            (getattr(self.env, env_key, None) if env_key else None, "environment"),
        ]
        for value, source in candidates:
            if value is not None:
                self.sources[name] = source
                return value
        self.sources[name] = "default"
        return default


def _visible_gpus() -> int:
    import torch

    return torch.cuda.device_count()


def _parse_gpu_ids(text: str, gpu_count: int, source: str) -> tuple[int, ...] | None:
    if text.strip().lower() == "all":
        return None
    try:
        ids = tuple(int(p) for p in text.split(",") if p.strip())
    except ValueError:
        raise LaunchError(f"{source}: gpu ids {text!r} are not valid; use \"all\" or indices such as 0,1.") from None
    if not ids or len(set(ids)) != len(ids):
        raise LaunchError(f"{source}: gpu ids {text!r} are not valid; use \"all\" or distinct indices such as 0,1.")
    missing = [i for i in ids if not 0 <= i < gpu_count]
    if missing:
        raise LaunchError(
            f"{source}: GPU {', '.join(map(str, missing))} does not exist; this machine has {gpu_count} visible "
            f"GPU(s){f' (0 to {gpu_count - 1})' if gpu_count else ''}. Use existing ids or --cpu."
        )
    return ids


def resolve_plan(options: LaunchOptions, *, environ: Mapping[str, str] | None = None,
                 gpu_count: int | None = None) -> LaunchPlan:
    """Resolve ``options`` over the config file and environment into a validated plan.

    ``gpu_count`` defaults to the number of CUDA devices visible here (tests pass it).
    """
    env = dict(os.environ if environ is None else environ)
    config = load_config(find_config_file(options.config_file, env))
    env.pop(LAUNCH_CONFIG_VAR, None)  # the launcher's own channel is not user configuration
    env_settings = load_settings(env)
    gpus = _visible_gpus() if gpu_count is None else gpu_count
    c = _Chooser(config, env_settings)

    if options.cpu and options.multi_gpu:
        raise LaunchError("--cpu and --multi-gpu contradict each other; pass one of them.")
    if options.cpu and options.gpu_ids is not None:
        raise LaunchError("--cpu and --gpu-ids contradict each other; pass one of them.")
    gpu_flag = "--multi-gpu" if options.multi_gpu else "--gpu-ids" if options.gpu_ids is not None else None
    if options.cpu or gpu_flag:
        use_cpu = c.pick("cpu", bool(options.cpu))
        reason = gpu_flag or ""
    elif config.use_cpu is not None or config.distributed_type == "MULTI_GPU":
        use_cpu = c.pick("cpu", bool(config.use_cpu))
        c.sources["cpu"] = c.config_label
        asked = "use_cpu: false" if config.use_cpu is False else "distributed_type: MULTI_GPU"
        reason = f"{asked} ({c.config_label})"
    else:
        use_cpu = c.pick("cpu", None, "", "cpu", default=default_device(gpus) == "cpu")
        reason = f"{LAUNCH_ENV_CPU} (environment)"
    if not use_cpu and gpus == 0:
        raise LaunchError(f"{reason} asks for GPUs, but no CUDA device is visible here; "
                          "run on a GPU machine or use --cpu to run on CPU processes.")
    device = "cpu" if use_cpu else "cuda"

    gpu_ids = None
    if device == "cuda":
        ids_text = c.pick("gpu_ids", options.gpu_ids, default="all")
        gpu_ids = _parse_gpu_ids(str(ids_text), gpus, c.sources["gpu_ids"])
    available = len(gpu_ids) if gpu_ids is not None else gpus

    machines = c.pick("num_machines", options.num_machines, default=1)
    machine_rank = c.pick("machine_rank", options.machine_rank, default=0)
    if machines < 1:
        raise LaunchError(f"--num-machines={machines} is not valid; use 1 or more.")
    if not 0 <= machine_rank < machines:
        raise LaunchError(f"machine rank {machine_rank} ({c.sources['machine_rank']}) is not valid with "
                          f"{machines} machine(s); use 0 to {machines - 1}.")
    default_total = default_process_count(device, available) * machines
    total = c.pick("num_processes", options.num_processes, default=default_total)
    if total < 1 or total % machines:
        raise LaunchError(f"num_processes={total} ({c.sources['num_processes']}) must be a positive multiple of "
                          f"num_machines={machines}: it counts processes over all machines.")
    per_machine = total // machines
    if not processes_fit(per_machine, device, available):
        raise LaunchError(f"{per_machine} processes per machine need {per_machine} GPUs, but only {available} "
                          f"{'are selected by gpu_ids' if gpu_ids is not None else 'are visible'}; "
                          "lower --num-processes or use --cpu.")

    precision = c.pick("mixed_precision", options.mixed_precision, env_key="mixed_precision", default="no")
    precision = check_mixed_precision(precision, device, where=c.sources["mixed_precision"])

    rdzv = c.pick("rdzv_backend", options.rdzv_backend, default="static")
    if rdzv not in ("static", "c10d"):
        raise LaunchError(f"--rdzv-backend={rdzv!r} is not supported; use static or c10d.")
    ip = c.pick("main_process_ip", options.main_process_ip, default=None)
    port = c.pick("main_process_port", options.main_process_port, default=None)
    if port is not None and not 0 <= port <= 65535:
        raise LaunchError(f"--main-process-port={port} is not a valid port; use 1 to 65535, or 0 to pick a free one.")
    if machines > 1:
        if not ip:
            raise LaunchError(f"{machines} machines need --main-process-ip: the address of machine 0, "
                              "reachable from every machine.")
        if port == 0:
            raise LaunchError("--main-process-port=0 cannot be used with several machines: the others cannot "
                              f"know the picked port; give the same port on every machine (e.g. {DEFAULT_PORT}).")
        port = DEFAULT_PORT if port is None else port
    else:
        ip = ip or "127.0.0.1"
        port = port or None
        if port is None:
            rdzv = "c10d"  # torch's standalone rendezvous: a c10d store on a free local port
            c.sources["rdzv_backend"] = "standalone (no port given)"

    max_restarts = c.pick("max_restarts", options.max_restarts, default=0)
    if max_restarts < 0:
        raise LaunchError(f"--max-restarts={max_restarts} is not valid; use 0 or more.")
    warnings = list(config.warnings)
    if max_restarts and rdzv == "static":
        # torch's static rendezvous keeps one store across restarts: the restarted workers find the dead
        # workers' addresses in it and cannot connect. c10d with a fresh store per round restarts cleanly.
        if c.sources["rdzv_backend"] == "command line":
            raise LaunchError("--max-restarts needs --rdzv-backend c10d: with static rendezvous torch cannot "
                              "restart the workers (they find the old workers' addresses); drop --rdzv-backend static.")
        warnings.append("--max-restarts: using c10d rendezvous instead of static (static cannot restart workers)")
        rdzv = "c10d"
        c.sources["rdzv_backend"] = "c10d (needed by --max-restarts)"
    interval = c.pick("monitor_interval", options.monitor_interval, default=None)
    if interval is not None and interval <= 0:
        raise LaunchError(f"--monitor-interval={interval} is not valid; use a number of seconds > 0.")

    settings = Settings(
        mixed_precision=precision,
        gradient_accumulation_steps=c.pick("gradient_accumulation_steps", options.gradient_accumulation_steps,
                                           env_key="gradient_accumulation_steps"),
        debug=c.pick("debug", options.debug, env_key="debug"),
        cpu=True if device == "cpu" else None,
        use_fsdp=c.pick("use_fsdp", options.use_fsdp, env_key="use_fsdp"),
        fsdp_config=dict(config.fsdp_config),
    )
    if settings.gradient_accumulation_steps is not None and settings.gradient_accumulation_steps < 1:
        raise LaunchError(f"--gradient-accumulation-steps={settings.gradient_accumulation_steps} is not valid; "
                          "use 1 or more.")
    visible = None
    if gpu_ids is not None:  # ids count among the visible GPUs, so map them through CUDA_VISIBLE_DEVICES
        already = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
        visible = ",".join(already[i] if i < len(already) else str(i) for i in gpu_ids)
    return LaunchPlan(
        script=options.script, script_args=tuple(options.script_args), module=options.module,
        nproc_per_machine=per_machine, num_machines=machines, machine_rank=machine_rank,
        main_process_ip=ip, main_process_port=port, rdzv_backend=rdzv, device=device,
        backend="gloo" if device == "cpu" else "nccl", gpu_ids=gpu_ids, settings=settings,
        max_restarts=max_restarts, monitor_interval=interval, config_path=config.path,
        sources=dict(c.sources), warnings=tuple(warnings), visible_devices=visible,
    )
