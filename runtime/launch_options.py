"""The launch options, each stated once: name, type, default, validation, help, and its Hugging Face spelling.

One table, :data:`LAUNCH_OPTIONS`, drives the three places that know the options:

- ``accelify launch``'s command line: a click option for each entry with ``flags`` (plus ``hf_flag``, the
  spelling ``accelerate launch`` uses), of the entry's ``kind``, with its ``help``;
- the config file (:mod:`.config`): each entry with a ``config_key`` (Accelerate's key) is validated by the
  entry's check;
- the launch plan (``accelify/launch/plan.py``): precedence per entry (command line > ``config_key`` in the
  config file > ``ACCELIFY_<env>``/``ACCELERATE_<env>`` > ``default``), each command-line value checked here;
  the entries with ``env`` are also the :class:`~.launch_settings.LaunchSettings` a worker reads.

Every invalid value gets one message, whatever its source: ``<where>: <name>=<value> is not valid; allowed:
<what is>.`` (``--max-restarts=-1`` on the command line, ``max_restarts=-1`` in a config file). The rules that
relate two options are here too, once: :func:`check_machine_rank`. The runtime owns this table (the tool
imports it; the runtime never imports the tool), and it imports neither torch nor click.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Mapping

from .errors import ConfigurationError
from .precision_rules import MIXED_PRECISION_CHOICES

RDZV_BACKENDS = ("static", "c10d")
DISTRIBUTED_TYPES = ("NO", "MULTI_CPU", "MULTI_GPU", "FSDP")
DEFAULT_PORT = 29500  # machine 0's port when several machines meet and nobody chose one
MAX_PORT = 65535
_TRUE = frozenset({"1", "true", "yes", "on"})
_FALSE = frozenset({"0", "false", "no", "off"})


class _Invalid(Exception):
    """Raised by a check: ``allowed`` says what is; ``verb`` how the value failed."""

    def __init__(self, allowed: str, verb: str = "is not valid", message: str | None = None) -> None:
        super().__init__(allowed)
        self.allowed, self.verb, self.message = allowed, verb, message


def parse_bool(raw: Any, where: str, *, empty: bool | None = None) -> bool:
    """``raw`` (a bool, or 1/0, true/false, yes/no, on/off in any case) as a bool.

    ``empty`` is what an empty string means (environment variables set to ""); None makes it an
    error, as in config files. ``where`` names the value in the error, e.g. ``"cfg.yaml: use_cpu"``.
    """
    if isinstance(raw, bool):
        return raw
    text = str(raw).strip().lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    if text == "" and empty is not None:
        return empty
    raise ConfigurationError(f"{where}={raw!r} is not valid; allowed: true or false (1/0, yes/no, on/off).")


def _whole(low: int, high: int | None = None) -> Callable[[Any], int]:
    def check(value: Any) -> int:
        if isinstance(value, str) and value.strip().lstrip("-").isdigit():
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int) or value < low or (high is not None and value > high):
            raise _Invalid(f"a whole number >= {low}" + (f" and <= {high}" if high is not None else ""))
        return value
    return check


def _boolean(value: Any) -> bool:
    try:
        return parse_bool(value, "")
    except ConfigurationError:
        raise _Invalid("true or false (1/0, yes/no, on/off)") from None


def _choice(choices: tuple[str, ...], fold: Callable[[str], str], hint: str = "") -> Callable[[Any], str]:
    def check(value: Any) -> str:
        text = fold(str(getattr(value, "value", value)).strip())
        if text not in choices:
            raise _Invalid(", ".join(choices) + hint, verb="is not supported")
        return text
    return check


def _host(value: Any) -> str:
    if not isinstance(value, (str, int)) or isinstance(value, bool) or not str(value).strip():
        raise _Invalid("a host name or IP address")
    return str(value).strip()


def _gpu_ids(value: Any) -> str:
    text = ",".join(str(v) for v in value) if isinstance(value, (list, tuple)) else str(value).strip()
    if text.lower() == "all":
        return "all"
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts or not all(p.isdigit() for p in parts) or len(set(parts)) != len(parts):
        raise _Invalid('"all" or distinct GPU indices such as "0,1"')
    return ",".join(parts)


def _seconds(value: Any) -> float:
    try:
        number = float(value)
    except (TypeError, ValueError):
        number = -1.0
    if isinstance(value, bool) or number <= 0:
        raise _Invalid("a number of seconds > 0")
    return number


def _mapping(value: Any) -> dict[str, Any]:
    if not isinstance(value, Mapping):
        raise _Invalid("a mapping", message=f"must be a mapping of options, got {type(value).__name__}")
    return dict(value)


@dataclass(frozen=True)
class LaunchOption:
    """One launch option. ``kind`` is its command-line type: ``"int"``, ``"float"``, ``"str"``, ``"flag"``,
    ``"choice"`` (of ``choices``) or ``"mapping"`` (config file only)."""

    name: str  # the LaunchOptions field, and the LaunchSettings field for options with ``env``
    kind: str
    check: Callable[[Any], Any]  # the value, normalised, or _Invalid
    help: str
    default: Any = None  # None: nobody chose; the plan decides (e.g. one process per visible GPU)
    choices: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()  # accelify's spellings; empty: not on the command line
    hf_flag: str | None = None  # Hugging Face Accelerate's spelling on the command line
    config_key: str | None = None  # the key in a config file (Accelerate's name); None: command line only
    env: str | None = None  # ACCELIFY_<env> / ACCELERATE_<env> set it too, and the workers receive it

    def validate(self, value: Any, where: str, label: str | None = None) -> Any:
        """``value`` checked and normalised, or ``ConfigurationError("<where>: <label>=<value> is not valid; ...")``.

        ``label`` is how the source spells the option (``--max-restarts`` on the command line); by default
        the config key, else the name.
        """
        try:
            return self.check(value)
        except _Invalid as bad:
            subject = f"{where}: {label or self.config_key or self.name}"
            if bad.message:
                raise ConfigurationError(f"{subject} {bad.message}.") from None
            raise ConfigurationError(f"{subject}={value!r} {bad.verb}; allowed: {bad.allowed}.") from None

    @property
    def cli_flags(self) -> tuple[str, ...]:
        """Every spelling on the command line: accelify's, then Hugging Face's."""
        return self.flags + ((self.hf_flag,) if self.hf_flag and self.hf_flag not in self.flags else ())


def _flag(name: str, *short: str) -> tuple[str, ...]:
    return ("--" + name.replace("_", "-"), *short)


LAUNCH_OPTIONS: tuple[LaunchOption, ...] = (
    LaunchOption("num_processes", "int", _whole(1), "Processes in total, over all machines (default: one per "
                 "visible GPU, else 1).", flags=_flag("num_processes", "-n"), hf_flag="--num_processes",
                 config_key="num_processes"),
    LaunchOption("num_machines", "int", _whole(1), "Machines taking part.", default=1,
                 flags=_flag("num_machines"), hf_flag="--num_machines", config_key="num_machines"),
    LaunchOption("machine_rank", "int", _whole(0), "This machine's rank, 0 to N-1.", default=0,
                 flags=_flag("machine_rank"), hf_flag="--machine_rank", config_key="machine_rank"),
    LaunchOption("main_process_ip", "str", _host, "Address of machine 0.", flags=_flag("main_process_ip"),
                 hf_flag="--main_process_ip", config_key="main_process_ip"),
    LaunchOption("main_process_port", "int", _whole(0, MAX_PORT),
                 f"Port on machine 0 (0: pick a free one; one machine only; several machines: {DEFAULT_PORT}).",
                 flags=_flag("main_process_port"), hf_flag="--main_process_port", config_key="main_process_port"),
    LaunchOption("cpu", "flag", _boolean, "Run on CPU processes (Gloo), even with GPUs.", flags=("--cpu",),
                 hf_flag="--cpu", config_key="use_cpu", env="USE_CPU"),
    LaunchOption("multi_gpu", "flag", _boolean, "Distributed on GPUs (an error without GPUs).",
                 flags=_flag("multi_gpu"), hf_flag="--multi_gpu"),
    LaunchOption("gpu_ids", "str", _gpu_ids, 'GPUs to use: "all" or indices such as 0,1.', default="all",
                 flags=_flag("gpu_ids"), hf_flag="--gpu_ids", config_key="gpu_ids"),
    LaunchOption("mixed_precision", "choice", _choice(MIXED_PRECISION_CHOICES, str.lower),
                 "Mixed precision for the Accelerator.", default="no", choices=MIXED_PRECISION_CHOICES,
                 flags=_flag("mixed_precision"), hf_flag="--mixed_precision", config_key="mixed_precision",
                 env="MIXED_PRECISION"),
    LaunchOption("gradient_accumulation_steps", "int", _whole(1), "Gradient accumulation steps for the "
                 "Accelerator.", flags=_flag("gradient_accumulation_steps"), hf_flag="--gradient_accumulation_steps",
                 config_key="gradient_accumulation_steps", env="GRADIENT_ACCUMULATION_STEPS"),
    LaunchOption("debug", "flag", _boolean, "Debug mode: check collective shapes.", flags=("--debug",),
                 hf_flag="--debug", config_key="debug", env="DEBUG_MODE"),
    LaunchOption("max_restarts", "int", _whole(0), "Restart the worker group up to N times after a failure.",
                 default=0, flags=_flag("max_restarts"), hf_flag="--max_restarts", config_key="max_restarts"),
    LaunchOption("monitor_interval", "float", _seconds, "Seconds between checks of the workers' health.",
                 flags=_flag("monitor_interval"), hf_flag="--monitor_interval", config_key="monitor_interval"),
    LaunchOption("rdzv_backend", "choice", _choice(RDZV_BACKENDS, str.lower),
                 "Rendezvous between machines (default static).", default="static", choices=RDZV_BACKENDS,
                 flags=_flag("rdzv_backend"), hf_flag="--rdzv_backend", config_key="rdzv_backend"),
    LaunchOption("use_fsdp", "flag", _boolean, "Shard the model with FSDP2.", flags=_flag("use_fsdp"),
                 hf_flag="--use_fsdp", config_key="use_fsdp", env="USE_FSDP"),
    # config file only
    LaunchOption("distributed_type", "choice", _choice(DISTRIBUTED_TYPES, str.upper),
                 "How the processes train together (FSDP implies use_fsdp, MULTI_CPU use_cpu).",
                 choices=DISTRIBUTED_TYPES, config_key="distributed_type"),
    LaunchOption("fsdp_config", "mapping", _mapping, "FSDP plugin options (Hugging Face's fsdp_* keys accepted).",
                 config_key="fsdp_config"),
    LaunchOption("compute_environment", "choice", _choice(
        ("LOCAL_MACHINE",), str, " (launch on each machine yourself with --num-machines/--machine-rank)"),
        "Where the processes run: this machine (start each machine's launcher yourself).",
        choices=("LOCAL_MACHINE",), config_key="compute_environment"),
)
OPTIONS: Mapping[str, LaunchOption] = {option.name: option for option in LAUNCH_OPTIONS}
BY_CONFIG_KEY: Mapping[str, LaunchOption] = {o.config_key: o for o in LAUNCH_OPTIONS if o.config_key}
COMMAND_LINE: tuple[LaunchOption, ...] = tuple(o for o in LAUNCH_OPTIONS if o.flags)
SETTINGS: tuple[LaunchOption, ...] = tuple(o for o in LAUNCH_OPTIONS if o.env)  # what the workers receive


def check_accumulation_steps(value: Any, where: str) -> int:
    """``gradient_accumulation_steps``, checked the one way every entry point checks it (a whole number >= 1)."""
    return OPTIONS["gradient_accumulation_steps"].validate(value, where)


def check_machine_rank(rank: int, machines: int, where: str) -> int:
    """``machine_rank`` must name one of the ``machines``: 0 to ``machines - 1``."""
    if not 0 <= rank < machines:
        raise ConfigurationError(
            f"{where}: machine_rank={rank} is not valid with num_machines={machines}; use 0 to {machines - 1}."
        )
    return rank
