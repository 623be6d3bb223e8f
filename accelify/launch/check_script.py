"""The script ``accelify test`` launches: checks that distributed training works with this setup.

Run by every process; each check runs everywhere, and a check passes only if it passed on every
process. The main process writes the results as JSON to ``--report`` for the command to show:
``[{"name": ..., "passed": true, "detail": ...}, ...]``. The exit code is 1 if any check failed.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import traceback
from typing import Callable

import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import Accelerator


def check_processes(acc: Accelerator, expected: int) -> str:
    assert acc.num_processes == expected, f"{acc.num_processes} processes, expected {expected}"
    indices = acc.gather(torch.tensor([acc.process_index], device=acc.device)).tolist()
    assert sorted(indices) == list(range(expected)), f"process indices {indices}"
    return f"{expected} process(es) on {acc.device}, indices {sorted(indices)}"


def check_sharding(acc: Accelerator, expected: int) -> str:
    samples = 8 * expected
    loader = acc.prepare(DataLoader(TensorDataset(torch.arange(samples)), batch_size=2))
    seen = torch.cat([batch for (batch,) in loader])
    assert len(seen) == samples // expected, f"this process saw {len(seen)} samples, expected {samples // expected}"
    everyone = acc.gather(seen).tolist()
    assert sorted(everyone) == list(range(samples)), "samples were duplicated or lost across processes"
    return f"{samples} samples split {samples // expected} per process, none duplicated"


def check_collectives(acc: Accelerator, expected: int) -> str:
    rank = acc.process_index
    total = acc.reduce(torch.tensor([float(rank + 1)], device=acc.device), reduction="sum")
    assert total.item() == expected * (expected + 1) / 2, f"reduce(sum) gave {total.item()}"
    padded = acc.pad_across_processes(torch.ones(rank + 1, device=acc.device), dim=0)
    assert padded.shape[0] == expected, f"pad_across_processes gave shape {tuple(padded.shape)}"
    from accelify.runtime import broadcast

    value = broadcast(torch.tensor([float(rank)], device=acc.device), from_process=0)
    assert value.item() == 0.0, f"broadcast from process 0 gave {value.item()}"
    return "gather, reduce, pad_across_processes, broadcast"


def check_gradient_sync(acc: Accelerator, expected: int) -> str:
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    x = torch.full((2, 4), float(acc.process_index + 1), device=acc.device)
    acc.backward(model(x).sum())
    grad = acc.unwrap_model(model).weight.grad.detach().clone()
    grads = acc.gather(grad[None])
    assert torch.allclose(grads, grads[0].expand_as(grads)), "gradients differ between processes"
    mean_input = sum(range(1, expected + 1)) / expected
    assert torch.allclose(grad, torch.full_like(grad, 2 * mean_input)), f"gradient {grad.tolist()} is not averaged"
    optimizer.step()
    weights = acc.gather(acc.unwrap_model(model).weight.detach()[None])
    assert torch.allclose(weights, weights[0].expand_as(weights)), "weights differ after the step"
    return "gradients averaged over processes; weights equal after a step"


def check_save_on_main_only(acc: Accelerator, expected: int) -> str:
    folder = [tempfile.mkdtemp(prefix="accelify-test-") if acc.is_main_process else None]
    if acc.num_processes > 1:
        dist.broadcast_object_list(folder, src=0)
    path = os.path.join(folder[0], "saved.pt")
    acc.save({"writer": acc.process_index}, path)
    acc.wait_for_everyone()
    assert os.path.exists(path), "accelerator.save wrote nothing"
    writer = torch.load(path)["writer"]
    assert writer == 0, f"the file was written by process {writer}, not the main process"
    acc.wait_for_everyone()
    if acc.is_main_process:
        os.remove(path)
        os.rmdir(folder[0])
    return "accelerator.save writes once, from the main process"


CHECKS: list[tuple[str, Callable[[Accelerator, int], str]]] = [
    ("processes", check_processes),
    ("data sharding", check_sharding),
    ("collectives", check_collectives),
    ("gradient sync", check_gradient_sync),
    ("save on main only", check_save_on_main_only),
]


def all_passed(acc: Accelerator, ok: bool) -> bool:
    """True only if ``ok`` on every process (a plain all-reduce, independent of the checks)."""
    if acc.num_processes == 1:
        return ok
    flag = torch.tensor([0.0 if ok else 1.0], device=acc.device)
    dist.all_reduce(flag)
    return flag.item() == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--report", required=True)
    parser.add_argument("--expect-processes", type=int, required=True)
    opts = parser.parse_args()
    acc = Accelerator()
    results = []
    for name, check in CHECKS:
        try:
            detail, ok = check(acc, opts.expect_processes), True
        except Exception as exc:  # a failed check is a result; the next checks still run
            detail, ok = f"process {acc.process_index}: {type(exc).__name__}: {exc}", False
            print(f"[process {acc.process_index}] check {name!r} failed:\n{traceback.format_exc()}", flush=True)
        passed = all_passed(acc, ok)
        if not passed and ok:
            detail = "failed on another process (see its output above)"
        results.append({"name": name, "passed": passed, "detail": detail})
    if acc.is_main_process:
        with open(opts.report, "w", encoding="utf-8") as fh:
            json.dump(results, fh)
    acc.wait_for_everyone()
    return 0 if all(r["passed"] for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
