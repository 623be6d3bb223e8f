"""Collectives: one-process results, argument errors, and one 2-process launch (workers/ops_collectives.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from accelify.runtime import broadcast, broadcast_object_list, gather, gather_object, pad_across_processes, reduce
from accelify.runtime.errors import ConfigurationError

WORKERS = Path(__file__).parent / "workers"


def test_one_process_gather_returns_the_input_as_a_one_process_result() -> None:
    assert gather(torch.tensor(3.0)).tolist() == [3.0]
    t = torch.arange(4).reshape(2, 2)
    assert gather(t) is t
    out = gather({"a": [t, (torch.tensor(1),)]})
    assert out["a"][0] is t and out["a"][1][0].tolist() == [1]
    with pytest.raises(TypeError, match="gather_object"):
        gather({"a": "text"})


def test_one_process_reduce_copies_and_scales() -> None:
    t = torch.tensor([1.0, 2.0])
    for how in ("sum", "mean", "max", "min", "none"):
        out = reduce(t, how)
        assert out.tolist() == [1.0, 2.0] and out is not t
    assert reduce(t, scale=2.0).tolist() == [2.0, 4.0]
    assert reduce(torch.tensor([3]), "mean").dtype.is_floating_point
    with pytest.raises(ConfigurationError, match="reduction='avg'"):
        reduce(t, "avg")


def test_one_process_broadcast_pad_and_objects() -> None:
    t = torch.ones(2, 3)
    assert broadcast(t) is t
    assert pad_across_processes(t, dim=1) is t
    assert pad_across_processes({"x": t, "y": "kept"})["y"] == "kept"
    assert gather_object([1, 2]) == [1, 2] and gather_object("a") == ["a"]
    items = ["a", 1]
    assert broadcast_object_list(items) is items


@pytest.mark.multiprocess
def test_two_processes(run_distributed) -> None:
    proc = run_distributed(WORKERS / "ops_collectives.py")
    assert proc.stdout.count("OPS-OK") == 2, proc.stdout + proc.stderr
