"""Trainer classes whose objects meet only across methods: a builder ``__init__`` calls (``self.build_model()``,
Image_Segmentation's and stargan's ``Solver``), loaders from one helper called once per data set, and the shapes
that must stay refused (a builder called again, or only under a condition)."""

from __future__ import annotations

from _convert import assert_converts, codes, converted

SOLVER = '''
import torch
from torch.utils.data import DataLoader, TensorDataset


class Solver:
    def __init__(self, loader):
        self.loader = loader
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        {call}

    def build_model(self):
        self.net = torch.nn.Linear(1, 1)
        self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)
        self.net.to(self.device)

    def train(self):
        for x, y in self.loader:
            x, y = x.to(self.device), y.to(self.device)
            loss = torch.nn.functional.mse_loss(self.net(x), y)
            self.optimizer.zero_grad()
            loss.backward()
            self.optimizer.step()
{after}

loader = DataLoader(TensorDataset(torch.randn(8, 1), torch.randn(8, 1)), batch_size=4)
Solver(loader).train()
'''


def test_a_builder_init_calls_once_is_where_prepare_goes() -> None:
    assert_converts(
        SOLVER.format(call="self.build_model()", after=""),
        '''
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        from accelify.runtime import Accelerator


        class Solver:
            def __init__(self, loader):
                self.accelerator = Accelerator()
                self.loader = loader
                self.build_model()
                self.net, self.optimizer, self.loader = self.accelerator.prepare(
                    self.net, self.optimizer, self.loader
                )

            def build_model(self):
                self.net = torch.nn.Linear(1, 1)
                self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

            def train(self):
                for x, y in self.loader:
                    loss = torch.nn.functional.mse_loss(self.net(x), y)
                    self.optimizer.zero_grad()
                    self.accelerator.backward(loss)
                    self.optimizer.step()
                self.accelerator.end_training()


        loader = DataLoader(TensorDataset(torch.randn(8, 1), torch.randn(8, 1)), batch_size=4)
        Solver(loader).train()
        ''',
    )


def test_a_builder_reached_through_another_builder_is_followed() -> None:
    source = SOLVER.format(call="self.build()", after="\n    def build(self):\n        self.build_model()\n")
    new = converted(source)
    init = new[new.index("def __init__"):new.index("def build_model")]
    assert "self.build()\n        self.net, self.optimizer, self.loader = self.accelerator.prepare(\n" in init, new


def test_a_builder_called_again_after_training_is_refused_naming_both() -> None:
    """Image_Segmentation's ``Solver.train`` ends with ``self.build_model()`` and a load of the best weights: the
    fresh model is not the prepared one, and the load may read a file the main process has not written yet."""
    source = SOLVER.format(call="self.build_model()", after="        self.build_model()\n")
    assert codes(source) == ["ACC040:23"]


def test_a_builder_under_a_condition_is_not_a_place_to_prepare() -> None:
    """``if resume: self.build_model()``: the objects may not exist after the call; the file stays refused."""
    source = SOLVER.format(call="if self.device.type:\n            self.build_model()", after="")
    assert [c.split(":")[0] for c in codes(source)] == ["ACC014"]


def test_loaders_one_helper_builds_for_each_data_set_are_each_prepared() -> None:
    """stargan's ``get_loader`` binds ``data_loader = DataLoader(...)`` and returns it; main calls it for CelebA and
    for RaFD (either may stay ``None``). Each call makes a loader of its own: both are prepared (``prepare`` hands
    ``None`` back as it is, in accelify.runtime and in HF Accelerate), not the first alone while the loop walks the
    other unprepared (ACC020)."""
    source = '''
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    def get_loader(n):
        data_loader = DataLoader(TensorDataset(torch.randn(n, 1), torch.randn(n, 1)), batch_size=4)
        return data_loader


    class Solver:
        def __init__(self, a_loader, b_loader, mode):
            self.a_loader = a_loader
            self.b_loader = b_loader
            self.mode = mode
            self.build_model()

        def build_model(self):
            self.net = torch.nn.Linear(1, 1)
            self.optimizer = torch.optim.SGD(self.net.parameters(), lr=0.1)

        def train(self):
            if self.mode == "a":
                data_loader = self.a_loader
            else:
                data_loader = self.b_loader
            data_iter = iter(data_loader)
            for i in range(4):
                try:
                    x, y = next(data_iter)
                except StopIteration:
                    data_iter = iter(data_loader)
                    x, y = next(data_iter)
                loss = torch.nn.functional.mse_loss(self.net(x), y)
                self.optimizer.zero_grad()
                loss.backward()
                self.optimizer.step()


    a_loader = None
    b_loader = None
    if True:
        a_loader = get_loader(8)
    b_loader = get_loader(12)
    Solver(a_loader, b_loader, "b").train()
    '''
    new = converted(source)
    assert "self.net, self.optimizer, self.a_loader, self.b_loader = self.accelerator.prepare(" in new, new
    assert codes(source) == []


