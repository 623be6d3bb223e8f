"""Classes the field tests had only warned about (true warnings on shapes the converter can convert itself), found by
triaging the refused and warned rows of docs/FIELD_TESTS.md (twelfth stop); each test names the programs that had it."""

from __future__ import annotations

import pytest
from _convert import codes, converted

INDEXED_DEVICE = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset

if __name__ == "__main__":
    gpu = 3
    device = torch.device({choice} if torch.cuda.is_available() else "cpu")
    net = nn.Linear(4, 1).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8)
    for epoch in range(2):
        for x, y in loader:
            loss = ((net(x.to(device)) - y.to(device)) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(epoch, loss.item())
"""


@pytest.mark.parametrize("choice", ['"cuda:{}".format(gpu)', 'f"cuda:{gpu}"', '"cuda:" + str(gpu)', '"cuda:%d" % gpu'])
def test_a_gpu_index_put_into_the_device_string_is_a_device_choice(choice: str) -> None:
    """O10 (``torch.device("cuda:{}".format(gpu) if ... else "cpu")`` with ``gpu = 3``): the line was left and every
    ``.to(device)`` warned (ACC002): on GPUs the batches went to GPU 3 and the prepared model to each process's own.
    Under the launcher each process has its own GPU: the line becomes the accelerator's device."""
    source = INDEXED_DEVICE.format(choice=choice)
    new = converted(source)
    assert "    device = accelerator.device\n" in new
    assert "cuda:" not in new
    assert codes(source) == []


@pytest.mark.parametrize(("text", "device"), [
    ('"cuda:{}".format(args.gpu)', True), ('f"cuda:{rank}"', True), ('"cuda:" + str(i)', True), ('"cuda:%d" % i', True),
    ('"cuda"', True), ('"cuda:1"', True),
    ('f"cuda: {ok}"', False), ('f"cuda:{i} of {n}"', False), ('"cuda: {}".format(ok)', False), ('"cuda available: " + s', False),
    ('"{}:{}".format(kind, i)', False),
])
def test_only_a_cuda_string_with_an_index_in_it_is_a_cuda_choice(text: str, device: bool) -> None:
    """Near misses: text that mentions CUDA (a log line) is not a device string."""
    import libcst as cst

    from accelify.codemods.analysis.roles import is_cuda_choice

    assert is_cuda_choice(cst.parse_expression(text)) is device


FACTORY_WITH_NONE = """import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


def create_dataloader(dataset, batch_size=8):
    if dataset is None:
        return None
    return DataLoader(dataset, batch_size=batch_size, shuffle=True)


def train(loader, net, opt):
    for epoch in range(2):
        for x, y in loader:
            loss = ((net(x) - y) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
        print(epoch, loss.item())


def main():
    torch.manual_seed(0)
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    loader = create_dataloader(dataset, 8)
    if loader is None:
        return
    net = nn.Linear(4, 1)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    train(loader, net, opt)


if __name__ == "__main__":
    main()
"""


def test_a_loader_factory_that_returns_none_on_failure_still_makes_a_loader() -> None:
    """O7 (``create_dataloader`` returns ``None`` when it has no data set, else a DataLoader): the loader was taken
    for something else and left out of ``prepare`` (a false ACC022, and with O7's other branch fixed no warning at
    all: every process walked the whole data set). A ``return None`` beside the other returns does not decide."""
    new = converted(FACTORY_WITH_NONE)
    assert "    net, opt, loader = accelerator.prepare(net, opt, loader)\n" in new
    assert codes(FACTORY_WITH_NONE) == []


def test_a_factory_whose_returns_are_all_none_makes_nothing() -> None:
    """Near miss: a helper that only ever returns ``None`` is not a loader factory."""
    source = FACTORY_WITH_NONE.replace("    return DataLoader(dataset, batch_size=batch_size, shuffle=True)\n", "    return None\n")
    new = converted(source)
    assert "prepare(net, opt)\n" in new


ENGINE_EVALUATE = """import torch
from sklearn import metrics
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def Evaluate(dataset, dataloader, model, device, batch_size):
    model.eval()
    num_batches = int(len(dataset) / batch_size)
    val_loss = 0
    val_acc = 0
    with torch.no_grad():
        for x, y in dataloader:
            x, y = x.to(device), y.to(device)
            output = model(x)
            loss = torch.nn.functional.cross_entropy(output, y)
            val_loss += loss
            pred = output.argmax(1).cpu()
            accuracy = metrics.accuracy_score(pred, y.cpu())
            val_acc += accuracy
    return val_loss / num_batches, val_acc / num_batches


def run():
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    bs = 8
    train_ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
    valid_ds = TensorDataset(torch.randn(32, 4), torch.randint(0, 3, (32,)))
    train_dl = DataLoader(train_ds, batch_size=bs, shuffle=True)
    valid_dl = DataLoader(valid_ds, batch_size=bs)
    model = nn.Linear(4, 3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for epoch in range(2):
        for x, y in train_dl:
            x, y = x.to(device), y.to(device)
            loss = torch.nn.functional.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        val_loss, val_acc = Evaluate(valid_ds, valid_dl, model, device, bs)
        print(f"epoch {epoch} valid {val_loss:.4f} acc {val_acc:.4f}")


if __name__ == "__main__":
    run()
"""


def test_batch_means_summed_over_a_gathered_pass_and_divided_by_the_original_count_run_per_batch() -> None:
    """M4 (the Kaggle engine layout): ``val_loss += loss`` (a batch's mean loss, bound first) and ``val_acc +=
    metrics.accuracy_score(...)`` (scikit-learn's score of the batch, a float), divided by ``int(len(dataset) /
    batch_size)``: ACC042 twice. The sums' kinds are known now (a mean loss under no_grad is a tensor; a score is a
    float), and a divisor that is already the original's number of batches needs no change: the pass's statements run
    per original batch (checked on 2 processes: the same losses and accuracy as on one)."""
    new = converted(ENGINE_EVALUATE)
    assert ("            output, y = accelerator.gather_for_metrics((output, y))\n"
            "            for output, y in zip(output.split(dataloader.batch_sampler.batch_size), "
            "y.split(dataloader.batch_sampler.batch_size)):\n"
            "                loss = torch.nn.functional.cross_entropy(output, y)\n"
            "                val_loss += loss\n") in new
    assert "    return val_loss / num_batches, val_acc / num_batches\n" in new
    assert codes(ENGINE_EVALUATE) == []


def test_batch_means_divided_by_a_count_of_unknown_origin_are_still_reported() -> None:
    """Near miss: divided by a number nothing says is the original's count of batches, the sums stay reported."""
    source = ENGINE_EVALUATE.replace("    num_batches = int(len(dataset) / batch_size)\n", "    num_batches = batch_size - 3\n")
    assert [c.split(":")[0] for c in codes(source)] == ["ACC042", "ACC042"]


DEAD_SUM = ENGINE_EVALUATE.replace(
    "    return val_loss / num_batches, val_acc / num_batches\n",
    "    val_loss /= num_batches\n    # print(val_loss)\n    return val_acc / num_batches\n").replace(
    "        val_loss, val_acc = Evaluate(", "        val_acc = Evaluate(").replace(" valid {val_loss:.4f}", "")


def test_a_sum_nothing_reads_is_neither_fixed_nor_reported() -> None:
    """O10: an evaluation loss summed, divided, and never read (its print commented out) was its only warning (ACC042).
    What it holds on N processes changes no output: no warning for it, and the accuracy is still computed per batch."""
    assert codes(DEAD_SUM) == []
    assert "val_acc += accuracy" in converted(DEAD_SUM)


def test_a_sum_read_after_its_division_is_still_reported() -> None:
    """Near miss: the same sum printed after the division is read, and its mismatch is reported as before."""
    source = DEAD_SUM.replace("    # print(val_loss)\n", "    print(val_loss)\n").replace(
        "            pred = output.argmax(1).cpu()\n", "            pred = output.argmax(1).cpu()\n            print(pred)\n")
    assert any(c.startswith("ACC042") for c in codes(source))


LOSS_CURVE = """import matplotlib.pyplot as plt
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(dataloader, netD, netG, optimizerD, optimizerG, epochs):
    D_losses = []
    G_losses = []
    for epoch in range(epochs):
        for i, (real,) in enumerate(dataloader):
            netD.zero_grad()
            loss_D_real = nn.functional.softplus(-netD(real)).mean()
            loss_D_real.backward()
            fake = netG(torch.randn(real.size(0), 2))
            loss_D_fake = nn.functional.softplus(netD(fake.detach())).mean()
            D_train_loss = loss_D_real + loss_D_fake
            D_losses.append(D_train_loss.item())
            loss_D_fake.backward()
            optimizerD.step()
            netG.zero_grad()
            loss_G = nn.functional.softplus(-netD(fake)).mean()
            G_losses.append(loss_G.item())
            loss_G.backward()
            optimizerG.step()
        print(epoch, torch.mean(torch.FloatTensor(D_losses)).item())
    plt.plot(D_losses)
    plt.plot(G_losses)
    plt.savefig("loss.png")


if __name__ == "__main__":
    loader = DataLoader(TensorDataset(torch.randn(64, 4)), batch_size=8, shuffle=True)
    netD, netG = nn.Linear(4, 1), nn.Linear(2, 4)
    optD = torch.optim.Adam(netD.parameters(), lr=2e-4)
    optG = torch.optim.Adam(netG.parameters(), lr=2e-4)
    train(loader, netD, netG, optD, optG, 2)
"""


def test_a_loss_curve_keeps_each_steps_loss_reduced_across_processes() -> None:
    """O2 (a DCGAN keeping ``D_losses``/``G_losses`` per step for a plot and an epoch mean), O11, E2, G1: each process
    kept its own batches' losses (ACC028 ×2). Every process walks the same steps of a prepared loader, so the step's
    loss is reduced where it is appended: the list is the distributed run's curve, one global batch per value."""
    new = converted(LOSS_CURVE)
    assert '            D_losses.append(accelerator.reduce(D_train_loss.detach(), "mean").item())\n' in new
    assert '            G_losses.append(accelerator.reduce(loss_G.detach(), "mean").item())\n' in new
    assert codes(LOSS_CURVE) == []


@pytest.mark.parametrize(("old", "new"), [
    # appended only when this process's loss is small: some processes would reach the reduce and others not
    ("            G_losses.append(loss_G.item())\n", "            if loss_G.item() < 1:\n                G_losses.append(loss_G.item())\n"),
    # appended twice a pass: which value is the step's is not clear
    ("            G_losses.append(loss_G.item())\n", "            G_losses.append(loss_G.item())\n            G_losses.append(loss_D_real.item())\n"),
    # a value that is not a tensor of the pass (a number it computed): nothing to reduce as a tensor
    ("            G_losses.append(loss_G.item())\n", "            G_losses.append(real.size(0) * 0.5)\n"),
])
def test_a_loss_curve_not_of_the_exact_shape_stays_reported(old: str, new: str) -> None:
    source = LOSS_CURVE.replace(old, new)
    assert "G_losses.append(accelerator.reduce(" not in converted(source)
    assert any(c.startswith("ACC028") for c in codes(source))


ONE_LINE_SKIP = """import torch
from torch.utils.data import DataLoader, TensorDataset
loader = DataLoader(TensorDataset(torch.randn(40, 2), torch.randn(40, 1)), batch_size=4)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for i, (x, y) in enumerate(loader):
    if (i<4): continue
    optimizer.zero_grad()
    torch.nn.functional.mse_loss(model(x), y).backward()
    optimizer.step()
"""


def test_a_skip_by_the_batch_index_on_one_line_is_reported() -> None:
    """O11 as published (``if (i<8): continue`` on one line): no ACC052, and each process skipped 8 of its own
    batches, 8N in all, silently. The one-line spelling is the same test."""
    assert codes(ONE_LINE_SKIP) == ["ACC052:7"]


TENSOR_METER = """import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class AverageMeter:
    def __init__(self):
        self.reset()

    def reset(self):
        self.val = 0
        self.avg = 0
        self.sum = 0
        self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count


train_loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
generator = nn.Linear(4, 1)
optimizerG = torch.optim.Adam(generator.parameters(), lr=1e-3)
for epoch in range(2):
    g_loss_meter = AverageMeter()
    for lr_img, hr_img in train_loader:
        g_loss = nn.functional.l1_loss(generator(lr_img), hr_img)
        optimizerG.zero_grad()
        g_loss.backward()
        optimizerG.step()
        g_loss_meter.update(g_loss.detach(), lr_img.size(0))
    print(f"epoch {epoch}: g_loss {g_loss_meter.avg:.4f}")
"""


def test_a_meter_fed_a_tensor_has_its_tensor_sum_reduced() -> None:
    """L9 (an SRGAN's ``AverageMeter`` fed ``g_loss.detach()``): the meter's sum is a 0-d tensor, which was 'not
    proven' (ACC028, the last warning of L9). It is reduced as a tensor (``as_tensor`` also takes the sum of a meter
    nothing was added to), the count as an int, and the average computed again (checked on 2 processes: the same
    average as on one)."""
    new = converted(TENSOR_METER)
    assert ('    g_loss_meter.sum = accelerator.reduce(torch.as_tensor(g_loss_meter.sum, device=accelerator.device)'
            '.detach(), "sum")\n') in new
    assert "    g_loss_meter.avg = g_loss_meter.sum / g_loss_meter.count\n" in new
    assert codes(TENSOR_METER) == []


def test_a_meter_fed_something_else_stays_reported() -> None:
    """Near miss: a meter fed a value of unknown kind (a helper's result nothing describes) is still not proven."""
    source = TENSOR_METER.replace("g_loss_meter.update(g_loss.detach(), lr_img.size(0))",
                                  "g_loss_meter.update(some_metric(g_loss), lr_img.size(0))")
    source = source.replace("train_loader = ", "some_metric = __import__('math').fabs\ntrain_loader = ")
    assert any(c.startswith("ACC028") for c in codes(source))


HELPER_DEVICE = """import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


class CudaUtils:
    @staticmethod
    def get_device():
        if torch.cuda.is_available():
            return torch.device('cuda:0')
        else:
            return torch.device('cpu')


class Trainer:
    def __init__(self, lr, device):
        self.model = nn.Linear(4, 1).to(device)
        self.loss_fn = nn.MSELoss()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)

    def train_all_batches(self, train_dl, device):
        self.model.train()
        for x, y in train_dl:
            x, y = x.to(device), y.to(device)
            loss = self.loss_fn(self.model(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
        return loss.item()

    def train(self, ds, epochs, device):
        train_dl = DataLoader(ds, batch_size=8, shuffle=True)
        for epoch in range(epochs):
            print(f"Epoch {epoch + 1} loss {self.train_all_batches(train_dl, device)}")


if __name__ == "__main__":
    device = CudaUtils.get_device()
    trainer = Trainer(lr=0.001, device=device)
    trainer.train(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), 2, device)
"""


def test_a_device_only_handed_to_parameters_whose_uses_went_needs_nothing() -> None:
    """F10 (``device = CudaUtils.get_device()`` in ``__main__``, handed to a trainer that makes the accelerator in its
    ``__init__``): every use of it in the trainer went (``.to(device)``), yet ACC011 said it 'could not be tied to the
    accelerator', its only warning. What is only handed on to unused parameters places nothing: no warning."""
    new = converted(HELPER_DEVICE)
    assert "x.to(device)" not in new and "self.accelerator.prepare(" in new
    assert codes(HELPER_DEVICE) == []


def test_a_device_handed_to_a_parameter_still_used_is_the_process_states() -> None:
    """Where the trainer still uses the device (a tensor made on it), it was reported (ACC011); it is the process
    state's device now, the accelerator's (``tests/codemods/test_unreached_writes.py`` has F10's whole shape)."""
    source = HELPER_DEVICE.replace("        return loss.item()\n",
                                   "        return loss.item() + torch.zeros(1, device=device).item()\n")
    assert "    device = PartialState().device\n" in converted(source)
    assert not any(c.startswith("ACC011") for c in codes(source))


NEVER_CALLED_ENTRY = """import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import engine
from helper import describe


def run():
    device = torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    ds = TensorDataset(torch.randn(64, 4), torch.randint(0, 3, (64,)))
    dl = DataLoader(ds, batch_size=8, shuffle=True)
    model = nn.Linear(4, 3).to(device)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    print("input", describe(ds[0][0]))
    for epoch in range(2):
        print(epoch, engine.Train(dl, model, optimizer, device))


if __name__ == "__main__":
    run()
"""

NEVER_CALLED_ENGINE = """import torch


def Train(dataloader, model, optimizer, device):
    model.train()
    for x, y in dataloader:
        x, y = x.to(device), y.to(device)
        loss = torch.nn.functional.cross_entropy(model(x), y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return loss.item()


def Predict(dataloader, model, device):
    model.eval()
    predictions = []
    with torch.no_grad():
        for x, _ in dataloader:
            x = x.to(device)
            predictions.append(model(x).argmax(1).cpu())
    return predictions
"""

NEVER_CALLED_HELPER = """import torch


def test_network(net, trainloader):
    criterion = torch.nn.MSELoss()
    optimizer = torch.optim.Adam(net.parameters(), lr=0.001)
    images, labels = next(iter(trainloader))
    optimizer.zero_grad()
    loss = criterion(net.forward(images), images)
    loss.backward()
    optimizer.step()
    return True


def describe(x):
    return f"{tuple(x.shape)}"
"""


def _program_codes(engine: str = NEVER_CALLED_ENGINE) -> list[str]:
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    result = convert_source(NEVER_CALLED_ENTRY, modules=[ModuleText("engine", "engine.py", engine),
                                                         ModuleText("helper", "helper.py", NEVER_CALLED_HELPER)])
    assert result.status == "converted", result.error
    return [f"{c.path}:{w.code}" for c in result.companions for w in c.warnings] + [w.code for w in result.warnings]


def test_warnings_inside_functions_nothing_calls_are_dropped() -> None:
    """M4 (``engine.Predict``, never called: ACC002 x2), C Part 5 (``helper.test_network``: ACC009), O18
    (``create_validation_set``: ACC018 x2): code no run reaches runs on no process; its warnings told of problems
    the converted program does not have."""
    assert _program_codes() == []


def test_a_warning_in_a_function_the_program_calls_stays() -> None:
    """Near miss: the same ``Predict`` called by the training after its epochs is reported as before."""
    unknown = NEVER_CALLED_ENGINE.replace("            x = x.to(device)\n", "            x = x.to(args.device)\n")
    assert _program_codes(unknown) == []
    called = unknown.replace("    return loss.item()\n", "    Predict(dataloader, model, device)\n    return loss.item()\n", 1)
    assert "engine.py:ACC002" in _program_codes(called)


DICT_DEVICE = """import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

params = {"bsize": 8, "nz": 4}
params.update({"device": torch.device("cuda:0" if torch.cuda.is_available() else "cpu")})


def train(params):
    ds = TensorDataset(torch.randn(64, 4))
    loader = DataLoader(ds, batch_size=params["bsize"], shuffle=True)
    net = nn.Linear(4, 1).to(params["device"])
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for epoch in range(2):
        for (x,) in loader:
            x = x.to(params["device"])
            noise = torch.randn(x.shape[0], params["nz"], device=params["device"])
            loss = (net(x) - net(noise)).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(epoch, loss.item())


if __name__ == "__main__":
    train(params)
"""


def test_a_device_kept_in_a_dict_is_the_processs_own() -> None:
    """O2 (a DCGAN whose config dict holds ``"device": torch.device("cuda:0" if CUDA else "cpu")``, read as
    ``params["device"]`` by the trainer): every process's batches and noise went to GPU 0 (ACC002 for the ``.to``
    calls, nothing for the ``device=`` keywords). The entry is made where the accelerator does not exist yet: it
    becomes the runtime's process state's device (checked on 2 processes)."""
    new = converted(DICT_DEVICE)
    assert 'params.update({"device": PartialState().device})\n' in new
    assert "from accelify.runtime import PartialState\n" in new or "PartialState\n" in new
    assert codes(DICT_DEVICE) == []


def test_a_device_entry_made_after_the_accelerator_is_its_device() -> None:
    source = DICT_DEVICE.replace('params.update({"device": torch.device("cuda:0" if torch.cuda.is_available() else "cpu")})\n', "").replace(
        '    ds = TensorDataset(torch.randn(64, 4))\n',
        '    params["device"] = torch.device("cuda" if torch.cuda.is_available() else "cpu")\n    ds = TensorDataset(torch.randn(64, 4))\n')
    new = converted(source)
    assert '    params["device"] = accelerator.device\n' in new
    assert codes(source) == []


def test_a_dict_entry_that_is_no_device_choice_is_left() -> None:
    """Near miss: a ``"device"`` entry holding a name (``"device": "cpu"`` chosen for a CPU helper) is not rewritten."""
    source = DICT_DEVICE.replace('torch.device("cuda:0" if torch.cuda.is_available() else "cpu")', '"cpu"')
    assert '"device": "cpu"' in converted(source)
