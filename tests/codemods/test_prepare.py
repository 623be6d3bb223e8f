"""InsertPrepare: one prepare() call, its order, its formatting, and when it cannot be placed."""

from __future__ import annotations

import pytest
from _convert import assert_converts, assert_unchanged, codes, converted, dedent

from accelify.pipeline import convert_source


def test_short_prepare_stays_on_one_line() -> None:
    out = converted("import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n")
    assert "\nmodel, opt = accelerator.prepare(model, opt)\n" in out


def test_gan_two_models_two_optimizers_loader_and_scheduler() -> None:
    assert_converts(
        """
        import torch
        from torch.optim.lr_scheduler import StepLR as Step
        def main():
            loader = torch.utils.data.DataLoader(ds)
            netG = Generator()
            netD = torch.nn.Linear(4, 1)
            optG = torch.optim.Adam(netG.parameters())
            optD = torch.optim.Adam(netD.parameters())
            sched = Step(optG, 1)
            for batch in loader:
                pass
        """,
        """
        import torch
        from torch.optim.lr_scheduler import StepLR as Step
        from accelify.runtime import Accelerator
        def main():
            accelerator = Accelerator()
            loader = torch.utils.data.DataLoader(ds)
            netG = Generator()
            netD = torch.nn.Linear(4, 1)
            optG = torch.optim.Adam(netG.parameters())
            optD = torch.optim.Adam(netD.parameters())
            sched = Step(optG, 1)
            netG, netD, optG, optD, loader, sched = accelerator.prepare(
                netG, netD, optG, optD, loader, sched
            )
            for batch in loader:
                pass
            accelerator.end_training()
        """,
    )


def test_long_prepare_is_split_like_black() -> None:
    out = converted(
        """
        import torch
        def main():
            generator_model = torch.nn.Linear(2, 2)
            discriminator_model = torch.nn.Linear(2, 1)
            generator_optimizer = torch.optim.Adam(generator_model.parameters())
            discriminator_optimizer = torch.optim.Adam(discriminator_model.parameters())
            training_data_loader = torch.utils.data.DataLoader(ds)
        """
    )
    assert (
        "    generator_model, discriminator_model, generator_optimizer, discriminator_optimizer, training_data_loader"
        " = accelerator.prepare(\n"
        "        generator_model,\n        discriminator_model,\n        generator_optimizer,\n"
        "        discriminator_optimizer,\n        training_data_loader,\n    )\n"
    ) in out


def test_medium_prepare_uses_three_lines() -> None:
    out = converted(
        """
        import torch
        def main():
            model = torch.nn.Linear(2, 2)
            optimizer = torch.optim.Adam(model.parameters())
            train_loader = torch.utils.data.DataLoader(ds)
            test_loader = torch.utils.data.DataLoader(ds)
        """
    )
    assert (
        "    model, optimizer, train_loader, test_loader = accelerator.prepare(\n"
        "        model, optimizer, train_loader, test_loader\n    )\n"
    ) in out


def test_model_found_through_the_optimizer_and_a_local_module_subclass() -> None:
    out = converted(
        """
        import torch
        from torch import nn
        class Base(nn.Module):
            pass
        class Net(Base):
            pass
        net = Net()
        other = build()
        opt = torch.optim.SGD(list(net.parameters()) + list(other.parameters()), lr=0.1)
        """
    )
    assert "net, other, opt = accelerator.prepare(net, other, opt)\n" in out


def test_optimizer_from_a_method_of_the_model_trains_that_model() -> None:
    """``optimizer = model.configure_optimizers(lr)`` returning ``AdamW(self.parameters())``: ``self`` is
    ``model``, so the model is prepared (it was left out, and N processes trained N copies)."""
    out = converted(
        """
        import torch
        from torch import nn
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(2, 1)
            def configure_optimizers(self, lr):
                return torch.optim.AdamW(self.fc.parameters(), lr=lr)
        model = Net()
        optimizer = model.configure_optimizers(1e-3)
        for x in torch.ones(4, 2):
            model(x).sum().backward()
            optimizer.step()
        """
    )
    assert "model, optimizer = accelerator.prepare(model, optimizer)\n" in out


