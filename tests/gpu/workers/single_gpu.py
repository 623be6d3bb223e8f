"""Run by tests/gpu/test_one_gpu.py as ``python single_gpu.py REPORT_DIR [--load-from DIR]``: one process, one GPU.

Checks, each reported by name (``<report dir>/rank0.json``): the device facts and decisions on a real GPU;
``prepare`` placing a model and a pinned, non-blocking loader on it; fp16 with a real overflow (the scaler
skips the step and lowers its scale, as Hugging Face Accelerate does, compared when it is installed); bf16
with the inner layers computing in bf16; a real CUDA out-of-memory halving in ``find_executable_batch_size``
with the memory freed between tries; ``save_state``/``load_state`` from the GPU to the CPU and back.
``REPORT_DIR/gpu_checkpoint`` is left for ``--load-from``: a process whose device is another GPU
(``LOCAL_RANK=1``) loads it onto its own GPU.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import torch
from report import Report
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import Accelerator, GradScalerKwargs, find_executable_batch_size
from accelify.runtime.devices import process_device, read_device_facts, read_gpu
from accelify.runtime.precision_rules import precision_allowed


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 2))


def facts_and_decisions() -> str:
    facts = read_device_facts()
    gpu = read_gpu(0)
    acc = Accelerator()
    assert facts.cuda_available and facts.gpu_count >= 1 and facts.nccl_available, facts
    assert acc.device == torch.device("cuda", 0) and acc.distributed_type.value == "NO", (acc.device, acc.distributed_type)
    assert process_device(facts, cpu=False, local_rank=0, world_size=1) == ("cuda", 0)
    if gpu.bf16:
        assert precision_allowed("bf16", "cuda", autocast_runs=True, gpu_bf16=gpu.bf16) == "bf16"
    return f"{facts}; {gpu}"


def prepare_places_on_the_gpu() -> str:
    config = types.SimpleNamespace(non_blocking=True, split_batches=False, even_batches=True, dispatch_batches=None)
    acc = Accelerator(dataloader_config=config)
    data = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model, optimizer, loader = acc.prepare(model, optimizer, DataLoader(data, batch_size=16, pin_memory=True))
    assert all(p.device == acc.device for p in model.parameters())
    assert loader.pin_memory and loader.non_blocking, (loader.pin_memory, loader.non_blocking)
    for x, y in loader:
        assert x.device == acc.device and y.device == acc.device
        acc.backward(nn.functional.cross_entropy(model(x), y))
        optimizer.step()
        optimizer.zero_grad()
    state = optimizer.state[next(iter(model.parameters()))]
    assert state["exp_avg"].device == acc.device
    return f"model, AdamW state and pinned non-blocking batches on {acc.device}"


def overflowing_step(acc: Any, model: nn.Module, optimizer: Any, scheduler: Any) -> torch.Tensor:
    """A step whose fp16 values overflow for real: the forward's 8 * 300 * 300 = 720000 and the weight's gradient
    4 * 1024 * 300 exceed 65504, the fp16 maximum (in fp32 both would be finite)."""
    x = torch.full((4, 8), 300.0, device=acc.device)
    out = model(x)
    acc.backward(out.float().sum())
    optimizer.step()
    scheduler.step()
    optimizer.zero_grad()
    return out


def fp16_overflow() -> str:
    acc = Accelerator(mixed_precision="fp16", kwargs_handlers=[GradScalerKwargs(init_scale=1024.0)])
    model = nn.Linear(8, 8)
    with torch.no_grad():
        model.weight.fill_(300.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    before = [p.detach().clone() for p in model.parameters()]
    out = overflowing_step(acc, model, optimizer, scheduler)
    assert torch.isinf(out).all() and out.dtype == torch.float32, out  # computed in fp16, handed back as fp32
    assert acc.optimizer_step_was_skipped, "the overflowing step was not skipped"
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters())), "an overflowing step changed weights"
    assert acc.scaler.get_scale() == 512.0, acc.scaler.get_scale()  # backoff_factor 0.5
    assert scheduler.get_last_lr() == [0.1], scheduler.get_last_lr()  # the scheduler did not step either
    acc.backward(model(torch.full((4, 8), 1e-3, device=acc.device)).sum())
    optimizer.step()
    scheduler.step()
    assert not acc.optimizer_step_was_skipped and not torch.equal(before[0], model.weight)
    return "overflow in fp16 activations: step skipped, weights kept, scale 1024 -> 512, scheduler held; next step applied"


def fp16_overflow_like_accelerate() -> str:
    try:
        from accelerate import Accelerator as HFAccelerator
        from accelerate.utils import GradScalerKwargs as HFGradScalerKwargs
    except ImportError:
        return "SKIP: Hugging Face Accelerate is not installed"
    acc = HFAccelerator(mixed_precision="fp16", kwargs_handlers=[HFGradScalerKwargs(init_scale=1024.0)])
    model = nn.Linear(8, 8)
    with torch.no_grad():
        model.weight.fill_(300.0)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    model, optimizer, scheduler = acc.prepare(model, optimizer, scheduler)
    before = [p.detach().clone() for p in model.parameters()]
    assert torch.isinf(overflowing_step(acc, model, optimizer, scheduler)).all()
    assert acc.optimizer_step_was_skipped and acc.scaler.get_scale() == 512.0, acc.scaler.get_scale()
    assert all(torch.equal(a, b) for a, b in zip(before, model.parameters()))
    return "Hugging Face Accelerate on the same step: skipped, scale 1024 -> 512 (the same as accelify)"


def bf16_inner_layers() -> str:
    acc = Accelerator(mixed_precision="bf16")
    model = make_model()
    seen: dict[str, torch.dtype] = {}
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            module.register_forward_hook(lambda m, args, out, name=name: seen.__setitem__(name, out.dtype))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    model, optimizer = acc.prepare(model, optimizer)
    out = model(torch.randn(4, 8, device=acc.device))
    assert set(seen.values()) == {torch.bfloat16}, seen  # every Linear computed in bf16
    assert out.dtype == torch.float32, out.dtype  # the prepared model hands back fp32, as Accelerate does
    acc.backward(out.sum())
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    optimizer.step()
    assert acc.scaler is None, "bf16 needs no GradScaler"
    return f"inner layers {sorted(seen)} computed in bf16, output fp32, weights and gradients fp32, no scaler"


def oom_halving() -> str:
    free, _ = torch.cuda.mem_get_info()
    chunk = free // 100 * 8  # a batch of 8 items: a batch of 1024 needs ~10x the free memory, 64 about 0.64x
    acc = Accelerator()
    model = acc.prepare(make_model())
    torch.cuda.synchronize()
    baseline = torch.cuda.memory_allocated()
    tried: list[int] = []
    leftovers: list[int] = []

    @find_executable_batch_size(starting_batch_size=1024)
    def inner(batch_size: int) -> int:
        nonlocal acc
        acc.free_memory()
        leftovers.append(torch.cuda.memory_allocated() - baseline)  # what earlier tries left behind
        tried.append(batch_size)
        held = []  # filled chunk by chunk: when one does not fit, the others are still held by this frame
        for _ in range(batch_size // 8):
            held.append(torch.ones(chunk, dtype=torch.uint8, device=acc.device))
        return batch_size

    found = inner()
    assert tried == [1024, 512, 256, 128, 64] and found == 64, tried
    assert all(left < 2**20 for left in leftovers), f"memory held across tries: {leftovers}"
    torch.cuda.synchronize()
    assert torch.cuda.memory_allocated() - baseline < 2**20, "the last try's memory was not freed"
    del model
    return f"batch sizes tried {tried} (real CUDA OOMs down to 64), at most {max(leftovers)} bytes left between tries"


def train_a_little(acc: Accelerator) -> tuple[nn.Module, torch.optim.Optimizer]:
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    model, optimizer = acc.prepare(model, optimizer)
    for step in range(3):
        x = torch.randn(8, 8, device=acc.device)
        with acc.autocast():
            loss = model(x).pow(2).mean()
        acc.backward(loss)
        optimizer.step()
        optimizer.zero_grad()
    return model, optimizer


def state_devices(model: nn.Module, optimizer) -> set[str]:
    devices = {str(p.device) for p in model.parameters()}
    for state in optimizer.state.values():
        devices |= {str(v.device) for v in state.values() if isinstance(v, torch.Tensor) and v.dim() > 0}
    return devices


def checkpoint_gpu_to_cpu(folder: Path) -> str:
    gpu = Accelerator(mixed_precision="fp16")
    model, optimizer = train_a_little(gpu)
    saved = {k: v.detach().cpu().clone() for k, v in model.state_dict().items()}
    gpu.save_state(folder / "gpu_checkpoint")
    cpu = Accelerator(cpu=True, mixed_precision="fp16")
    cpu_model, cpu_optimizer = train_a_little(cpu)  # different weights, now replaced by the GPU's
    cpu.load_state(folder / "gpu_checkpoint")
    assert state_devices(cpu_model, cpu_optimizer) == {"cpu"}, state_devices(cpu_model, cpu_optimizer)
    assert all(torch.equal(v, saved[k]) for k, v in cpu_model.state_dict().items())
    assert cpu.scaler.get_scale() == gpu.scaler.get_scale(), (cpu.scaler.get_scale(), gpu.scaler.get_scale())
    return "written on cuda:0, loaded into a CPU accelerator: weights equal, optimizer state and scaler on the CPU"


def checkpoint_cpu_to_gpu(folder: Path) -> str:
    cpu = Accelerator(cpu=True)
    cpu_model, _ = train_a_little(cpu)
    saved = {k: v.detach().clone() for k, v in cpu_model.state_dict().items()}
    cpu.save_state(folder / "cpu_checkpoint")
    gpu = Accelerator()
    model, optimizer = train_a_little(gpu)
    gpu.load_state(folder / "cpu_checkpoint", map_location="on_device")
    assert state_devices(model, optimizer) == {str(gpu.device)}, state_devices(model, optimizer)
    assert all(torch.equal(v.cpu(), saved[k]) for k, v in model.state_dict().items())
    return f"written on the CPU, loaded with map_location='on_device': everything on {gpu.device}"


def load_from(folder: Path) -> str:
    """In a process whose device is the second GPU: a checkpoint written on the first."""
    acc = Accelerator(mixed_precision="fp16")
    assert acc.device == torch.device("cuda", 1), acc.device
    model, optimizer = train_a_little(acc)
    acc.load_state(folder)
    assert state_devices(model, optimizer) == {"cuda:1"}, state_devices(model, optimizer)
    return "written on cuda:0, loaded on cuda:1: weights and optimizer state on cuda:1"


def main(folder: Path, load: Path | None) -> None:
    report = Report(str(folder), 0)
    if load is not None:
        report.check("checkpoint from another GPU", lambda: load_from(load))
        report.write()
        return
    for name, check in [("facts and decisions", facts_and_decisions),
                        ("prepare places on the GPU", prepare_places_on_the_gpu),
                        ("fp16 overflow", fp16_overflow), ("fp16 overflow like Accelerate", fp16_overflow_like_accelerate),
                        ("bf16 inner layers", bf16_inner_layers), ("out-of-memory halving", oom_halving),
                        ("checkpoint GPU to CPU", lambda: checkpoint_gpu_to_cpu(folder)),
                        ("checkpoint CPU to GPU", lambda: checkpoint_cpu_to_gpu(folder))]:
        report.check(name, check)
    report.write()


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[3]) if sys.argv[2:3] == ["--load-from"] else None)
