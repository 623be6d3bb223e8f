"""A prepared model whose forward reaches a submodule only through some of its parts (a backbone's layers run one by
one, its classifier left out): the accelerator looks for unused parameters (analysis/unused_submodules.py)."""

from __future__ import annotations

import pytest
from _convert import converted

FINDS = "accelerator = Accelerator(kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=True)])"

# set M4 (a Kaggle leaf-disease project): the wrapper runs its backbone's layers and its own head
PROGRAM_BACKBONE = """
import torch
import torch.nn as nn


class Backbone(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3)
        self.layer1 = nn.Conv2d(8, 8, 3)
        self.fc = nn.Linear(8, 1000)

    def features(self, x):
        return self.layer1(self.conv1(x))

    def forward(self, x):
        return self.fc(self.features(x).mean((2, 3)))


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.base_model = Backbone()
        self.out = nn.Linear(8, 5)

    def forward(self, image):
        x = self.base_model.layer1(self.base_model.conv1(image))
        return self.out(x.mean((2, 3)))


model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(8, 3, 8, 8)), batch_size=2)
for (x,) in loader:
    model(x).sum().backward()
    optimizer.step()
"""

FORWARD = "        x = self.base_model.layer1(self.base_model.conv1(image))\n        return self.out(x.mean((2, 3)))\n"


def with_forward(body: str, source: str = PROGRAM_BACKBONE) -> str:
    """``PROGRAM_BACKBONE`` with ``Net.forward``'s body replaced."""
    assert FORWARD in source
    return source.replace(FORWARD, "".join(f"        {line}\n" for line in body.strip().splitlines()))


def library_backbone(make: str, forward: str, imports: str = "import torchvision") -> str:
    """The wrapper around a library model ``make`` (the program cannot see its parts)."""
    source = PROGRAM_BACKBONE.replace("self.base_model = Backbone()", f"self.base_model = {make}")
    return imports + "\n" + with_forward(forward, source)


def finds_unused(source: str) -> bool:
    out = converted(source)
    if FINDS in out:
        return True
    assert "accelerator = Accelerator()" in out and "find_unused_parameters" not in out, out
    return False


def test_a_backbone_run_layer_by_layer_without_its_head_makes_ddp_look_for_unused_parameters() -> None:
    """The backbone is a class of the program: its ``fc`` is a part the forward never reaches (DDP's
    UnusedParametersError at the second step on N processes). Reaching it through the backbone's own method
    (``self.base_model.features(x)``) leaves ``fc`` out just the same."""
    out = converted(PROGRAM_BACKBONE)
    assert FINDS in out and "from accelify.runtime import Accelerator, DistributedDataParallelKwargs" in out
    assert finds_unused(with_forward("return self.out(self.base_model.features(image).mean((2, 3)))"))


@pytest.mark.parametrize(
    "forward",
    [
        "return self.out(self.base_model(image))",  # the backbone called whole
        "return self.out(self.base_model.forward(image))",
        "x = self.base_model.features(image).mean((2, 3))\nreturn self.out(x) + self.base_model.fc(x).sum()",
        "x = self.base_model.layer1(self.base_model.conv1(image)).mean((2, 3))\nreturn self.base_model.fc(x) + self.out(x).sum()",
        "return self.out(run(self.base_model, image))",  # handed on whole: not judged
    ],
)
def test_a_backbone_whose_every_part_runs_is_not_judged(forward: str) -> None:
    assert not finds_unused(with_forward(forward))


@pytest.mark.parametrize(
    ("make", "forward", "imports"),
    [
        ("torchvision.models.resnet34(pretrained=True)",
         "x = self.base_model.layer4(self.base_model.conv1(image))\nreturn self.out(x.mean((2, 3)))", "import torchvision"),
        ('EfficientNet.from_pretrained("efficientnet-b3")',
         "return self.out(self.base_model.extract_features(image).mean((2, 3)))", "from efficientnet_pytorch import EfficientNet"),
        ('timm.create_model("resnet18", pretrained=True)',
         "return self.out(self.base_model.forward_features(image).mean((2, 3)))", "import timm"),
        ('pretrainedmodels.__dict__["resnet34"](pretrained="imagenet")',
         "return self.out(self.base_model.features(image).mean((2, 3)))", "import pretrainedmodels"),
        ("getattr(models, arch)(pretrained=True)",
         "x = self.base_model.layer4(self.base_model.conv1(image))\nreturn self.out(x.mean((2, 3)))",
         'from torchvision import models\narch = "resnet34"'),
    ],
)
def test_a_library_backbone_reached_by_parts_makes_ddp_look_for_unused_parameters(make: str, forward: str, imports: str) -> None:
    """A library model's parts are unknowable: run by parts (never whole), some may get no gradient."""
    assert finds_unused(library_backbone(make, forward, imports))
    assert not finds_unused(library_backbone(make, "return self.out(self.base_model(image))", imports))


