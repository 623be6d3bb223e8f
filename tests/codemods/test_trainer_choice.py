"""Several trainers chosen by a flag (pytorch-generative-model-collections' ten GAN classes, Zeleni9/pytorch-wgan's
four): one built per run, each converted on its own with its own accelerator; the shapes that stay refused (ACC039:
two trainers in one run, a choice in a loop or in a function called twice, a base class they share); a trainer refused
on its own refuses the program; and a gradient penalty summed into the critic's loss where it is computed is no
penalty backwarded alone (ACC041)."""

from __future__ import annotations

from _convert import codes, converted, dedent

import libcst as cst

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.trainer_choice import Trainer
from accelify.codemods.engine.alternatives import _merge
from accelify.pipeline import convert_source
from accelify.program import ModuleText

TRAINER = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


class {name}{base}:
    def __init__(self, args):
        self.G = torch.nn.Linear(4, 4)
        self.G_optimizer = torch.optim.{optimizer}(self.G.parameters(), lr=0.01)
        self.data_loader = DataLoader(TensorDataset(torch.randn(16, 4)), batch_size=4, shuffle=True)

    def train(self):
        for (x,) in self.data_loader:
            self.G_optimizer.zero_grad()
            loss = self.G(x).pow(2).mean()
            {backward}
            self.G_optimizer.step()
        print("done", loss.item())
'''

ENTRY = '''
import argparse
from gan import GAN
from wgan import WGAN


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gan_type", default="GAN")
    args = parser.parse_args()
{choose}
    gan.train()


if __name__ == "__main__":
    main()
'''

IF_CHAIN = '''    if args.gan_type == "GAN":
        gan = GAN(args)
    elif args.gan_type == "WGAN":
        gan = WGAN(args)
    else:
        raise ValueError(args.gan_type)'''


def trainer(name: str, optimizer: str = "Adam", base: str = "", backward: str = "loss.backward()") -> str:
    return dedent(TRAINER.format(name=name, optimizer=optimizer, base=base, backward=backward))


def convert(choose: str = IF_CHAIN, gan: str | None = None, wgan: str | None = None, entry: str = ENTRY):
    modules = [ModuleText("gan", "gan.py", gan or trainer("GAN")),
               ModuleText("wgan", "wgan.py", wgan or trainer("WGAN", "RMSprop"))]
    return convert_source(dedent(entry.format(choose=choose)), modules=modules)


def warned(result) -> list[str]:
    """The codes a conversion reports, in the script and in its modules."""
    return [w.code for part in (result, *result.companions) for w in part.warnings]


def test_each_trainer_a_flag_chooses_is_converted_on_its_own() -> None:
    """The entry builds one of two trainer classes (each in a module of its own) in an if/elif chain: each class makes
    its accelerator and prepares its own objects in ``__init__``; the entry is left as it is."""
    result = convert()
    assert result.status == "converted", result.warnings
    assert result.new == result.old
    parts = {c.path: c.new for c in result.companions}
    for path in ("gan.py", "wgan.py"):
        new = parts[path]
        assert new.count("Accelerator(") == 1 and "from accelify.runtime import Accelerator\n" in new
        assert ("        self.G, self.G_optimizer, self.data_loader = self.accelerator.prepare(\n"
                "            self.G, self.G_optimizer, self.data_loader\n        )\n") in new, new
        assert "self.accelerator.backward(loss)" in new and 'self.accelerator.print("done", loss.item())' in new
    converted_again = convert_source(result.new, modules=[ModuleText("gan", "gan.py", parts["gan.py"]),
                                                          ModuleText("wgan", "wgan.py", parts["wgan.py"])])
    assert converted_again.status == "unchanged" and not any(c.changed for c in converted_again.companions)


def test_a_conditional_expression_chooses_too() -> None:
    result = convert('    gan = GAN(args) if args.gan_type == "GAN" else WGAN(args)')
    assert result.status == "converted" and len(result.companions) == 2


FUNCTIONS = '''
import argparse
import torch
from torch.utils.data import DataLoader, TensorDataset


def make_loader():
    return DataLoader(TensorDataset(torch.randn(32, 4), torch.randn(32, 1)), batch_size=8, shuffle=True)


def train_linear(args):
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    loader = make_loader()
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


def train_mlp(args):
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loader = make_loader()
    for epoch in range(2):
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="linear")
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    if args.model == "linear":
        train_linear(args)
    else:
        train_mlp(args)
