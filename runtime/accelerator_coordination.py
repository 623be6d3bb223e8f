"""The Accelerator's methods for processes acting together: collectives, coordination and the trigger.

A base class of :class:`~.accelerator.Accelerator` (its methods, grouped by job). The collectives
delegate to :mod:`.ops`; ``wait_for_everyone``, ``main_process_first``, ``print`` and the
``on_*`` decorators are :class:`~.state.PartialState`'s, on the Accelerator's ``state``. It reads
only the Accelerator's public attributes: ``state``, ``device``, ``use_distributed`` and
``flag_tensor`` (the trigger, which it also sets).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import torch

from .state import PartialState


def _state_method(name: str) -> Callable[..., Any]:
    """An Accelerator method that calls ``PartialState.<name>`` on ``self.state`` (same signature and docs)."""
    target = getattr(PartialState, name)

    @functools.wraps(target)
    def method(self: "AcceleratorCoordination", *args: Any, **kwargs: Any) -> Any:
        return getattr(self.state, name)(*args, **kwargs)

    return method


class AcceleratorCoordination:
    """``Accelerator.gather``, ``reduce``, ``wait_for_everyone``, ``set_trigger``/``check_trigger`` and the like."""

    def gather(self, tensor: Any) -> Any:
        """Concatenate ``tensor`` from every process (see ``accelify.runtime.gather``)."""
        from . import ops

        return ops.gather(tensor)

    def reduce(self, tensor: Any, reduction: str = "sum", scale: float = 1.0) -> Any:
        """Sum/mean/max ``tensor`` over processes (see ``accelify.runtime.reduce``)."""
        from . import ops

        return ops.reduce(tensor, reduction, scale)

    def pad_across_processes(self, tensor: Any, dim: int = 0, pad_index: int = 0, pad_first: bool = False) -> Any:
        """Pad ``tensor`` to the largest size along ``dim`` on any process."""
        from . import ops

        return ops.pad_across_processes(tensor, dim=dim, pad_index=pad_index, pad_first=pad_first)

    def gather_for_metrics(self, input_data: Any, use_gather_object: bool = False) -> Any:
        """Gather for evaluation, dropping the samples duplicated to even out the last batch.

        With two processes and 10 samples in batches of 3, the last step gathers ``[6,7,8]`` and
        ``[9,0,1]`` and returns ``[6,7,8,9]``; objects that are not tensors go through ``gather_object``.
        """
        from . import ops

        return ops.gather_for_metrics(input_data, use_gather_object)

    # -- coordination -----------------------------------------------------------------------
    # wait_for_everyone, main_process_first, print, on_main_process, split_between_processes...:
    # the process-level coordination of PartialState (see its docstrings), on this accelerator's state.
    wait_for_everyone = _state_method("wait_for_everyone")
    main_process_first = _state_method("main_process_first")
    local_main_process_first = _state_method("local_main_process_first")
    split_between_processes = _state_method("split_between_processes")
    print = _state_method("print")
    on_main_process = _state_method("on_main_process")
    on_local_main_process = _state_method("on_local_main_process")
    on_last_process = _state_method("on_last_process")
    on_process = _state_method("on_process")
    on_local_process = _state_method("on_local_process")

    def set_trigger(self) -> None:
        """Raise this process's flag; the next ``check_trigger()`` on every process returns True.

        With two processes, if process 1 calls ``set_trigger()`` (say, its loss went NaN), then
        ``if accelerator.check_trigger(): break`` stops the loop on both.
        """
        self.flag_tensor = torch.ones((), dtype=torch.int32, device=self.device)

    def check_trigger(self) -> bool:
        """True on every process if any process called ``set_trigger()`` since the last check (which resets it)."""
        flag = self.flag_tensor if self.flag_tensor is not None else torch.zeros((), dtype=torch.int32, device=self.device)
        if self.use_distributed:
            import torch.distributed as dist

            flag = flag.clone()
            dist.all_reduce(flag)
        self.flag_tensor = None
        return bool(flag.item() >= 1)

    set_breakpoint = set_trigger  # the older names in Hugging Face's troubleshooting guide
    check_breakpoint = check_trigger
