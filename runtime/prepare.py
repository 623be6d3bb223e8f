"""``prepare``: wrapping the user's models, optimizers, data loaders and schedulers for this process.

Inherited by ``Accelerator`` (:class:`PrepareMixin`). Models are placed on the device and wrapped in
DDP (FSDP2 with a plugin) with mixed-precision autocast; optimizers become
:class:`~.optimizer.AcceleratedOptimizer` (rebound to parameters that placement or sharding
replaced); data loaders become :class:`~.data_loader.DataLoaderShard`; schedulers become
:class:`~.scheduler.AcceleratedScheduler`. Reads the Accelerator's settings (``device``,
``device_placement``, ``use_fsdp``, ``fsdp_plugin``, ``use_distributed``, ``ddp_handler``,
``mixed_precision``, ``scaler``, ``gradient_state``, the data-loader options) and appends to
``self._models``, ``self._optimizers``, ``self._dataloaders``, ``self._schedulers``.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader

from . import model_io, precision
from .data_loader import DataLoaderShard
from .data_loader import prepare_data_loader as _shard_loader
from .errors import ConfigurationError, UnusedParametersError
from .optimizer import AcceleratedOptimizer
from .scheduler import AcceleratedScheduler

_SCHEDULER_TYPES: tuple[type, ...] = (torch.optim.lr_scheduler.LRScheduler, torch.optim.lr_scheduler.ReduceLROnPlateau)


class _DDP(DistributedDataParallel):
    """DDP whose unused-parameter error names the parameters and the kwargs handler that fixes it, and
    that forwards attribute reads and writes it does not own to the wrapped module.

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

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().forward(*args, **kwargs)
        except RuntimeError as exc:
            if "Expected to have finished reduction" not in str(exc):
                raise
            raise UnusedParametersError(model_io.unused_parameters_message(self.module, str(exc))) from exc


class PrepareMixin:
    """The ``prepare*`` methods of ``Accelerator`` (see the module docstring for what they read)."""

    def prepare(self, *args: Any, device_placement: Sequence[bool] | None = None) -> Any:
        """Wrap models, optimizers, data loaders and schedulers for this process; return them in order.

        Anything else (``None`` included) comes back unchanged, and preparing twice is harmless.
        With two processes, ``model, opt, loader = accelerator.prepare(model, opt, loader)`` gives
        a DDP model, an :class:`AcceleratedOptimizer` and a loader that yields half of each epoch.
        """
        if device_placement is None:
            device_placement = [None] * len(args)  # type: ignore[list-item]
        elif len(device_placement) != len(args):
            raise ConfigurationError(f"device_placement has {len(device_placement)} entries for {len(args)} objects.")
        raw_optimizers = [a for a in args if isinstance(a, torch.optim.Optimizer) and not isinstance(a, AcceleratedOptimizer)]
        result = list(args)
        for i, obj in enumerate(args):  # models first: optimizers may need rebinding to new parameters
            if isinstance(obj, torch.nn.Module):
                result[i] = self.prepare_model(obj, device_placement=device_placement[i], _optimizers=raw_optimizers)
        for i, obj in enumerate(args):
            if isinstance(obj, torch.optim.Optimizer):
                result[i] = self.prepare_optimizer(obj, device_placement=device_placement[i])
            elif isinstance(obj, DataLoader):
                result[i] = self.prepare_data_loader(obj, device_placement=device_placement[i])
        for i, obj in enumerate(args):
            if isinstance(obj, _SCHEDULER_TYPES):
                result[i] = self.prepare_scheduler(obj)
        return result[0] if len(result) == 1 else tuple(result)

    def prepare_model(
        self,
        model: torch.nn.Module,
        device_placement: bool | None = None,
        evaluation_mode: bool = False,
        *,
        _optimizers: Sequence[torch.optim.Optimizer] = (),
    ) -> torch.nn.Module:
        """Place ``model`` on the device, wrap it in DDP (FSDP2 with a plugin) and add mixed-precision autocast.

        ``_optimizers``: optimizers of the same ``prepare`` call, rebound if wrapping replaces parameters.
        """
        if any(model is m for m in self._models):
            return model
        if isinstance(model, DistributedDataParallel):  # wrapped by the script itself: keep its DDP
            precision.attach_autocast(model.module, self.mixed_precision, self.device)
            self._models.append(model)
            return model
        place = self.device_placement if device_placement is None else device_placement
        optimizers = [o.optimizer for o in self._optimizers] + list(_optimizers)
        if self.use_fsdp and not evaluation_mode:
            from . import fsdp

            model = fsdp.wrap_model(model, self.fsdp_plugin, self.device, optimizers=optimizers)
        else:
            before = {name: p for name, p in model.named_parameters()}
            if place:
                model.to(self.device)
            model_io.rebind_optimizers(before, model, optimizers)
        precision.attach_autocast(model, self.mixed_precision, self.device)
        if self.use_distributed and not self.use_fsdp and not evaluation_mode:
            if any(p.requires_grad for p in model.parameters()):
                options = self.ddp_handler.to_kwargs() if self.ddp_handler is not None else {}
                if self.device.type == "cuda":
                    options.update(device_ids=[self.device.index], output_device=self.device.index)
                model = _DDP(model, **options)
        self._models.append(model)
        return model

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None) -> AcceleratedOptimizer:
        """Wrap ``optimizer`` so that ``step``/``zero_grad`` follow accumulation and the fp16 scaler."""
        if isinstance(optimizer, AcceleratedOptimizer):
            if not any(optimizer is o for o in self._optimizers):
                self._optimizers.append(optimizer)
            return optimizer
        # built before its model was placed or sharded in an earlier prepare(): follow the new parameters
        if self.use_fsdp:
            from . import fsdp

            fsdp.rebind_optimizer(optimizer, self._models)
        else:
            model_io.rebind_optimizer(optimizer, self._models)
        place = self.device_placement if device_placement is None else device_placement
        wrapped = AcceleratedOptimizer(optimizer, place, self.scaler, self.gradient_state)
        self._optimizers.append(wrapped)
        return wrapped

    def prepare_data_loader(self, data_loader: DataLoader, device_placement: bool | None = None) -> DataLoaderShard:
        """Shard ``data_loader``: with two processes each gets every other batch (see :mod:`.data_loader`)."""
        if isinstance(data_loader, DataLoaderShard) and any(data_loader is d for d in self._dataloaders):
            return data_loader
        place = self.device_placement if device_placement is None else device_placement
        loader = _shard_loader(
            data_loader,
            device=self.device,
            num_processes=self.num_processes,
            process_index=self.process_index,
            split_batches=self.split_batches,
            even_batches=self.even_batches,
            put_on_device=place,
            rng_types=self.rng_types,
            dispatch_batches=self.dispatch_batches,
        )
        self._dataloaders.append(loader)
        return loader

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` so it steps only when its optimizer did (see :mod:`.scheduler`)."""
        if isinstance(scheduler, AcceleratedScheduler):
            return scheduler
        raw = scheduler.optimizer
        optimizers = [o for o in self._optimizers if o is raw or o.optimizer is raw] or [raw]
        wrapped = AcceleratedScheduler(
            scheduler,
            optimizers,
            gradient_state=self.gradient_state,
            num_processes=self.num_processes,
            step_with_optimizer=self.step_scheduler_with_optimizer,
            split_batches=self.split_batches,
        )
        self._schedulers.append(wrapped)
        return wrapped
