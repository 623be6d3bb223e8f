"""``prepare``: wrapping the user's models, optimizers, data loaders and schedulers for this process.

Models are placed on the device and wrapped in DDP (FSDP2 with a plugin) with mixed-precision
autocast; optimizers become :class:`~.optimizer.AcceleratedOptimizer` (rebound to parameters that
placement or sharding replaced); data loaders become :class:`~.data_loader.DataLoaderShard`;
schedulers become :class:`~.scheduler.AcceleratedScheduler`. ``Accelerator``'s ``prepare*`` methods
delegate here, passing what these functions need explicitly: the :class:`~.prepared.PreparedObjects`
it owns (appended to, in order) and a :class:`PrepareSettings` read from its attributes at the call.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from . import model_io, precision
from .data_loader import DataLoaderShard
from .data_loader import prepare_data_loader as _shard_loader
from .errors import ConfigurationError, UnusedParametersError
from .optimizer import AcceleratedOptimizer
from .prepared import PreparedObjects
from .scheduler import AcceleratedScheduler
from .gradient_state import GradientState

_SCHEDULER_TYPES: tuple[type, ...] = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


class _DDP(DistributedDataParallel):
    """DDP whose unused-parameter error names the parameters and the kwargs handler that fixes it, and
    that forwards attribute reads, writes and deletions it does not own to the wrapped module.

    Scripts call their own methods and attributes on the model after ``prepare``
    (``model.decode(z)``, ``model.saved_actions.append(a)``, ``model.rewards = []``); with one
    process the prepared model is the module itself, so with N they must work too. Lightning
    Fabric's wrapper does the same; Hugging Face Accelerate raises ``AttributeError``.
    """

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)  # parameters, buffers and submodules of the wrapper itself
        except AttributeError:
            modules = self.__dict__.get("_modules")
            if modules is None or "module" not in modules:
                raise
            return getattr(modules["module"], name)

    def __setattr__(self, name: str, value: Any) -> None:
        modules = self.__dict__.get("_modules")
        wrapped = modules.get("module") if modules is not None else None
        if (
            wrapped is not None
            and name not in self.__dict__
            and not hasattr(type(self), name)
            and name in wrapped.__dict__
        ):
            setattr(wrapped, name, value)  # the module's own plain attribute: its methods read it there
            return
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        modules = self.__dict__.get("_modules")
        wrapped = modules.get("module") if modules is not None else None
        if wrapped is not None and name not in self.__dict__ and name in wrapped.__dict__:
            delattr(wrapped, name)  # ``del model.std`` before saving the module: its own plain attribute
            return
        super().__delattr__(name)

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().forward(*args, **kwargs)
        except RuntimeError as exc:
            if "Expected to have finished reduction" not in str(exc):
                raise
            raise UnusedParametersError(model_io.unused_parameters_message(self.module, str(exc))) from exc


@dataclass(frozen=True)
class PrepareSettings:
    """What preparing needs from its ``Accelerator``, read when ``prepare`` is called (scripts may change
    ``accelerator.even_batches`` and the like between calls)."""

    device: torch.device
    device_placement: bool
    mixed_precision: str
    use_distributed: bool
    num_processes: int
    process_index: int
    use_fsdp: bool
    fsdp_plugin: Any
    ddp_handler: Any  # DistributedDataParallelKwargs or None
    scaler: Any  # torch.amp.GradScaler or None
    gradient_state: GradientState
    split_batches: bool
    even_batches: bool
    rng_types: list[Any] | None
    dispatch_batches: Any
    step_scheduler_with_optimizer: bool
    non_blocking: bool = False  # DataLoaderConfiguration(non_blocking=True): asynchronous copies from pinned memory
    sentinels: Any = None  # the Accelerator's sentinels.Sentinels (None when off): told what was prepared

    def placement(self, device_placement: bool | None) -> bool:
        """The call's own ``device_placement`` when given, else the accelerator's."""
        return self.device_placement if device_placement is None else device_placement


def prepare_all(args: Sequence[Any], device_placement: Sequence[bool] | None, *, model: Callable[..., Any],
                optimizer: Callable[..., Any], data_loader: Callable[..., Any], scheduler: Callable[..., Any]) -> Any:
    """``Accelerator.prepare``: each argument through the matching ``prepare_*`` callable; others unchanged.

    Models first (optimizers of the same call are rebound if wrapping replaces parameters), then
    optimizers and data loaders, then schedulers (they need the wrapped optimizers).
    """
    if device_placement is None:
        device_placement = [None] * len(args)  # type: ignore[list-item]
    elif len(device_placement) != len(args):
        raise ConfigurationError(f"device_placement has {len(device_placement)} entries for {len(args)} objects.")
    raw_optimizers = [a for a in args if isinstance(a, torch.optim.Optimizer) and not isinstance(a, AcceleratedOptimizer)]
    result = list(args)
    for i, obj in enumerate(args):  # models first: optimizers may need rebinding to new parameters
        if isinstance(obj, torch.nn.Module):
            result[i] = model(obj, device_placement=device_placement[i], _optimizers=raw_optimizers)
    for i, obj in enumerate(args):
        if isinstance(obj, torch.optim.Optimizer):
            result[i] = optimizer(obj, device_placement=device_placement[i])
        elif isinstance(obj, DataLoader):
            result[i] = data_loader(obj, device_placement=device_placement[i])
    for i, obj in enumerate(args):
        if isinstance(obj, _SCHEDULER_TYPES):
            result[i] = scheduler(obj)
    return result[0] if len(result) == 1 else tuple(result)


def prepare_model(prepared: PreparedObjects, settings: PrepareSettings, model: torch.nn.Module,
                  device_placement: bool | None = None, evaluation_mode: bool = False,
                  optimizers: Sequence[torch.optim.Optimizer] = ()) -> torch.nn.Module:
    """Place ``model`` on the device, wrap it in DDP (FSDP2 with a plugin) and add mixed-precision autocast.

    ``optimizers``: optimizers of the same ``prepare`` call, rebound if wrapping replaces parameters.
    """
    if any(model is m for m in prepared.models):
        return model
    raw = model
    if isinstance(model, DistributedDataParallel):  # wrapped by the script itself: keep its DDP
        precision.attach_autocast(model.module, settings.mixed_precision, settings.device)
        prepared.models.append(model)
        _remember(settings, raw, model)
        return model
    to_rebind = [o.optimizer for o in prepared.optimizers] + list(optimizers)
    if settings.use_fsdp and not evaluation_mode:
        from . import fsdp

        model = fsdp.wrap_model(model, settings.fsdp_plugin, settings.device, optimizers=to_rebind)
    else:
        before = {name: p for name, p in model.named_parameters()}
        if settings.placement(device_placement):
            model.to(settings.device)
        model_io.rebind_optimizers(before, model, to_rebind)
    precision.attach_autocast(model, settings.mixed_precision, settings.device)
    if settings.use_distributed and not settings.use_fsdp and not evaluation_mode:
        if any(p.requires_grad for p in model.parameters()):
            options = settings.ddp_handler.to_kwargs() if settings.ddp_handler is not None else {}
            if settings.device.type == "cuda":
                options.update(device_ids=[settings.device.index], output_device=settings.device.index)
            model = _DDP(model, **options)
    prepared.models.append(model)
    _remember(settings, raw, model)
    return model


def prepare_optimizer(prepared: PreparedObjects, settings: PrepareSettings, optimizer: torch.optim.Optimizer,
                      device_placement: bool | None = None) -> AcceleratedOptimizer:
    """Wrap ``optimizer`` so that ``step``/``zero_grad`` follow accumulation and the fp16 scaler."""
    if isinstance(optimizer, AcceleratedOptimizer):
        if not any(optimizer is o for o in prepared.optimizers):
            prepared.optimizers.append(optimizer)
        return optimizer
    # built before its model was placed or sharded in an earlier prepare(): follow the new parameters
    if settings.use_fsdp:
        from . import fsdp

        fsdp.rebind_optimizer(optimizer, prepared.models)
    else:
        model_io.rebind_optimizer(optimizer, prepared.models)
    wrapped = AcceleratedOptimizer(optimizer, settings.placement(device_placement), settings.scaler,
                                   settings.gradient_state)
    prepared.optimizers.append(wrapped)
    if settings.sentinels is not None:
        settings.sentinels.remember(optimizer, wrapped)
        settings.sentinels.watch_optimizer(wrapped)
    return wrapped


def prepare_data_loader(prepared: PreparedObjects, settings: PrepareSettings, data_loader: DataLoader,
                        device_placement: bool | None = None) -> DataLoaderShard:
    """Shard ``data_loader``: with two processes each gets every other batch (see :mod:`.data_loader`)."""
    if isinstance(data_loader, DataLoaderShard) and any(data_loader is d for d in prepared.dataloaders):
        return data_loader
    loader = _shard_loader(
        data_loader,
        device=settings.device,
        num_processes=settings.num_processes,
        process_index=settings.process_index,
        split_batches=settings.split_batches,
        even_batches=settings.even_batches,
        put_on_device=settings.placement(device_placement),
        rng_types=settings.rng_types,
        dispatch_batches=settings.dispatch_batches,
        non_blocking=settings.non_blocking,
    )
    prepared.dataloaders.append(loader)
    _remember(settings, data_loader, loader)
    return loader


def prepare_scheduler(prepared: PreparedObjects, settings: PrepareSettings, scheduler: Any) -> AcceleratedScheduler:
    """Wrap ``scheduler`` so it steps only when its optimizer did (see :mod:`.scheduler`)."""
    if isinstance(scheduler, AcceleratedScheduler):
        return scheduler
    raw = scheduler.optimizer
    optimizers = [o for o in prepared.optimizers if o is raw or o.optimizer is raw] or [raw]
    wrapped = AcceleratedScheduler(
        scheduler,
        optimizers,
        gradient_state=settings.gradient_state,
        num_processes=settings.num_processes,
        step_with_optimizer=settings.step_scheduler_with_optimizer,
        split_batches=settings.split_batches,
    )
    prepared.schedulers.append(wrapped)
    if settings.sentinels is not None:
        settings.sentinels.remember(scheduler, wrapped)
        settings.sentinels.watch_scheduler(wrapped)
    return wrapped


def _remember(settings: PrepareSettings, raw: Any, prepared: Any) -> None:
    """Tell the sentinels (when on) the user's name for what was prepared."""
    if settings.sentinels is not None:
        settings.sentinels.remember(raw, prepared)
