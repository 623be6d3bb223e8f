"""GatherForMetrics: predictions and targets gathered after the forward in evaluation loops."""

from __future__ import annotations

import pytest
from _convert import converted

TEMPLATE = """\
import torch
def evaluate(model, loader):
    model.eval()
    correct = 0
{loop}
def main():
    model = torch.nn.Linear(2, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = torch.utils.data.DataLoader(ds)
    evaluate(model, loader)
"""

CASES = [
    (
        "    with torch.no_grad():\n        for data, target in loader:\n            output = model(data)\n"
        "            correct += output.eq(target).sum().item()\n",
        "            output = model(data)\n            output, target = accelerator.gather_for_metrics((output, target))\n",
    ),
    (
        "    with torch.inference_mode():\n        for i, (x, y) in enumerate(loader):\n            logits = model(x)\n"
        "            correct += (logits.argmax(1) == y).sum().item() + x.size(0)\n",
        "            logits = model(x)\n            logits, y, x = accelerator.gather_for_metrics((logits, y, x))\n",
    ),
    (
        "    with torch.no_grad():\n        for (x,) in loader:\n            out = model(x)\n            correct += out.sum().item()\n",
        "            out = model(x)\n            out = accelerator.gather_for_metrics(out)\n",
    ),
    # only the forward under no_grad (Hugging Face's evaluation loops)
    (
        "    for x, y in loader:\n        with torch.no_grad():\n            out = model(x)\n        correct += out.eq(y).sum().item()\n",
        "            out = model(x)\n            out, y = accelerator.gather_for_metrics((out, y))\n",
    ),
    # a dict batch whose target is reshaped where it is taken (``batch["y"].view(-1, 1)``): gathered with the output
    (
        "    with torch.no_grad():\n        for batch in loader:\n            x = batch['x']\n"
        "            y = batch['y'].view(-1, 1).float()\n            out = model(x)\n"
        "            correct += torch.nn.functional.mse_loss(out, y).item()\n",
        "            out = model(x)\n            out, y = accelerator.gather_for_metrics((out, y))\n",
    ),
    # no no_grad at all, but the model was put in eval mode
    (
        "    model.eval()\n    for x, y in loader:\n        out = model(x)\n        correct += out.eq(y).sum().item()\n",
        "        out = model(x)\n        out, y = accelerator.gather_for_metrics((out, y))\n",
    ),
]


@pytest.mark.parametrize(("loop", "expected"), CASES)
def test_gather_after_the_forward(loop: str, expected: str) -> None:
    out = converted(TEMPLATE.format(loop=loop))
    assert expected in out
    assert "def evaluate(model, loader, accelerator):" in out


NEAR_MISSES = [
    # a training loop (backward) is not an evaluation loop
    "    with torch.no_grad():\n        pass\n    for x, y in loader:\n        out = model(x)\n        out.sum().backward()\n",
    # eval mode, but the loop steps an optimizer (gradients by hand): not an evaluation
    "    model.eval()\n    for x, y in loader:\n        out = model(x)\n        g = torch.autograd.grad(out.sum(), model.parameters())\n",
    # not a prepared loader
    "    with torch.no_grad():\n        for x, y in [(1, 2)]:\n            out = model(x)\n            correct += out.eq(y).sum()\n",
]


@pytest.mark.parametrize("loop", NEAR_MISSES)
def test_no_gather(loop: str) -> None:
    assert "gather_for_metrics" not in converted(TEMPLATE.format(loop=loop))


def test_no_gather_with_gradients_on_and_no_eval_mode() -> None:
    """Neither no_grad nor ``model.eval()``: nothing says the loop evaluates, so it is left alone."""
    source = TEMPLATE.format(loop="    for x, y in loader:\n        out = model(x)\n        correct += out.eq(y).sum().item()\n")
    out = converted(source.replace("    model.eval()\n", ""))
    assert "gather_for_metrics" not in out


