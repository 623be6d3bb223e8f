"""Neighbouring statements the conversion keeps to the main process share one guard (codemods/engine/guards.py)."""

from __future__ import annotations

import libcst as cst

from _convert import dedent
from accelify.codemods.engine.guards import join_main_guards
from accelify.pipeline import convert_source

WRITES = """\
import json
import pickle
import torch
from torch.utils.data import DataLoader, TensorDataset


def save_vocab(v, filename):
    pickle.dump(v, open(filename, "wb"))


def train():
    vocab = {"a": 0}
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    save_vocab(vocab, "vocab.pickle")
    json.dump({"lr": 0.1}, open("config.json", "w"))
    for x, y in loader:
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()


train()
"""


def test_neighbouring_writes_kept_to_the_main_process_share_one_guard() -> None:
    result = convert_source(WRITES)
    assert ('    if accelerator.is_main_process:\n        save_vocab(vocab, "vocab.pickle")\n'
            '        json.dump({"lr": 0.1}, open("config.json", "w"))\n') in result.new, result.new
    assert result.new.count("is_main_process") == 1, result.new


def test_guards_join_only_where_nothing_stands_between_them() -> None:
    converted = dedent("""
        if accelerator.is_main_process:
            a()
        if accelerator.is_main_process:
            b()
        # a comment of the script's
        if accelerator.is_main_process:
            c()
        x = 1
        if accelerator.is_main_process:
            d()
        if other.is_main_process:
            e()
        if accelerator.is_main_process:
            f()
        else:
            g()
        if accelerator.is_main_process:
            h()
        """)
    body = list(cst.parse_module(converted).body)
    joined = cst.Module(body=join_main_guards(body, own={id(body[-1])})).code
    assert joined == dedent("""
        if accelerator.is_main_process:
            a()
            b()
        # a comment of the script's
        if accelerator.is_main_process:
            c()
        x = 1
        if accelerator.is_main_process:
            d()
        if other.is_main_process:
            e()
        if accelerator.is_main_process:
            f()
        else:
            g()
        if accelerator.is_main_process:
            h()
        """)


def test_the_scripts_own_rank_tests_keep_their_blocks() -> None:
    """Two ``if rank == 0:`` blocks of a script written for DDP by hand become two guards, as the author wrote them."""
    script = dedent("""
        import torch
        import torch.distributed as dist
        from torch.utils.data import DataLoader, TensorDataset


        def main():
            dist.init_process_group("gloo")
            rank = dist.get_rank()
            loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                opt.zero_grad()
                loss.backward()
                opt.step()
            if rank == 0:
                print(loss)
            if rank == 0:
                print("done")
        """)
    new = convert_source(script).new
    assert new.count("if accelerator.is_main_process:") == 2, new
