"""Hand-written distributed code: the shapes converted to the runtime's (rules ddp, sampler, collectives,
process_group, spawn, ranks, apex, micro_steps, unused_imports) and the near misses left alone."""

from __future__ import annotations

import pytest
from _convert import assert_converts, codes, dedent

from accelify.pipeline import convert_source

CONVERTED = [
    pytest.param(
        """
        import torch
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP
        dist.init_process_group("gloo")
        model = DDP(torch.nn.Linear(2, 1), find_unused_parameters=True)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in torch.ones(4, 2):
            model(x).sum().backward()
            optimizer.step()
        """,
        """
        import torch
        from accelify.runtime import Accelerator, DistributedDataParallelKwargs
        accelerator = Accelerator(
            cpu=True,
            kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)],
        )
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for x in torch.ones(4, 2):
            accelerator.backward(model(x).sum())
            optimizer.step()
        accelerator.end_training()
        """,
        id="ddp-options-go-to-the-accelerator",
    ),
    pytest.param(
        """
        import argparse
        import torch
        import torch.distributed as dist
        import torch.multiprocessing as mp
        def worker(gpu, args):
            args.gpu = gpu
            if args.distributed:
                dist.init_process_group("gloo", rank=gpu, world_size=2)
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in torch.ones(4, 2):
                model(x).sum().backward()
                optimizer.step()
            if args.gpu is None or args.gpu == 0:
                print("done")
        parser = argparse.ArgumentParser()
        parser.add_argument("--distributed", action="store_true")
        parser.add_argument("--gpu", type=int, default=None)
        args = parser.parse_args()
        if args.distributed:
            mp.spawn(worker, nprocs=2, args=(args,))
        else:
            worker(args.gpu, args)
        """,
        """
        import argparse
        import torch
        from accelify.runtime import Accelerator
        def worker(gpu, args):
            accelerator = Accelerator(cpu=True)
            args.gpu = gpu
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            model, optimizer = accelerator.prepare(model, optimizer)
            for x in torch.ones(4, 2):
                accelerator.backward(model(x).sum())
                optimizer.step()
            if accelerator.is_local_main_process:
                accelerator.print("done")
            accelerator.end_training()
        parser = argparse.ArgumentParser()
        parser.add_argument("--distributed", action="store_true")
        parser.add_argument("--gpu", type=int, default=None)
        args = parser.parse_args()
        if args.distributed:
            worker(args.gpu, args)
        else:
            worker(args.gpu, args)
        """,
        id="spawn-becomes-the-direct-call-and-the-spawn-index-test-the-local-main-process",
    ),
    pytest.param(
        """
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, TensorDataset
        dist.init_process_group("gloo")
        if dist.get_rank() != 0:
            dist.barrier()
        ds = TensorDataset(torch.randn(8, 2))
        if dist.get_rank() == 0:
            dist.barrier()
        loader = DataLoader(ds, batch_size=4)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
        if dist.is_initialized():
            print("world", dist.get_world_size())
        """,
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        with accelerator.main_process_first():
            ds = TensorDataset(torch.randn(8, 2))
        loader = DataLoader(ds, batch_size=4)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for (x,) in loader:
            accelerator.backward(model(x).sum())
            optimizer.step()
        if accelerator.num_processes > 1:
            accelerator.print("world", accelerator.num_processes)
        accelerator.end_training()
        """,
        id="global-barrier-pair-is-main-process-first",
    ),
    pytest.param(
        """
        import torch
        from apex import amp
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = amp.initialize(model, optimizer, opt_level="O1")
        for x in torch.ones(4, 2):
            loss = model(x).sum()
            with amp.scale_loss(loss, optimizer) as scaled_loss:
                scaled_loss.backward()
            optimizer.step()
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        accelerator = Accelerator(cpu=True, mixed_precision="fp16")
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for x in torch.ones(4, 2):
            loss = model(x).sum()
            accelerator.backward(loss)
            optimizer.step()
        accelerator.end_training()
        """,
        id="apex-without-a-flag",
    ),
    pytest.param(
        """
        import argparse
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, DistributedSampler, TensorDataset
        parser = argparse.ArgumentParser()
        parser.add_argument("--distributed", action="store_true")
        args = parser.parse_args()
        if args.distributed:
            dist.init_process_group("gloo")
        else:
            print("one process")
        ds = TensorDataset(torch.randn(8, 2))
        loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds, shuffle=False))
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for (x,) in loader:
            model(x).sum().backward()
            optimizer.step()
        """,
        """
        import argparse
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        parser = argparse.ArgumentParser()
        parser.add_argument("--distributed", action="store_true")
        args = parser.parse_args()
        accelerator.print("one process")
        ds = TensorDataset(torch.randn(8, 2))
        loader = DataLoader(ds, batch_size=4, shuffle=False)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for (x,) in loader:
            accelerator.backward(model(x).sum())
            optimizer.step()
        accelerator.end_training()
        """,
        id="set-up-branch-leaves-its-else-and-an-inline-sampler-its-shuffle",
    ),
    pytest.param(
        """
        import os
        import torch
        import torch.distributed as dist
        local_rank = int(os.environ.get("LOCAL_RANK", -1))
        if local_rank != -1:
            dist.init_process_group("gloo")
            torch.cuda.set_device(local_rank)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in torch.ones(4, 2):
            model(x).sum().backward()
            optimizer.step()
            if local_rank in (-1, 0):
                print(x)
        """,
        """
        import os
        import torch
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        local_rank = int(os.environ.get("LOCAL_RANK", -1))
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model, optimizer = accelerator.prepare(model, optimizer)
        for x in torch.ones(4, 2, device=accelerator.device):
            accelerator.backward(model(x).sum())
            optimizer.step()
            if accelerator.is_local_main_process:
                accelerator.print(x)
        accelerator.end_training()
        """,
        id="local-rank-with-a-default-of-minus-one-is-tested-through-the-accelerator",
    ),
]


@pytest.mark.parametrize(("before", "after"), CONVERTED)
def test_hand_written_distribution_is_converted(before: str, after: str) -> None:
    assert_converts(before, after)
    assert codes(before) == []


NEAR_MISSES = [
    pytest.param(
        # no process group, DDP or sampler: `rank` is the script's own, and so is its test
        "import torch\nrank = 0\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    opt.step()\n    if rank == 0:\n        pass\n",
        "    if rank == 0:\n",
        id="rank-without-distribution",
    ),
    pytest.param(
        # `dist.is_available()` asks torch whether it was built with distributed support: left alone, with its import
        "import torch\nimport torch.distributed as dist\nmodel = torch.nn.Linear(2, 1)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in torch.ones(4, 2):\n    model(x).sum().backward()\n"
        "    opt.step()\nprint(dist.is_available())\n",
        "import torch.distributed as dist\n",
        id="is-available",
    ),
]


@pytest.mark.parametrize(("code", "kept"), NEAR_MISSES)
def test_near_misses_keep_their_code(code: str, kept: str) -> None:
    result = convert_source(code)
    assert result.status == "converted" and kept in result.new


def test_a_rank_test_in_a_helper_the_accelerator_cannot_reach_refuses_the_file() -> None:
    code = dedent(
        """
        import torch
        import torch.distributed as dist
        def log(message):
            if dist.get_rank() == 0:
                print(message)
        def main():
            dist.init_process_group("gloo")
            model = torch.nn.Linear(2, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x in torch.ones(4, 2):
                model(x).sum().backward()
                optimizer.step()
                log(*["step"])
        main()
        """
    )
    result = convert_source(code)
    assert result.status == "attention" and result.new == code
    assert codes(code) == ["ACC009:3"]


def test_a_launcher_read_before_the_accelerator_can_be_made_refuses_the_file() -> None:
    code = dedent(
        """
        import os
        import torch
        from torch.distributed import init_process_group
        ddp = int(os.environ.get("RANK", -1)) != -1
        steps = 4
        if ddp:
            init_process_group("gloo")
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in torch.ones(3, 2):
            for micro_step in range(steps):
                model.require_backward_grad_sync = micro_step == steps - 1
                (model(x).sum() / steps).backward()
            optimizer.step()
        """
    )
    result = convert_source(code)
    assert result.status == "attention" and result.new == code
    assert codes(code) == ["ACC003:4"]
    assert "bind `steps` before" in result.warnings[0].fix


def test_ddp_tutorial_trainer_loses_set_epoch_and_module() -> None:
    """PyTorch's DDP tutorial Trainer: the sampler built inline in the DataLoader, ``self.train_data.sampler.set_epoch``
    in a method, ``self.model.module.state_dict()`` in another: on the prepared loader there is no ``set_epoch``,
    and on one process the prepared model has no ``.module``."""
    from _convert import converted

    out = converted(
        """
        import os
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.utils.data.distributed import DistributedSampler
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.distributed import init_process_group

        class Trainer:
            def __init__(self, model, train_data, optimizer):
                self.gpu_id = int(os.environ["LOCAL_RANK"])
                self.train_data = train_data
                self.optimizer = optimizer
                self.model = DDP(model.to(self.gpu_id), device_ids=[self.gpu_id])

            def run_epoch(self, epoch):
                self.train_data.sampler.set_epoch(epoch)
                for source, targets in self.train_data:
                    self.optimizer.zero_grad()
                    torch.nn.functional.mse_loss(self.model(source), targets).backward()
                    self.optimizer.step()
                torch.save(self.model.module.state_dict(), "checkpoint.pt")

        def main():
            init_process_group(backend="nccl")
            dataset = TensorDataset(torch.rand(64, 4), torch.rand(64, 1))
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
            data = DataLoader(dataset, batch_size=8, shuffle=False, sampler=DistributedSampler(dataset))
            Trainer(model, data, optimizer).run_epoch(0)
        """
    )
    assert "set_epoch" not in out and ".module" not in out
    assert "self.accelerator.unwrap_model(self.model).state_dict()" in out


def test_a_set_up_branch_that_only_passes_is_no_reason_to_refuse() -> None:
    """ImageNet's layout: ``elif args.distributed:`` holding a comment and ``pass`` was named as manual code."""
    from _convert import converted
    from accelify.pipeline import convert_source

    source = (
        "import argparse\nimport torch\nimport torch.distributed as dist\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('--world-size', default=-1, type=int)\n"
        "args = parser.parse_args()\nargs.distributed = args.world_size > 1\n"
        "if args.distributed:\n    dist.init_process_group(backend='gloo')\nmodel = torch.nn.Linear(4, 1)\n"
        "if not torch.cuda.is_available():\n    print('slow')\nelif args.distributed:\n    # DDP would go here\n    pass\n"
        "else:\n    model = model.cuda()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in torch.ones(4, 4):\n    model(x).sum().backward()\n    optimizer.step()\n"
    )
    assert convert_source(source).status == "converted"
    assert "init_process_group" not in converted(source)
