"""Shapes found in field-test set K (docs/FIELD_TESTS.md): each the minimal program of its class, and what a right
conversion of it does."""

from __future__ import annotations

from _convert import dedent
from accelify.pipeline import convert_source
from accelify.program import ModuleText

FLOW = """\
import torch
import torch.nn as nn


class Affine(nn.Module):
    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.zeros(2))

    def forward(self, x):
        return x * torch.exp(self.s), self.s.sum().expand(x.shape[0])

    def backward(self, z):
        return z * torch.exp(-self.s)


prior = torch.distributions.Normal(torch.zeros(2), torch.ones(2))
flow = Affine()
optimizer = torch.optim.Adam(flow.parameters(), lr=0.05)
for step in range(10):
    z, log_det = flow(torch.randn(64, 2))
    loss = -(prior.log_prob(z).sum(1) + log_det).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
with torch.no_grad():
    samples = flow.backward(prior.sample((256,)))
"""


def test_a_models_own_method_named_backward_is_no_autograd_backward() -> None:
    """K1 (a normalizing flow whose inverse is ``backward(z)``, as karpathy's pytorch-normalizing-flows names it):
    ``samples = flow.backward(prior.sample(...))`` became ``accelerator.backward(flow, gradient=...)`` (a TypeError
    on 2 processes, after training), and in a module of its own ``z, ld = flow.backward(z)`` was refused (ACC009,
    advice that would route an inverse through autograd). Autograd's backward returns None: a ``backward`` whose
    value is assigned is the program's own method."""
    result = convert_source(FLOW)
    assert result.warnings == (), [w.format() for w in result.warnings]
    assert "    accelerator.backward(loss)\n" in result.new
    assert "    samples = flow.backward(prior.sample((256,)))\n" in result.new
    module = [ModuleText("flows", "flows.py", dedent("""
        import torch.nn as nn


        class Chain(nn.Module):
            def __init__(self, flows):
                super().__init__()
                self.flows = nn.ModuleList(flows)

            def backward(self, z):
                for flow in self.flows[::-1]:
                    z, ld = flow.backward(z)
                return z
        """))]
    script = FLOW.replace("flow = Affine()", "from flows import Chain\nflow = Chain([Affine()])")
    result = convert_source(script, modules=module)
    found = [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]
    assert found == [], found


def test_a_cpu_option_that_overrides_the_chosen_device_becomes_the_accelerators_cpu_flag() -> None:
    """K1: ``device = torch.cuda.current_device()`` then ``if args.cpu: device = "cpu"``. The current GPU's index
    is a device choice, and the override is the user's opt-in to the CPU: ``Accelerator(cpu=args.cpu)`` (before,
    ``Accelerator()``: ``--cpu`` was ignored on a GPU machine)."""
    result = convert_source(dedent("""
        import argparse
        import torch
        parser = argparse.ArgumentParser()
        parser.add_argument("--cpu", action="store_true")
        args = parser.parse_args()
        device = torch.cuda.current_device()
        if args.cpu:
            device = "cpu"
        model = torch.nn.Linear(2, 1).to(device)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.ones(4, 2).to(device)).sum()
            loss.backward()
            optimizer.step()
        """))
    assert "accelerator = Accelerator(cpu=args.cpu)\n" in result.new, result.new
    assert result.warnings == (), [w.format() for w in result.warnings]


def test_a_tensors_own_device_in_a_model_of_another_module_is_no_unknown_device() -> None:
    """K1's ``models.py``: ``torch.zeros(n).to(x.device)`` in the ``forward`` of a model defined in another module
    of the program (its classes are known as ``models.Name`` there, and the test took the bare name: ACC002 for
    device-agnostic code); and ``.to(p)`` with ``p = next(self.flow.parameters())``, a parameter's dtype and
    device."""
    module = [ModuleText("models", "models.py", dedent("""
        import torch
        import torch.nn as nn


        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 1)

            def forward(self, x):
                mask = torch.ones(x.size(0), 1).to(x.device)
                return self.fc(x) * mask

            def sample(self, n):
                p = next(self.fc.parameters())
                return self.fc(torch.randn(n, 2).to(p))
        """))]
    result = convert_source(dedent("""
        import torch
        from models import Net
        model = Net().cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for step in range(3):
            loss = model(torch.ones(4, 2).cuda()).sum()
            loss.backward()
            optimizer.step()
        """), modules=module)
    found = [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]
    assert found == [], found