def test_objects_created_after_the_training_loop_stop_the_conversion() -> None:
    code = """
    import torch
    model = torch.nn.Linear(2, 1)
    for step in range(3):
        model(x).sum().backward()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    """
    result = convert_source(dedent(code))
    assert result.status == "attention" and result.new == dedent(code)
    assert codes(code) == ["ACC008:5"]


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (  # k-fold: the model is rebuilt per fold; an unprepared model would train unsynchronised copies
            """
            import torch
            def main():
                for fold in range(2):
                    model = torch.nn.Linear(2, 1)
                opt = torch.optim.SGD(model.parameters(), lr=0.1)
            """,
            ["ACC007:4"],
        ),
        (  # found in torch/_inductor/fx_passes/numeric_utils.py: backward swapped, nothing prepared
            """
            import torch
            def run_model(model, x, n=10):
                for i in range(n):
                    model(x)[0].sum().backward(retain_graph=True)
                    opt = torch.optim.SGD([p for _, p in model.named_parameters()], lr=0.01)
                    opt.step()
            """,
            ["ACC007:5"],
        ),
    ],
)
def test_model_or_optimizer_built_inside_a_loop_leaves_the_file_unchanged(code: str, expected: list[str]) -> None:
    result = convert_source(dedent(code))
    assert result.status == "attention" and result.new == dedent(code)
    assert codes(code) == expected
    assert all("the file was left unchanged" in w.message for w in result.warnings)


def test_loader_built_inside_a_loop_is_prepared_where_it_is_built() -> None:
    code = """
    import torch
    from torch.utils.data import DataLoader
    def main():
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for epoch in range(2):
            loader = DataLoader(ds, batch_size=4)
            for x in loader:
                model(x).sum().backward()
    """
    out = converted(code)
    assert "model, opt = accelerator.prepare(model, opt)" in out
    assert "        loader = DataLoader(ds, batch_size=4)\n        loader = accelerator.prepare(loader)\n" in out
    assert codes(code) == []


def test_a_call_taking_named_parameters_is_no_optimizer_unless_it_steps() -> None:
    # found in torch/_inductor/compile_fx.py: `OrderedSet([... mod.named_parameters()])` was "prepared"
    code = """
    import torch
    def names(mod):
        keys = OrderedSet([name for name, _ in mod.named_parameters()])
        keys.update(x)
    """
    assert_unchanged(code)
    stepped = converted(
        """
        import torch
        model = torch.nn.Linear(2, 1)
        opt = Lion(model.parameters(), lr=0.1)
        opt.zero_grad()
        """
    )
    assert "model, opt = accelerator.prepare(model, opt)" in stepped


@pytest.mark.parametrize(
    "code",
    [
        "import torch\nloss_fn = torch.nn.CrossEntropyLoss()\nopt = torch.optim.SGD(params, lr=0.1)\n",
    ],
)
def test_losses_are_not_models(code: str) -> None:
    out = converted(code)
    assert "opt = accelerator.prepare(opt)" in out and "loss_fn, " not in out


def test_objects_returned_by_a_factory_are_prepared_where_they_arrive() -> None:
    assert_converts(
        """
        import torch
        def build():
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            return model, opt
        def main():
            model, opt = build()
            model(x).sum().backward()
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        def build():
            model = torch.nn.Linear(2, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            return model, opt
        def main():
            accelerator = Accelerator(cpu=True)
            model, opt = build()
            model, opt = accelerator.prepare(model, opt)
            accelerator.backward(model(x).sum())
            accelerator.end_training()
        """,
    )


