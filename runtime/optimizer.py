"""AcceleratedOptimizer: a transparent optimizer wrapper aware of accumulation and the fp16 scaler."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

import torch

from .gradient_state import GradientState


class AcceleratedOptimizer(torch.optim.Optimizer):
    """Wraps a torch optimizer: ``step``/``zero_grad`` act only on gradient-sync steps; fp16 goes through the scaler.

    Everything else (``param_groups``, ``state``, ``state_dict()``, ``load_state_dict()``,
    ``add_param_group()``) is the wrapped optimizer's own. With ``gradient_accumulation_steps=2``
    inside ``accelerator.accumulate(model)``, ``optimizer.step()`` updates the weights on every
    second batch only. Under fp16, ``step_was_skipped`` tells whether the scaler skipped the update
    because the gradients overflowed.
    """

    def __init__(
        self,
        optimizer: torch.optim.Optimizer,
        device_placement: bool = True,
        scaler: Any = None,
        gradient_state: GradientState | None = None,
    ) -> None:
        # torch.optim.Optimizer.__init__ is skipped on purpose: all state lives in the wrapped optimizer.
        self.optimizer = optimizer
        self.scaler = scaler
        self.gradient_state = gradient_state if gradient_state is not None else GradientState()
        self.device_placement = device_placement
        self._is_overflow = False
        self._unscaled = False
        self._zero_grad_takes_set_to_none = "set_to_none" in inspect.signature(optimizer.zero_grad).parameters
        self._step_called = False
        # steps really taken (not skipped by accumulation or the fp16 scaler); the sentinels (see
        # .sentinels) are called at step ``_sentinel_at`` and say the next one (0: never)
        self._steps_taken = 0
        self._sentinel: Callable[[Any, int], int] | None = None
        self._sentinel_at = 0
        if device_placement and optimizer.state:
            # load_state_dict casts each state tensor to its parameter's device and dtype
            optimizer.load_state_dict(optimizer.state_dict())

    def _scaler_step(self, closure: Callable[[], Any] | None) -> Any:
        """``scaler.step`` with the wrapped ``optimizer.step`` flagged, to learn whether the scaler called it.

        The optimizer's ``step`` is read now, not when wrapping: an LR scheduler created later patches
        it (to check the call order) and that patch must survive.
        """
        optimizer = self.optimizer
        had_own = "step" in vars(optimizer)
        current = optimizer.step

        def flagging_step(*args: Any, **kwargs: Any) -> Any:
            self._step_called = True
            return current(*args, **kwargs)

        self._step_called = False
        optimizer.step = flagging_step  # type: ignore[method-assign]
        try:
            if closure is not None:
                return self.scaler.step(optimizer, closure)
            return self.scaler.step(optimizer)
        finally:
            if had_own:
                optimizer.step = current  # type: ignore[method-assign]
            else:
                del optimizer.step  # back to the class's method

    # -- transparent attributes ------------------------------------------------------------
    @property
    def state(self) -> Any:  # type: ignore[override]
        return self.optimizer.state

    @state.setter
    def state(self, value: Any) -> None:
        self.optimizer.state = value

    @property
    def param_groups(self) -> list[dict[str, Any]]:  # type: ignore[override]
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, value: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = value

    @property
    def defaults(self) -> dict[str, Any]:  # type: ignore[override]
        return self.optimizer.defaults

    @defaults.setter
    def defaults(self, value: dict[str, Any]) -> None:
        self.optimizer.defaults = value

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        self.optimizer.add_param_group(param_group)

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        self.optimizer.load_state_dict(state_dict)  # type: ignore[arg-type]

    def train(self) -> None:
        """Switch optimizers that have modes (schedule-free ones) to training mode."""
        if callable(getattr(self.optimizer, "train", None)):
            self.optimizer.train()  # type: ignore[attr-defined]

    def eval(self) -> None:
        """Switch optimizers that have modes (schedule-free ones) to evaluation mode."""
        if callable(getattr(self.optimizer, "eval", None)):
            self.optimizer.eval()  # type: ignore[attr-defined]

    def __repr__(self) -> str:
        return f"AcceleratedOptimizer({self.optimizer!r})"

    # -- the training step -----------------------------------------------------------------
    def zero_grad(self, set_to_none: bool | None = None) -> None:
        """Clear the gradients, except on accumulation steps (where they must keep adding up)."""
        if not self.gradient_state.sync_gradients:
            return
        if self._zero_grad_takes_set_to_none:
            self.optimizer.zero_grad(set_to_none=True if set_to_none is None else set_to_none)
        elif set_to_none is not None:
            raise TypeError(f"{type(self.optimizer).__name__}.zero_grad() takes no set_to_none argument; drop it.")
        else:
            self.optimizer.zero_grad()

    def unscale_(self) -> None:
        """Divide the gradients by the fp16 loss scale, once per step (before clipping)."""
        if self.scaler is not None and not self._unscaled and self.gradient_state.sync_gradients:
            self.scaler.unscale_(self.optimizer)
            self._unscaled = True

    def step(self, closure: Callable[[], Any] | None = None) -> Any:  # type: ignore[override]
        """Update the weights on gradient-sync steps; under fp16 the scaler may skip an overflowing step."""
        if not self.gradient_state.sync_gradients:
            return None
        if self.scaler is None:
            result = self.optimizer.step(closure) if closure is not None else self.optimizer.step()
        else:
            try:
                result = self._scaler_step(closure)
                self.scaler.update()
            finally:
                self._unscaled = False
            self._is_overflow = not self._step_called
            if self._is_overflow:
                return result
        steps = self._steps_taken = self._steps_taken + 1
        if steps == self._sentinel_at:
            self._sentinel_at = self._sentinel(self, steps)  # type: ignore[misc]
        return result

    @property
    def step_was_skipped(self) -> bool:
        """Whether the last ``step()`` was skipped because fp16 gradients overflowed."""
        return self._is_overflow

    # torch.optim.Optimizer's own pickling keeps only defaults/state/param_groups and patches the
    # class's ``step`` on unpickling; this wrapper's state is its attributes, the optimizer among them.
    # The sentinel belongs to the Accelerator of this process: a copy is not watched.
    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_sentinel": None, "_sentinel_at": 0}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update({"_steps_taken": 0, "_sentinel": None, "_sentinel_at": 0, **state})
