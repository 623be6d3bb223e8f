"""SwapClipping, SwapPrint, DisableProgress: before/after tables and near-misses."""

from __future__ import annotations

import pytest
from _convert import codes, converted

HEAD = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"

CLIPPING = [
    ("torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)", "accelerator.clip_grad_norm_(model.parameters(), 1.0)"),
    ("nn.utils.clip_grad_value_(model.parameters(), 0.5)", "accelerator.clip_grad_value_(model.parameters(), 0.5)"),
    ("clip(model.parameters(), max_norm=2)", "accelerator.clip_grad_norm_(model.parameters(), max_norm=2)"),
    ("clip_grad.clip_grad_norm_(model.parameters(), 1)", "accelerator.clip_grad_norm_(model.parameters(), 1)"),
]
IMPORTS = (
    "import torch.nn as nn\nfrom torch.nn.utils import clip_grad_norm_ as clip\nfrom torch.nn.utils import clip_grad\n"
)


@pytest.mark.parametrize(("before", "after"), CLIPPING)
def test_clipping_any_import_spelling(before: str, after: str) -> None:
    assert f"\n{after}\n" in converted(IMPORTS + HEAD + before + "\n")


def test_clipping_near_miss_a_local_function() -> None:
    code = HEAD + "def clip_grad_norm_(p, m):\n    return p\nclip_grad_norm_(model.parameters(), 1.0)\n"
    assert "\nclip_grad_norm_(model.parameters(), 1.0)\n" in converted(code)


PRINTS = [
    ('print("loss", loss)', 'accelerator.print("loss", loss)'),
    ('print(f"{x}", file=sys.stderr)', 'accelerator.print(f"{x}", file=sys.stderr)'),
]


@pytest.mark.parametrize(("before", "after"), PRINTS)
def test_print_after_the_accelerator(before: str, after: str) -> None:
    assert f"\n{after}\n" in converted(HEAD + before + "\n")


def test_print_before_the_accelerator_or_shadowed_stays() -> None:
    code = (
        "import torch\ndef main():\n    print('start')\n    args = parser.parse_args()\n"
        "    device = torch.device('cuda' if not args.cpu else 'cpu')\n"
        "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    print('built')\n"
        "def other(print):\n    print('x')\n"
    )
    out = converted(code)
    assert "    print('start')\n" in out and "    accelerator.print('built')\n" in out and "    print('x')\n" in out


PROGRESS = [
    ("for b in tqdm(loader):", "for b in tqdm(loader, disable=not accelerator.is_local_main_process):"),
    ("bar = auto_tqdm(range(3), desc='x')", "bar = auto_tqdm(range(3), desc='x', disable=not accelerator.is_local_main_process)"),
    ("for e in trange(3):", "for e in trange(3, disable=not accelerator.is_local_main_process):"),
]


@pytest.mark.parametrize(("before", "after"), PROGRESS)
def test_progress_bars(before: str, after: str) -> None:
    imports = "from tqdm import tqdm, trange\nfrom tqdm.auto import tqdm as auto_tqdm\n"
    body = before + ("\n    pass\n" if before.endswith(":") else "\n")
    assert f"\n{after}\n" in converted(imports + HEAD + body)


@pytest.mark.parametrize("code", ["for b in tqdm(loader, disable=True):", "for b in tqdm(loader, **opts):"])
def test_progress_near_misses(code: str) -> None:
    out = converted("from tqdm import tqdm\n" + HEAD + code + "\n    pass\n")
    assert f"\n{code}\n" in out


