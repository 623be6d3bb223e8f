"""Accelerator: the facade a converted training script talks to (Hugging Face Accelerate's API).

Each method delegates to a small module: process state (:mod:`.state`), data loading
(:mod:`.data_loader`), collectives (:mod:`.ops`), precision (:mod:`.precision`), the optimizer and
scheduler wrappers, model files (:mod:`.model_io`), preparing (:mod:`.prepare`), checkpoints
(:mod:`.checkpoint`) and trackers (:mod:`.tracking`). It owns one :class:`~.prepared.PreparedObjects`
(what it prepared and registered) and passes it, with the settings each call needs, to those modules;
none of them reads the Accelerator's fields. Its process facts and its methods for models, trackers and
processes acting together live in base classes named for that job (:mod:`.accelerator_facts`,
:mod:`.accelerator_models`, :mod:`.accelerator_trackers`, :mod:`.accelerator_coordination`), which
read only its public attributes; its constructor's arguments are checked by :mod:`.accelerator_options`.
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from torch.utils.data import DataLoader

from . import checkpoint, precision, prepare, tracking
from .accelerator_coordination import AcceleratorCoordination
from .accelerator_facts import AcceleratorFacts
from .accelerator_models import AcceleratorModels
from .accelerator_options import accumulation_steps, pick, refuse_unsupported
from .accelerator_trackers import AcceleratorTrackers
from .accumulation import Accumulate, no_sync
from .checkpoint import ProjectConfiguration
from .data_loader import DataLoaderShard
from .data_loader import skip_first_batches as _skip_first_batches
from .errors import UnusedParametersError
from .kwargs import AutocastKwargs, DistributedDataParallelKwargs, GradScalerKwargs, InitProcessGroupKwargs, sort_handlers
from .launch_settings import load_launch_settings, sentinels_enabled
from .optimizer import AcceleratedOptimizer
from .prepared import PreparedObjects
from .scheduler import AcceleratedScheduler
from .sentinels import Sentinels
from .gradient_state import GradientState
from .state import AcceleratorState, DistributedType
from .tracking import GeneralTracker, filter_trackers


def _prepared_list(name: str) -> property:
    """``accelerator._models`` and the like (Hugging Face's names): the registry's list, readable and settable."""
    return property(lambda self: getattr(self._prepared, name), lambda self, value: setattr(self._prepared, name, value),
                    doc=f"The {name} of ``PreparedObjects`` (Hugging Face Accelerate's private name for it).")


class Accelerator(AcceleratorFacts, AcceleratorModels, AcceleratorTrackers, AcceleratorCoordination):
    """Runs a training loop on one process, or data-parallel on N, with one code path.

    Arguments left as ``None`` come from ``accelify launch`` (the launch file) or the
    ``ACCELIFY_*`` / ``ACCELERATE_*`` environment variables, in that order, then the defaults.
    ``sentinels`` (accelify's own; default on unless ``ACCELIFY_SENTINELS=0``) runs cheap checks of
    a real run (see :mod:`.sentinels`): with two processes, a prepared model whose weights differ
    between them after step 4 raises ``ParametersDifferError`` naming it.
    Example (with two processes, each sees half of every epoch and the same weights)::

        accelerator = Accelerator(mixed_precision="bf16")
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            optimizer.zero_grad()
            accelerator.backward(loss_fn(model(x), y))
            optimizer.step()
    """

    def __init__(
        self,
        *,
        device_placement: bool = True,
        split_batches: bool | None = None,
        mixed_precision: str | None = None,
        gradient_accumulation_steps: int | None = None,
        cpu: bool | None = None,
        dataloader_config: Any = None,
        fsdp_plugin: Any = None,
        rng_types: Sequence[Any] | None = None,
        log_with: Any = None,
        project_dir: str | None = None,
        project_config: ProjectConfiguration | None = None,
        gradient_accumulation_plugin: Any = None,
        step_scheduler_with_optimizer: bool = True,
        kwargs_handlers: Iterable[Any] | None = None,
        even_batches: bool | None = None,
        debug: bool | None = None,
        dynamo_backend: str | None = None,
        sentinels: bool | None = None,
        **unsupported: Any,
    ) -> None:
        refuse_unsupported(unsupported, dynamo_backend)
        settings = load_launch_settings()
        handlers = sort_handlers(kwargs_handlers)
        pg = handlers.get(InitProcessGroupKwargs, InitProcessGroupKwargs())
        use_fsdp = fsdp_plugin is not None or bool(settings.use_fsdp)
        if fsdp_plugin is None and use_fsdp:
            from .fsdp import FullyShardedDataParallelPlugin

            fsdp_plugin = FullyShardedDataParallelPlugin.from_config(settings.fsdp_config)  # HF `fsdp_*` keys too
        self.fsdp_plugin = fsdp_plugin
        self.state = AcceleratorState(pick(cpu, settings.cpu, False), backend=pg.backend, timeout=pg.timeout)
        # FSDP shards across processes: with one process there is nothing to shard, models stay plain
        self.state.use_fsdp = use_fsdp and self.state.use_distributed
        self.state.debug = bool(pick(debug, settings.debug, False))
        mp = pick(mixed_precision, settings.mixed_precision, "no")
        self.state.mixed_precision = precision.check_mixed_precision(mp, self.device)
        steps = accumulation_steps(gradient_accumulation_steps, gradient_accumulation_plugin,
                                   settings.gradient_accumulation_steps)
        self.gradient_state = GradientState(
            steps,
            adjust_scheduler=getattr(gradient_accumulation_plugin, "adjust_scheduler", True),
            sync_with_dataloader=getattr(gradient_accumulation_plugin, "sync_with_dataloader", True),
        )
        self.device_placement = device_placement
        self.split_batches = bool(pick(split_batches, getattr(dataloader_config, "split_batches", None), False))
        self.even_batches = bool(pick(even_batches, getattr(dataloader_config, "even_batches", None), True))
        self.rng_types = list(rng_types) if rng_types is not None else None
        self.dispatch_batches = getattr(dataloader_config, "dispatch_batches", None)  # only None/False work
        self.non_blocking = bool(getattr(dataloader_config, "non_blocking", False))  # used with pinned memory only
        self.step_scheduler_with_optimizer = step_scheduler_with_optimizer
        self.ddp_handler = handlers.get(DistributedDataParallelKwargs)
        self.autocast_handler = handlers.get(AutocastKwargs)
        scaler_options = handlers[GradScalerKwargs].to_kwargs() if GradScalerKwargs in handlers else None
        self.scaler = precision.make_grad_scaler(self.mixed_precision, self.device, scaler_options)
        if project_config is None:
            project_config = ProjectConfiguration(project_dir=project_dir)
        elif project_dir is not None:
            project_config.set_directories(project_dir)
        self.project_configuration = project_config
        # unknown tracker names, missing packages and a missing logging folder fail here, not at init_trackers
        self.log_with = filter_trackers(log_with, project_config.logging_dir)
        self.flag_tensor: torch.Tensor | None = None
        self.trackers: list[GeneralTracker] = []  # started by init_trackers
        self._prepared = PreparedObjects()
        # accelify's own (Hugging Face Accelerate has no such argument): see runtime/sentinels.py
        self._sentinels = (
            Sentinels(self._prepared, num_processes=self.num_processes, process_index=self.process_index,
                      gradient_state=self.gradient_state)
            if sentinels_enabled(sentinels) else None
        )

    _models = _prepared_list("models")
    _optimizers = _prepared_list("optimizers")
    _schedulers = _prepared_list("schedulers")
    _dataloaders = _prepared_list("dataloaders")
    _custom_objects = _prepared_list("custom_objects")

    # -- settings (process facts: runtime/accelerator_facts.py) -----------------------------------
    sync_gradients = property(
        lambda self: self.gradient_state.sync_gradients, doc="True on steps where gradients are synchronised."
    )
    project_dir = property(lambda self: self.project_configuration.project_dir)
    logging_dir = property(lambda self: self.project_configuration.logging_dir)

    @property
    def gradient_accumulation_steps(self) -> int:
        return self.gradient_state.num_steps

    @gradient_accumulation_steps.setter
    def gradient_accumulation_steps(self, value: int) -> None:
        self.gradient_state.num_steps = int(value)

    @property
    def step(self) -> int:
        """The accumulation step counter (saved and restored by save_state/load_state)."""
        return self.gradient_state.step

    @step.setter
    def step(self, value: int) -> None:
        self.gradient_state.step = int(value)

    @property
    def optimizer_step_was_skipped(self) -> bool:
        """True when the last ``optimizer.step()`` was skipped because fp16 gradients overflowed."""
        return any(opt.step_was_skipped for opt in self._optimizers)

    # -- the training step ------------------------------------------------------------------
    def backward(self, loss: torch.Tensor, **kwargs: Any) -> None:
        """``loss.backward(**kwargs)``, divided by ``gradient_accumulation_steps`` and scaled under fp16."""
        if self.gradient_state.num_steps > 1:
            loss = loss / self.gradient_state.num_steps
        if self.scaler is not None:
            self.scaler.scale(loss).backward(**kwargs)
        else:
            loss.backward(**kwargs)

    def unscale_gradients(self, optimizer: Any = None) -> None:
        """Under fp16, divide the gradients by the loss scale (once per step); a no-op otherwise."""
        if self.scaler is None:
            return
        targets = self._optimizers if optimizer is None else (optimizer if isinstance(optimizer, (list, tuple)) else [optimizer])
        for opt in targets:
            if isinstance(opt, AcceleratedOptimizer):
                opt.unscale_()

    def clip_grad_norm_(self, parameters: Any, max_norm: float, norm_type: float = 2.0) -> torch.Tensor:
        """Clip gradients to a total norm of ``max_norm`` (after fp16 unscaling); return the norm before clipping.

        With two processes, gradients are already synchronised, so both get the same norm. On
        accumulation steps (``sync_gradients`` false) gradients are incomplete: nothing is clipped
        and the current norm is returned.
        """
        params = [parameters] if isinstance(parameters, torch.Tensor) else list(parameters)
        if self.use_fsdp:
            from . import fsdp

            for model in self._models:
                if fsdp.is_fsdp_module(model) and _same_params(params, model):
                    self.unscale_gradients()
                    return fsdp.clip_grad_norm_(model, max_norm, norm_type)
        if not self.gradient_state.sync_gradients:
            grads = [p.grad for p in params if p.grad is not None]
            norm = torch.nn.utils.get_total_norm(grads, norm_type) if grads else torch.tensor(0.0)
            return norm / self.scaler.get_scale() if self.scaler is not None else norm
        self.unscale_gradients()
        return torch.nn.utils.clip_grad_norm_(params, max_norm, norm_type=norm_type)

    def clip_grad_value_(self, parameters: Any, clip_value: float) -> None:
        """Clamp every gradient to ``[-clip_value, clip_value]`` (after fp16 unscaling)."""
        self.unscale_gradients()
        torch.nn.utils.clip_grad_value_(parameters, clip_value)

    def accumulate(self, *models: torch.nn.Module) -> contextlib.AbstractContextManager[None]:
        """One micro-batch of gradient accumulation: gradients sync (and the optimizer steps) every k-th time.

        With ``gradient_accumulation_steps=2`` and two processes, the first batch's backward skips
        the all-reduce (DDP ``no_sync``), the second synchronises and ``optimizer.step()`` updates.
        The last batch of the loader always synchronises.
        """
        return Accumulate(self.gradient_state, models)

    def no_sync(self, model: torch.nn.Module) -> contextlib.AbstractContextManager[Any]:
        """Skip the gradient all-reduce in this block's backward passes (gradients accumulate locally)."""
        return no_sync(model)

    def autocast(self, autocast_handler: AutocastKwargs | None = None) -> contextlib.AbstractContextManager[Any]:
        """Run extra code (e.g. a loss outside the model) under this accelerator's mixed precision."""
        handler = autocast_handler or self.autocast_handler or AutocastKwargs()
        return precision.autocast(self.mixed_precision, self.device, handler.enabled, handler.cache_enabled)

    # -- prepare (runtime/prepare.py) ---------------------------------------------------------
    def prepare(self, *args: Any, device_placement: Sequence[bool] | None = None) -> Any:
        """Wrap models, optimizers, data loaders and schedulers for this process; return them in order.

        Anything else (``None`` included) comes back unchanged, and preparing twice is harmless.
        With two processes, ``model, opt, loader = accelerator.prepare(model, opt, loader)`` gives
        a DDP model, an :class:`AcceleratedOptimizer` and a loader that yields half of each epoch.
        """
        return prepare.prepare_all(args, device_placement, model=self.prepare_model, optimizer=self.prepare_optimizer,
                                   data_loader=self.prepare_data_loader, scheduler=self.prepare_scheduler)

    def prepare_model(self, model: torch.nn.Module, device_placement: bool | None = None, evaluation_mode: bool = False,
                      *, _optimizers: Sequence[torch.optim.Optimizer] = ()) -> torch.nn.Module:
        """Place ``model`` on the device, wrap it in DDP (FSDP2 with a plugin) and add mixed-precision autocast.

        ``_optimizers``: optimizers of the same ``prepare`` call, rebound if wrapping replaces parameters.
        """
        return prepare.prepare_model(self._prepared, self._prepare_settings(), model, device_placement,
                                     evaluation_mode, _optimizers)

    def prepare_optimizer(self, optimizer: torch.optim.Optimizer, device_placement: bool | None = None) -> AcceleratedOptimizer:
        """Wrap ``optimizer`` so that ``step``/``zero_grad`` follow accumulation and the fp16 scaler."""
        return prepare.prepare_optimizer(self._prepared, self._prepare_settings(), optimizer, device_placement)

    def prepare_data_loader(self, data_loader: DataLoader, device_placement: bool | None = None) -> DataLoaderShard:
        """Shard ``data_loader``: with two processes each gets every other batch (see :mod:`.data_loader`)."""
        return prepare.prepare_data_loader(self._prepared, self._prepare_settings(), data_loader, device_placement)

    def prepare_scheduler(self, scheduler: Any) -> AcceleratedScheduler:
        """Wrap ``scheduler`` so it steps only when its optimizer did (see :mod:`.scheduler`)."""
        return prepare.prepare_scheduler(self._prepared, self._prepare_settings(), scheduler)

    def _prepare_settings(self) -> prepare.PrepareSettings:
        return prepare.PrepareSettings(
            device=self.device, device_placement=self.device_placement, mixed_precision=self.mixed_precision,
            use_distributed=self.use_distributed, num_processes=self.num_processes, process_index=self.process_index,
            use_fsdp=self.use_fsdp, fsdp_plugin=self.fsdp_plugin, ddp_handler=self.ddp_handler, scaler=self.scaler,
            gradient_state=self.gradient_state, split_batches=self.split_batches, even_batches=self.even_batches,
            rng_types=self.rng_types, dispatch_batches=self.dispatch_batches,
            step_scheduler_with_optimizer=self.step_scheduler_with_optimizer, non_blocking=self.non_blocking,
            sentinels=self._sentinels,
        )

    # -- checkpoints (runtime/checkpoint.py) ------------------------------------------------------
    def register_for_checkpointing(self, *objects: Any) -> None:
        """Save and load ``objects`` (anything with ``state_dict``/``load_state_dict``) in save_state/load_state.

        With two processes, rank 0 writes ``custom_checkpoint_<i>.pkl``; both processes load it.
        """
        checkpoint.register_for_checkpointing(self._prepared, objects)

    def save_state(self, output_dir: str | os.PathLike[str] | None = None, safe_serialization: bool = True) -> Path:
        """Save models, optimizers, schedulers, scaler, data-loader positions, RNG states and registered objects.

        With ``ProjectConfiguration(automatic_checkpoint_naming=True)`` and no ``output_dir``, the folder is
        ``<project_dir>/checkpoints/checkpoint_<iteration>`` and only the newest ``total_limit`` are kept
        (an explicit ``output_dir`` is used as given; Hugging Face Accelerate would silently ignore it).
        With two processes, both must call it; both return once the folder is complete on disk.
        """
        return checkpoint.save_state(
            self._prepared, self.project_configuration, output_dir, safe_serialization=safe_serialization,
            scaler=self.scaler, step=self.step, process_index=self.process_index,
            local_process_index=self.local_process_index, model_state=self.get_state_dict)

    def load_state(self, input_dir: str | os.PathLike[str] | None = None, load_kwargs: dict[str, Any] | None = None,
                   **load_model_func_kwargs: Any) -> None:
        """Restore what ``save_state`` wrote; with no folder and automatic naming, the newest checkpoint.

        ``strict=False`` relaxes model loading; ``map_location="on_device"`` loads optimizer state
        straight onto ``accelerator.device``. With two processes, each restores its own RNG states.
        """
        self.step = checkpoint.load_state(
            self._prepared, self.project_configuration, input_dir, load_kwargs, scaler=self.scaler,
            device=self.device, process_index=self.process_index, unwrap=self.unwrap_model, **load_model_func_kwargs)

    # -- the end (trackers: runtime/accelerator_trackers.py) ------------------------------------------
    def end_training(self) -> None:
        """Finish every tracker, then wait for every process; safe to call with no trackers.

        With two processes, both return only once rank 0 has closed its tracker files. Unlike Hugging
        Face Accelerate, the process group is left up: the prepared DDP models the script still holds
        reference it, and destroying it under them made Gloo abort processes at exit (4 runs in 25).
        It is torn down when the process exits; ``accelerator.state.destroy_process_group()`` closes
        it explicitly once the models are gone. With sentinels on, it compares the prepared models'
        parameters between processes around that barrier (raising ``ParametersDifferError``).
        """
        if self._sentinels is not None:
            self._sentinels.before_end()
        tracking.finish_trackers(self.trackers, is_main_process=self.is_main_process)
        self.wait_for_everyone()
        if self._sentinels is not None:
            self._sentinels.after_end()

    def skip_first_batches(self, dataloader: DataLoader, num_batches: int = 0) -> DataLoader:
        """A loader that starts ``num_batches`` into the epoch (to resume mid-epoch)."""
        return _skip_first_batches(dataloader, num_batches)

    def free_memory(self, *objects: Any) -> list[None]:
        """Drop the prepared objects' references and free device memory: ``a, b = accelerator.free_memory(a, b)``."""
        from .memory import release_memory

        self._prepared.forget_prepared()
        self.gradient_state.step = 0
        return release_memory(*objects)

    clear = free_memory

    def __repr__(self) -> str:
        return f"Accelerator({self.state!r}, mixed_precision={self.mixed_precision!r})"


def _same_params(params: list[torch.Tensor], model: torch.nn.Module) -> bool:
    ids = {id(p) for p in model.parameters()}
    return bool(params) and all(id(p) in ids for p in params)


__all__ = ["Accelerator", "DistributedType", "UnusedParametersError"]