'''


def test_training_functions_a_flag_chooses_each_make_their_accelerator() -> None:
    """``train_linear(args)`` or ``train_mlp(args)``, each building its model, optimizer and loader: each function
    makes its accelerator and prepares its own objects; the loader helper both call is unchanged. Its random data
    only feeds the loader each prepares, so neither is pinned to the CPU (the other trainer's call of the helper,
    not the one converted, made both ``cpu=True``)."""
    new = converted(FUNCTIONS)
    assert new.count("    accelerator = Accelerator()\n") == 2, new
    assert new.count("    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n") == 2
    assert "def make_loader():\n    return DataLoader(" in new
    # both run, one after the other: one accelerator where they are called, each prepares its own
    both = converted(FUNCTIONS.replace("    else:\n        train_mlp(args)", "    train_mlp(args)"))
    assert both.count("Accelerator()") == 1 and both.count("= accelerator.prepare(model, optimizer, loader)") == 2


REGISTRY = '''
import argparse
from gan import GAN
from wgan import WGAN

GANS = {{"GAN": GAN, "WGAN": WGAN}}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gan_type", default="GAN", choices=list(GANS))
    args = parser.parse_args()
{choose}


if __name__ == "__main__":
    main()
'''


def test_training_functions_handed_the_loader_the_entry_builds_make_their_accelerator_themselves() -> None:
    """The entry builds the loader and hands it to the chosen function: each function makes its accelerator and
    prepares the loader it receives with its own objects (one trainer alone would make it in the entry, which the
    trainers share, each its own way)."""
    shared = FUNCTIONS.replace("    loader = make_loader()\n", "").replace("(args):\n    model", "(args, loader):\n    model")
    shared = shared.replace("    args = parser.parse_args()\n", "    args = parser.parse_args()\n    loader = make_loader()\n")
    shared = shared.replace("train_linear(args)", "train_linear(args, loader)").replace("train_mlp(args)", "train_mlp(args, loader)")
    new = converted(shared)
    assert new.count("    accelerator = Accelerator(cpu=True)\n") == 2, new
    assert new.count("    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n") == 2
    assert "    loader = make_loader()\n    if args.model" in new


def test_a_module_two_conversions_change_differently_is_not_put_together() -> None:
    """Outside the trainers, the conversions must agree (or leave the code as it was): otherwise the program stays
    refused (ACC039 says why) rather than taking one trainer's version of code the other runs."""
    original = cst.parse_module("import torch\n\n\ndef helper(x):\n    return x\n")
    one = original.with_changes(body=[original.body[0], cst.parse_statement("def helper(x, accelerator):\n    return x\n")])
    other = original.with_changes(body=[original.body[0], cst.parse_statement("def helper(x):\n    return x + 1\n")])
    gan, wgan = (Trainer(Scope(cst.ClassDef(cst.Name(n), cst.IndentedBlock([])), "class", None, n), None) for n in ("GAN", "WGAN"))  # type: ignore[arg-type]
    assert _merge(original, [], [(gan, one), (wgan, one)]) is one
    assert _merge(original, [], [(gan, one), (wgan, original)]) is None
    assert _merge(original, [], [(gan, one), (wgan, other)]) is None


def test_a_trainer_looked_up_in_a_dict_of_them_is_chosen_too() -> None:
    """``GANS[args.gan_type](args)``: one call builds one of the classes the dict holds; each is converted on its
    own. Every one of them built in a loop over the dict stays refused."""
    result = convert("    gan = GANS[args.gan_type](args)\n    gan.train()", entry=REGISTRY)
    assert result.status == "converted", result.warnings
    assert [c.path for c in result.companions if c.changed] == ["gan.py", "wgan.py"]
    assert all("self.accelerator.backward(loss)" in c.new for c in result.companions)
    looped = "    for name in GANS:\n        GANS[name](args).train()"
    assert warned(convert(looped, entry=REGISTRY)) == ["ACC039"]


def test_two_trainers_in_one_run_stay_refused() -> None:
    """Both built (to compare them): one process would need two accelerators; each trainer alone is no program."""
    result = convert('    gan = GAN(args)\n    WGAN(args).train()')
    assert result.status == "attention" and warned(result) == ["ACC039"]
    assert "a run of the program may build more than one of them" in result.reason


def test_a_choice_made_in_a_loop_or_twice_stays_refused() -> None:
    looped = IF_CHAIN.replace("    ", "        ").replace("        if args", "    for _ in range(2):\n        if args", 1)
    assert warned(convert(looped + "\n        gan.train()")) == ["ACC039"]
    twice = ENTRY.replace('    main()\n', '    main()\n    main()\n')
    assert warned(convert(entry=twice)) == ["ACC039"]


def test_trainers_sharing_a_base_class_of_the_program_stay_refused() -> None:
    """What the base class runs, both trainers run: one trainer's conversion cannot be made on its own."""
    base = "class Base:\n    def log(self, text):\n        print(text)\n\n\n"
    gan = base + trainer("GAN", base="(Base)")
    wgan = "from gan import Base\n" + trainer("WGAN", "RMSprop", base="(Base)")
    result = convert(gan=gan, wgan=wgan)
    assert warned(result) == ["ACC039"]
    assert "but `GAN` and `Base` are related classes of the program" in result.reason


def test_trainers_sharing_a_training_step_stay_refused_saying_so() -> None:
    """Both trainers call one ``step`` helper that backwards: converted one at a time, each would change it."""
    step = "def step(loss):\n    loss.backward()\n"
    modules = [ModuleText("gan", "gan.py", "from steps import step\n" + trainer("GAN", backward="step(loss)")),
               ModuleText("wgan", "wgan.py", "from steps import step\n" + trainer("WGAN", "RMSprop", backward="step(loss)")),
               ModuleText("steps", "steps.py", step)]
    result = convert_source(dedent(ENTRY.format(choose=IF_CHAIN)), modules=modules)
    assert result.status == "attention" and warned(result) == ["ACC039"]
    assert "but `step`, outside them, trains for them" in result.reason


def test_a_trainer_refused_on_its_own_refuses_the_program_naming_it() -> None:
    """WGAN's penalty is backwarded alone (ACC041): written without it, ``--gan_type WGAN`` would run the unconverted
    trainer on every process; nothing is written, and the reason says the other trainer converts."""
    penalty = ("x.requires_grad_(True)\n            grad = torch.autograd.grad(self.G(x).sum(), x, create_graph=True)[0]\n"
               "            loss.backward()\n            penalty = (grad.norm(2, dim=1) - 1).pow(2).mean()\n"
               "            penalty.backward()")
    result = convert(wgan=trainer("WGAN", "RMSprop", backward=penalty))
    assert result.status == "attention" and result.new == result.old and not any(c.changed for c in result.companions)
    found = [(c.path, w.code) for c in result.companions for w in c.warnings]
    assert found == [("wgan.py", "ACC041")]
    assert "(in `WGAN`, of the trainers the program chooses between by a flag; `GAN` convert on their own" in result.reason


SUMMED = '''
import torch
from torch.autograd import grad
from torch.utils.data import DataLoader, TensorDataset