def test_objects_that_never_meet_in_one_scope_stop_the_conversion() -> None:
    code = """
    import torch
    def make_optimizer():
        model = torch.nn.Linear(2, 1)
        return torch.optim.SGD(model.parameters(), lr=0.1)
    def main():
        opt = make_optimizer()
        opt.step()
    """
    result = convert_source(dedent(code))
    assert result.status == "attention" and result.new == dedent(code)
    assert [w.code for w in result.warnings] == ["ACC014"]


def test_a_training_loop_over_the_raw_loader_refuses_the_file() -> None:
    """prepare goes where the optimizer is (fit); main then trains again on the loader as it was: every
    process would see all of it, so nothing is written (ACC020 names the loop)."""
    code = """
    import torch
    from torch.utils.data import DataLoader
    def fit(model, loader):
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for x in loader:
            model(x).sum().backward()
            opt.step()
    def main():
        model = torch.nn.Linear(2, 1)
        loader = DataLoader(ds, batch_size=4)
        fit(model, loader)
        for x in loader:
            model(x).sum().backward()
    """
    result = convert_source(dedent(code))
    assert result.status == "attention" and result.new == dedent(code)
    assert [f"{w.code}:{w.line}" for w in result.warnings] == ["ACC020:12"]


def test_training_data_from_a_library_factory_is_refused() -> None:
    """``build_loader("train")`` from an installed package may be a DataLoader: converted, every process would walk all
    of it (each time ACC021 fired in the field tests it was one). Refused, naming the data."""
    code = """
    import torch
    from mylib import build_loader
    def main():
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = build_loader("train")
        for x in loader:
            model(x).sum().backward()
            opt.step()
    """
    result = convert_source(dedent(code))
    assert result.status == "attention" and result.new == result.old
    assert [f"{w.code}:{w.line}" for w in result.warnings] == ["ACC021:7"]
    assert "`loader`" in result.warnings[0].message


def test_training_data_a_function_is_passed_is_judged_by_what_its_callers_pass() -> None:
    """``train(net, batches)``: a list written in the call is no DataLoader (converted, ACC022); a library's
    ``get_loader()`` may be one that every process would walk whole (refused, ACC021)."""
    code = """
    import torch
    from mylib import get_loader
    def train(net, batches):
        opt = torch.optim.SGD(net.parameters(), lr=0.1)
        for x, y in batches:
            torch.nn.functional.mse_loss(net(x), y).backward()
            opt.step()
    train(torch.nn.Linear(1, 1), {data})
    """
    listed = convert_source(dedent(code.format(data="[(torch.ones(2, 1), torch.ones(2, 1))]")))
    assert (listed.status, [w.code for w in listed.warnings]) == ("converted", ["ACC022"])
    loader = convert_source(dedent(code.format(data="get_loader()")))
    assert (loader.status, [w.code for w in loader.warnings]) == ("attention", ["ACC021"])


def test_training_data_followed_to_a_table_of_a_data_library_is_the_same_data() -> None:
    """A pandas frame or a ``datasets`` table is no DataLoader: every process walks all of it (correct, no faster)."""
    code = """
    import pandas as pd
    import torch
    def main():
        model = torch.nn.Linear(2, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        rows = pd.read_csv("train.csv").to_numpy()
        for x in rows:
            model(torch.as_tensor(x)).sum().backward()
            opt.step()
    """
    result = convert_source(dedent(code))
    assert result.status == "converted"
    assert [f"{w.code}:{w.line}" for w in result.warnings] == ["ACC022:7"]


def test_a_module_that_trains_itself_is_refused() -> None:
    """The forward-forward example: each layer (an ``nn.Linear``) builds and steps its own optimizer; an
    accelerator per layer with the layer unprepared trained independent copies on N processes."""
    result = convert_source(dedent(
        """
        import torch
        import torch.nn.functional as F
        class Layer(torch.nn.Linear):
            def __init__(self):
                super().__init__(4, 1)
                self.opt = torch.optim.SGD(self.parameters(), lr=0.1)
            def fit(self, x, y):
                for i in range(10):
                    loss = F.mse_loss(self.forward(x), y)
                    self.opt.zero_grad()
                    loss.backward()
                    self.opt.step()
        Layer().fit(torch.randn(8, 4), torch.randn(8, 1))
        """
    ))
    assert result.status == "attention"
    assert [w.code for w in result.warnings] == ["ACC026"]


