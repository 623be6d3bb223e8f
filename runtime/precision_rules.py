"""Mixed precision, stated once: the choices, the one precision -> dtype table, and which device runs which.

Every entry point applies these (``accelify launch``, ``accelify config``/``test``, ``notebook_launcher``,
``write_basic_config`` and ``Accelerator``); none restates them. The decisions are pure functions of plain
facts, so the tests call them with plain inputs: :func:`precision_allowed` (may this device run this
precision?) and :func:`grad_scaler_plan` (is a ``GradScaler`` created, with which settings?).
:func:`check_mixed_precision` is the one caller that reads those facts from torch (autocast's support, the
GPU's bfloat16 support) and hands them over.

torch is imported only inside the functions that ask it something: a launcher imports this module freely.
"""

from __future__ import annotations

from typing import Any, Mapping

from .errors import ConfigurationError

MIXED_PRECISION_CHOICES = ("no", "fp16", "bf16")

# The one precision -> torch dtype table (torch's dtype names, looked up once torch is loaded). "no" computes in
# the parameters' own dtype. Wherever a dtype is named by text (an FSDP mixed-precision policy), the table's keys
# and its values are the accepted spellings: "bf16" and "bfloat16" alike.
PRECISION_DTYPES: Mapping[str, str] = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def dtype_name(text: str) -> str | None:
    """The torch dtype name for a precision or dtype spelling: ``"bf16"`` and ``"bfloat16"`` -> ``"bfloat16"``;
    ``"no"`` -> None. Raises ``ConfigurationError`` listing the spellings for anything else."""
    key = str(text).strip().lower()
    if key == "no":
        return None
    if key in PRECISION_DTYPES:
        return PRECISION_DTYPES[key]
    if key in PRECISION_DTYPES.values():
        return key
    known = ["no", *(f"{k}/{v}" for k, v in PRECISION_DTYPES.items())]
    raise ConfigurationError(f"dtype {text!r} is not known; use one of {', '.join(known)}.")


def parse_mixed_precision(raw: Any, where: str = "") -> str:
    """``raw`` (any case; ``None`` or an enum member accepted) as one of :data:`MIXED_PRECISION_CHOICES`.

    ``where`` prefixes the error, e.g. ``"ACCELIFY_MIXED_PRECISION"``: ``parse_mixed_precision("FP16")``
    is ``"fp16"``; ``parse_mixed_precision("fp8")`` raises ``ConfigurationError`` listing the choices.
    """
    text = "no" if raw is None else str(getattr(raw, "value", raw)).strip().lower()
    if text not in MIXED_PRECISION_CHOICES:
        prefix = f"{where}: " if where else ""
        raise ConfigurationError(
            f"{prefix}mixed_precision={raw!r} is not valid; use one of {', '.join(MIXED_PRECISION_CHOICES)}."
        )
    return text


def precision_allowed(precision: str, device_type: str, *, autocast_runs: bool, gpu_bf16: bool | None = None,
                      gpu_name: str = "this GPU", torch_version: str = "", where: str = "") -> str:
    """The mixed-precision rule as a pure function: return ``precision`` when ``device_type`` can run it.

    The rule: ``fp16`` and ``bf16`` are allowed on every device whose ``torch.autocast`` runs that dtype
    (``autocast_runs``), the CPU included (torch >= 2.4 autocasts both there, and the fp16 ``GradScaler``
    works there); a GPU without bfloat16 support (``gpu_bf16=False``) refuses ``bf16``; ``gpu_bf16=None``
    means not probed (a launcher never touches the GPUs). Anything else is a ``ConfigurationError`` that
    says what to use instead: a run is never silently fp32 under an fp16 or bf16 label.

    >>> precision_allowed("bf16", "cuda", autocast_runs=True, gpu_bf16=True)
    'bf16'
    """
    if precision == "no":
        return precision
    prefix = f"{where}: " if where else ""
    if device_type == "cuda" and precision == "bf16" and gpu_bf16 is False:
        raise ConfigurationError(
            f"{prefix}mixed_precision='bf16' needs a GPU with bfloat16 support; {gpu_name} has none. "
            "Use mixed_precision='fp16'."
        )
    if not autocast_runs:
        advice = ("Use mixed_precision='bf16' or 'no' on the CPU, or run on a GPU." if device_type == "cpu"
                  else "Use mixed_precision='no' or a device that supports it.")
        raise ConfigurationError(
            f"{prefix}mixed_precision={precision!r} is not supported on the {device_type} device by torch "
            f"{torch_version} (autocast would silently run in fp32). {advice}"
        )
    return precision


def check_mixed_precision(value: Any, device: Any, where: str = "") -> str:
    """The mixed-precision rule, with the facts read from torch: returns ``"no"``, ``"fp16"`` or ``"bf16"``.

    ``device`` is a ``torch.device`` in a training process (its GPU's own bfloat16 support is probed
    too), or ``"cpu"``/``"cuda"`` in a launcher, which never initialises CUDA: each process then checks
    its GPU when its ``Accelerator`` is created. ``where`` names the value's source in the error
    (``"command line"``, a config file, an environment variable). See :func:`precision_allowed`.
    """
    text = parse_mixed_precision(value, where)
    if text == "no" or (isinstance(device, str) and device != "cpu"):
        return text  # a launcher does not touch the GPUs: each process checks its own when it starts
    import torch  # only when a precision is asked for

    device_type = device if isinstance(device, str) else device.type
    gpu_bf16, gpu_name = None, "this GPU"
    if device_type == "cuda" and text == "bf16":
        from .devices import read_gpu

        gpu = read_gpu(device.index if device.index is not None else torch.cuda.current_device())
        gpu_bf16, gpu_name = gpu.bf16, gpu.name
    return precision_allowed(text, device_type, autocast_runs=autocast_supports(device_type, text),
                             gpu_bf16=gpu_bf16, gpu_name=gpu_name, torch_version=torch.__version__, where=where)


def autocast_supports(device_type: str, precision: str) -> bool:
    """Whether ``torch.autocast(device_type, dtype)`` really runs ``precision`` (torch warns and disables
    itself for a dtype the device does not support). Does not initialise CUDA for fp16."""
    import warnings

    import torch

    dtype = getattr(torch, PRECISION_DTYPES[precision])
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ctx = torch.autocast(device_type, dtype=dtype)
    return bool(getattr(ctx, "_enabled", True)) and not any("not supported" in str(w.message) for w in caught)


def mixed_precision_choices(device_type: str) -> tuple[str, ...]:
    """The choices :func:`check_mixed_precision` accepts on ``"cpu"`` or ``"cuda"`` (what to offer a person)."""
    offered = []
    for choice in MIXED_PRECISION_CHOICES:
        try:
            offered.append(check_mixed_precision(choice, device_type))
        except ConfigurationError:
            continue
    return tuple(offered)


def grad_scaler_plan(mixed_precision: str, device_type: str,
                     options: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """Whether a ``torch.amp.GradScaler`` is created, and its arguments: only for fp16, on the training device,
    with ``GradScalerKwargs``' options (those that differ from the defaults). bf16 and fp32 need none.

    >>> grad_scaler_plan("fp16", "cuda", {"init_scale": 1024.0})
    {'device': 'cuda', 'init_scale': 1024.0}
    >>> grad_scaler_plan("bf16", "cuda") is None
    True
    """
    if mixed_precision != "fp16":
        return None
    return {"device": device_type, **(options or {})}