D = torch.nn.Sequential(torch.nn.Linear(2, 4), torch.nn.Tanh(), torch.nn.Linear(4, 1))
G = torch.nn.Linear(2, 2)
d_optimizer = torch.optim.Adam(D.parameters())
loader = DataLoader(TensorDataset(torch.randn(8, 2)), batch_size=4)
for (x,) in loader:
    fake = G(torch.randn_like(x)).detach()
    d_optimizer.zero_grad()
    d_real_loss = -D(x).mean()
    d_fake_loss = D(fake).mean()
    x_hat = (0.5 * x + 0.5 * fake).requires_grad_(True)
    pred_hat = D(x_hat)
    gradients = grad(outputs=pred_hat, inputs=x_hat, grad_outputs=torch.ones(pred_hat.size()), create_graph=True)[0]
    gradient_penalty = 10 * ((gradients.view(gradients.size()[0], -1).norm(2, 1) - 1) ** 2).mean()
    {backward}
    d_optimizer.step()
'''


def test_a_penalty_summed_into_the_loss_where_it_is_computed_converts() -> None:
    """pytorch-generative-model-collections' WGAN_GP and DRAGAN: the penalty computed inline and summed into
    ``D_loss`` (one backward, which DDP reduces) was refused with ACC041 for sharing the function with the grad."""
    summed = SUMMED.replace("{backward}", "d_loss = d_real_loss + d_fake_loss + gradient_penalty\n    d_loss.backward()")
    assert "    accelerator.backward(d_loss)\n" in converted(summed)
    assert codes(summed) == []
    alone = SUMMED.replace("{backward}", "(d_real_loss + d_fake_loss).backward()\n    gradient_penalty.backward()")
    assert codes(alone) == ["ACC041:19"]  # the penalty's own backward