def test_created_after_the_loop_names_the_object_created_late_not_the_first_prepared() -> None:
    """A fine-tuning stage: its optimizer comes after the first loop; the loader (created first, walked by both
    loops) is not the culprit."""
    code = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)
    head = torch.nn.Linear(4, 1)
    model = torch.nn.Sequential(torch.nn.Linear(4, 4), head)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    head_optimizer = torch.optim.SGD(head.parameters(), lr=0.01)
    for x, y in loader:
        torch.nn.functional.mse_loss(model(x), y).backward()
        head_optimizer.step()
    """
    result = convert_source(dedent(code))
    assert result.status == "attention"
    assert [(w.code, w.line) for w in result.warnings] == [("ACC008", 10)]
    assert "`head_optimizer` is created after the training loop starts" in result.warnings[0].message


def test_an_autograd_demo_before_the_model_is_not_training_that_started_early() -> None:
    """A notebook's first cells show autograd on a toy tensor (``y.backward(); print(x.grad)``), then build the
    model: that backward, once, outside any loop and with no optimizer step beside it, does not start training."""
    code = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    x = torch.ones(2, requires_grad=True)
    y = (x * x).sum()
    y.backward()
    print(x.grad)
    loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for xb, yb in loader:
        loss = torch.nn.functional.mse_loss(model(xb), yb)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    """
    result = convert_source(dedent(code))
    assert result.status == "converted", result.warnings
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in result.new


def test_a_later_experiment_with_a_model_under_a_new_name_is_prepared_where_it_is_built() -> None:
    """``model_1 = ...`` then ``optimizer = SGD(model_1.parameters())`` after the first experiment trained
    ``model_0`` (a course notebook's shape): both are prepared where they are built."""
    code = """
    import torch
    from torch.utils.data import DataLoader, TensorDataset
    loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
    model_0 = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(params=model_0.parameters(), lr=0.01)
    for xb, yb in loader:
        torch.nn.functional.mse_loss(model_0(xb), yb).backward()
        optimizer.step()
    model_1 = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(params=model_1.parameters(), lr=0.01)
    for xb, yb in loader:
        torch.nn.functional.mse_loss(model_1(xb), yb).backward()
        optimizer.step()
    """
    result = convert_source(dedent(code))
    assert result.status == "converted", result.warnings
    assert "model_1 = accelerator.prepare(model_1)\n" in result.new
    assert "optimizer = accelerator.prepare(optimizer)\n" in result.new


def test_an_object_built_in_either_branch_of_an_if_is_listed_once() -> None:
    out = converted(
        """
        import torch
        def train(model, loader, sgd):
            if sgd:
                optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
            else:
                optimizer = torch.optim.Adam(model.parameters())
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
        net = torch.nn.Linear(4, 1)
        data = torch.utils.data.DataLoader(ds)
        train(net, data, True)
        """
    )
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in out, out


def test_loaders_in_a_dict_are_prepared_and_prepare_goes_before_a_training_call_whose_result_is_kept() -> None:
    # usuyama's U-Net notebook: ``dataloaders[phase]`` in the loop, ``model = train_model(model, ...)``
    out = converted(
        """
        import torch
        from torch.utils.data import DataLoader
        dataloaders = {'train': DataLoader(train_set, batch_size=5, shuffle=True), 'val': DataLoader(val_set, batch_size=5)}
        def train_model(model, optimizer, num_epochs=25):
            for epoch in range(num_epochs):
                for phase in ['train', 'val']:
                    for inputs, labels in dataloaders[phase]:
                        loss = torch.nn.functional.mse_loss(model(inputs), labels)
                        if phase == 'train':
                            loss.backward()
                            optimizer.step()
            return model
        model = torch.nn.Linear(4, 1)
        optimizer_ft = torch.optim.Adam(model.parameters())
        model = train_model(model, optimizer_ft, num_epochs=2)
        """
    )
    assert "dataloaders = {k: accelerator.prepare(v) for k, v in dataloaders.items()}\ndef train_model" in out, out
    assert (
        "model, optimizer_ft = accelerator.prepare(model, optimizer_ft)\n"
        "model = train_model(model, optimizer_ft, num_epochs=2)\n"
    ) in out, out
    assert "ACC022" not in " ".join(codes(out))


