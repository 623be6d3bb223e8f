"""Fully sharded data parallel through torch's FSDP2 (``torch.distributed.fsdp.fully_shard``).

``Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(...))`` (or ``accelify launch --use-fsdp``)
makes ``prepare`` call :func:`wrap_model` instead of wrapping in DDP. FSDP2 shards every parameter
into a ``DTensor`` and *replaces the parameter objects*; an optimizer built before wrapping would
keep updating the old, unsharded tensors, so :func:`wrap_model` rebinds the optimizers it is given,
and :func:`rebind_optimizer` rebinds one prepared later (both before any step was taken).

State dicts are full (unsharded) tensors gathered on CPU: on the main process, empty elsewhere.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import torch
from torch import nn

from . import model_io
from .errors import ConfigurationError
from .precision import torch_dtype

WRAP_POLICIES = ("transformer_based_wrap", "size_based_wrap", "no_wrap")
STATE_DICT_TYPES = ("FULL_STATE_DICT",)


@dataclass
class FullyShardedDataParallelPlugin:
    """How ``prepare`` shards models (the FSDP2 subset of Hugging Face's plugin).

    - ``reshard_after_forward``: free gathered parameters after forward (ZeRO-3) or keep them (ZeRO-2).
    - ``auto_wrap_policy``: ``"transformer_based_wrap"`` (shard each module whose class name is in
      ``transformer_cls_names_to_wrap``, default the model's ``_no_split_modules``), ``"size_based_wrap"``
      (each submodule holding >= ``min_num_params`` parameters not yet sharded), ``"no_wrap"`` (the root
      only) or a callable ``module -> bool``. ``None`` picks transformer-based when class names are
      given, size-based when ``min_num_params`` is, else no-wrap.
    - ``cpu_offload``: keep sharded parameters and gradients on CPU (FSDP2 ``CPUOffloadPolicy``).
    - ``mixed_precision_policy``: a ``MixedPrecisionPolicy``, a dtype name (``"bf16"``, ``"fp16"``), or a
      mapping of ``param_dtype``/``reduce_dtype``/``output_dtype`` to dtypes or names.
    - ``state_dict_type``: ``"FULL_STATE_DICT"`` (gathered on the main process; the only kind supported).
    - ``activation_checkpointing``: recompute the wrapped blocks' activations in backward.
    - ``sharding_strategy``: FSDP1's ``"FULL_SHARD"`` / ``"SHARD_GRAD_OP"``, mapped to ``reshard_after_forward``.

    ``from_config`` keeps FSDP1-only keys of a Hugging Face config file (``fsdp_backward_prefetch``,
    ``fsdp_use_orig_params``, ...) in ``extra``: FSDP2 has no such settings, so they do not apply.

    Example (with two processes, each holds half of every weight)::

        accelerator = Accelerator(fsdp_plugin=FullyShardedDataParallelPlugin(min_num_params=1_000))
        model, optimizer = accelerator.prepare(model, optimizer)
    """

    reshard_after_forward: bool = True
    auto_wrap_policy: str | Callable[[nn.Module], bool] | None = None
    transformer_cls_names_to_wrap: Sequence[str] | None = None
    min_num_params: int | None = None
    cpu_offload: bool = False
    mixed_precision_policy: Any = None
    state_dict_type: str = "FULL_STATE_DICT"
    activation_checkpointing: bool = False
    fsdp_version: int = 2
    sharding_strategy: str | None = None
    extra: dict[str, Any] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        if self.sharding_strategy is not None:  # FSDP1's name for the same choice
            strategy = str(getattr(self.sharding_strategy, "name", self.sharding_strategy)).upper()
            if strategy not in ("FULL_SHARD", "SHARD_GRAD_OP", "1", "2"):
                raise ConfigurationError(
                    f"sharding_strategy={self.sharding_strategy!r} is not supported with FSDP2; use FULL_SHARD or "
                    "SHARD_GRAD_OP (or reshard_after_forward=True/False)."
                )
            self.reshard_after_forward = strategy in ("FULL_SHARD", "1")
        if self.fsdp_version != 2:
            raise ConfigurationError(f"fsdp_version={self.fsdp_version} is not supported; accelify shards with FSDP2 (fsdp_version=2).")
        if isinstance(self.transformer_cls_names_to_wrap, str):
            self.transformer_cls_names_to_wrap = [n.strip() for n in self.transformer_cls_names_to_wrap.split(",") if n.strip()]
        if self.auto_wrap_policy is None:
            self.auto_wrap_policy = (
                "transformer_based_wrap" if self.transformer_cls_names_to_wrap
                else "size_based_wrap" if self.min_num_params else "no_wrap"
            )
        if isinstance(self.auto_wrap_policy, str):
            self.auto_wrap_policy = self.auto_wrap_policy.lower().replace("-", "_")
            if self.auto_wrap_policy not in WRAP_POLICIES:
                raise ConfigurationError(
                    f"auto_wrap_policy={self.auto_wrap_policy!r} is not known; use one of {', '.join(WRAP_POLICIES)} or a callable."
                )
        if self.auto_wrap_policy == "size_based_wrap" and not self.min_num_params:
            raise ConfigurationError("auto_wrap_policy='size_based_wrap' needs min_num_params > 0.")
        self.state_dict_type = str(getattr(self.state_dict_type, "name", self.state_dict_type)).upper()
        if self.state_dict_type not in STATE_DICT_TYPES:
            raise ConfigurationError(
                f"state_dict_type={self.state_dict_type!r} is not supported; accelify saves FULL_STATE_DICT "
                "(full tensors gathered on the main process)."
            )

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> FullyShardedDataParallelPlugin:
        """Build from a config file's ``fsdp_config`` (HF keys such as ``fsdp_auto_wrap_policy`` accepted)."""
        aliases = {
            "transformer_layer_cls_to_wrap": "transformer_cls_names_to_wrap",
            "offload_params": "cpu_offload",
            "version": "fsdp_version",
        }
        known = {f for f in cls.__dataclass_fields__ if f != "extra"}
        kwargs: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for key, value in config.items():
            name = aliases.get(key.removeprefix("fsdp_"), key.removeprefix("fsdp_"))
            (kwargs if name in known else extra)[name] = value
        for flag in ("reshard_after_forward", "cpu_offload", "activation_checkpointing"):
            if isinstance(kwargs.get(flag), str):
                kwargs[flag] = kwargs[flag].strip().lower() in {"1", "true", "yes", "on"}
        for number in ("fsdp_version", "min_num_params"):
            if kwargs.get(number) is not None:
                kwargs[number] = int(kwargs[number])
        return cls(**kwargs, extra=extra)


def _mp_policy(spec: Any) -> Any:
    from torch.distributed.fsdp import MixedPrecisionPolicy

    if spec is None or isinstance(spec, MixedPrecisionPolicy):
        return spec or MixedPrecisionPolicy()

    def dtype(value: Any) -> torch.dtype | None:
        if value is None or isinstance(value, torch.dtype):
            return value
        try:
            return torch_dtype(str(value))  # the one precision -> dtype table (precision_rules)
        except ConfigurationError as exc:
            raise ConfigurationError(f"mixed_precision_policy {exc}") from None

    if isinstance(spec, Mapping):
        return MixedPrecisionPolicy(**{k: dtype(v) for k, v in spec.items()})
    low = dtype(spec)
    return MixedPrecisionPolicy(param_dtype=low, reduce_dtype=low)


def _wrap_targets(model: nn.Module, plugin: FullyShardedDataParallelPlugin) -> list[nn.Module]:
    """Submodules (not the root) to shard on their own, innermost first."""
    policy = plugin.auto_wrap_policy
    if policy == "no_wrap":
        return []
    if callable(policy):
        return [m for m in model.modules() if m is not model and policy(m)][::-1]
    if policy == "transformer_based_wrap":
        names = set(plugin.transformer_cls_names_to_wrap or getattr(model, "_no_split_modules", None) or [])
        if not names:
            raise ConfigurationError(
                "auto_wrap_policy='transformer_based_wrap' needs transformer_cls_names_to_wrap (e.g. ['GPT2Block'])."
            )
        targets = [m for m in model.modules() if m is not model and type(m).__name__ in names]
        found = {type(m).__name__ for m in targets}
        if names - found:
            raise ConfigurationError(f"transformer_cls_names_to_wrap names {sorted(names - found)} but the model has no such module.")
        return targets[::-1]
    targets: list[nn.Module] = []
    wrapped: set[int] = set()

    def visit(module: nn.Module) -> int:  # post-order: parameters not yet claimed by a wrapped child
        pending = sum(visit(child) for child in module.children())
        pending += sum(p.numel() for p in module.parameters(recurse=False) if id(p) not in wrapped)
        if module is not model and pending >= int(plugin.min_num_params or 0):
            targets.append(module)
            wrapped.update(id(p) for p in module.parameters())
            return 0
        return pending

    visit(model)
    return targets


def wrap_model(
    model: nn.Module, plugin: FullyShardedDataParallelPlugin, device: torch.device, *, optimizers: Iterable[Any] = ()
) -> nn.Module:
    """Shard ``model`` across the default process group with FSDP2 and rebind ``optimizers`` to its new parameters.

    With two processes, each process afterwards holds half of every sharded parameter (a ``DTensor``);
    forward and backward gather and scatter them automatically.
    """
    import torch.distributed as dist
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import CPUOffloadPolicy, OffloadPolicy, fully_shard

    if is_fsdp_module(model):
        return model
    if not dist.is_initialized():
        raise ConfigurationError("FSDP needs a process group; launch with `accelify launch` or torchrun (even for one process).")
    optimizers = list(optimizers)
    for opt in optimizers:
        inner = getattr(opt, "optimizer", opt)
        if any(inner.state.get(p) for p in model.parameters()):
            raise ConfigurationError("An optimizer already took a step; prepare the model and optimizer before training with FSDP.")
    old_params = {id(p): (weakref.ref(p), name) for name, p in model.named_parameters()}
    model.to(device)
    targets = _wrap_targets(model, plugin)
    if plugin.activation_checkpointing:
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import apply_activation_checkpointing

        ids = {id(m) for m in targets}
        apply_activation_checkpointing(model, check_fn=lambda m: id(m) in ids)
    mesh = init_device_mesh(device.type, (dist.get_world_size(),))
    kwargs = {
        "mesh": mesh,
        "reshard_after_forward": plugin.reshard_after_forward,
        "mp_policy": _mp_policy(plugin.mixed_precision_policy),
        "offload_policy": CPUOffloadPolicy() if plugin.cpu_offload else OffloadPolicy(),
    }
    for module in targets:
        fully_shard(module, **kwargs)
    fully_shard(model, **kwargs)
    model_io.remember_replaced(model, old_params)  # weak: the unsharded tensors are freed when nothing else holds them
    for opt in optimizers:
        rebind_optimizer(opt, [model])
    return model


def rebind_optimizer(optimizer: Any, models: Iterable[nn.Module]) -> int:
    """Point ``optimizer`` at the sharded parameters of ``models`` where it still holds their pre-sharding ones.

    ``prepare`` must call this for an optimizer built before its model was sharded but prepared in a
    later call; otherwise it would update tensors the model no longer uses. Returns how many
    parameters were replaced. Raises ``ConfigurationError`` if the optimizer already has state for them.
    """
    return model_io.rebind_optimizer(optimizer, models, keep_state=False)


def is_fsdp_module(module: Any) -> bool:
    """True when ``module`` was sharded by FSDP2 (or wrapped by the older ``FullyShardedDataParallel``)."""
    from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

    return isinstance(module, (FSDPModule, FullyShardedDataParallel))


def _options(**kwargs: Any) -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, **kwargs)


def full_state_dict(module: nn.Module) -> dict[str, torch.Tensor]:
    """Every process must call it. Full CPU tensors on the main process, ``{}`` elsewhere.

    With two processes, rank 0 gets ``{"weight": <full 2-D tensor>, ...}`` and rank 1 ``{}``.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict

    return get_model_state_dict(module, options=_options(cpu_offload=True))


def load_full_state_dict(module: nn.Module, state_dict: Mapping[str, torch.Tensor], strict: bool = True) -> None:
    """Load a full (unsharded) state dict present on every process into the sharded ``module``."""
    from torch.distributed.checkpoint.state_dict import set_model_state_dict

    set_model_state_dict(module, dict(state_dict), options=_options(strict=strict))


def full_optimizer_state_dict(module: nn.Module, optimizer: torch.optim.Optimizer) -> dict[str, Any]:
    """Every process must call it. The optimizer's full state keyed by parameter name, on the main process."""
    from torch.distributed.checkpoint.state_dict import get_optimizer_state_dict

    return get_optimizer_state_dict(module, optimizer, options=_options(cpu_offload=True))


def load_full_optimizer_state_dict(module: nn.Module, optimizer: torch.optim.Optimizer, state_dict: dict[str, Any]) -> None:
    """Load a full optimizer state dict (present on every process) into ``optimizer`` over the sharded ``module``."""
    from torch.distributed.checkpoint.state_dict import set_optimizer_state_dict

    set_optimizer_state_dict(module, optimizer, state_dict, options=_options())


def clip_grad_norm_(module: nn.Module, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
    """Clip the sharded gradients of ``module`` by their global norm; returns that norm (a plain tensor).

    With two processes, both get the same norm, computed over the full (all-shard) gradients.
    """
    from torch.distributed.tensor import DTensor

    params = [p for p in module.parameters() if p.grad is not None]
    grads = [p.grad for p in params]
    if not grads:
        return torch.tensor(0.0)
    total = torch.nn.utils.get_total_norm(grads, norm_type=norm_type)
    if isinstance(total, DTensor):
        total = total.full_tensor()
    torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total