ENGINE = """\
import torch


def train_one_epoch(model, loader, optimizer, criterion, device, scaler):
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        with torch.autocast(device_type=device.type, enabled=device.type == "cuda"):
            loss = criterion(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
"""


def test_a_grad_scaler_handed_to_an_engine_helper_is_converted_there() -> None:
    """K2 (the "engine.py" layout with AMP): ``scaler = GradScaler()`` in main, ``train_one_epoch(..., scaler)`` in
    another module scales, steps and updates. The scaler's binding was deleted while the call still passed it, and
    the helper kept its scaler calls: NameError on every process. Its uses are followed into the function it is
    handed to; the binding stays where the call still reads it."""
    script = dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from engine import train_one_epoch


        def main():
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randn(64, 1)), batch_size=8)
            model = torch.nn.Linear(8, 1).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            scaler = torch.cuda.amp.GradScaler()
            for epoch in range(3):
                train_one_epoch(model, loader, optimizer, torch.nn.MSELoss(), device, scaler)


        if __name__ == "__main__":
            main()
        """)
    result = convert_source(script, modules=[ModuleText("engine", "engine.py", ENGINE)])
    found = [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]
    assert found == [], found
    engine = next(c.new for c in result.companions if c.path and c.path.endswith("engine.py"))
    assert "        accelerator.backward(loss)\n        optimizer.step()\n" in engine, engine
    assert "scaler.scale" not in engine and "scaler.update" not in engine and "scaler.step" not in engine
    assert "    scaler = torch.cuda.amp.GradScaler()\n" in result.new  # still handed to the helper
    assert 'Accelerator(mixed_precision="fp16" if torch.cuda.is_available() else "no")' in result.new


def test_an_evaluation_that_writes_a_file_per_item_walks_all_of_its_loader() -> None:
    """K4 (super-resolution: after training, ``saveImg(model(x), f"out_{i}.jpg")`` for each test image): the test
    loader was prepared and the write kept to the main process, so on 2 processes only process 0's half of the
    outputs was written, silently. An evaluation loader whose loop writes files (in the loop, or in a function it
    calls) is left unprepared: every process walks all of it and the main process writes every item. A loader the
    evaluation only reads for a metric is still prepared."""
    head = dedent("""
        import matplotlib.pyplot as plt
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def save_img(img, path):
            plt.imsave(path, img.permute(1, 2, 0).clamp(0, 1).numpy())


        train_loader = DataLoader(TensorDataset(torch.rand(8, 3, 8, 8)), batch_size=2, shuffle=True)
        test_loader = DataLoader(TensorDataset(torch.rand(4, 3, 8, 8)), batch_size=1)
        model = torch.nn.Conv2d(3, 3, 3, padding=1).cuda()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for (x,) in train_loader:
            x = x.cuda()
            loss = torch.nn.functional.mse_loss(model(x), x)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        with torch.no_grad():
            for i, (x,) in enumerate(test_loader):
                x = x.cuda()
        """)
    result = convert_source(head + '        save_img(model(x)[0].cpu(), f"out_{i}.png")\n')
    assert "model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)\n" in result.new
    assert "    if accelerator.is_main_process:\n        plt.imsave(" in result.new, result.new
    assert "        x = x.to(accelerator.device)\n" in result.new.split("with torch.no_grad():")[1]
    # (batches of two: a loader of one sample per batch only evaluation walks is left as it is in any case)
    metric = convert_source(head.replace("torch.rand(4, 3, 8, 8)), batch_size=1", "torch.rand(4, 3, 8, 8)), batch_size=2")
                            + "        print(torch.nn.functional.mse_loss(model(x), x).item())\n")
    assert "model, optimizer, train_loader, test_loader = accelerator.prepare(" in metric.new, metric.new


def test_the_length_of_a_progress_bar_over_a_prepared_loader_is_the_loaders() -> None:
    """K5 (an LSTM forecaster's ``train_once``/``eval_once``): ``loader = tqdm.tqdm(dataloader)``, a sum of batch
    losses over it divided by ``len(loader)``. The bar's length was not taken for the loader's: the training loss
    stayed process 0's (ACC028), and the evaluation's sum of gathered-pass means went unreported. A bar given a
    ``total=`` has that length instead, and is not followed."""
    code = dedent("""
        import torch
        import tqdm
        from torch.utils.data import DataLoader, TensorDataset


        def train_once(model, dataloader, optimizer):
            loader = tqdm.tqdm(dataloader, disable=True)
            loss_epoch = 0
            for x, y in loader:
                loss = torch.nn.functional.mse_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
                loss_epoch += loss.item()
            return loss_epoch / len(loader)


        def eval_once(model, dataloader):
            loader = tqdm.tqdm(dataloader, disable=True)
            loss_epoch = 0
            with torch.no_grad():
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss_epoch += loss.item()
            loss_epoch /= len(loader)
            return loss_epoch


        x = torch.arange(230.0).unsqueeze(1) / 100
        train_loader = DataLoader(TensorDataset(x, x ** 2), batch_size=64)
        val_loader = DataLoader(TensorDataset(x, x ** 2), batch_size=64)
        model = torch.nn.Linear(1, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        print(eval_once(model, val_loader), train_once(model, train_loader, optimizer))
        """)
    result = convert_source(code)
    # the evaluation's forward, taken out of ``mse_loss(model(x), y)`` and gathered, is read as the gathered output:
    # its sum of mean losses runs per original batch over ``len(loader)`` (was reported, ACC042, before stop 40)
    assert [f"{w.code}:{w.line}" for w in result.warnings] == [], [w.format() for w in result.warnings]
    assert "            for output, y in zip(output.split(dataloader.batch_sampler.batch_size), " in result.new, result.new
    assert "    loss_epoch /= len(dataloader.batch_sampler.batch_sampler)\n" in result.new, result.new
    assert "    loss_epoch = accelerator.reduce(" in result.new, result.new
    totals = convert_source(code.replace("tqdm.tqdm(dataloader, disable=True)", "tqdm.tqdm(dataloader, total=3)"))
    assert "ACC028" in [w.code for w in totals.warnings], [w.format() for w in totals.warnings]


def test_an_optimizer_class_handed_to_a_pipelines_init_makes_its_optimizer() -> None:
    """K8 (torchmf's ``BasePipeline``): ``__init__(self, data, model=BaseModule, optimizer=torch.optim.Adam)``
    builds ``self.model = model(...)`` and ``self.optimizer = optimizer(self.model.parameters(), lr=lr)``; the
    program was refused with a false ACC012 ("no optimizer was found"). Stepped, zeroed and handed parameters, the
    call of a class handed in makes the optimizer, and the model it trains is one."""
    result = convert_source(dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        class Pipeline:
            def __init__(self, data, model=torch.nn.Linear, optimizer=torch.optim.Adam, lr=0.05):
                self.loader = DataLoader(data, batch_size=8, shuffle=True)
                self.model = model(4, 1)
                self.optimizer = optimizer(self.model.parameters(), lr=lr)

            def fit(self):
                for x, y in self.loader:
                    self.optimizer.zero_grad()
                    loss = torch.nn.functional.mse_loss(self.model(x), y)
                    loss.backward()
                    self.optimizer.step()


        if __name__ == "__main__":
            data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
            Pipeline(data, optimizer=torch.optim.SGD).fit()
        """))
    assert result.status == "converted", [w.format() for w in result.warnings]
    assert "self.model, self.optimizer, self.loader = self.accelerator.prepare(" in result.new, result.new


MODEL_WITH_SAVE = """\
import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.fc = nn.Linear(n_in, n_out)

    def forward(self, x):
        return self.fc(x)

    def save_model(self, filename):
        torch.save({"hparams": {"n_in": self.n_in, "n_out": self.n_out}, "state_dict": self.state_dict()}, filename)

    @classmethod
    def load_model(cls, filename):
        d = torch.load(filename)
        model = cls(**d["hparams"])
        model.load_state_dict(d["state_dict"])
        return model
"""


def test_a_models_own_save_method_runs_on_the_main_process_at_its_calls() -> None:
    """K7 (a character-level LM whose model class saves and reloads itself): the accelerator was threaded into the
    model as a new required ``__init__`` parameter, so the class's own ``load_model`` (``cls(**hparams)``) and the
    repository's generation script failed (TypeError). The model is left alone: each call ``model.save_model(path)``
    waits for every process and runs on the main process, on the unwrapped model (plain keys), and a later call that
    loads the same path waits for it."""
    script = dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from model import Net


        def train():
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
            model = Net(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for epoch in range(2):
                for x, y in loader:
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                model.save_model("net.pt")
            print("reloaded:", Net.load_model("net.pt"))


        if __name__ == "__main__":
            train()
        """)
    result = convert_source(script, modules=[ModuleText("model", "model.py", MODEL_WITH_SAVE)])
    found = [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]
    assert found == [], found
    assert all(c.new == c.old for c in result.companions), "the model's module is left as it is"
    assert ("        accelerator.wait_for_everyone()\n        if accelerator.is_main_process:\n"
            '            accelerator.unwrap_model(model).save_model("net.pt")\n') in result.new, result.new
    assert '    accelerator.wait_for_everyone()\n    accelerator.print("reloaded:", Net.load_model("net.pt"))\n' \
        in result.new, result.new


TWO_MODELS_WITH_SAVE = MODEL_WITH_SAVE + """

class Mlp(nn.Module):
    def __init__(self, n_in, n_out):
        super().__init__()
        self.n_in, self.n_out = n_in, n_out
        self.fc = nn.Sequential(nn.Linear(n_in, 8), nn.ReLU(), nn.Linear(8, n_out))

    def forward(self, x):
        return self.fc(x)

    def save_model(self, filename):
        torch.save({"hparams": {"n_in": self.n_in, "n_out": self.n_out}, "state_dict": self.state_dict()}, filename)


class Vocab:
    def __init__(self, n):
        self.n = n

    def save_dict(self, filename):
        pickle.dump(self, open(filename, "wb"))


class Corpus:
    def __init__(self, n):
        self.vocab = Vocab(n)
""".replace("import torch\n", "import pickle\nimport torch\n", 1)


def test_a_models_own_save_method_is_found_through_placement_and_branches() -> None:
    """K7 as published: the model is built placed (``LSTMGen(...).to(device)``) in one of two arms of an ``if``, each
    a class with its own ``save_model``; the save stayed on every process, with an ACC009 whose advice (thread the
    accelerator into the model) broke the class's own loading before. Both classes' methods are the call's, and it
    is kept to the main process as for one class. The vocabulary the data set holds (``dataset.vocab``, a class of
    the program pickling itself in ``save_dict``) is written once, as a function's write is; the batch moved to
    ``next(model.parameters()).device`` through a name follows the model (no ACC002)."""
    script = dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from model import Net, Mlp, Corpus


        def train(use_mlp):
            device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
            corpus = Corpus(4)
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
            if use_mlp:
                model = Mlp(4, 1).to(device)
            else:
                model = Net(4, 1).to(device)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            corpus.vocab.save_dict("vocab.pickle")
            model_device = next(model.parameters()).device
            for epoch in range(2):
                for x, y in loader:
                    x, y = x.to(model_device), y.to(model_device)
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                model.save_model("net.pt")


        if __name__ == "__main__":
            train(False)
        """)
    result = convert_source(script, modules=[ModuleText("model", "model.py", TWO_MODELS_WITH_SAVE)])
    found = [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]
    assert found == [], found
    assert all(c.new == c.old for c in result.companions), "the model's module is left as it is"
    assert ("        accelerator.wait_for_everyone()\n        if accelerator.is_main_process:\n"
            '            accelerator.unwrap_model(model).save_model("net.pt")\n') in result.new, result.new
    assert '    if accelerator.is_main_process:\n        corpus.vocab.save_dict("vocab.pickle")\n' in result.new, result.new


def test_a_model_a_training_function_hands_back_is_the_prepared_one() -> None:
    """K10 (the Udacity-course ``model_transfer = train(n_epochs, loaders, model, ...)`` ending in ``return
    model``, then ``model_transfer.load_state_dict(torch.load(save_path))``): the returned model was not taken for
    the prepared one, so the best checkpoint (saved unwrapped) was loaded into the wrapper (RuntimeError: missing
    ``module.`` keys) with no barrier after the main process's save. A function that returns a parameter it is handed
    unchanged hands back what the call passed."""
    result = convert_source(dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def train(n_epochs, loader, model, optimizer, save_path):
            for epoch in range(n_epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    loss = torch.nn.functional.mse_loss(model(x), y)
                    loss.backward()
                    optimizer.step()
                torch.save(model.state_dict(), save_path)
            return model


        loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        model_best = train(3, loader, model, optimizer, "best.pt")
        model_best.load_state_dict(torch.load("best.pt"))
        """))
    assert ('accelerator.wait_for_everyone()\n'
            'accelerator.unwrap_model(model_best).load_state_dict(torch.load("best.pt", map_location="cpu"))\n'
            ) in result.new, result.new
    # the notebook binds the name before (``if use_cuda: model_transfer = model``): the call's value is what it holds
    aliased = convert_source(result.old.replace('model_best = train(', 'model_best = model\nmodel_best = train('))
    assert 'accelerator.unwrap_model(model_best).load_state_dict(' in aliased.new, aliased.new


def test_a_nested_training_beside_one_whose_model_a_factory_builds_is_refused_for_the_true_reason() -> None:
    """K6 (SimCLR pre-training that calls a linear probe, a training of its own in another module, every k
    epochs): with the pre-training model built by a factory (``encoder = make_encoder()``), the program was refused
    with ACC014, "`optimizer` cannot be followed to a place that holds the model, optimizer and data loaders",
    false (the probe holds its own together). A model built by a function only one training calls belongs to that
    training: ACC039, several trainings in one run, as with the model built in place."""
    factory = ModuleText("nets", "nets.py", dedent("""
        import torch


        def make_encoder(kind="small"):
            if kind == "small":
                model = torch.nn.Linear(8, 4)
            else:
                model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
            return model
        """))
    probe = ModuleText("probe", "probe.py", dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def eval(state_dict):
            encoder = torch.nn.Linear(8, 4)
            encoder.load_state_dict(state_dict)
            classifier = torch.nn.Linear(4, 3)
            loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=16)
            optimizer = torch.optim.SGD(classifier.parameters(), lr=0.5)
            for x, y in loader:
                loss = torch.nn.functional.cross_entropy(classifier(encoder(x).detach()), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            return loss.item()
        """))
    result = convert_source(dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from probe import eval
        from nets import make_encoder


        def train():
            loader = DataLoader(TensorDataset(torch.randn(128, 8)), batch_size=16, shuffle=True)
            encoder = make_encoder()
            optimizer = torch.optim.SGD(encoder.parameters(), lr=0.1)
            for epoch in range(4):
                for (x,) in loader:
                    loss = -torch.nn.functional.cosine_similarity(encoder(x), encoder(x + 0.1)).mean()
                    optimizer.zero_grad()
                    loss.backward()
                    optimizer.step()
                print(eval(encoder.state_dict()))


        if __name__ == "__main__":
            train()
        """), modules=[factory, probe])
    found = [w.code for r in (result, *result.companions) for w in r.warnings]
    assert result.status == "attention" and "ACC039" in found and "ACC014" not in found, found
    # the program itself: the probe builds its encoder with the same factory, which each training calls for its own
    shared = ModuleText("probe", "probe.py", probe.text.replace(
        "import torch\n", "import torch\nfrom nets import make_encoder\n", 1).replace(
        "encoder = torch.nn.Linear(8, 4)", "encoder = make_encoder()"))
    result = convert_source(result.old, modules=[factory, shared])
    found = [w.code for r in (result, *result.companions) for w in r.warnings]
    assert result.status == "attention" and "ACC039" in found and "ACC014" not in found, found


def test_a_loader_an_evaluation_shares_with_a_prepared_one_stays_prepared() -> None:
    """K2 after K4's fix: ``evaluate(model, val_loader)`` and ``evaluate(model, test_loader)``, and a figure helper
    that writes per batch of ``test_loader``: leaving ``test_loader`` unprepared made ``evaluate`` walk one prepared
    and one whole loader, so it lost its gather and printed one process's half of the validation loss, silently.
    A loader a shared evaluation walks beside prepared ones is prepared with them."""
    result = convert_source(dedent("""
        import matplotlib.pyplot as plt
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def evaluate(model, loader):
            total = 0.0
            with torch.no_grad():
                for x, y in loader:
                    total += torch.nn.functional.mse_loss(model(x), y).item()
            return total / len(loader)


        def show(model, loader):
            with torch.no_grad():
                for i, (x, y) in enumerate(loader):
                    plt.plot(model(x)[:, 0].numpy())
                    plt.savefig(f"pred_{i}.png")


        x = torch.randn(96, 4)
        y = x.sum(1, keepdim=True)
        train_loader = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=8, shuffle=True)
        val_loader = DataLoader(TensorDataset(x[48:72], y[48:72]), batch_size=4)
        test_loader = DataLoader(TensorDataset(x[72:], y[72:]), batch_size=4)
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for a, b in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(a), b).backward()
            optimizer.step()
        print(evaluate(model, val_loader), evaluate(model, test_loader))
        show(model, test_loader)
        """))
    assert "model, optimizer, train_loader, val_loader, test_loader = accelerator.prepare(" in result.new, result.new


def test_a_file_per_batch_of_a_prepared_loader_is_reported() -> None:
    """K2's figure helper: ``plt.savefig(f"pred_{i}.png")`` per batch of a test loader that stays prepared (a shared
    evaluation walks it too): kept to the main process, one of the two figures was written, silently. It is reported
    (ACC054); a file per epoch (no loop name in it) is not."""
    code = dedent("""
        import matplotlib.pyplot as plt
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        loader = DataLoader(TensorDataset(torch.randn(16, 2)), batch_size=4)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            for i, (x,) in enumerate(loader):
                out = model(x)
                out.sum().backward()
                optimizer.step()
                plt.plot(out.detach()[:, 0].numpy())
                plt.savefig(f"pred_{i}.png")
        """)
    result = convert_source(code)
    assert [f"{w.code}:{w.line}" for w in result.warnings] == ["ACC054:13"], [w.format() for w in result.warnings]
    per_epoch = convert_source(code.replace('f"pred_{i}.png"', 'f"pred_{epoch}.png"'))
    assert per_epoch.warnings == (), [w.format() for w in per_epoch.warnings]


def test_a_loader_a_trainer_builds_under_a_test_in_init_is_seen_prepared_by_its_other_methods() -> None:
    """K8 after its fix: ``if self.test is not None: self.test_loader = DataLoader(...)`` in ``__init__`` is prepared
    where it is built, but ``_validation_loss`` (another method) walked it as unprepared: no gather, and the printed
    validation loss was one process's half, silently. The other methods run after ``__init__``: they see it prepared."""
    result = convert_source(dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        class Pipeline:
            def __init__(self, x, y, test=True):
                self.test = test
                self.train_loader = DataLoader(TensorDataset(x[:48], y[:48]), batch_size=8, shuffle=True)
                if self.test is not None:
                    self.test_loader = DataLoader(TensorDataset(x[48:], y[48:]), batch_size=8)
                self.model = torch.nn.Linear(4, 1)
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)

            def fit(self):
                for x, y in self.train_loader:
                    self.optimizer.zero_grad()
                    torch.nn.functional.mse_loss(self.model(x), y).backward()
                    self.optimizer.step()
                print(self._validation_loss())

            def _validation_loss(self):
                self.model.eval()
                total = 0.0
                for x, y in self.test_loader:
                    loss = torch.nn.functional.mse_loss(self.model(x), y, reduction="sum")
                    total += loss.item()
                return total / 48


        if __name__ == "__main__":
            x = torch.randn(96, 4)
            Pipeline(x, x.sum(1, keepdim=True)).fit()
        """))
    assert "self.test_loader = self.accelerator.prepare(self.test_loader)" in result.new, result.new
    assert "self.accelerator.gather_for_metrics(" in result.new, result.new


def test_a_mean_loss_of_the_programs_own_over_a_progress_bar_is_computed_per_original_batch() -> None:
    """K5 (an LSTM stock forecaster): the evaluation adds ``l2_loss(output, label)``, the program's own function
    returning ``F.mse_loss(pred, label, size_average=True)`` (the legacy spelling of the mean), over ``loader =
    tqdm.tqdm(dataloader)`` and divides by ``len(loader)``. Over the gathered loop that was the mean of N batches
    summed over 1/N as many passes, left with ACC042. The function is a mean loss of its parameters, and the bar's
    length is its loader's: each pass adds the loss of each original batch it holds, divided by the original's
    number of batches."""
    script = dedent("""
        import torch
        import tqdm
        from torch.utils.data import DataLoader, TensorDataset


        def l2_loss(pred, label):
            loss = torch.nn.functional.mse_loss(pred, label, size_average=True)
            return loss


        def eval_once(model, dataloader):
            model.eval()
            loader = tqdm.tqdm(dataloader)
            loss_epoch = 0
            for idx, (data, label) in enumerate(loader):
                output = model(data)
                loss = l2_loss(output, label)
                loss_epoch += loss.detach().item()
            loss_epoch /= len(loader)
            return loss_epoch


        def main():
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 1)), batch_size=8, shuffle=True)
            val_loader = DataLoader(TensorDataset(torch.randn(20, 4), torch.randn(20, 1)), batch_size=8)
            model = torch.nn.Linear(4, 1)
            optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            for x, y in loader:
                loss = l2_loss(model(x), y)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(eval_once(model, val_loader))


        main()
        """)
    result = convert_source(script)
    assert [w.code for w in result.warnings] == [], [w.format() for w in result.warnings]
    assert ("        for output, label in zip(output.split(dataloader.batch_sampler.batch_size), "
            "label.split(dataloader.batch_sampler.batch_size)):\n") in result.new, result.new
    assert "    loss_epoch /= len(dataloader.batch_sampler.batch_sampler)\n" in result.new, result.new


def test_a_download_at_the_top_of_a_notebook_that_imports_again_later_runs_main_process_first() -> None:
    """K10 (an anomaly-detection notebook): ``datasets.MNIST(root, download=True)`` is its first statement after the
    first cell's imports, and later cells import again (``from torch.utils.data import DataLoader``). The accelerator
    went after the last import, below the download, so the download raced on every process (ACC018). It goes after
    the imports at the top now: the download runs under ``main_process_first``."""
    script = dedent("""
        import torch
        from torchvision import datasets
        import torchvision.transforms as transforms

        train_data = datasets.MNIST(root="data", train=True, download=True, transform=transforms.ToTensor())

        from torch.utils.data import DataLoader

        loader = DataLoader(train_data, batch_size=16, shuffle=True)
        model = torch.nn.Linear(784, 10)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            loss = torch.nn.functional.cross_entropy(model(x.view(len(x), -1)), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    result = convert_source(script)
    assert [w.code for w in result.warnings] == [], [w.format() for w in result.warnings]
    assert ("import torchvision.transforms as transforms\nfrom accelify.runtime import Accelerator\n\n"
            "accelerator = Accelerator()\n") in result.new, result.new
    assert "with accelerator.main_process_first():\n    train_data = datasets.MNIST(" in result.new, result.new
