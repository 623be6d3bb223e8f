"""The static half of verify: collectives under process-local conditions, read from the converted program."""

from __future__ import annotations

import textwrap

from accelify.verify.deadlocks import latent_deadlocks

HEAD = """\
import torch
import torch.distributed as dist
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
model = torch.nn.Linear(2, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=2)
model, opt, loader = accelerator.prepare(model, opt, loader)
"""


def _found(body: str, *modules: tuple[str, str]) -> list[str]:
    return [d.format() for d in latent_deadlocks(("train.py", HEAD + textwrap.dedent(body)), modules)]


def test_a_collective_under_a_test_on_the_local_loss_is_named_with_its_line() -> None:
    found = _found("""\
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            accelerator.backward(loss)
            if loss.item() > 1:
                accelerator.wait_for_everyone()
        """)
    assert len(found) == 1 and found[0].startswith("train.py:15: accelerator.wait_for_everyone() sits under an `if`")
    assert "`loss.item() > 1`" in found[0]


def test_rank_tests_torch_distributed_and_local_loop_exits_are_found() -> None:
    found = _found("""\
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            accelerator.backward(loss)
            if accelerator.is_main_process:
                dist.barrier()
            if loss.item() < 1e-3:
                break
        """)
    assert any("train.py:13: accelerator.backward()" in f and "`break` under `if loss.item() < 1e-3`" in f for f in found)
    assert any("train.py:15: dist.barrier() sits under an `if`" in f for f in found)


def test_agreed_places_are_not_findings() -> None:
    found = _found("""\
        from tqdm import tqdm
        best = None
        for epoch in tqdm(range(3), disable=not accelerator.is_main_process):
            for step, (x, y) in enumerate(tqdm(loader, disable=not accelerator.is_local_main_process)):
                loss = ((model(x) - y) ** 2).mean()
                accelerator.backward(loss)
                opt.step()
            total = accelerator.reduce(loss.detach(), reduction="mean")
            if total.item() < 1e-3:
                accelerator.wait_for_everyone()
                break
            if accelerator.is_main_process:
                accelerator.save(model.state_dict(), "m.pt")
            accelerator.wait_for_everyone()
        """)
    assert found == []


def test_a_helper_module_called_from_a_local_branch_is_named_in_its_file() -> None:
    helper = ("evaluation.py", "def sync(accelerator):\n    accelerator.wait_for_everyone()\n")
    found = _found("""\
        from evaluation import sync
        for x, y in loader:
            loss = ((model(x) - y) ** 2).mean()
            if loss.item() > 1:
                sync(accelerator)
        """, helper)
    assert found and found[0].startswith("evaluation.py:2: accelerator.wait_for_everyone() is in `sync`")


def test_a_file_that_does_not_parse_has_no_findings() -> None:
    assert latent_deadlocks(("train.py", "def (:\n")) == []


def test_a_time_parsed_from_a_folder_name_is_no_clock_read_but_the_clock_is() -> None:
    """Resume code sorts checkpoint folders by the time in their names (``datetime.strptime``, pytorch-cifar100's
    utils): every process reads the same names, so a loop that skips epochs by them agrees; one that stops on the
    clock does not."""
    utils = textwrap.dedent("""\
        import datetime
        import os
        def most_recent(root, fmt):
            folders = sorted(os.listdir(root), key=lambda f: datetime.datetime.strptime(f, fmt))
            return folders[-1]
        """)
    body = """\
        import time
        from utils import most_recent
        resume_epoch = int(most_recent(".", fmt="%Y"))
        for epoch in range(3):
            if epoch <= resume_epoch:
                continue
            for x, y in loader:
                accelerator.backward(((model(x) - y) ** 2).mean())
            accelerator.wait_for_everyone()
        """
    assert _found(body, ("utils.py", utils)) == []
    clocked = body.replace("resume_epoch = int(most_recent", "resume_epoch = int(time.time()) % 3 or int(most_recent")
    assert any("`if epoch <= resume_epoch`" in f for f in _found(clocked, ("utils.py", utils)))


def test_a_barrier_in_a_method_of_an_object_kept_to_the_main_process_is_found() -> None:
    """diegoalejogm/gans (set I, W1) as first converted: the logger made on the main process only (`... if
    accelerator.is_main_process else None`), each call of its methods guarded, and a barrier inside `save_models`."""
    found = _found("""\
        class Logger:
            def __init__(self, accelerator):
                self.accelerator = accelerator

            def save_models(self, model):
                self.accelerator.wait_for_everyone()
                self.accelerator.save(self.accelerator.unwrap_model(model).state_dict(), "m.pt")


        logger = Logger(accelerator) if accelerator.is_main_process else None
        for x, y in loader:
            accelerator.backward(((model(x) - y) ** 2).mean())
            if accelerator.is_main_process:
                logger.save_models(model)
        """)
    assert len(found) == 1 and found[0].startswith("train.py:16: self.accelerator.wait_for_everyone() is in `save_models`")
