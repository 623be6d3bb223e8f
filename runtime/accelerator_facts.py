"""The Accelerator's facts about this process: rank, device, world size, precision, read from its state.

A base class of :class:`~.accelerator.Accelerator` (its attributes, grouped by job): read-only
properties that read only the Accelerator's public ``state`` (an :class:`~.state.AcceleratorState`).
"""

from __future__ import annotations


class AcceleratorFacts:
    """``Accelerator.device``, ``process_index``, ``num_processes``, ``is_main_process`` and the like."""

    device = property(lambda self: self.state.device, doc="The device this process trains on (cuda:<local rank> or cpu).")
    process_index = property(lambda self: self.state.process_index, doc="This process's rank (0 .. num_processes-1).")
    local_process_index = property(lambda self: self.state.local_process_index, doc="Rank within this machine.")
    num_processes = property(lambda self: self.state.num_processes, doc="How many processes train together.")
    is_main_process = property(lambda self: self.state.is_main_process, doc="True on process 0 only.")
    is_local_main_process = property(lambda self: self.state.is_local_main_process, doc="True on local rank 0.")
    is_last_process = property(lambda self: self.state.is_last_process, doc="True on the last process.")
    use_distributed = property(lambda self: self.state.use_distributed, doc="True with more than one process.")
    distributed_type = property(lambda self: self.state.distributed_type, doc="NO, MULTI_CPU, MULTI_GPU or FSDP.")
    mixed_precision = property(lambda self: self.state.mixed_precision, doc="'no', 'fp16' or 'bf16'.")
    use_fsdp = property(lambda self: self.state.use_fsdp, doc="True when models are sharded with FSDP2.")