def test_a_backbone_without_its_head_is_judged_by_what_the_model_holds() -> None:
    """``nn.Sequential(*list(backbone.children())[:-1])`` from a local backbone holds no head, and the forward calls
    it whole: nothing unused. Kept as an attribute as well (``self.backbone``), the backbone and its head are
    registered in the model and never run."""
    local = library_backbone("nn.Sequential(*list(torchvision.models.resnet18().children())[:-1])",
                             "return self.out(self.base_model(image).flatten(1))")
    assert not finds_unused(local)
    kept = local.replace("        self.base_model = nn.Sequential(",
                         "        self.backbone = torchvision.models.resnet18()\n        self.base_model = nn.Sequential(")
    assert finds_unused(kept)


def test_a_layer_read_through_its_tensors_is_judged_by_the_tensors_read() -> None:
    """``F.linear(x, self.out.weight, self.out.bias)`` runs all of ``self.out``; its weight alone leaves the bias."""
    both = "x = self.base_model(image).mean((2, 3))\nreturn nn.functional.linear(x, self.out.weight, self.out.bias)"
    assert not finds_unused(with_forward(both))
    assert finds_unused(with_forward(both.replace(", self.out.bias)", ")")))


def test_a_class_of_the_program_called_whole_runs_what_its_own_forward_reaches() -> None:
    """The model calls its encoder whole; the encoder runs the backbone by parts: the backbone's head is unused."""
    encoder = PROGRAM_BACKBONE.replace("class Net(nn.Module):", """class Encoder(nn.Module):
    def __init__(self):
        super().__init__()
        self.backbone = Backbone()

    def forward(self, x):
        return self.backbone.layer1(self.backbone.conv1(x))


class Net(nn.Module):""").replace("self.base_model = Backbone()", "self.base_model = Encoder()")
    assert finds_unused(with_forward("return self.out(self.base_model(image).mean((2, 3)))", encoder))
    whole = encoder.replace("return self.backbone.layer1(self.backbone.conv1(x))", "return self.backbone(x)")
    assert not finds_unused(with_forward("return self.out(self.base_model(image).mean((2, 3)))", whole))



@pytest.mark.parametrize("made", ["Net(torchvision.models.resnet34())", "Net(backbone=torchvision.models.resnet34())"])
def test_a_backbone_handed_to_the_model_is_judged_by_what_the_call_passes(made: str) -> None:
    """``self.base_model = backbone``, a parameter of ``__init__``: the model made by ``Net(resnet34())`` holds a
    library model, run by parts here; called whole, nothing is unused."""

    def handed(forward: str) -> str:
        source = library_backbone("backbone", forward).replace("model = Net()", f"model = {made}")
        return source.replace("    def __init__(self):\n        super().__init__()\n        self.base_model = backbone",
                              "    def __init__(self, backbone):\n        super().__init__()\n        self.base_model = backbone")

    assert "def __init__(self, backbone)" in handed("return self.out(self.base_model(image))")
    assert finds_unused(handed("x = self.base_model.layer4(self.base_model.conv1(image))\nreturn self.out(x.mean((2, 3)))"))
    assert not finds_unused(handed("return self.out(self.base_model(image))"))


def test_containers_reached_by_key_or_index_are_used_whole() -> None:
    """makemore's ``self.transformer = nn.ModuleDict(dict(wte=..., wpe=..., h=..., ln_f=...))`` reached key by key,
    and a U-Net's decoder ``self.ups[idx](x)`` over an ``nn.ModuleList``: nothing to look for (each step of DDP would
    pay for the search, and warn that it found nothing)."""
    from _convert import converted

    body = (
        "import torch\nimport torch.nn as nn\n\n\nclass Net(nn.Module):\n    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.transformer = nn.ModuleDict(dict(wte=nn.Embedding(8, 4), h=nn.ModuleList([nn.Linear(4, 4)]),"
        " ln_f=nn.LayerNorm(4)))\n"
        "        self.ups = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])\n\n"
        "    def forward(self, idx):\n        x = self.transformer.wte(idx)\n"
        "        for block in self.transformer.h:\n            x = block(x)\n"
        "        for i in range(len(self.ups)):\n            x = self.ups[i](x)\n"
        "        return self.transformer.ln_f(x).sum()\n\n\n"
        "model = Net()\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for idx in torch.randint(0, 8, (4, 2)):\n    model(idx).backward()\n    optimizer.step()\n")
    assert "find_unused_parameters" not in converted(body)
    partly = body.replace("        x = self.transformer.wte(idx)\n", "        x = torch.zeros(2, 4)\n")
    assert "find_unused_parameters=True" in converted(partly)  # ``wte`` never reached