def test_the_accelerator_is_created_before_loaders_prepared_where_they_are_built() -> None:
    # usuyama's notebook: the dict of loaders in an early cell, more imports and the device in a later one
    out = converted(
        """
        import torch
        from torch.utils.data import DataLoader
        dataloaders = {'train': DataLoader(train_set, batch_size=5, shuffle=True)}
        import torch.nn as nn
        device = torch.device('cuda' if torch.cuda.is_available() else 'cpu')
        def train_model(model, optimizer):
            for inputs, labels in dataloaders['train']:
                nn.functional.mse_loss(model(inputs.to(device)), labels.to(device)).backward()
                optimizer.step()
            return model
        model = nn.Linear(4, 1).to(device)
        optimizer_ft = torch.optim.Adam(model.parameters())
        model = train_model(model, optimizer_ft)
        """
    )
    assert out.index("accelerator = Accelerator()") < out.index("dataloaders = {k: accelerator.prepare(v)"), out


def test_the_model_a_training_call_hands_back_is_still_the_prepared_one() -> None:
    out = converted(
        """
        import torch
        def train_model(model, optimizer, loader):
            for x, y in loader:
                torch.nn.functional.mse_loss(model(x), y).backward()
                optimizer.step()
            return model
        model = torch.nn.Linear(4, 1)
        optimizer = torch.optim.Adam(model.parameters())
        loader = torch.utils.data.DataLoader(ds, batch_size=4)
        model = train_model(model, optimizer, loader)
        torch.save(model.state_dict(), 'model.pt')
        """
    )
    assert "accelerator.save(accelerator.unwrap_model(model).state_dict(), 'model.pt')" in out, out


_DRAWN = """
import torch
from torch.utils.data import DataLoader, TensorDataset


def get_loader(n):
    return DataLoader(TensorDataset(torch.randn(n, 4), torch.randn(n, 1)), batch_size=8, shuffle=True)


class Solver:
    def __init__(self, loader):
        self.loader = loader
        self.model = torch.nn.Linear(4, 1)
        self.opt = torch.optim.SGD(self.model.parameters(), lr=0.1)

    def train(self, iters):
        data_iter = iter(self.loader)
        for i in range(iters):
            try:
                x, y = next(data_iter)
            except StopIteration:
                data_iter = iter(self.loader)
                x, y = next(data_iter)
            loss = torch.nn.functional.mse_loss(self.model(x), y)
            self.opt.zero_grad()
            loss.backward()
            self.opt.step()


def main(use):
    loader = None
    if use:
        loader = get_loader(64)
    Solver(loader).train(20)
"""


def test_a_loader_kept_as_none_until_a_helper_builds_it_and_drawn_with_next_is_prepared() -> None:
    # ``loader = None`` then ``loader = get_loader(...)`` (stargan's main.py): the placeholder held no object and the
    # loader, drawn with next(iter(...)) at every step, was never prepared, silently (every process saw all of it)
    out = converted(_DRAWN)
    assert "self.model, self.opt, self.loader = self.accelerator.prepare(" in out
    assert "ACC022" not in codes(_DRAWN)