def test_an_early_stop_on_a_loss_read_through_data_stops_every_process() -> None:
    """``loss = out.data`` is as local as ``out.item()``: its ``break`` becomes a trigger (it hung on 2 processes)."""
    out = converted(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
        for epoch in range(100):
            for xb, yb in loader:
                out = torch.nn.functional.mse_loss(model(xb), yb)
                loss = out.data
                out.backward()
                optimizer.step()
                if loss < 1e-3:
                    break
        """
    )
    assert "accelerator.set_trigger()" in out and "if accelerator.check_trigger():" in out


def test_a_nested_forward_gathers_the_targets_read_after_it() -> None:
    """``recon = torch.sigmoid(model(x))`` then a loss against ``x``: ``x`` is read later, so it is gathered too."""
    out = converted(TEMPLATE.format(loop=(
        "    with torch.no_grad():\n        for (x,) in loader:\n            recon = torch.sigmoid(model(x))\n"
        "            correct += torch.nn.functional.mse_loss(recon, x).item()\n"
    )))
    assert "output, x = accelerator.gather_for_metrics((output, x))" in out


def test_a_stop_on_rewards_of_sampled_actions_stops_every_process() -> None:
    """REINFORCE: actions drawn with ``Categorical(probs).sample()`` differ between processes, so the rewards
    and the running reward do: the solved ``break`` becomes a trigger (it hung on 2 processes)."""
    out = converted(
        """
        import torch
        from torch.distributions import Categorical
        policy = torch.nn.Linear(4, 2)
        optimizer = torch.optim.Adam(policy.parameters(), lr=1e-2)
        running = 0.0
        for episode in range(100):
            probs = torch.softmax(policy(torch.ones(4)), -1)
            m = Categorical(probs)
            action = m.sample()
            reward = float(action.item())
            (-m.log_prob(action) * reward).backward()
            optimizer.step()
            running = 0.9 * running + 0.1 * reward
            if running > 0.8:
                break
        """
    )
    assert "accelerator.set_trigger()" in out and "if accelerator.check_trigger():" in out


def test_a_hidden_state_the_forward_takes_back_is_not_gathered() -> None:
    """``output, val_h = net(inputs, val_h)`` in an evaluation loop: the hidden state goes back into the model on the
    next batch, so it stays this process's own; only the output and the targets are gathered (a crash before)."""
    from accelify.pipeline import convert_source

    code = (
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\nclass Net(torch.nn.Module):\n"
        "    def __init__(self):\n        super().__init__()\n        self.rnn = torch.nn.GRU(3, 4, batch_first=True)\n"
        "        self.fc = torch.nn.Linear(4, 1)\n\n    def forward(self, x, h):\n        out, h = self.rnn(x, h)\n"
        "        return self.fc(out[:, -1]), h\n\n\n"
        "loader = DataLoader(TensorDataset(torch.randn(16, 5, 3), torch.randn(16, 1)), batch_size=4, drop_last=True)\n"
        "net = Net()\noptimizer = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "for x, y in loader:\n    out, _ = net(x, torch.zeros(1, 4, 4))\n    loss = torch.nn.functional.mse_loss(out, y)\n"
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
        "h = torch.zeros(1, 4, 4)\ntotal = 0.0\nwith torch.no_grad():\n    for x, y in loader:\n"
        "        output, h = net(x, h)\n        total += torch.nn.functional.mse_loss(output, y).item()\nprint(total)\n"
    )
    result = convert_source(code)
    assert "output, y = accelerator.gather_for_metrics((output, y))" in result.new, result.new


def test_an_evaluation_helper_called_with_the_train_and_the_validation_loader_gathers() -> None:
    """josiahdavis/tabular's ``evaluate_nn(train_dataloader, ...)`` then ``evaluate_nn(valid_dataloader, ...)``:
    the parameter held a different loader at each call, so it was not taken for a loader at all and each process
    computed its metrics on its shard, silently."""
    out = converted(
        "import torch\nimport numpy as np\n"
        "def evaluate(loader, model):\n    model.eval()\n    ys = []\n    with torch.no_grad():\n"
        "        for x, y in loader:\n            out = model(x)\n            ys.append((out.argmax(1) == y).numpy())\n"
        "    return np.concatenate(ys).mean()\n"
        "def main():\n    model = torch.nn.Linear(2, 2)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    train = torch.utils.data.DataLoader(ds)\n    val = torch.utils.data.DataLoader(ds2)\n"
        "    for x, y in train:\n        torch.nn.functional.cross_entropy(model(x), y).backward()\n        opt.step()\n"
        "    print(evaluate(train, model), evaluate(val, model))\n"
    )
    assert "model, opt, train, val = accelerator.prepare(model, opt, train, val)" in out
    assert "            out, y = accelerator.gather_for_metrics((out, y))\n" in out


def test_a_helper_handed_a_loader_at_one_call_and_something_else_at_another_is_left() -> None:
    out = converted(
        "import torch\n"
        "def evaluate(items, model):\n    model.eval()\n    n = 0\n    with torch.no_grad():\n"
        "        for x, y in items:\n            n += (model(x).argmax(1) == y).sum().item()\n    return n\n"
        "def main():\n    model = torch.nn.Linear(2, 2)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    train = torch.utils.data.DataLoader(ds)\n"
        "    for x, y in train:\n        torch.nn.functional.cross_entropy(model(x), y).backward()\n        opt.step()\n"
        "    print(evaluate(train, model), evaluate(pairs, model))\n"
    )
    assert "gather_for_metrics" not in out


FORWARD_IN_BRANCHES = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=4)
model = torch.nn.Linear(3, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
labels = False
for x, y in loader:
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
test_loss = 0
with torch.no_grad():
    for x, y in loader:
        if labels:
            loss = torch.nn.functional.mse_loss(model(x), y)
        else:
            loss = torch.nn.functional.l1_loss(model(x), y)
{use}
test_loss /= len(loader)
print(test_loss)
"""


@pytest.mark.parametrize(
    ("use", "reported"),
    [
        ("        test_loss += loss.item()", False),  # only a running sum, reduced after the loop
        ("        value = loss.item()\n        test_loss += value", False),  # through a plain assignment
        ("        test_loss += loss.item()\n        print(loss.item())", True),  # one process's batch, printed
        ("        value = loss.item()\n        test_loss += value\nprint(value)", True),  # the last batch's, read after
    ],
)
def test_a_forward_that_cannot_be_gathered_is_reported_only_where_a_value_stays_local(use: str, reported: bool) -> None:
    """field test I8 (DDPM by abarankab): the forward is in an ``if``/``else`` (``diffusion(x, y)`` or
    ``diffusion(x)``), so it is not gathered, but the test loss it feeds is a running sum the averages rule reduces
    after the loop: ACC016 ("the metric stays each process's own") was false there. It stays for a value read
    anywhere else."""
    from accelify.pipeline import convert_source

    result = convert_source(FORWARD_IN_BRANCHES.format(use=use))
    assert result.status == "converted", result.error
    assert 'test_loss = accelerator.reduce(torch.tensor(test_loss, dtype=torch.float64, device=accelerator.device), "mean")' \
        in result.new, result.new
    assert ("ACC016" in [w.code for w in result.warnings]) is reported


MINING = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


def online_pairs(emb, labels):
    iu = torch.triu_indices(len(labels), len(labels), 1)
    same = labels[iu[0]] == labels[iu[1]]
    d = (emb[iu[0]] - emb[iu[1]]).pow(2).sum(1)
    return torch.cat([d[same], torch.relu(1.0 - d[~same].sqrt()).pow(2)]).mean(), int(same.sum())


loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,))), batch_size=8)
net = torch.nn.Linear(8, 2)
{wrap}optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
for x, y in loader:
    optimizer.zero_grad()
    online_pairs(net(x), y)[0].backward()
    optimizer.step()
val_loss, pairs, batches = 0.0, 0, 0
with torch.no_grad():
    for x, y in loader:
{forward}
        val_loss += loss.item()
        pairs += n
        batches += 1
print(val_loss / len(loader), pairs / batches)
"""


@pytest.mark.parametrize("forward", [
    "        out = net(x)\n        loss, n = online_pairs(out, y)",
    "        loss, n = online_pairs(net(x), y)",  # the forward inside the loss's call: taken out, not gathered
])
def test_a_loss_mined_within_the_batch_runs_per_process_and_its_sums_and_counts_are_reduced(forward: str) -> None:
    """field test J3 (siamese-triplet): a loss that picks its pairs within the batch, on the gathered batches of every
    process, mined across them (positive pairs per batch 121.5 on 2 processes where the original has 29.8). It runs on
    each process's own batch (whole batches of the original's sampler), nothing is gathered (nothing else reads the
    outputs), and the loss sum and the count of pairs the loss returns are reduced with the batch counter's "mean"."""
    new = converted(MINING.format(wrap="", forward=forward))
    assert "gather" not in new, new
    assert 'val_loss = accelerator.reduce(torch.tensor(val_loss, dtype=torch.float64, device=accelerator.device), "mean")' \
        in new, new
    assert 'pairs = accelerator.reduce(torch.tensor(pairs, dtype=torch.float64, device=accelerator.device), "mean")' \
        in new, new


def test_a_loss_mined_within_the_batch_stays_gathered_under_split_batches() -> None:
    """A ``DataParallel`` script converted with ``split_batches=True``: each process holds 1/N of every batch, so the
    gathered pass is one original batch, and the loss is computed on it as before."""
    new = converted(MINING.format(wrap="net = torch.nn.DataParallel(net)\n", forward="        out = net(x)\n"
                                  "        loss, n = online_pairs(out, y)"))
    assert "split_batches=True" in new, new
    assert "        out = net(x)\n        out, y = accelerator.gather_for_metrics((out, y))\n        loss, n = online_pairs" in new, new


REBOUND = """\
import torch
from torch.utils.data import DataLoader, TensorDataset


class BatchHardLoss(torch.nn.Module):
    def forward(self, emb, labels):
        d = torch.cdist(emb, emb)
        same = labels[:, None] == labels[None, :]
        return torch.relu((d * same).max(1).values - (d + 1e6 * same).min(1).values + 0.5).mean()


def evaluate(model, loader, loss_fn):
    total = 0.0
    with torch.no_grad():
        for x, y in loader:
            out = model(x)
            total += loss_fn(out, y).item()
    return total / len(loader)


loader = DataLoader(TensorDataset(torch.randn(32, 8), torch.randint(0, 4, (32,))), batch_size=8)
net = torch.nn.Linear(8, 4)
optimizer = torch.optim.SGD(net.parameters(), lr=0.05)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(net(x), y).backward()
    optimizer.step()
loss_fn = torch.nn.CrossEntropyLoss()
print(evaluate(net, loader, loss_fn))
{second}
"""


@pytest.mark.parametrize(("second", "gathered"), [
    ("", True),  # every caller passes a torch loss: a mean of per-sample terms, gathered before it
    ("loss_fn = BatchHardLoss()\nprint(evaluate(net, loader, loss_fn))", False),  # rebound, as J3's notebook does
])
def test_a_loss_parameter_is_judged_by_every_value_it_may_hold(second: str, gathered: bool) -> None:
    """siamese-triplet's notebook rebinds ``loss_fn`` for each experiment before calling ``fit``: the name's first
    binding (a torch loss) does not speak for the others (a loss that picks the hardest pairs within the batch)."""
    new = converted(REBOUND.format(second=second))
    assert ("out, y = accelerator.gather_for_metrics((out, y))" in new) is gathered, new
    assert ('total = accelerator.reduce(' in new) is not gathered, new