WGAN = '''
import torch
from torch import autograd
from torch.utils.data import DataLoader, TensorDataset


class WGAN_GP:
    def __init__(self):
        self.G = torch.nn.Linear(2, 4)
        self.D = torch.nn.Linear(4, 1)
        self.d_optimizer = torch.optim.Adam(self.D.parameters())
        self.g_optimizer = torch.optim.Adam(self.G.parameters())

    def penalty(self, real, fake):
        mixed = (0.5 * real + 0.5 * fake).requires_grad_(True)
        out = self.D(mixed)
        grads = autograd.grad(outputs=out, inputs=mixed, grad_outputs=torch.ones(out.size()), create_graph=True)[0]
        return ((grads.norm(2, dim=1) - 1) ** 2).mean()

    def train(self, loader):
        mone = torch.tensor(-1.0)
        for (x,) in loader:
            self.D.zero_grad()
            fake = self.G(torch.randn(x.size(0), 2))
{critic}
            self.d_optimizer.step()
            self.G.zero_grad()
            g_loss = self.D(self.G(torch.randn(x.size(0), 2))).mean()
            g_loss.backward(mone)
            self.g_optimizer.step()


model = WGAN_GP()
loader = DataLoader(TensorDataset(torch.randn(8, 4)), batch_size=4)
model.train(loader)
'''


def test_a_train_method_called_once_with_the_loader_prepares_first_thing() -> None:
    """Zeleni9/pytorch-wgan: ``__init__`` builds the models and optimizers, ``model.train(train_loader)`` brings the
    loader. Prepare goes first thing in ``train``, the accelerator in ``__init__``; ``backward(mone)`` keeps its
    gradient as ``gradient=mone``."""
    critic = ("            d_loss = self.D(fake.detach()).mean() - self.D(x).mean() + self.penalty(x, fake.detach())\n"
              "            d_loss.backward()")
    resumed = WGAN.replace("{critic}", critic).replace(
        "        self.g_optimizer = torch.optim.Adam(self.G.parameters())\n",
        "        self.g_optimizer = torch.optim.Adam(self.G.parameters())\n        self.G.load_state_dict(torch.load('g.pt'))\n")
    new = converted(resumed)
    assert "    def __init__(self):\n        self.accelerator = Accelerator(cpu=True)\n" in new, new
    # __init__ runs before train prepares: its model is the plain one, loaded as it is
    assert "        self.G.load_state_dict(torch.load('g.pt', map_location=\"cpu\"))\n" in new, new
    assert ("    def train(self, loader):\n        self.G, self.D, self.d_optimizer, self.g_optimizer, loader = "
            "self.accelerator.prepare(") in new, new
    assert "self.accelerator.backward(g_loss, gradient=mone)" in new


def test_a_train_method_called_twice_is_no_place_to_prepare() -> None:
    critic = "            (self.D(fake.detach()).mean() - self.D(x).mean()).backward()"
    source = WGAN.replace("{critic}", critic) + "model.train(loader)\n"
    assert [c.split(":")[0] for c in codes(source)] == ["ACC014"]


def test_two_training_methods_called_once_each_are_no_place_to_prepare() -> None:
    """``model.train(loader)`` and ``model.finetune(loader)``: either may run first, or alone, so preparing in one
    would leave the other training unprepared objects; the file stays refused."""
    critic = "            (self.D(fake.detach()).mean() - self.D(x).mean()).backward()"
    source = WGAN.replace("{critic}", critic).replace("    def train(self, loader):", """    def finetune(self, loader):
        for (x,) in loader:
            self.D(x).mean().backward()
            self.d_optimizer.step()

    def train(self, loader):""") + "model.finetune(loader)\n"
    assert [c.split(":")[0] for c in codes(source)] == ["ACC014"]


def test_a_gradient_penalty_backwarded_on_its_own_is_refused() -> None:
    """The penalty's backward gives the critic's last bias no gradient; DDP would stop waiting for it."""
    critic = ("            self.D(x).mean().backward(mone)\n            self.D(fake.detach()).mean().backward()\n"
              "            gradient_penalty = self.penalty(x, fake.detach())\n            gradient_penalty.backward()")
    assert codes(WGAN.replace("{critic}", critic)) == ["ACC041:27"]


PER_EPOCH = '''
import torch
from torch.utils.data import DataLoader, TensorDataset

net = torch.nn.Linear(4, 2)
trainloader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)


def train(epoch):
    net.train()
    optimizer = torch.optim.SGD(net.parameters(), lr=0.1 * (0.5 ** epoch), momentum=0.9)
    for inputs, targets in trainloader:
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(net(inputs), targets).backward()
        optimizer.step()


for epoch in range(3):
    train(epoch)
'''


def test_an_optimizer_built_anew_at_every_call_of_an_epoch_function_is_named() -> None:
    """meliketoy/wide-resnet.pytorch: ``train(epoch)`` builds a new SGD with the epoch's learning rate, the model and
    loaders are module globals. Refused as before, but naming the optimizer made once per epoch (ACC007), not the
    loader (ACC014 said `trainloader` could not be followed, which was not what to fix)."""
    assert codes(PER_EPOCH) == ["ACC007:10"]
