"""Resolve ``accelify launch``'s command line over the config file into a :class:`LaunchPlan`.

Precedence for every value: command line > config file > environment (``ACCELIFY_*`` then
``ACCELERATE_*``, see :mod:`accelify.runtime.launch_settings`) > defaults. ``plan.sources`` says which
level each value came from. Impossible requests raise :class:`LaunchError` here, before anything
starts. Nothing here starts a process; :mod:`accelify.launch.run` runs the plan.

Each option's config key, environment name, default and check come from the runtime's table
(:mod:`accelify.runtime.launch_options`), the one that also makes ``accelify launch``'s click options and
validates config files. Defaults (no config, no flags): one process per visible GPU, else one process on
CPU. There is no silent fallback: ``--multi-gpu``/``--gpu-ids`` without GPUs and more processes than GPUs
are errors. The device rules are the runtime's (:mod:`accelify.runtime.devices`: ``default_device``,
``default_process_count``, ``processes_fit``, ``selected_gpus``, ``visible_devices``) and so is the
mixed-precision rule (:mod:`accelify.runtime.precision_rules`), the same ones ``notebook_launcher``,
``accelify config`` and the ``Accelerator`` apply. ``num_processes`` counts processes over all machines,
as in Accelerate.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from accelify.errors import LaunchError
from accelify.runtime.config import UserConfig, find_config_file, load_config
from accelify.runtime.devices import (
    default_device,
    default_process_count,
    processes_fit,
    read_device_facts,
    selected_gpus,
    visible_devices,
)
from accelify.runtime.errors import ConfigurationError
from accelify.runtime.launch_options import DEFAULT_PORT, OPTIONS, check_machine_rank
from accelify.runtime.launch_settings import LAUNCH_CONFIG_VAR, LaunchSettings, load_launch_settings
from accelify.runtime.precision_rules import check_mixed_precision

WORKER_MODULE = "accelify.launch.worker"  # what each process runs (python -m), around the user's script
LAUNCH_ENV_CPU = "ACCELIFY_USE_CPU/ACCELERATE_USE_CPU=0"


@dataclass(frozen=True)
class LaunchOptions:
    """What the command line asked for; ``None`` means "not given".

    One field per command-line entry of :data:`accelify.runtime.launch_options.LAUNCH_OPTIONS` (a test
    keeps them equal), plus the script, its arguments, ``module`` and ``config_file``.
    """

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
    settings: LaunchSettings
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
    """Picks each value by precedence (the option's table entry says where to look) and remembers its source."""

    def __init__(self, config: UserConfig, env_settings: LaunchSettings) -> None:
        self.config, self.env, self.sources = config, env_settings, {}
        self.config_label = f"config file {config.path}" if config.path else "config file"

    def pick(self, name: str, cli: Any, *, config: bool = True, default: Any = None) -> Any:
        """Command line (checked here) > config file (checked when loaded) > environment > ``default``, else the
        option's own default."""
        option = OPTIONS[name]
        if cli is not None:
            self.sources[name] = "command line"
            try:
                return option.validate(cli, "command line", option.flags[0])
            except ConfigurationError as exc:
                raise LaunchError(str(exc)) from None
        candidates = [
            (getattr(self.config, option.config_key, None) if config and option.config_key else None,
             self.config_label),
            (getattr(self.env, name, None) if option.env else None, "environment"),
        ]
        for value, source in candidates:
            if value is not None:
                self.sources[name] = source
                return value
        self.sources[name] = "default"
        return option.default if default is None else default

    def check(self, rule: Callable[[], Any]) -> Any:
        """``rule()``, with a rule's ``ConfigurationError`` (the runtime's) as this tool's ``LaunchError``."""
        try:
            return rule()
        except ConfigurationError as exc:
            raise LaunchError(str(exc)) from None


def _visible_gpus() -> int:
    return read_device_facts().gpu_count


def resolve_plan(options: LaunchOptions, *, environ: Mapping[str, str] | None = None,
                 gpu_count: int | None = None) -> LaunchPlan:
    """Resolve ``options`` over the config file and environment into a validated plan.

    ``gpu_count`` defaults to the number of CUDA devices visible here (tests pass it).
    """
    env = dict(os.environ if environ is None else environ)
    config = load_config(find_config_file(options.config_file, env))
    env.pop(LAUNCH_CONFIG_VAR, None)  # the launcher's own channel is not user configuration
    env_settings = load_launch_settings(env)
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
        use_cpu = bool(config.use_cpu)
        c.sources["cpu"] = c.config_label
        asked = "use_cpu: false" if config.use_cpu is False else "distributed_type: MULTI_GPU"
        reason = f"{asked} ({c.config_label})"
    else:
        use_cpu = c.pick("cpu", None, config=False, default=default_device(gpus) == "cpu")
        reason = f"{LAUNCH_ENV_CPU} (environment)"
    if not use_cpu and gpus == 0:
        raise LaunchError(f"{reason} asks for GPUs, but no CUDA device is visible here; "
                          "run on a GPU machine or use --cpu to run on CPU processes.")
    device = "cpu" if use_cpu else "cuda"

    gpu_ids = None
    if device == "cuda":
        ids_text = c.pick("gpu_ids", options.gpu_ids)
        gpu_ids = c.check(lambda: selected_gpus(str(ids_text), gpus, c.sources["gpu_ids"]))
    available = len(gpu_ids) if gpu_ids is not None else gpus

    machines = c.pick("num_machines", options.num_machines)
    machine_rank = c.pick("machine_rank", options.machine_rank)
    c.check(lambda: check_machine_rank(machine_rank, machines, c.sources["machine_rank"]))
    default_total = default_process_count(device, available) * machines
    total = c.pick("num_processes", options.num_processes, default=default_total)
    if total % machines:
        raise LaunchError(f"num_processes={total} ({c.sources['num_processes']}) must be a positive multiple of "
                          f"num_machines={machines}: it counts processes over all machines.")
    per_machine = total // machines
    if not processes_fit(per_machine, device, available):
        raise LaunchError(f"{per_machine} processes per machine need {per_machine} GPUs, but only {available} "
                          f"{'are selected by gpu_ids' if gpu_ids is not None else 'are visible'}; "
                          "lower --num-processes or use --cpu.")

    precision = c.pick("mixed_precision", options.mixed_precision)
    precision = check_mixed_precision(precision, device, where=c.sources["mixed_precision"])

    rdzv = c.pick("rdzv_backend", options.rdzv_backend)
    ip = c.pick("main_process_ip", options.main_process_ip)
    port = c.pick("main_process_port", options.main_process_port)
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

    max_restarts = c.pick("max_restarts", options.max_restarts)
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
    interval = c.pick("monitor_interval", options.monitor_interval)

    settings = LaunchSettings(
        mixed_precision=precision,
        gradient_accumulation_steps=c.pick("gradient_accumulation_steps", options.gradient_accumulation_steps),
        debug=c.pick("debug", options.debug),
        cpu=True if device == "cpu" else None,
        use_fsdp=c.pick("use_fsdp", options.use_fsdp),
        fsdp_config=dict(config.fsdp_config),
    )
    visible = None
    if gpu_ids is not None:  # ids count among the visible GPUs, so map them through CUDA_VISIBLE_DEVICES
        visible = visible_devices(gpu_ids, env.get("CUDA_VISIBLE_DEVICES"))
    return LaunchPlan(
        script=options.script, script_args=tuple(options.script_args), module=options.module,
        nproc_per_machine=per_machine, num_machines=machines, machine_rank=machine_rank,
        main_process_ip=ip, main_process_port=port, rdzv_backend=rdzv, device=device,
        backend="gloo" if device == "cpu" else "nccl", gpu_ids=gpu_ids, settings=settings,
        max_restarts=max_restarts, monitor_interval=interval, config_path=config.path,
        sources=dict(c.sources), warnings=tuple(warnings), visible_devices=visible,
    )
