"""The shared analysis: import aliases, roles, origins through helper parameters, comment-safe edits."""

from __future__ import annotations

import libcst as cst
import pytest

from accelify.codemods.analysis.collect import collect
from accelify.codemods.analysis.plan import Plan


@pytest.mark.parametrize(
    ("imports", "expr", "qualname"),
    [
        ("import torch.nn as nn", "nn.Linear", "torch.nn.Linear"),
        ("from torch import nn", "nn.utils.clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
        ("from torch.nn.utils import clip_grad_norm_ as clip", "clip", "torch.nn.utils.clip_grad_norm_"),
        ("import torch.nn.utils.clip_grad as cg", "cg.clip_grad_norm_", "torch.nn.utils.clip_grad_norm_"),
        ("from torch.nn.parallel import DistributedDataParallel as DDP", "DDP", "torch.nn.parallel.DistributedDataParallel"),
        ("import torch", "torch.utils.data.DataLoader", "torch.utils.data.DataLoader"),
        ("from tqdm.auto import tqdm", "tqdm", "tqdm.tqdm"),
        ("import os", "print", "print"),
    ],
)
def test_qualified_names_follow_every_import_spelling(imports: str, expr: str, qualname: str) -> None:
    facts = collect(cst.parse_module(imports + "\n"))
    assert facts.imports.qualname(cst.parse_expression(expr)) == qualname


def _plan(code: str) -> tuple[Plan, dict[str, str | None]]:
    facts = collect(cst.parse_module(code))
    plan = Plan(facts)
    return plan, {b.key: b.role for b in facts.bindings() if b.role}


def test_roles() -> None:
    plan, roles = _plan(
        "import torch\nfrom torch import nn, optim\nfrom torch.utils.data import DataLoader as DL\n"
        "class Net(nn.Module):\n    pass\n"
        "device = torch.device('cuda')\nnet = Net()\nhead = build_head()\nloss_fn = nn.MSELoss()\n"
        "opt = optim.AdamW([{'params': net.parameters()}, {'params': head.parameters()}])\n"
        "sched = optim.lr_scheduler.OneCycleLR(opt, 1.0, total_steps=10)\nloader = DL(ds)\n"
        "scaler = torch.amp.GradScaler()\n"
    )
    assert roles == {
        "device": "device",
        "net": "model",
        "head": "model",
        "opt": "optimizer",
        "sched": "scheduler",
        "loader": "loader",
        "scaler": "scaler",
    }
    assert [a.key for a in plan.aliases] == ["net", "head", "opt", "loader", "sched"]


def test_origin_follows_helper_parameters_only_when_call_sites_agree() -> None:
    code = (
        "import torch\ndef inner(m):\n    return m\ndef outer(net):\n    inner(net)\n"
        "def other(x):\n    return x\n"
        "def main():\n    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    outer(model)\n    other(model)\n    other(opt)\n"
    )
    plan, _ = _plan(code)
    facts = plan.facts
    inner, other = facts.function("inner"), facts.function("other")
    assert inner is not None and other is not None
    found = plan.param_origin(inner, "m")
    assert found is not None and found.key == "model" and found.role == "model"
    assert plan.param_origin(other, "x") is None


def test_skip_comments_are_collected() -> None:
    facts = collect(cst.parse_module("x = 1  # accelify: skip\n# accelify: skip\ny = 2\nz = 3\n"))
    assert len(facts.skipped) == 2