def test_either_of_two_loaders_a_training_method_draws_from_with_next_is_prepared() -> None:
    # one of two loaders chosen in the training method (stargan's Solver.train), drawn with next(iter(...)): the
    # name bound in two branches was read as its first value only, and the other loader left whole on every process
    source = (_DRAWN.replace("def __init__(self, loader):", "def __init__(self, loader, other, which):")
              .replace("        self.loader = loader\n", "        self.loader = loader\n        self.other = other\n        self.which = which\n")
              .replace("        data_iter = iter(self.loader)\n",
                       "        if self.which == 'a':\n            data_loader = self.loader\n"
                       "        elif self.which == 'b':\n            data_loader = self.other\n"
                       "        data_iter = iter(data_loader)\n", 1)
              .replace("data_iter = iter(self.loader)\n", "data_iter = iter(data_loader)\n")
              .replace("    Solver(loader).train(20)",
                       "    other = DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8)\n"
                       "    Solver(loader, other, 'a').train(20)"))
    out = converted(source)
    assert "self.model, self.opt, self.loader, self.other = self.accelerator.prepare(" in out
    assert "ACC014" not in codes(source)


def test_an_object_bound_only_under_a_flag_is_prepared_in_its_branch() -> None:
    """word_language_model's ``if args.use_optimizer: optimizer = ...`` (no ``else``; the default updates the
    parameters by hand): ``model, optimizer = accelerator.prepare(model, optimizer)`` after the ``if`` raised
    NameError whenever the flag was off. Converted as here, it trains and reloads on 2 processes either way."""
    assert_converts(
        """
        import torch
        model = torch.nn.Linear(2, 1)
        if use_optimizer:
            optimizer = torch.optim.AdamW(model.parameters())
        for x in torch.ones(4, 2):
            model(x).sum().backward()
            if use_optimizer:
                optimizer.step()
            else:
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-0.1)
        """,
        """
        import torch
        from accelify.runtime import Accelerator
        accelerator = Accelerator(cpu=True)
        model = torch.nn.Linear(2, 1)
        if use_optimizer:
            optimizer = torch.optim.AdamW(model.parameters())
            optimizer = accelerator.prepare(optimizer)
        model = accelerator.prepare(model)
        for x in torch.ones(4, 2):
            accelerator.backward(model(x).sum())
            if use_optimizer:
                optimizer.step()
            else:
                for p in model.parameters():
                    p.data.add_(p.grad, alpha=-0.1)
        accelerator.end_training()
        """,
    )


@pytest.mark.parametrize(
    "binding",
    [
        "if adam:\n    optimizer = torch.optim.Adam(model.parameters())\n"
        "elif sgd:\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        "if big:\n    model = torch.nn.Linear(2, 1)\nelse:\n    model = torch.nn.Linear(2, 1, bias=False)\n"
        "if adam:\n    optimizer = torch.optim.Adam(model.parameters())\n",
    ],
)
@pytest.mark.parametrize("step", ["optimizer.step()\n", "if adam:\n        optimizer.step()\n"])
def test_objects_unbound_on_some_way_through_an_if_are_prepared_after_it_when_the_training_reads_them(
        binding: str, step: str) -> None:
    """No ``else``: where the training right after the ``if`` steps the optimizer whenever it runs, every run that
    trains has bound it (the original stops with a ``NameError`` otherwise), so it is prepared with the rest after the
    ``if``, whichever branch built it; where the training reads it only under a condition of its own, the name may be
    unbound after the ``if``, and it is prepared in its branch, right where it is built."""
    out = converted("import torch\nmodel = torch.nn.Linear(2, 1)\n" + binding + "for x in torch.ones(4, 2):\n"
                    "    model(x).sum().backward()\n    " + step)
    if step.startswith("if"):
        assert "    optimizer = torch.optim.Adam(model.parameters())\n    optimizer = accelerator.prepare(optimizer)\n" in out
        assert out.count("accelerator.prepare(") == (3 if "elif" in binding else 2), out
        # the model where the prepare went before (after the last object's statement; the runtime rebinds an
        # optimizer prepared first to the model's parameters)
        assert "\nmodel = accelerator.prepare(model)\nfor x in" in out
    else:
        assert out.count("accelerator.prepare(") == 1, out
        assert "\nmodel, optimizer = accelerator.prepare(model, optimizer)\nfor x in" in out, out


