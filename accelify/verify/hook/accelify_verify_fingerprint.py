"""Fingerprints of parameters for the recorder's ``step`` events (``accelify_verify_recorder.py``): a sample of
the values, the exact sum and a sample of the gradient, packed as float64 bytes in base64.

A full fingerprint (the steps verify compares value by value) is made per tensor. A sparse one (the steps between,
up to thousands a run: a few values and the sum of each tensor) is made for all the optimizer's tensors at once, in
three torch calls and one conversion to Python floats, and written by columns (one list per field, not one dict per
tensor: a third of the bytes to encode, and to read back): per tensor, it cost more than the script's own step on a
small model. The evenly spaced indices of a sample are made once per size.

Like the recorder, this module imports nothing of accelify.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

GRADS_PER_TENSOR = 1024  # gradient values recorded per parameter tensor (evenly spaced)
_INDICES: dict[tuple[int, int, Any], Any] = {}  # (values, sample size, device) -> the sample's indices


def _indices(torch: ModuleType, count: int, size: int, device: Any) -> Any:
    """``size`` evenly spaced indices into ``count`` values (made once per size and device)."""
    key = (count, size, device)
    index = _INDICES.get(key)
    if index is None:
        # integers, rounded to the nearest (a float32 ``linspace`` rounds the last index to ``count`` past 2**24
        # values: set U's U1, a 102,760,448-value layer, failed in this hook)
        steps = max(size - 1, 1)
        index = _INDICES[key] = (torch.arange(size, device=device, dtype=torch.int64) * (count - 1) + steps // 2) // steps
    return index


def _local(parameter: Any) -> tuple[Any, bool]:
    """The parameter's values here, flat, and whether it is sharded (an FSDP2 DTensor: this process's part)."""
    tensor = parameter.detach()
    sharded = type(tensor).__name__ == "DTensor"
    if sharded:
        tensor = tensor.to_local()
    return tensor.reshape(-1), sharded


def fingerprint(torch: ModuleType, parameter: Any, budget: int, grads_too: bool, owners: Any) -> dict[str, Any]:
    """A parameter after a step: its values (all up to ``budget``, evenly spaced ones beyond) and exact sum, up to
    ``GRADS_PER_TENSOR`` gradient values (``grads_too``), and the DDP wrapper ``owners`` says holds it."""
    flat, sharded = _local(parameter)
    count = flat.numel()
    sample = flat.index_select(0, _indices(torch, count, budget, flat.device)) if count > budget else flat
    grads = ""
    if grads_too and parameter.grad is not None and type(parameter.grad).__name__ != "DTensor":
        grad = parameter.grad.detach().reshape(-1)
        if grad.numel() > GRADS_PER_TENSOR:
            grad = grad.index_select(0, _indices(torch, count, GRADS_PER_TENSOR, grad.device))
        grads = packed(grad)
    owner = "sharded" if sharded else owners.get(parameter)
    return {
        "shape": list(parameter.shape),
        "numel": count,
        "sum": float(flat.double().sum().item()) if count else 0.0,
        "values": packed(sample),
        "sampled": count > budget,
        "grad": parameter.grad is not None,
        "grads": grads,
        "wrapper": owner,
    }


def sparse_fingerprints(torch: ModuleType, parameters: list[Any], budget: int,
                        owners: Any) -> dict[str, Any] | list[dict[str, Any]]:
    """:func:`fingerprint` without gradients for every one of ``parameters`` at once (``budget`` values each, or
    all of a smaller tensor), the same values and sums, by columns: ``{"budget", "shape", "numel", "sum", "values",
    "grad", "wrapper"}``, one entry per tensor (``numel``: this process's part of a sharded one; ``values``: the
    samples one after the other, ``min(numel, budget)`` each). A list of :func:`fingerprint` dicts where one
    concatenation cannot hold them (several devices or dtypes)."""
    flats, samples, shapes, counts, grads, wrappers = [], [], [], [], [], []
    for parameter in parameters:
        flat, part = _local(parameter)
        count = flat.numel()
        flats.append(flat)
        samples.append(flat.index_select(0, _indices(torch, count, budget, flat.device)) if count > budget else flat)
        shapes.append(list(parameter.shape))
        counts.append(count)
        grads.append(parameter.grad is not None)
        wrappers.append("sharded" if part else owners.get(parameter))
    if not flats:
        return []
    dtype, device = flats[0].dtype, flats[0].device
    if any(flat.dtype != dtype or flat.device != device for flat in flats):  # one cat needs one device and dtype
        return [fingerprint(torch, p, budget, False, owners) for p in parameters]
    with torch.no_grad():
        sums = torch.stack([flat.double().sum() if flat.numel() else flat.new_zeros((), dtype=torch.float64)
                            for flat in flats]).tolist()
        values = torch.cat(samples).double().tolist()
    return {"budget": budget, "shape": shapes, "numel": counts, "sum": sums, "values": values, "grad": grads,
            "wrapper": wrappers}


def packed(tensor: Any) -> str:
    """A tensor's values as float64 bytes (this machine's order) in base64: JSON floats cost more than the training
    step when written for thousands of values a step; ``records.py`` unpacks them."""
    import base64

    data = tensor.detach().double().cpu().contiguous()
    try:
        raw = data.numpy().tobytes()
    except Exception:  # torch without numpy
        from array import array

        raw = array("d", data.tolist()).tobytes()
    return base64.b64encode(raw).decode("ascii")
