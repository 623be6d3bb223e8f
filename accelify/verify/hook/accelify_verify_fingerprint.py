"""Fingerprints of parameters for the recorder's ``step`` events (``accelify_verify_recorder.py``): a sample of
the values, the exact sum and a sample of the gradient, packed as float64 bytes in base64.

A full fingerprint (the steps verify compares value by value) is made per tensor. A sparse one (the steps between,
up to thousands a run: a few values and the sum of each tensor) is made for all the optimizer's tensors at once, in
three torch calls and one conversion to Python floats, written as a JSON list: per tensor, it cost more than the
script's own step on a small model. The evenly spaced indices of a sample are made once per size.

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
        index = _INDICES[key] = torch.linspace(0, count - 1, size, device=device).round().long()
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


def sparse_fingerprints(torch: ModuleType, parameters: list[Any], budget: int, owners: Any) -> list[dict[str, Any]]:
    """:func:`fingerprint` without gradients for every one of ``parameters`` at once (``budget`` values each, or
    all of a smaller tensor), the same values and sums."""
    flats, samples, counts, sharded = [], [], [], []
    for parameter in parameters:
        flat, part = _local(parameter)
        count = flat.numel()
        flats.append(flat)
        counts.append(count)
        sharded.append(part)
        samples.append(flat.index_select(0, _indices(torch, count, budget, flat.device)) if count > budget else flat)
    if not flats:
        return []
    devices = {flat.device for flat in flats}
    if len(devices) > 1 or any(flat.dtype != flats[0].dtype for flat in flats):  # one cat needs one device and dtype
        return [fingerprint(torch, p, budget, False, owners) for p in parameters]
    with torch.no_grad():
        sums = torch.stack([flat.double().sum() if flat.numel() else flat.new_zeros((), dtype=torch.float64)
                            for flat in flats]).tolist()
        values = torch.cat(samples).double().tolist()
    found, start = [], 0
    for parameter, count, part, sample, total in zip(parameters, counts, sharded, samples, sums):
        size = sample.numel()
        found.append({
            "shape": list(parameter.shape),
            "numel": count,
            "sum": total if count else 0.0,
            "values": values[start:start + size],
            "sampled": count > budget,
            "grad": parameter.grad is not None,
            "grads": "",
            "wrapper": "sharded" if part else owners.get(parameter),
        })
        start += size
    return found


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
