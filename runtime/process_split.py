"""Dividing inputs between processes: the share each process gets in ``split_between_processes``.

With two processes, ``["a", "b", "c"]`` gives process 0 ``["a", "b"]`` and process 1 ``["c"]``
(``["c", "c"]`` with padding). :meth:`~.state.PartialState.split_between_processes` is its user.
"""

from __future__ import annotations

from typing import Any, Mapping

import torch

from .errors import ConfigurationError


def split_inputs(inputs: Any, n: int, index: int, pad: bool) -> Any:
    """Process ``index`` of ``n``'s contiguous share of ``inputs`` (padded with the last item when ``pad``)."""
    if n == 1:
        return inputs
    if isinstance(inputs, Mapping):
        lengths = {len(v) for v in inputs.values()}
        if len(lengths) > 1:
            raise ConfigurationError(
                f"split_between_processes got a dict whose values have different lengths {sorted(lengths)}; "
                "every value must have the same length."
            )
        return type(inputs)({k: split_inputs(v, n, index, pad) for k, v in inputs.items()})  # type: ignore[call-arg]
    if not hasattr(inputs, "__len__") or not hasattr(inputs, "__getitem__"):
        raise ConfigurationError(
            f"split_between_processes cannot split a {type(inputs).__name__}; pass a list, tuple, dict or tensor."
        )
    length = len(inputs)
    per, extra = divmod(length, n)
    start = index * per + min(index, extra)
    end = start + per + (1 if index < extra else 0)
    part = inputs[start:end]
    if pad and length > 0:
        target = per + (1 if extra else 0)
        missing = target - (end - start)
        if missing > 0:
            last = inputs[-1:]
            if isinstance(inputs, torch.Tensor):
                part = torch.cat([part, last.repeat(missing, *([1] * (inputs.dim() - 1)))])
            else:
                part = part + type(part)(list(last) * missing)
    return part
