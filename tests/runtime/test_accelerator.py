"""The Accelerator facade: one process in-process, and two Gloo processes through one launched worker."""

from __future__ import annotations

import json
import os
import pickle
import random
from pathlib import Path

import numpy as np
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader

from accelify.runtime import (
    AcceleratedOptimizer,
    AcceleratedScheduler,
    Accelerator,
    ConfigurationError,
    DataLoaderShard,
    DistributedDataParallelKwargs,
    DistributedType,
    set_seed,
)

WORKERS = Path(__file__).parent / "workers"


@pytest.mark.multiprocess
def test_two_processes(run_distributed, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """torchrun, 2 CPU processes, cpu=False: MULTI_CPU, synced gradients, collectives, coordination, saving."""
    proc = run_distributed(WORKERS / "accelerator_worker.py", str(tmp_path))
    assert proc.stdout.count("ACCELERATOR-WORKER-OK") == 2, proc.stdout + proc.stderr
    assert proc.stdout.count("PRINTED-ONCE") == 1, proc.stdout  # print: once per machine
    # the group the runtime opened is closed at exit (after a gc pass), not left to the interpreter's teardown
    assert proc.stdout.count("GROUP-OPEN-AT-EXIT False") == 2, proc.stdout


def _env(monkeypatch: pytest.MonkeyPatch, **values: str) -> None:
    for key in list(os.environ):
        if key.startswith(("ACCELIFY_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    for key, value in values.items():
        monkeypatch.setenv(key, value)


def test_settings_precedence(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """explicit argument > launch file > ACCELIFY_* > ACCELERATE_* > default."""
    _env(monkeypatch)
    assert Accelerator(cpu=True).mixed_precision == "no" and Accelerator(cpu=True).gradient_accumulation_steps == 1
    _env(monkeypatch, ACCELERATE_MIXED_PRECISION="fp16", ACCELERATE_GRADIENT_ACCUMULATION_STEPS="2")
    assert (Accelerator(cpu=True).mixed_precision, Accelerator(cpu=True).gradient_accumulation_steps) == ("fp16", 2)
    monkeypatch.setenv("ACCELIFY_MIXED_PRECISION", "bf16")
    monkeypatch.setenv("ACCELIFY_GRADIENT_ACCUMULATION_STEPS", "3")
    assert (Accelerator(cpu=True).mixed_precision, Accelerator(cpu=True).gradient_accumulation_steps) == ("bf16", 3)
    launch = tmp_path / "launch.yaml"
    launch.write_text("mixed_precision: fp16\ngradient_accumulation_steps: 4\n")
    monkeypatch.setenv("ACCELIFY_LAUNCH_CONFIG", str(launch))
    acc = Accelerator(cpu=True)
    assert (acc.mixed_precision, acc.gradient_accumulation_steps) == ("fp16", 4) and acc.scaler is not None
    acc = Accelerator(cpu=True, mixed_precision="no", gradient_accumulation_steps=5)
    assert (acc.mixed_precision, acc.gradient_accumulation_steps, acc.scaler) == ("no", 5, None)
    monkeypatch.setenv("ACCELIFY_USE_CPU", "1")
    monkeypatch.setenv("ACCELIFY_DEBUG_MODE", "true")
    assert Accelerator().device == torch.device("cpu") and Accelerator().state.debug is True
    assert Accelerator(debug=False).state.debug is False  # the latest accelerator sets the process-wide flag


def test_constructor_rejects_what_it_does_not_support() -> None:
    with pytest.raises(ConfigurationError, match="deepspeed_plugin"):
        Accelerator(deepspeed_plugin=object())
    with pytest.raises(TypeError, match="bogus"):
        Accelerator(bogus=1)
    with pytest.raises(ConfigurationError, match="kwargs_handlers"):
        Accelerator(kwargs_handlers=[object()])
    with pytest.raises(ConfigurationError, match="two DistributedDataParallelKwargs"):
        Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(), DistributedDataParallelKwargs()])
    with pytest.raises(ConfigurationError, match="mixed_precision='fp8'"):
        Accelerator(cpu=True, mixed_precision="fp8")
    with pytest.raises(ConfigurationError, match="gradient_accumulation_steps"):
        Accelerator(cpu=True, gradient_accumulation_steps=0)
    with pytest.raises(TypeError):
        Accelerator(True)  # keyword-only, as documented


def test_prepare_single_process() -> None:
    acc = Accelerator(cpu=True)
    assert acc.distributed_type == DistributedType.NO and acc.num_processes == 1 and acc.is_main_process
    model = nn.Linear(3, 1)
    opt = torch.optim.AdamW(model.parameters(), lr=0.1)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda step: 0.5**step)
    loader = DataLoader(list(range(6)), batch_size=2)
    pm, popt, pl, ps, nothing = acc.prepare(model, opt, loader, sched, None)
    assert pm is model and acc.unwrap_model(pm) is model  # one process: the user's own module
    assert isinstance(popt, AcceleratedOptimizer) and isinstance(popt, torch.optim.Optimizer)
    assert isinstance(pl, DataLoaderShard) and isinstance(ps, AcceleratedScheduler) and nothing is None
    assert acc.prepare(popt) is popt and acc.prepare(pm) is pm and acc.prepare(ps) is ps
    assert len(acc._optimizers) == 1 and len(acc._models) == 1
    assert [b.tolist() for b in pl] == [[0, 1], [2, 3], [4, 5]]
    # the optimizer wrapper is transparent
    assert popt.param_groups is opt.param_groups and popt.defaults is opt.defaults
    acc.backward(pm(torch.ones(2, 3)).sum())
    popt.step()
    ps.step()
    assert popt.state is opt.state and popt.state_dict()["state"] and ps.get_last_lr() == [0.05]
    popt.zero_grad()
    assert model.weight.grad is None
    popt.zero_grad(set_to_none=False)
    assert not acc.optimizer_step_was_skipped
    assert pickle.loads(pickle.dumps(popt)).state_dict()["param_groups"][0]["lr"] == 0.05


def test_clip_single_process() -> None:
    acc = Accelerator(cpu=True)
    model = acc.prepare(nn.Linear(4, 1, bias=False))
    model.weight.grad = torch.full((1, 4), 3.0)
    norm = acc.clip_grad_norm_(model.parameters(), 1.0)
    assert torch.isclose(norm, torch.tensor(6.0)) and torch.isclose(model.weight.grad.norm(), torch.tensor(1.0))
    acc.clip_grad_value_(model.parameters(), 0.1)
    assert model.weight.grad.abs().max() <= 0.1 + 1e-7


def test_gather_trigger_and_helpers_single_process() -> None:
    acc = Accelerator(cpu=True)
    assert acc.gather(torch.tensor(3)).tolist() == [3]
    assert acc.gather_for_metrics(["a", "b"]) == ["a", "b"]
    assert acc.gather_for_metrics((torch.ones(2), torch.zeros(2)))[0].tolist() == [1.0, 1.0]
    assert acc.reduce(torch.tensor(2.0), "mean").item() == 2.0
    assert acc.check_trigger() is False
    acc.set_trigger()
    assert acc.check_trigger() is True and acc.check_trigger() is False
    with acc.autocast():
        pass
    acc.prepare(nn.Linear(1, 1))
    a, b = acc.free_memory(object(), object())
    assert a is None and b is None and acc._models == []


def test_save_is_atomic_and_save_model_shards(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    acc.save({"x": torch.arange(3)}, tmp_path / "ckpt.pt")
    assert torch.load(tmp_path / "ckpt.pt")["x"].tolist() == [0, 1, 2]
    assert os.listdir(tmp_path) == ["ckpt.pt"]  # no temp file left behind
    acc.save({"w": torch.ones(2)}, tmp_path / "w.safetensors", safe_serialization=True)
    from safetensors.torch import load_file

    assert load_file(tmp_path / "w.safetensors")["w"].tolist() == [1.0, 1.0]

    model = nn.Sequential(nn.Linear(8, 8), nn.Linear(8, 8))
    acc.save_model(model, tmp_path / "one")
    assert os.listdir(tmp_path / "one") == ["model.safetensors"]
    acc.save_model(model, tmp_path / "sharded", max_shard_size="300B")
    files = sorted(os.listdir(tmp_path / "sharded"))
    assert "model.safetensors.index.json" in files and "model-00002-of-00002.safetensors" in files, files
    index = json.loads((tmp_path / "sharded" / "model.safetensors.index.json").read_text())
    merged = {}
    for name in set(index["weight_map"].values()):
        merged.update(load_file(tmp_path / "sharded" / name))
    assert all(torch.equal(merged[k], v) for k, v in model.state_dict().items())
    acc.save_model(model, tmp_path / "bin", safe_serialization=False)
    assert os.listdir(tmp_path / "bin") == ["pytorch_model.bin"]
    with pytest.raises(ConfigurationError, match="max_shard_size"):
        acc.save_model(model, tmp_path / "bad", max_shard_size="lots")
    tied = nn.Linear(2, 2)
    shared = nn.Module()
    shared.a, shared.b = tied, tied  # tied weights are written once (safetensors refuses aliases)
    acc.save_model(shared, tmp_path / "tied")
    assert set(load_file(tmp_path / "tied" / "model.safetensors")) == {"a.weight", "a.bias"}


def test_set_seed_seeds_everything() -> None:
    def draw() -> tuple[float, float, float]:
        return random.random(), float(np.random.rand()), float(torch.rand(1))

    set_seed(7)
    first = draw()
    set_seed(7)
    assert draw() == first
    set_seed(7, device_specific=True)  # process 0 of 1: the same seed
    assert draw() == first


def test_one_process_fsdp_plugin_and_skip_first_batches() -> None:
    from accelify.runtime import FullyShardedDataParallelPlugin

    acc = Accelerator(cpu=True, fsdp_plugin=FullyShardedDataParallelPlugin())
    assert not acc.use_fsdp and acc.distributed_type == DistributedType.NO  # nothing to shard across
    model = nn.Linear(2, 2)
    assert acc.prepare(model) is model
    loader = acc.prepare(DataLoader(list(range(8)), batch_size=2))
    assert [b.tolist() for b in acc.skip_first_batches(loader, 2)] == [[4, 5], [6, 7]]
    with acc.local_main_process_first():
        assert acc.on_local_process(lambda: 1, local_process_index=0)() == 1


def test_optimizer_follows_parameters_that_placement_replaced() -> None:
    """When placement makes new Parameter objects (torch's overwrite-on-conversion mode, FSDP), optimizers follow."""
    model = nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()  # state keyed by the old parameters
    old = list(model.parameters())
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        acc = Accelerator(cpu=True)
        model, popt = acc.prepare(model, opt)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    new = list(model.parameters())
    assert all(a is not b for a, b in zip(old, new)), "this torch kept the parameters; the test needs new ones"
    assert all(a is b for a, b in zip(popt.param_groups[0]["params"], new)) and all(p in popt.state for p in new)
    before = model.weight.detach().clone()
    model(torch.ones(1, 2)).sum().backward()
    popt.step()
    assert not torch.equal(before, model.weight)


def test_optimizer_prepared_in_a_later_call_follows_replaced_parameters() -> None:
    """prepare(model) then prepare(optimizer): the optimizer must not keep updating the replaced parameters."""
    model = nn.Linear(2, 1)
    opt = torch.optim.Adam(model.parameters(), lr=0.1)
    model(torch.ones(1, 2)).sum().backward()
    opt.step()
    torch.__future__.set_overwrite_module_params_on_conversion(True)
    try:
        acc = Accelerator(cpu=True)
        model = acc.prepare(model)
    finally:
        torch.__future__.set_overwrite_module_params_on_conversion(False)
    popt = acc.prepare(opt)
    new = list(model.parameters())
    assert all(a is b for a, b in zip(popt.param_groups[0]["params"], new)) and all(p in popt.state for p in new)
    before = model.weight.detach().clone()
    popt.zero_grad()
    model(torch.ones(1, 2)).sum().backward()
    popt.step()
    assert not torch.equal(before, model.weight)
    other = torch.optim.SGD(nn.Linear(2, 1).parameters(), lr=0.1)  # unrelated parameters are left alone
    kept = list(other.param_groups[0]["params"])
    assert acc.prepare(other).param_groups[0]["params"] == kept


def test_fsdp_plugin_from_launch_settings_accepts_hugging_face_keys(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A launch file's fsdp_config in HF's spelling (``fsdp_auto_wrap_policy``...) builds the plugin."""
    _env(monkeypatch)
    launch = tmp_path / "launch.yaml"
    launch.write_text(
        "use_fsdp: true\nfsdp_config:\n  fsdp_auto_wrap_policy: SIZE_BASED_WRAP\n  fsdp_min_num_params: 100\n"
        "  fsdp_offload_params: 'false'\n  fsdp_sharding_strategy: SHARD_GRAD_OP\n  fsdp_backward_prefetch: BACKWARD_PRE\n"
    )
    monkeypatch.setenv("ACCELIFY_LAUNCH_CONFIG", str(launch))
    plugin = Accelerator(cpu=True).fsdp_plugin
    assert (plugin.auto_wrap_policy, plugin.min_num_params, plugin.cpu_offload) == ("size_based_wrap", 100, False)
    assert plugin.reshard_after_forward is False and plugin.extra == {"backward_prefetch": "BACKWARD_PRE"}


def test_unknown_tracker_fails_at_construction(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match="log_with='wandbb' is not a known tracker; available here: .*jsonl"):
        Accelerator(cpu=True, log_with="wandbb", project_dir=str(tmp_path))
    with pytest.raises(ConfigurationError, match="needs a logging directory"):
        Accelerator(cpu=True, log_with="jsonl")
    assert Accelerator(cpu=True, log_with=["jsonl", "jsonl"], project_dir=str(tmp_path)).log_with == ["jsonl"]


@pytest.mark.multiprocess
def test_prepare_without_fsdp_does_not_import_torch_fsdp() -> None:
    """torch.distributed.fsdp costs ~0.8 s to import: only an FSDP run may load it.

    No optimizer here: constructing any torch optimizer imports torch._dynamo, which imports
    torch.distributed.fsdp itself (torch 2.13), whatever accelify does.
    """
    import subprocess
    import sys

    code = (
        "import sys, torch\nfrom torch import nn\nfrom torch.utils.data import DataLoader\n"
        "from accelify.runtime import Accelerator\n"
        "acc = Accelerator(cpu=True)\n"
        "model, loader = acc.prepare(nn.Linear(2, 2), DataLoader(list(range(4)), batch_size=2))\n"
        "acc.backward(model(torch.ones(1, 2)).sum()); acc.clip_grad_norm_(model.parameters(), 1.0)\n"
        "acc.get_state_dict(model); acc.unwrap_model(model)\n"
        "print(sorted(m for m in sys.modules if m.startswith('torch.distributed.fsdp')))\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELIFY_", "ACCELERATE_"))}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env, check=True)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


def test_gather_for_metrics_on_the_last_batch_keeps_what_hugging_face_keeps() -> None:
    # process 0 of 2 simulated; 10 samples in batches of 3: the last round holds 4 real samples and 2 duplicates
    from accelify.runtime import prepare_data_loader

    acc = Accelerator(cpu=True)
    loader = prepare_data_loader(DataLoader(list(range(10)), batch_size=3), num_processes=2, process_index=0)
    results = []
    for _ in loader:
        results.append((
            acc.gather_for_metrics(torch.arange(6)).tolist(),  # a whole round, as gather returns it on two processes
            acc.gather_for_metrics(torch.tensor(1.5)).tolist(),  # a per-batch scalar: never cut to nothing
            acc.gather_for_metrics(list("abcdef")),
        ))
    assert results[0] == (list(range(6)), [1.5], list("abcdef"))  # not the last batch: everything
    assert results[1] == ([0, 1, 2, 3], [1.5], list("abcd"))


def test_unwrap_model_removes_autocast_through_torch_compile() -> None:
    from accelify.runtime.precision import find_autocast

    acc = Accelerator(cpu=True, mixed_precision="bf16")
    inner = nn.Linear(2, 2)
    compiled = acc.prepare(torch.compile(inner))
    assert find_autocast(compiled) is not None or find_autocast(inner) is not None
    assert acc.unwrap_model(compiled) is compiled and acc.unwrap_model(compiled, keep_torch_compile=False) is inner
    assert acc.unwrap_model(compiled, keep_fp32_wrapper=False) is compiled
    assert find_autocast(compiled) is None and find_autocast(inner) is None  # no bf16 left anywhere in the chain
