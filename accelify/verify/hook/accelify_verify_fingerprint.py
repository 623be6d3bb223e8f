"""Fingerprints of parameters for the recorder's ``step`` events (``accelify_verify_recorder.py``): a sample of
the values, the exact sum and a sample of the gradient, packed as float64 bytes in base64.

Like the recorder, this module imports nothing of accelify.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

GRADS_PER_TENSOR = 1024  # gradient values recorded per parameter tensor (evenly spaced)


def fingerprint(torch: ModuleType, parameter: Any, budget: int, grads_too: bool, owners: Any) -> dict[str, Any]:
    """A parameter after a step: its values (all up to ``budget``, evenly spaced ones beyond) and exact sum, up to
    ``GRADS_PER_TENSOR`` gradient values (``grads_too``), and the DDP wrapper ``owners`` says holds it."""
    tensor = parameter.detach()
    sharded = type(tensor).__name__ == "DTensor"
    if sharded:
        tensor = tensor.to_local()
    flat = tensor.reshape(-1)
    count = flat.numel()
    if count > budget:
        index = torch.linspace(0, count - 1, budget, device=flat.device).round().long()
        sample = flat.index_select(0, index)
    else:
        sample = flat
    grads = ""
    if grads_too and parameter.grad is not None and type(parameter.grad).__name__ != "DTensor":
        grad = parameter.grad.detach().reshape(-1)
        if grad.numel() > GRADS_PER_TENSOR:
            grad = grad.index_select(0, torch.linspace(0, count - 1, GRADS_PER_TENSOR,
                                                       device=grad.device).round().long())
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
