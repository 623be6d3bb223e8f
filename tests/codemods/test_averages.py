"""``rules/averages.py`` (with ``analysis/shard_sums.py``): which running sums over a sharded loader are reduced
after the loop, how, and which are reported instead. Each case is a training loop over a prepared loader;
``STEP`` marks the forward, backward and optimizer step."""

from __future__ import annotations

import textwrap

import pytest

from _convert import codes, converted

from accelify.pipeline import convert_source

HEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=2)
"""
STEP = ["out = model(x)", "loss = torch.nn.functional.cross_entropy(out, y)", "loss.backward()", "optimizer.step()"]


def _script(body: str) -> str:
    lines = []
    for line in textwrap.dedent(body).lstrip("\n").splitlines():
        if line.strip() == "STEP":
            indent = line[: len(line) - len(line.lstrip())]
            lines += [indent + s for s in STEP]
        else:
            lines.append(line)
    return HEAD + "\n".join(lines) + "\n"


# the script's body -> the reductions inserted, in order, each right after the loop where the sum is complete
REDUCED = {
    "a count over the data set": ("""
        for epoch in range(2):
            correct = 0
            for x, y in loader:
                STEP
                correct += (out.argmax(1) == y).sum().item()
            print(correct / len(loader.dataset))
        """, ['    correct = accelerator.reduce(torch.tensor(correct, device=accelerator.device), "sum").item()']),
    "a mean over the batches": ("""
        for epoch in range(2):
            total = 0.0
            for x, y in loader:
                STEP
                total += loss.item()
            print(total / len(loader))
        """, ['    total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "mean").item()']),
    "a tensor sum over a batch counter": ("""
        total, n = 0, 0
        for x, y in loader:
            STEP
            total += loss.detach()
            n += 1
        print(total / n)
        """, ['total = accelerator.reduce(total, "mean")']),
    "a sum and its count": ("""
        seen, total = 0, 0.0
        for x, y in loader:
            STEP
            total += loss.item() * x.size(0)
            seen += y.shape[0]
        result = total / seen
        """, ['total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()',
              'seen = accelerator.reduce(torch.tensor(seen, device=accelerator.device), "sum").item()']),
    "a sum over a data set's length": ("""
        train_set = TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,)))
        train_loader = DataLoader(train_set, batch_size=2)
        total = 0.0
        for x, y in train_loader:
            STEP
            total += loss.item() * x.size(0)
        print(total / len(train_set))
        """, ['total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()']),
    "a sum over the length of a library data set a loader walks (pytorch-beginner's CNN)": ("""
        from torchvision import datasets
        train_dataset = datasets.MNIST(root="./data", train=True, download=True)
        train_loader = DataLoader(train_dataset, batch_size=2)
        running_loss = 0.0
        for i, (x, y) in enumerate(train_loader, 1):
            STEP
            running_loss += loss.item() * y.size(0)
            if i % 300 == 0:
                print(running_loss / (2 * i))
        print(running_loss / (len(train_dataset)))
        """, ['running_loss = accelerator.reduce(torch.tensor(running_loss, dtype=torch.float64, device=accelerator.device), "sum").item()']),
    "a sum over the length of a data set of unknown type a loader walks": ("""
        data = make_data()
        train_loader = DataLoader(data, batch_size=2)
        total = 0.0
        for x, y in train_loader:
            STEP
            total += loss.item() * x.size(0)
        print(total / len(data))
        """, ['total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()']),
    "a count through torch.sum": ("""
        correct = 0
        for x, y in loader:
            STEP
            correct += torch.sum(out.argmax(1) == y).item()
        print(f"{correct} right")
        """, ['correct = accelerator.reduce(torch.tensor(correct, device=accelerator.device), "sum").item()']),
    "an item of unknown type keeps its type": ("""
        hits = 0
        for x, y in loader:
            STEP
            mask = out.argmax(1) == y
            hits += mask.sum().item()
        print(f"{hits} right")
        """, ['hits = type(hits)(accelerator.reduce(torch.tensor(hits, dtype=torch.float64, device=accelerator.device), "sum").item())']),
    "a mean over the enumerate counter started at 1": ("""
        for epoch in range(2):
            running_loss, running_acc = 0.0, 0.0
            for i, (x, y) in enumerate(loader, 1):
                STEP
                running_loss += loss.item()
                running_acc += (out.argmax(1) == y).float().mean()
            print(f"loss {running_loss / i:.4f} acc {running_acc / i:.4f}")
        """, ['    running_loss = accelerator.reduce(torch.tensor(running_loss, dtype=torch.float64, device=accelerator.device), "mean").item()',
              '    running_acc = accelerator.reduce(running_acc, "mean")']),
    "a mean over the enumerate counter plus one": ("""
        total = 0.0
        for step, (x, y) in enumerate(loader):
            STEP
            total += loss.item()
        print(total / (step + 1))
        """, ['total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "mean").item()']),
    "a sum of detached losses (loss.data) printed as it is": ("""
        for epoch in range(2):
            total_loss = 0
            for x, y in loader:
                STEP
                total_loss += loss.data
            print("epoch [{}], loss:{:.4f}".format(epoch + 1, total_loss))
        """, ['    total_loss = accelerator.reduce(total_loss, "sum")']),
    "summed over every epoch, read after them": ("""
        total = 0.0
        for epoch in range(2):
            for x, y in loader:
                STEP
                total += loss.item()
        print(total)
        """, ['total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "sum").item()']),
    "a tensor of zeros made to sum into, over an attribute of the data set": ("""
        class Ratings(TensorDataset):
            nnz = 8
        train_set = Ratings(torch.randn(8, 2), torch.randint(0, 2, (8,)))
        train_loader = DataLoader(train_set, batch_size=2)
        for epoch in range(2):
            total_loss = torch.Tensor([0])
            for x, y in train_loader:
                STEP
                total_loss += loss.item()
            total_loss /= train_set.nnz
            print(total_loss[0])
        """, ['    total_loss = accelerator.reduce(total_loss.to(accelerator.device), "sum").to(total_loss.device)']),
    "a sum of batch losses over the data set's number of batches": ("""
        train_set = TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,)))
        train_loader = DataLoader(train_set, batch_size=2)
        num_batches = int(len(train_set) / train_loader.batch_size)
        tr_loss = 0.0
        for x, y in train_loader:
            STEP
            tr_loss += loss.item()
        print(tr_loss / num_batches)
        """, ['tr_loss = accelerator.reduce(torch.tensor(tr_loss, dtype=torch.float64, device=accelerator.device), "sum").item()']),
    "a sum over the rows of the data a data set wraps": ("""
        X_train, y_train = torch.randn(8, 2), torch.randint(0, 2, (8,))
        train_loader = DataLoader(TensorDataset(X_train, y_train), batch_size=2)
        total = torch.zeros(1)
        for x, y in train_loader:
            STEP
            total += loss.item() * x.size(0)
        print(total / X_train.shape[0], total / len(X_train))
        """, ['total = accelerator.reduce(total.to(accelerator.device), "sum").to(total.device)']),
}


@pytest.mark.parametrize("name", list(REDUCED))
def test_reduced_after_the_loop(name: str) -> None:
    body, lines = REDUCED[name]
    code = _script(body)
    new = converted(code).splitlines()
    assert codes(code) == []
    assert [line for line in new if ".reduce(" in line] == lines
    first = new.index(lines[0])
    indent = len(lines[0]) - len(lines[0].lstrip())
    before = new[first - 1]
    assert len(before) - len(before.lstrip()) > indent, "the reduction comes right after the loop's body"


LEFT = {
    "printed every N steps inside the loop": ("""
        running = 0.0
        for i, (x, y) in enumerate(loader):
            STEP
            running += loss.item()
            if i % 2 == 1:
                print(running / 2)
                running = 0.0
        """, []),
    "a batch counter alone": ("""
        n = 0
        for x, y in loader:
            STEP
            n += 1
        print(n)
        """, []),
    "not read after the loop": ("""
        total = 0.0
        for x, y in loader:
            STEP
            total += loss.item()
        """, []),
    "an AverageMeter": ("""
        from meters import AverageMeter
        meter = AverageMeter()
        for x, y in loader:
            STEP
            meter.update(loss.item(), x.size(0))
        print(meter.avg)
        """, ["ACC028:13"]),
    "a list appended to on some batches only, by this process's own values": ("""
        import numpy as np
        losses = []
        for i, (x, y) in enumerate(loader):
            STEP
            if loss.item() > 0.5:
                losses.append(loss.item())
        print(np.mean(losses))
        """, ["ACC028:14"]),
    "summed over epochs and read between them": ("""
        total = 0.0
        for epoch in range(2):
            for x, y in loader:
                STEP
                total += loss.item()
            print(total)
        """, ["ACC028:13"]),
    "divided by the enumerate counter started at 0 (the count less one)": ("""
        total = 0.0
        for i, (x, y) in enumerate(loader):
            STEP
            total += loss.item()
        print(total / i)
        """, ["ACC028:12"]),
    "divided by the enumerate counter of a loop that may break": ("""
        total = 0.0
        for i, (x, y) in enumerate(loader, 1):
            STEP
            total += loss.item()
            if loss.item() < 0.1:
                break
        print(total / i)
        """, ["ACC028:12"]),
    "divided by the enumerate counter of a later loop": ("""
        total = 0.0
        for i, (x, y) in enumerate(loader, 1):
            STEP
            total += loss.item()
        for i, (x, y) in enumerate(DataLoader(TensorDataset(torch.randn(4, 2)), batch_size=2), 1):
            pass
        print(total / i)
        """, ["ACC028:12"]),
    "divided by the enumerate counter, summed over every epoch": ("""
        total = 0.0
        for epoch in range(2):
            for i, (x, y) in enumerate(loader, 1):
                STEP
                total += loss.item()
        print(total / i)
        """, ["ACC028:13"]),
    "divided by the counter times the batch size (the process's batch only without split batches)": ("""
        batch_size = 2
        total = 0.0
        for i, (x, y) in enumerate(loader, 1):
            STEP
            total += loss.item() * x.size(0)
        print(total / (batch_size * i))
        """, ["ACC028:13"]),
    "divided by a count it cannot place": ("""
        total = 0.0
        for x, y in loader:
            STEP
            total += loss.item()
        print(total / 7)
        """, ["ACC028:12"]),
    "an integer tensor summed into, divided by a count": ("""
        total = torch.tensor(0)
        for x, y in loader:
            STEP
            total += loss.item()
        print(total / len(loader))
        """, ["ACC028:12"]),
    "a loader walked only on the main process": ("""
        for x, y in loader:
            STEP
        import torch.distributed as dist
        if dist.get_rank() == 0:
            correct = 0
            for x, y in DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,)))):
                correct += (model(x).argmax(1) == y).sum().item()
            print(correct)
        """, None),
}


@pytest.mark.parametrize("name", list(LEFT))
def test_left_alone(name: str) -> None:
    body, warnings = LEFT[name]
    code = _script(body)
    assert ".reduce(" not in converted(code)
    if warnings is not None:
        assert codes(code) == warnings


CURVES = {
    "a list of per-batch losses read in order (a loss curve)": """
        import matplotlib.pyplot as plt
        losses = []
        for x, y in loader:
            STEP
            losses.append(loss.item())
        plt.plot(losses)
        """,
    "a list appended to on the same steps of every process (by the batch index)": """
        import numpy as np
        losses = []
        for i, (x, y) in enumerate(loader):
            STEP
            if i % 2 == 0:
                losses.append(loss.item())
        print(np.mean(losses))
        """,
}


@pytest.mark.parametrize("name", list(CURVES))
def test_a_loss_curve_keeps_the_steps_loss_reduced_where_it_is_appended(name: str) -> None:
    """Every process walks the same steps of a prepared loader: the step's loss is reduced where the curve keeps it
    (it was reported, ACC028: each process kept its own batches' losses)."""
    code = _script(CURVES[name])
    assert 'losses.append(accelerator.reduce(loss.detach(), "mean").item())' in converted(code)
    assert codes(code) == []


def test_a_sum_set_again_after_each_pass_is_reduced_after_each_pass() -> None:
    code = _script("""
        running = 0.0
        for epoch in range(2):
            for x, y in loader:
                STEP
                running += loss.item()
            print(running / len(loader))
            running = 0.0
        """)
    new = converted(code)
    assert codes(code) == []
    assert (
        '        running += loss.item()\n'
        '    running = accelerator.reduce(torch.tensor(running, dtype=torch.float64, device=accelerator.device), "mean").item()\n'
        '    accelerator.print(running / len(loader))\n'
    ) in new


def test_metrics_a_helper_sums_into_a_dict_are_reduced_key_by_key_with_their_count() -> None:
    # usuyama's U-Net notebook: ``calc_loss(outputs, labels, metrics)`` does ``metrics['loss'] += ...`` into a
    # ``defaultdict(float)``: every key it sums under is written out, so each is reduced, and so is the count
    code = """
    from collections import defaultdict
    import torch
    from torch.utils.data import DataLoader
    def calc_loss(pred, target, metrics):
        loss = torch.nn.functional.mse_loss(pred, target)
        metrics['loss'] += loss.item() * target.size(0)
        return loss
    def train_model(model, optimizer, loader):
        for epoch in range(2):
            metrics = defaultdict(float)
            epoch_samples = 0
            for inputs, labels in loader:
                loss = calc_loss(model(inputs), labels, metrics)
                loss.backward()
                optimizer.step()
                epoch_samples += inputs.size(0)
            print(metrics['loss'] / epoch_samples)
        return model
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=4)
    model = train_model(model, optimizer, loader)
    """
    new = converted(code)
    assert (
        "        for key in ('loss',):\n"
        "            metrics[key] = accelerator.reduce(torch.tensor(float(metrics[key]), dtype=torch.float64, "
        "device=accelerator.device), \"sum\").item()\n"
        "        epoch_samples = accelerator.reduce(torch.tensor(epoch_samples, device=accelerator.device), \"sum\").item()\n"
    ) in new, new
    assert codes(code) == []
    # a key not written out (``metrics[name] += ...``): the keys could differ between processes, so both are reported
    # and the count is not reduced alone (a 1/N loss)
    other = code.replace("metrics['loss'] += ", "metrics[name] += ").replace("def calc_loss(pred, target, metrics):",
                                                                            "def calc_loss(pred, target, metrics, name='loss'):")
    assert codes(other) == ["ACC028:13", "ACC028:16"] and "accelerator.reduce" not in converted(other)


SPLIT = """
import numpy as np
import torch
from torch.utils.data import DataLoader
from torch.utils.data.sampler import SubsetRandomSampler
indices = list(range(len(train_data)))
np.random.shuffle(indices)
train_loader = DataLoader(train_data, batch_size=20, sampler=SubsetRandomSampler(indices[40:]))
model = torch.nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
for epoch in range(2):
    train_loss = 0.0
    for data, target in train_loader:
        loss = torch.nn.functional.cross_entropy(model(data), target)
        loss.backward()
        optimizer.step()
        train_loss += loss.item() * data.size(0)
    print(train_loss / len(train_loader.sampler))
"""


def test_a_sum_over_a_split_divided_by_the_samplers_size_is_summed_across_processes() -> None:
    # udacity's CIFAR notebook: ``len(loader.sampler)`` is the split's size (the runtime keeps the sampler)
    new = converted(SPLIT)
    assert 'train_loss = accelerator.reduce(torch.tensor(train_loss, dtype=torch.float64, device=accelerator.device), "sum").item()' in new
    assert "np.random.seed(0)\nnp.random.shuffle(indices)" in new  # the split drawn alike everywhere
    assert codes(SPLIT) == []


def test_hugging_face_accelerate_reads_the_scripts_sampler_through_the_batch_sampler() -> None:
    new = converted(SPLIT, target="accelerate")
    assert "print(train_loss / len(train_loader.batch_sampler.sampler))" in new, new


@pytest.mark.parametrize("made, reduced", [("defaultdict(float)", True), ("{'loss': 0.0}", False)])
def test_a_dict_of_sums_in_the_loop_is_reduced_when_missing_keys_read_zero(made: str, reduced: bool) -> None:
    code = f"""
    from collections import defaultdict
    import torch
    from torch.utils.data import DataLoader
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    loader = DataLoader(ds, batch_size=4)
    for epoch in range(2):
        sums = {made}
        for x, y in loader:
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            sums['loss'] += loss.item() * x.size(0)
        print(sums['loss'] / len(loader.dataset))
    """
    assert ("for key in ('loss',):" in converted(code)) is reduced
    assert (codes(code) == []) is reduced


def test_a_loss_a_helper_computes_from_the_batch_is_reduced() -> None:
    # ``loss = loss_function(recon, x)`` (pytorch/examples vae): the helper's result reads its parameter, which the
    # call passes a batch's output; it was taken as the same on every process and the epoch average left at 1/N
    source = HEAD + textwrap.dedent("""
        def loss_function(out, y):
            return torch.nn.functional.cross_entropy(out, y, reduction="sum")
        for epoch in range(2):
            train_loss = 0
            for x, y in loader:
                loss = loss_function(model(x), y)
                loss.backward()
                optimizer.step()
                train_loss += loss.item()
            print("Average loss: {:.4f}".format(train_loss / len(loader.dataset)))
        """)
    out = converted(source)
    assert '    train_loss = accelerator.reduce(torch.tensor(train_loss, dtype=torch.float64, device=accelerator.device), "sum").item()' in out


def test_meters_kept_in_a_dict_are_reduced() -> None:
    # ``meters["loss"].update(loss.item())`` (DeiT / DETR engines): the meter's sum and count are reduced after the
    # loop (more holders and the refusals: test_meter_sums.py)
    source = _script("""
        class AverageMeter:
            def __init__(self):
                self.sum, self.count = 0.0, 0
            def update(self, val, n=1):
                self.sum += val * n
                self.count += n
        meters = {"loss": AverageMeter()}
        for x, y in loader:
            STEP
            meters["loss"].update(loss.item())
        print(meters["loss"].sum / meters["loss"].count)
        """)
    assert codes(source) == []
    out = converted(source)
    assert 'meters["loss"].sum = accelerator.reduce(torch.tensor(meters["loss"].sum, dtype=torch.float64, ' in out
    assert 'meters["loss"].count = accelerator.reduce(torch.tensor(meters["loss"].count, device=' in out


GATHERED = {
    "np.mean of a list set before each pass": ("""
        import numpy as np
        for epoch in range(2):
            losses = []
            for x, y in loader:
                STEP
                losses.append(loss.item())
            print(epoch, np.mean(losses))
        """, "    losses = accelerator.gather(torch.tensor(losses, dtype=torch.float64, device=accelerator.device)).tolist()"),
    "sum over len": ("""
        losses = []
        for x, y in loader:
            STEP
            losses.append(loss.item())
        print(sum(losses) / len(losses))
        """, "losses = accelerator.gather(torch.tensor(losses, dtype=torch.float64, device=accelerator.device)).tolist()"),
    "a helper's accuracy, computed from the parameter it is handed": ("""
        import numpy as np
        def get_accuracy(prediction, label):
            return prediction.argmax(-1).eq(label).sum() / prediction.shape[0]
        accs = []
        for x, y in loader:
            STEP
            accuracy = get_accuracy(out, y)
            accs.append(accuracy.item())
        print(np.mean(accs))
        """, "accs = accelerator.gather(torch.tensor(accs, dtype=torch.float64, device=accelerator.device)).tolist()"),
    "counts stay integers": ("""
        hits = []
        for x, y in loader:
            STEP
            hits.append((out.argmax(1) == y).sum().item())
        print(sum(hits))
        """, "hits = accelerator.gather(torch.tensor(hits, device=accelerator.device)).tolist()"),
    "detached losses kept on the device, stacked and averaged": ("""
        for epoch in range(2):
            losses = []
            for x, y in loader:
                STEP
                losses.append(loss.detach())
            print(torch.stack(losses).mean().item())
        """, "    losses = list(accelerator.gather(torch.stack(losses)))"),
    "numbers made a tensor and averaged": ("""
        losses = []
        for x, y in loader:
            STEP
            losses.append(loss.item())
        print(torch.tensor(losses).mean())
        """, "losses = accelerator.gather(torch.tensor(losses, dtype=torch.float64, device=accelerator.device)).tolist()"),
}


@pytest.mark.parametrize("kept", [
    "losses.append(loss.detach().cpu())\n        print(torch.stack(losses).mean())",  # off the device: not gathered as is
    "losses.append(loss.detach())\n        print(torch.stack(losses)[-1])",  # read in order: the last batch's
])
def test_a_list_of_tensors_that_cannot_be_gathered_as_it_is_is_reported(kept: str) -> None:
    code = _script(f"""
        losses = []
        for x, y in loader:
            STEP
            {kept}
        """)
    assert [c.split(":")[0] for c in codes(code)] == ["ACC028"]


@pytest.mark.parametrize("name", list(GATHERED))
def test_a_list_of_per_batch_numbers_summarised_after_the_pass_is_gathered(name: str) -> None:
    """explainingai-code DDPM-Pytorch's ``losses.append(loss.item())`` then ``np.mean(losses)`` printed one
    process's mean: the list is gathered right after the pass (every process's batches, in one list)."""
    body, line = GATHERED[name]
    code = _script(body)
    new = converted(code).splitlines()
    assert codes(code) == []
    assert [n for n in new if ".gather(" in n] == [line]
    before = new[new.index(line) - 1]
    assert len(before) - len(before.lstrip()) > len(line) - len(line.lstrip()), "right after the loop's body"



GATHERED_EVAL = """
    test_loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randint(0, 2, (8,))), batch_size=2)
    for x, y in loader:
        STEP
    model.eval()
    criterion = torch.nn.CrossEntropyLoss({made})
    test_loss = 0
    with torch.no_grad():
        for x, y in test_loader:
            out = model(x)
            test_loss += {added}
    print(test_loss / {divisor})
    """


@pytest.mark.parametrize("made, added, divisor, warned", [
    ("", "criterion(out, y).item()", "len(test_loader)", False),  # summed per original batch (see below)
    ('reduction="sum"', "criterion(out, y).item()", "len(test_loader.dataset)", False),  # sums over the data set's size
    ("", "torch.nn.functional.cross_entropy(out, y, reduction='sum').item()", "len(test_loader.dataset)", False),
    # a count over the number of batches: counted per original batch, over the original's number of batches
    ("", "(out.argmax(1) == y).sum().item()", "len(test_loader)", False),
    ("", "(out.argmax(1) == y).sum().item()", "len(test_loader.dataset)", False),
    # a mean loss of a value the loop does not gather: its batches cannot be told apart in the pass
    ("", "criterion(out + torch.randn(1), y).item()", "len(test_loader.dataset)", True),
])
def test_a_sum_over_a_gathered_loop_is_reported_when_its_divisor_does_not_fit(made: str, added: str, divisor: str,
                                                                               warned: bool) -> None:
    code = _script(GATHERED_EVAL.format(made=made, added=added, divisor=divisor))
    new = converted(code)
    assert "accelerator.gather_for_metrics((out, y))" in new and ".reduce(" not in new
    assert codes(code) == (["ACC042:18"] if warned else [])


@pytest.mark.parametrize("added, loss", [
    ("criterion(out, y).sum().item()", "criterion(out, y).sum().item()"),  # pytorch/examples siamese_network
    ("torch.nn.functional.cross_entropy(out, y).item()", "torch.nn.functional.cross_entropy(out, y).item()"),
    ("float(criterion(out, y))", "float(criterion(out, y))"),
])
def test_a_sum_of_mean_losses_over_a_gathered_loop_sums_the_original_batches(added: str, loss: str) -> None:
    """``test_loss += criterion(out, y).item()`` over a gathered loop, divided by the data set's size (F5, cifar100's
    test loss): each pass holds N of the original's batches, so the value added is the sum of their mean losses, split
    by the loader's batch size; the printed value is the original's (tests/e2e: corpus ``gathered_mean_losses``)."""
    code = _script(GATHERED_EVAL.format(made="", added=added, divisor="len(test_loader.dataset)"))
    size = "test_loader.batch_sampler.batch_size"
    assert f"test_loss += sum({loss} for out, y in zip(out.split({size}), y.split({size})))\n" in converted(code)
    assert codes(code) == []


def test_a_mean_loss_bound_in_the_loop_is_summed_per_original_batch() -> None:
    """weiaicunzai/pytorch-cifar100: ``loss = loss_function(outputs, labels)`` then ``test_loss += loss.item()``."""
    code = _script(GATHERED_EVAL.format(made="", added="loss.item()", divisor="len(test_loader.dataset)").replace(
        "            out = model(x)\n", "            out = model(x)\n            loss = criterion(out, y)\n"))
    size = "test_loader.batch_sampler.batch_size"
    new = converted(code)
    assert "        loss = criterion(out, y)\n" in new
    assert f"test_loss += sum(criterion(out, y).item() for out, y in zip(out.split({size}), y.split({size})))\n" in new
    assert codes(code) == []


@pytest.mark.parametrize("added, reduction", [
    ("loss.item()", '"mean"'),  # a batch's mean: with split batches each process holds 1/N of every batch
    ("loss.item() * x.size(0)", '"sum"'),  # a per-sample sum: the processes' shares add up
])
def test_a_sum_of_batch_means_under_split_batches_is_averaged(added: str, reduction: str) -> None:
    code = _script(f"""
        model = torch.nn.DataParallel(model)
        total = 0.0
        for x, y in loader:
            STEP
            total += {added}
        print(total)
        """)
    new = converted(code)
    assert "Accelerator(split_batches=True)" in new
    assert [line for line in new.splitlines() if ".reduce(" in line] == [
        f"total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), {reduction}).item()"]


HELPER_METRIC = """
def get_accuracy(SR, GT, threshold=0.5):
    SR = SR > threshold
    GT = GT == torch.max(GT)
    corr = torch.sum(SR == GT)
    acc = float(corr) / float(SR.size(0) * SR.size(1))
    return acc


for epoch in range(2):
    acc = 0.
    length = 0
    for x, y in loader:
        STEP
        acc += {added}
        length += x.size(0)
    acc = acc / length
    print(acc)
"""


def test_a_sum_of_what_a_helper_computes_from_the_batch_is_reduced_with_its_count() -> None:
    """LeeJunHyun/Image_Segmentation's ``acc += get_accuracy(SR, GT)``: the helper rebinds its parameter (``SR = SR >
    threshold``) and returns a float; the sum is one process's share, reduced with the count it is divided by."""
    new = converted(_script(HELPER_METRIC.format(added="get_accuracy(out, torch.nn.functional.one_hot(y, 2).float())")))
    reduced = [line.strip().split(" = ")[0] for line in new.splitlines() if ".reduce(" in line]
    assert reduced == ["acc", "length"], new


def test_a_count_is_not_reduced_alone_when_the_sum_it_divides_stays_per_process() -> None:
    """A sum of unknown kind stays one process's share (ACC028): the count it is divided by must stay local too,
    whichever of the two the loop adds first, or the printed value would be 1/N of the share."""
    for first in (True, False):
        body = HELPER_METRIC.format(added="score(out)")
        if not first:
            body = body.replace("        acc += score(out)\n        length += x.size(0)\n",
                                "        length += x.size(0)\n        acc += score(out)\n")
        code = _script(body.replace("def get_accuracy", "from sklearn.metrics import score\n\n\ndef get_accuracy"))
        assert ".reduce(" not in converted(code)
        assert [c.split(":")[0] for c in codes(code)] == ["ACC028", "ACC028"]  # the sum, and the count kept with it


@pytest.mark.parametrize("bound, added, divisor", [
    ("mse = criterion(out, y)", "10 * math.log10(1 / mse.item())", "(len(test_loader) + 1)"),
    ("mse = criterion(out + torch.randn(1), y)", "10 * math.log10(1 / mse.item())", "len(test_loader)"),  # not gathered
])
def test_a_function_of_a_mean_loss_summed_over_a_gathered_loop_is_reported(bound: str, added: str, divisor: str) -> None:
    """A function of a batch's mean loss (a PSNR) summed over the gathered test loop: where it is not the proven
    shape (see the next test) each pass's value is of the mean over N batches, not the batches' values; no division
    makes it the original's, so it is reported (ACC042), where it had been silently close."""
    body = GATHERED_EVAL.format(made="", added=added, divisor=divisor).replace(
        "            out = model(x)\n", f"            out = model(x)\n            {bound}\n" if bound else "            out = model(x)\n")
    code = _script("import math\n" + textwrap.dedent(body).lstrip("\n"))
    assert [c.split(":")[0] for c in codes(code)] == ["ACC042"]


@pytest.mark.parametrize("bound, added", [
    ("", "1 / criterion(out, y).item()"),
    ("mse = criterion(out, y)", "10 * math.log10(1 / mse.item())"),
])
def test_a_function_of_a_mean_loss_over_the_data_set_size_runs_per_original_batch(bound: str, added: str) -> None:
    """``test_loss += 1 / criterion(out, y).item()``, or a PSNR of a mean loss, divided by the data set's size, were
    reported (ACC042) while the kind of what is added was unknown; known as a number since the fourteenth stop (a
    division, ``math.log10``), the loop's statements from the gather on run per original batch, which makes the sum
    the original's (its divisor is the original's already)."""
    body = GATHERED_EVAL.format(made="", added=added, divisor="len(test_loader.dataset)").replace(
        "            out = model(x)\n", f"            out = model(x)\n            {bound}\n" if bound else "            out = model(x)\n")
    code = _script("import math\n" + textwrap.dedent(body).lstrip("\n"))
    assert codes(code) == []
    new = converted(code)
    assert "        for out, y in zip(out.split(test_loader.batch_sampler.batch_size), y.split(" \
        "test_loader.batch_sampler.batch_size)):\n" in new and f"test_loss += {added}\n" in new, new


PSNR = """
    mse = criterion(out, y)
    psnr = 10 * math.log10(1 / mse.item())
"""


@pytest.mark.parametrize("chain, added", [
    (PSNR, "psnr"),  # pytorch/examples super_resolution
    ("\n    mse = criterion(out, y)\n", "10 * math.log10(1 / mse.item())"),
    ("\n    mse = criterion(out, y).item()\n    rmse = math.sqrt(mse)\n    psnr = 20 * math.log10(1 / rmse)\n", "psnr"),
    # a mean loss itself over len(loader): the mean of the passes' means weighs an uneven last pass as a full one
    ("", "criterion(out, y).item()"),
    ("\n    mse = criterion(out, y)\n    value = mse.item()\n", "value"),
])
def test_a_function_of_a_mean_loss_is_computed_per_original_batch(chain: str, added: str) -> None:
    """pytorch/examples super_resolution: ``mse = criterion(prediction, target)``, ``psnr = 10 * log10(1 / mse.item())``
    summed over the gathered test loop and divided by its length: the statements from the mean loss to the sum run per
    original batch the pass holds, and the sum is divided by the original's number of batches (tests/e2e: corpus
    ``gathered_psnr``, the same PSNR on 1, 2 and 3 processes)."""
    lines = [line for line in textwrap.dedent(chain).splitlines() if line]
    body = GATHERED_EVAL.format(made="", added=added, divisor="len(test_loader)").replace(
        "            out = model(x)\n", "            out = model(x)\n" + "".join(f"            {line}\n" for line in lines))
    code = _script("import math\n" + textwrap.dedent(body).lstrip("\n"))
    size = "test_loader.batch_sampler.batch_size"
    new = converted(code)
    loop = (f"        out, y = accelerator.gather_for_metrics((out, y))\n"
            f"        for out, y in zip(out.split({size}), y.split({size})):\n"
            + "".join(f"            {line}\n" for line in lines) + f"            test_loss += {added}\n")
    assert loop in new
    assert "print(test_loss / len(test_loader.batch_sampler.batch_sampler))" in new
    assert codes(code) == []
    accelerate = converted(code, target="accelerate")
    assert 'print(test_loss / len(getattr(test_loader.batch_sampler, "batch_sampler", test_loader.batch_sampler)))' in accelerate


@pytest.mark.parametrize("after", [
    "            print(psnr)\n",  # a name of the chain read later in the pass: it would be the last batch's
    "            print(out.shape)\n",  # a gathered name read later in the pass: the per-batch loop rebinds it
    "            print(test_loss)\n",  # the running value read in the pass
])
def test_a_chain_read_after_its_sum_in_the_pass_is_reported(after: str) -> None:
    body = GATHERED_EVAL.format(made="", added="psnr", divisor="len(test_loader)").replace(
        "            out = model(x)\n", "            out = model(x)\n" + "".join(
            f"            {line}\n" for line in textwrap.dedent(PSNR).splitlines() if line)).replace(
        "            test_loss += psnr\n", "            test_loss += psnr\n" + after)
    code = _script("import math\n" + textwrap.dedent(body).lstrip("\n"))
    assert [c.split(":")[0] for c in codes(code)] == ["ACC042"]


def test_values_appended_in_a_for_else_clause_are_read_after_the_loop_not_kept_per_batch() -> None:
    """``for x, y in loader: ... else:`` (the Udacity course's shape): the ``else:`` clause runs once after the
    loop, so a loss curve appended there (``train_losses.append(total / len(loader))``) takes the reduced sum; it is
    no per-batch list kept over the shard (ACC028 had refused it)."""
    code = _script("""
        train_losses = []
        for epoch in range(2):
            total = 0.0
            for x, y in loader:
                STEP
                total += loss.item()
            else:
                train_losses.append(total / len(loader))
                print(train_losses[-1])
        """)
    assert codes(code) == []
    new = converted(code)
    reduce_at = new.index('total = accelerator.reduce(torch.tensor(total, dtype=torch.float64, device=accelerator.device), "mean")')
    assert new.index("    else:") < reduce_at < new.index("train_losses.append(total / len(loader))")


UDACITY = """
    test_loader = DataLoader(TensorDataset(torch.randn(9, 2), torch.randint(0, 2, (9,))), batch_size=2)
    for x, y in loader:
        STEP
    criterion = torch.nn.NLLLoss()
    test_loss = 0
    accuracy = 0
    with torch.no_grad():
        model.eval()
        for images, labels in test_loader:
            log_ps = model(images)
            test_loss += criterion(log_ps, labels)
            ps = torch.exp(log_ps)
            top_p, top_class = ps.topk(1, dim=1)
            equals = top_class == labels.view(*top_class.shape)
            accuracy += torch.mean(equals.type(torch.FloatTensor))
    print(test_loss / len(test_loader), accuracy / len(test_loader))
    """


def test_batch_means_over_a_gathered_loop_run_per_original_batch() -> None:
    """The Udacity course's test loop: a mean loss summed as a tensor and an accuracy that is a batch's mean, both over
    ``len(testloader)``. Over a gathered pass each is the mean of N batches (close to the original's, not equal with an
    uneven last round): the statements from the gather to the last update run per original batch, and the sums are
    divided by the original's number of batches (tests/e2e/test_gathered_batches.py runs it on 2 and 3 processes)."""
    code = _script(UDACITY)
    size = "test_loader.batch_sampler.batch_size"
    new = converted(code)
    assert ("        log_ps, labels = accelerator.gather_for_metrics((log_ps, labels))\n"
            f"        for log_ps, labels in zip(log_ps.split({size}), labels.split({size})):\n"
            "            test_loss += criterion(log_ps, labels)\n"
            "            ps = torch.exp(log_ps)\n"
            "            top_p, top_class = ps.topk(1, dim=1)\n"
            "            equals = top_class == labels.view(*top_class.shape)\n"
            "            accuracy += torch.mean(equals.type(torch.FloatTensor))\n"
            "accelerator.print(test_loss / len(test_loader.batch_sampler.batch_sampler), "
            "accuracy / len(test_loader.batch_sampler.batch_sampler))\n") in new, new
    assert codes(code) == []


EARLY_STOPPING = """
    valid_loader = DataLoader(TensorDataset(torch.randn(9, 2), torch.randint(0, 2, (9,))), batch_size=2)
    criterion = torch.nn.CrossEntropyLoss()
    for epoch in range(2):
        valid_losses = []
        for x, y in loader:
            STEP
        model.eval()
        for data, target in valid_loader:
            output = model(data)
            loss = criterion(output, target)
            valid_losses.append(loss.item())
        print(np.average(valid_losses))
    """


def test_a_list_of_mean_losses_over_a_gathered_loop_gets_one_per_original_batch() -> None:
    """Bjarten/early-stopping-pytorch (field set I, W11): ``valid_losses.append(loss.item())`` per batch, then
    ``np.average(valid_losses)``. Appending the sum of a pass's batch means made the printed loss N times the
    original's; the list must hold one value per original batch."""
    code = "import numpy as np\n" + _script(EARLY_STOPPING)
    size = "valid_loader.batch_sampler.batch_size"
    new = converted(code)
    assert ("        output, target = accelerator.gather_for_metrics((output, target))\n"
            f"        for output, target in zip(output.split({size}), target.split({size})):\n"
            "            loss = criterion(output, target)\n"
            "            valid_losses.append(loss.item())\n"
            "    accelerator.print(np.average(valid_losses))\n") in new, new
    assert codes(code) == []


def test_values_of_a_gathered_pass_that_cannot_run_per_batch_are_reported() -> None:
    """A statement that cannot run once per batch (a print) between the gather and the last update: the list and the
    batch means are one pass's, reported (ACC042), never left silently."""
    code = "import numpy as np\n" + _script(EARLY_STOPPING.replace(
        "            valid_losses.append(loss.item())\n", "            print(loss.item())\n            valid_losses.append(loss.item())\n"))
    assert "        valid_losses.append(loss.item())\n" in converted(code)
    assert codes(code) == ["ACC042:21"]
    code = _script(UDACITY.replace("            ps = torch.exp(log_ps)\n", "            print(log_ps)\n            ps = torch.exp(log_ps)\n"))
    assert "(test_loader.batch_sampler" not in converted(code)
    assert codes(code) == ["ACC042:19", "ACC042:24"]


@pytest.mark.parametrize("divide", [
    "test_loss /= len(test_loader)\nprint(test_loss, correct)",
    "test_loss /= num_batches\nprint(test_loss, correct)",  # PyTorch's quickstart: num_batches = len(dataloader) before the loop
])
def test_a_mean_loss_divided_in_place_by_the_number_of_batches_runs_per_original_batch(divide: str) -> None:
    body = GATHERED_EVAL.format(made="", added="criterion(out, y).item()", divisor="len(test_loader)").replace(
        "    test_loss = 0\n", "    num_batches = len(test_loader)\n    test_loss = 0\n").replace(
        "            test_loss += criterion(out, y).item()\n",
        "            test_loss += criterion(out, y).item()\n            correct += (out.argmax(1) == y).sum().item()\n").replace(
        "    test_loss = 0\n", "    test_loss, correct = 0, 0\n").replace(
        "    print(test_loss / len(test_loader))\n", textwrap.indent(divide, "    ") + "\n")
    code = _script(body)
    new = converted(code)
    size = "test_loader.batch_sampler.batch_size"
    assert (f"        for out, y in zip(out.split({size}), y.split({size})):\n"
            "            test_loss += criterion(out, y).item()\n"
            "            correct += (out.argmax(1) == y).sum().item()\n") in new, new
    assert "len(test_loader.batch_sampler.batch_sampler)" in new, new
    assert codes(code) == []


@pytest.mark.parametrize("bar", ["from rich.progress import track", "from alive_progress import alive_it as track",
                                 "from tqdm.rich import tqdm as track", "from fastprogress import progress_bar as track"])
def test_a_loop_through_any_progress_bar_walks_the_prepared_loader(bar: str) -> None:
    """``enumerate(track(loader, ...))`` (rich) walked "something else": the epoch's loss stayed process 0's share,
    printed as the whole epoch's, and rich drew its bar on every process (field test J10)."""
    source = textwrap.dedent(f"""\
        import torch
        {bar}
        from torch.utils.data import DataLoader, TensorDataset
        loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
        model = torch.nn.Linear(4, 2)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for epoch in range(2):
            epoch_loss = 0.0
            for batch_idx, (x, y) in enumerate(track(loader)):
                optimizer.zero_grad()
                loss = torch.nn.functional.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
                epoch_loss += loss.item()
            print(f"epoch {{epoch}} loss {{epoch_loss / len(loader):.4f}}")
        """)
    out = converted(source)
    assert 'epoch_loss = accelerator.reduce(torch.tensor(epoch_loss, dtype=torch.float64, device=accelerator.device), ' \
           '"mean").item()' in out
    drawn = "enumerate(track(loader, disable=not accelerator.is_local_main_process))" in out
    assert drawn == ("fastprogress" not in bar)  # fastprogress's bar takes no ``disable``


def test_a_gathered_sum_divided_by_the_loops_last_index_is_reported() -> None:
    """``valid_loss / k`` after ``for k, (x, y) in enumerate(valid_loader)`` (the last index: an off-by-one many
    write), the loss computed on gathered outputs: ``k`` counts this process's passes, so the printed loss changed
    (2.66 against 1.74, field test J8) and one gathered pass divided by zero, with no warning."""
    source = textwrap.dedent("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        train = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
        valid = DataLoader(TensorDataset(torch.randn(36, 4), torch.randint(0, 2, (36,))), batch_size=8)
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in train:
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        valid_loss = 0
        with torch.no_grad():
            for k, (x, y) in enumerate(valid):
                pred = model(x)
                valid_loss += torch.nn.functional.cross_entropy(pred, y).item()
        print(valid_loss / k)
        """)
    assert codes(source) == ["ACC042:15"]
    assert "the loop's last index" in convert_source(source).warnings[0].message


SUMMARIES = '''\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset


def accuracy(outputs, labels):
    return float((outputs.argmax(1) == labels).float().mean())


def train(model, optimizer, loader, every=2):
    summ = []
    for i, (x, y) in enumerate(loader):
        out = model(x)
        loss = torch.nn.functional.cross_entropy(out, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if i % every == 0:
            summary_batch = {"accuracy": accuracy(out, y)}
            summary_batch["loss"] = loss.item()
            summ.append(summary_batch)
    metrics_mean = {metric: np.mean([x[metric] for x in summ]) for metric in summ[0]}
    print(" ; ".join("{}: {:05.3f}".format(k, v) for k, v in metrics_mean.items()))


loader = DataLoader(TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,))), batch_size=4)
model = torch.nn.Linear(4, 3)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
train(model, optimizer, loader)
'''


def test_a_list_of_per_batch_summaries_averaged_by_key_is_gathered() -> None:
    """Field J4 (Stanford CS230's template, copied by many: peterliht/knowledge-distillation-pytorch): every k-th
    batch's metrics as a dict in ``summ``, averaged per key after the pass with ``np.mean``: the train metrics
    logged were process 0's share (ACC028). The list is gathered whole after the loop (every process's dicts)."""
    new = converted(SUMMARIES)
    assert ("        summ.append(summary_batch)\n"
            "    summ = accelerator.gather_for_metrics(summ, use_gather_object=True)\n") in new, new
    assert "ACC028" not in codes(SUMMARIES)
    in_order = SUMMARIES.replace("np.mean([x[metric] for x in summ])", "summ[-1][metric]")  # the last batch's
    assert "gather_for_metrics" not in converted(in_order) and any(c.startswith("ACC028") for c in codes(in_order))
