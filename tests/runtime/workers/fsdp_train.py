"""Launched on 2 Gloo CPU processes by tests/runtime/test_fsdp.py; asserts inside the workers.

An ``Accelerator(fsdp_plugin=...)`` trains a sharded model next to an unsharded reference that sees
both processes' batches; losses, clipped norms, weights, ``save_model``, and a ``save_state`` /
``load_state`` round trip (optimizer moments included) must match. Then transformer-based wrapping
with activation checkpointing must give the reference's gradients, and an optimizer prepared in a
later ``prepare()`` call than its model must be rebound to the sharded parameters.
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch
from safetensors.torch import load_file
from torch import nn
from torch.distributed.tensor import DTensor

from accelify.runtime import Accelerator, FullyShardedDataParallelPlugin
from accelify.runtime import fsdp
from accelify.runtime.errors import ConfigurationError

TOL = {"rtol": 1e-5, "atol": 1e-6}


def make_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 4))


def batch(step: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(100 + step)
    return torch.randn(8, 8, generator=g), torch.randn(8, 4, generator=g)


def step_both(accelerator, model, optimizer, ref, ref_opt, step: int) -> None:
    rank, world = accelerator.process_index, accelerator.num_processes
    x, y = batch(step)
    mine = slice(rank * 8 // world, (rank + 1) * 8 // world)
    loss = nn.functional.mse_loss(model(x[mine]), y[mine])
    accelerator.backward(loss)
    norm = accelerator.clip_grad_norm_(model.parameters(), 0.5)
    optimizer.step()
    optimizer.zero_grad()
    ref_loss = nn.functional.mse_loss(ref(x), y)
    ref_loss.backward()
    ref_norm = torch.nn.utils.clip_grad_norm_(ref.parameters(), 0.5)
    ref_opt.step()
    ref_opt.zero_grad()
    assert torch.allclose(norm, ref_norm, **TOL), (step, norm, ref_norm)


def check_weights(accelerator, model, ref) -> None:
    full = accelerator.get_state_dict(model)
    if accelerator.is_main_process:
        expected = ref.state_dict()
        assert sorted(full) == sorted(expected), (sorted(full), sorted(expected))
        for name, tensor in full.items():
            assert tensor.device.type == "cpu" and not isinstance(tensor, DTensor), name
            assert torch.allclose(tensor, expected[name], **TOL), name
    else:
        assert full == {}, sorted(full)


def main(directory: Path) -> None:
    plugin = FullyShardedDataParallelPlugin(min_num_params=200)
    accelerator = Accelerator(cpu=True, fsdp_plugin=plugin)
    assert accelerator.num_processes == 2
    model, ref = make_model(), make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)  # built before prepare: must be rebound
    ref_opt = torch.optim.AdamW(ref.parameters(), lr=0.01)
    model, optimizer = accelerator.prepare(model, optimizer)
    # size-based: the two big Linears (288 and 1056 parameters) get their own shard groups, the last (132) not
    assert [fsdp.is_fsdp_module(m) for m in (model, model[0], model[2], model[4])] == [True, True, True, False]
    params = list(model.parameters())
    assert all(isinstance(p, DTensor) for p in params)
    assert params[0].to_local().shape == (16, 8)  # half of the (32, 8) weight on each process
    assert [id(p) for g in optimizer.param_groups for p in g["params"]] == [id(p) for p in params]

    for step in range(3):
        step_both(accelerator, model, optimizer, ref, ref_opt, step)
    check_weights(accelerator, model, ref)
    assert accelerator.unwrap_model(model) is model  # FSDP2 shards in place: nothing to unwrap

    accelerator.save_model(model, directory / "model")
    accelerator.wait_for_everyone()
    written = load_file(directory / "model" / "model.safetensors")
    for name, tensor in ref.state_dict().items():
        assert torch.allclose(written[name], tensor, **TOL), name

    accelerator.save_state(directory / "state")
    ref_saved, ref_opt_saved = copy.deepcopy(ref.state_dict()), copy.deepcopy(ref_opt.state_dict())
    step_both(accelerator, model, optimizer, ref, ref_opt, 3)  # move away from the checkpoint
    accelerator.load_state(directory / "state")
    ref.load_state_dict(ref_saved)
    ref_opt.load_state_dict(ref_opt_saved)
    check_weights(accelerator, model, ref)
    for step in (3, 4):  # the same steps again: Adam's moments must have come back too
        step_both(accelerator, model, optimizer, ref, ref_opt, step)
    check_weights(accelerator, model, ref)

    # transformer-based wrapping with activation checkpointing, through fsdp.wrap_model directly
    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = nn.Linear(8, 8)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x + torch.tanh(self.inner(x))

    torch.manual_seed(1)
    net = nn.Sequential(Block(), Block(), nn.Linear(8, 2))
    ref_net = copy.deepcopy(net)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    plugin = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["Block"], activation_checkpointing=True)
    net = fsdp.wrap_model(net, plugin, accelerator.device)  # the optimizer is rebound afterwards, as prepare may
    assert not any(isinstance(p, DTensor) for p in opt.param_groups[0]["params"])
    assert fsdp.rebind_optimizer(opt, [model, net]) == 6 and fsdp.rebind_optimizer(opt, [net]) == 0
    assert [id(p) for p in opt.param_groups[0]["params"]] == [id(p) for p in net.parameters()]
    assert sum(fsdp.is_fsdp_module(m) for m in net.modules()) == 3  # two blocks and the root
    x, _ = batch(7)
    mine = slice(accelerator.process_index * 4, accelerator.process_index * 4 + 4)
    net(x[mine]).pow(2).mean().backward()
    ref_net(x).pow(2).mean().backward()
    norm = fsdp.clip_grad_norm_(net, 1e9)
    ref_norm = torch.nn.utils.clip_grad_norm_(ref_net.parameters(), 1e9)
    assert torch.allclose(norm, ref_norm, **TOL), (norm, ref_norm)
    opt.step()
    full = fsdp.full_state_dict(net)
    if accelerator.is_main_process:
        for name, tensor in ref_net.state_dict().items():
            assert torch.allclose(full[name], tensor - 0.1 * dict(ref_net.named_parameters())[name].grad, **TOL), name

    # an optimizer prepared in a later prepare() call than its model follows the sharded parameters
    late_model = make_model()
    late_opt = torch.optim.SGD(late_model.parameters(), lr=0.1)
    late_model = accelerator.prepare(late_model)
    assert not any(isinstance(p, DTensor) for p in late_opt.param_groups[0]["params"])
    late_opt = accelerator.prepare(late_opt)
    assert [id(p) for g in late_opt.param_groups for p in g["params"]] == [id(p) for p in late_model.parameters()]
    before = late_model[0].weight.to_local().clone()
    accelerator.backward(late_model(batch(9)[0]).pow(2).mean())
    late_opt.step()
    assert not torch.equal(before, late_model[0].weight.to_local()), "the rebound optimizer must update the shards"

    stepped = nn.Linear(2, 2)
    stepped_opt = torch.optim.Adam(stepped.parameters())
    stepped(torch.ones(1, 2)).sum().backward()
    stepped_opt.step()
    try:
        fsdp.wrap_model(stepped, FullyShardedDataParallelPlugin(), accelerator.device, optimizers=[stepped_opt])
    except ConfigurationError as exc:
        assert "already took a step" in str(exc), exc
    else:
        raise AssertionError("wrapping a model whose optimizer already stepped must fail")
    assert not fsdp.is_fsdp_module(stepped)
    accelerator.end_training()
    print(f"rank {accelerator.process_index}: FSDP OK", flush=True)


if __name__ == "__main__":
    main(Path(sys.argv[1]))