MAIN_HEAD = (
    "import torch\ndef main():\n    args = parser.parse_args()\n"
    "    device = torch.device('cuda' if not args.cpu else 'cpu')\n"
    "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)

# Each print stays as written: a local `print`, one before the accelerator exists, one in a
# module-level helper that has no accelerator.
PRINT_NOOP = [
    ("def print(*a):\n    pass\n" + HEAD + "print('loss')\n", "\nprint('loss')\n"),
    (MAIN_HEAD.replace("    args = ", "    print('parsing')\n    args = "), "\n    print('parsing')\n"),
    (MAIN_HEAD + "def report(x):\n    print(x)\n", "\n    print(x)\n"),
    ("from rich import print\n" + HEAD + "print('loss')\n", "\nprint('loss')\n"),
    (HEAD + "print = logger.info\nprint('loss')\n", "\nprint('loss')\n"),
]


@pytest.mark.parametrize(("code", "kept"), PRINT_NOOP)
def test_print_noop(code: str, kept: str) -> None:
    assert kept in converted(code)


def test_print_in_nested_functions_and_lambdas_after_the_accelerator() -> None:
    out = converted(MAIN_HEAD + "    def report(x):\n        print(x)\n    show = lambda x: print(x)\n")
    assert "        accelerator.print(x)\n" in out and "    show = lambda x: accelerator.print(x)\n" in out


def test_nested_helper_called_before_the_accelerator_keeps_print() -> None:
    # `accelerator.print` there would raise NameError: the helper runs before `accelerator = ...`
    code = MAIN_HEAD.replace("    args = ", "    def log(m):\n        print(m)\n    log('parsing')\n    args = ")
    out = converted(code + "    log('built')\n")
    assert "        print(m)\n" in out


ACTING = """
import torch
import torch.nn as nn
class DQN(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 2)
    def forward(self, x):
        return self.fc(x)
    def act(self, state):
        RETURN
model = DQN()
optimizer = torch.optim.Adam(model.parameters())
for frame in range(10):
    state = torch.rand(1, 4)
    action = model.act(state)
    loss = (model(state)[0, action] - 1.0).pow(2)
    loss.backward()
    optimizer.step()
"""


@pytest.mark.parametrize(
    "returned, refused",
    [
        ("return self(state).argmax(1).item()", False),  # picks an action: no graph leaves it
        ("q = self.forward(state)\n        return int(q.max(1)[1])", False),
        ("with torch.no_grad():\n            q = self(state)\n        return q.argmax(1)", False),
        ("return self(state).max(1)[0]", True),  # the values of the max carry the graph
        ("q = self(state)\n        return q, q.argmax(1).item()", True),  # the output itself is returned too
    ],
)
def test_an_acting_method_is_no_training_forward(returned: str, refused: bool) -> None:
    found = codes(ACTING.replace("RETURN", returned))
    assert any(c.startswith("ACC025:") for c in found) is refused, found


def test_a_tensor_sliced_by_an_inner_loop_is_reported_as_the_same_data_everywhere() -> None:
    # the epoch loop (``range(2)``) walks no data; the inner loop slices the helper's tensor
    code = """
    import torch
    from data_utils import Corpus
    ids = Corpus().get_data('train.txt', 4)
    model = torch.nn.Embedding(10, 10)
    optimizer = torch.optim.Adam(model.parameters())
    for epoch in range(2):
        for i in range(0, ids.size(1) - 5, 5):
            x, y = ids[:, i:i+5], ids[:, i+1:i+6]
            loss = torch.nn.functional.cross_entropy(model(x).reshape(-1, 10), y.reshape(-1))
            loss.backward()
            optimizer.step()
    """
    assert "ACC022:7" in codes(code), codes(code)


@pytest.mark.parametrize("draw", ["(x, y) = next(iter(loader))", "(x, y) = next(batches)"])
def test_batches_drawn_from_a_prepared_loader_at_every_step_are_its_shard(draw: str) -> None:
    # zalandoresearch's VQ-VAE notebook: ``(data, _) = next(iter(training_loader))`` once per update
    code = f"""
    import torch
    from torch.utils.data import DataLoader
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.Adam(model.parameters())
    batches = iter(loader)
    num_training_updates = 100
    for i in range(num_training_updates):
        {draw}
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
    """
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in converted(code)
    assert codes(code) == []


def test_training_through_a_method_that_runs_the_models_layers_is_refused() -> None:
    # PPO's ``policy.evaluate(states, actions)`` runs ``self.actor`` and ``self.critic`` itself: through the prepared
    # model it bypasses the DDP wrapper; its ``act`` (under no_grad, detached results) does not decide anything
    code = """
    import torch
    import torch.nn as nn
    class ActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.actor = nn.Sequential(nn.Linear(4, 2), nn.Softmax(dim=-1))
            self.critic = nn.Linear(4, 1)
        def act(self, state):
            probs = self.actor(state)
            action = torch.distributions.Categorical(probs).sample()
            return action.detach()
        def evaluate(self, state, action):
            dist = torch.distributions.Categorical(self.actor(state))
            return dist.log_prob(action), self.critic(state)
    policy = ActorCritic()
    optimizer = torch.optim.Adam(policy.parameters())
    for episode in range(10):
        states = torch.rand(8, 4)
        with torch.no_grad():
            actions = policy.act(states)
        for _ in range(4):
            logprobs, values = policy.evaluate(states, actions)
            loss = -(logprobs * values.detach().squeeze()).mean() + values.pow(2).mean()
            loss.backward()
            optimizer.step()
    """
    assert any(c.startswith("ACC025:") for c in codes(code)), codes(code)
    assert all(not c.startswith("ACC025:") for c in codes(code.replace("policy.evaluate(states, actions)", "policy(states), policy.critic(states)")))


EMA = """
import torch
import torch.nn as nn
class Quantizer(nn.Module):
    def __init__(self):
        super().__init__()
        self.embedding = nn.Embedding(8, 4)
        self.ema_w = nn.Parameter(torch.randn(8, 4))
    def forward(self, x):
        if self.training:
            self.ema_w = nn.Parameter(self.ema_w * 0.99 + 0.01 * x.mean())
            self.embedding.weight = nn.Parameter(self.ema_w / 2)
        return x + self.embedding.weight.sum()
model = nn.Sequential(nn.Linear(4, 4), Quantizer())
optimizer = torch.optim.Adam(model.parameters())
for x in torch.rand(10, 2, 4):
    loss = model(x).pow(2).mean()
    loss.backward()
    optimizer.step()
"""


def test_a_parameter_replaced_while_the_model_runs_is_refused() -> None:
    # zalandoresearch's VQ-VAE: the EMA codebook is a new nn.Parameter at every step; under DDP the old ones get no
    # gradient (an error at the next step) and each process would keep a codebook of its own
    assert codes(EMA) == ["ACC037:10"]
    assert codes(EMA.replace("        if self.training:\n", "        if False:\n")
                 .replace("self.ema_w = nn.Parameter(self.ema_w", "w = (self.ema_w")
                 .replace("self.embedding.weight = nn.Parameter(self.ema_w / 2)", "pass")) == []
