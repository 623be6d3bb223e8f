"""Optimizers over parameter groups, and the optimizers and schedules of Hugging Face transformers.

Fine-tuning scripts written without the Trainer (bert-sentiment's train.py, set G) build
``param_optimizer = list(model.named_parameters())``, groups over it, then ``transformers.AdamW(groups)`` and
``get_linear_schedule_with_warmup(optimizer, ...)``. Before: ACC012 "no optimizer was found" for the library's
AdamW; and with ``torch.optim.AdamW`` over the same groups the model was silently left out of ``prepare`` (its
groups were followed one binding deep only), so each process trained an unwrapped copy."""

from __future__ import annotations

from _convert import assert_converts, dedent

GROUPS = """\
param_optimizer = list(model.named_parameters())
no_decay = ["bias", "1.weight"]
groups = [
    {"params": [p for n, p in param_optimizer if not any(nd in n for nd in no_decay)], "weight_decay": 0.01},
    {"params": [p for n, p in param_optimizer if any(nd in n for nd in no_decay)], "weight_decay": 0.0},
]
"""


def test_groups_built_over_a_list_of_named_parameters_train_the_model() -> None:
    before = dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.optim import AdamW
        loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1))
        """) + GROUPS + dedent("""
        optimizer = AdamW(groups, lr=3e-5)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        """)
    after = dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from torch.optim import AdamW
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1))
        """) + GROUPS + dedent("""
        optimizer = AdamW(groups, lr=3e-5)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
        accelerator.end_training()
        """)
    assert_converts(before, after)


def test_transformers_adamw_and_its_warmup_schedule_are_prepared() -> None:
    """The per-batch schedule is prepared with them: on N processes it moves N steps per call, as each process
    walks 1/N of the batches, so ``num_training_steps`` counted on one process still ends the schedule."""
    before = dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from transformers import AdamW, get_linear_schedule_with_warmup
        loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1))
        """) + GROUPS + dedent("""
        optimizer = AdamW(groups, lr=3e-5)
        scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=len(loader))
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            scheduler.step()
        """)
    after = dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from transformers import AdamW, get_linear_schedule_with_warmup
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4, shuffle=True)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.LayerNorm(8), torch.nn.Linear(8, 1))
        """) + GROUPS + dedent("""
        optimizer = AdamW(groups, lr=3e-5)
        scheduler = get_linear_schedule_with_warmup(optimizer, num_warmup_steps=0, num_training_steps=len(loader))
        model, optimizer, loader, scheduler = accelerator.prepare(
            model, optimizer, loader, scheduler
        )
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            accelerator.backward(loss)
            optimizer.step()
            scheduler.step()
        accelerator.end_training()
        """)
    assert_converts(before, after)