@pytest.mark.parametrize(
    "binding",
    [
        "if adam:\n    optimizer = torch.optim.Adam(model.parameters())\n"
        "else:\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n",
        "optimizer = None\nif adam:\n    optimizer = torch.optim.Adam(model.parameters())\n",
    ],
)
def test_a_name_bound_on_every_way_through_an_if_is_prepared_after_it(binding: str) -> None:
    out = converted("import torch\nmodel = torch.nn.Linear(2, 1)\n" + binding + "for x in torch.ones(4, 2):\n"
                    "    model(x).sum().backward()\n    optimizer.step()\n")
    assert out.count("accelerator.prepare(") == 1, out
    assert "\nmodel, optimizer = accelerator.prepare(model, optimizer)\nfor x in" in out


@pytest.mark.parametrize("read", ["net = net.cuda()\n", ""])
def test_a_model_built_in_an_if_elif_chain_and_read_after_it_is_prepared_after_the_chain(read: str) -> None:
    """Cutout's ``if args.model == 'resnet18': cnn = ResNet18() elif ...: cnn = WideResNet()`` (no ``else``), then
    ``cnn = cnn.cuda()`` and the optimizer on ``cnn.parameters()``: the statements after the chain read the name, so
    every way that reaches prepare has bound it. Prepared in the first branch only, the other model trained as N
    unwrapped copies."""
    out = converted(
        "import torch\nfrom torch import nn\n"
        "loader = torch.utils.data.DataLoader(ds, batch_size=2)\n"
        "if arch == 'small':\n    net = nn.Linear(2, 1)\nelif arch == 'big':\n    net = nn.Sequential(nn.Linear(2, 1))\n"
        + read +
        "opt = torch.optim.SGD(net.parameters(), lr=0.1)\n"
        "for x, y in loader:\n    nn.functional.mse_loss(net(x), y).backward()\n    opt.step()\n"
    )
    assert out.count("accelerator.prepare(") == 1, out
    assert "opt = torch.optim.SGD(net.parameters(), lr=0.1)\nnet, opt, loader = accelerator.prepare(net, opt, loader)\n" in out, out


def test_a_per_epoch_scheduler_sized_by_the_loader_is_built_before_prepare() -> None:
    """SimCLR (field set I, I10): ``CosineAnnealingLR(optimizer, T_max=len(train_loader))`` stepped once per epoch
    stays out of prepare; built after it, it read the prepared loader's length (half on 2 processes) and its schedule
    ran twice as fast (lr 1.5e-4 at epoch 10 against 2.56e-4). Prepare goes after it; a scheduler that reads no length
    (``StepLR``) still comes after prepare, and nothing moves past a training loop."""
    assert_converts(
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=4)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(loader), eta_min=0)
        for epoch in range(8):
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            sched.step()
        """,
        """
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from accelify.runtime import Accelerator
        accelerator = Accelerator()
        loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=4)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=len(loader), eta_min=0)
        model, opt, loader = accelerator.prepare(model, opt, loader)
        for epoch in range(8):
            for x, y in loader:
                opt.zero_grad()
                accelerator.backward(torch.nn.functional.mse_loss(model(x), y))
                opt.step()
            sched.step()
        accelerator.end_training()
        """,
    )
    unsized = converted("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        loader = DataLoader(TensorDataset(torch.randn(16, 3), torch.randn(16, 1)), batch_size=4)
        model = torch.nn.Linear(3, 1)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)
        for epoch in range(8):
            for x, y in loader:
                opt.zero_grad()
                torch.nn.functional.mse_loss(model(x), y).backward()
                opt.step()
            sched.step()
        """)
    assert ("model, opt, loader = accelerator.prepare(model, opt, loader)\n"
            "sched = torch.optim.lr_scheduler.StepLR(opt, step_size=2)\n") in unsized
