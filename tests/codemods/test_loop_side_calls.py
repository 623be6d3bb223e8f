"""Field set J (docs/FIELD_TESTS.md): calls of the loop other than the training forward. A forward inside a
comprehension (``tuple(net(d) for d in data)``) gathered whole, never taken out of the scope that binds its names; a
target the loop may set to None gathered on its own; a siamese/triplet net's tuple of outputs split member by member;
a model's own sampling method whose output never reaches a loss converted (ACC025 only where it does); files written
by writers of any library, or by any call named like a write, guarded or reported."""

from __future__ import annotations

import pytest

from _convert import assert_converts, codes, converted

DATA = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
net = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
train = DataLoader(TensorDataset(torch.randn(16, 3, 4)), batch_size=4)
test = DataLoader(TensorDataset(torch.randn(8, 3, 4)), batch_size=4)
"""
CONVERTED_DATA = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
net = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
train = DataLoader(TensorDataset(torch.randn(16, 3, 4)), batch_size=4)
test = DataLoader(TensorDataset(torch.randn(8, 3, 4)), batch_size=4)
net, optimizer, train, test = accelerator.prepare(net, optimizer, train, test)
"""
TRIPLET = """

def triplet_loss(a, p, n):
    return torch.relu((a - p).pow(2).sum(1) - (a - n).pow(2).sum(1) + 1.0).mean()


"""


def test_a_forward_in_a_generator_is_gathered_whole_and_split_member_by_member() -> None:
    """siamese-triplet's evaluation: ``outputs = tuple(net(d) for d in data)``. The forward was taken out of the
    generator (``output = net(d)``: NameError ``d``); the tuple is gathered whole, and the per-batch mean loss over it
    runs per original batch with each member split (a tuple has no ``.split``)."""
    assert_converts(DATA + TRIPLET + """\
for (x,) in train:
    triplet_loss(*(net(d) for d in x.unbind(1))).backward()
    optimizer.step()
val_loss = 0.0
with torch.no_grad():
    for (x,) in test:
        outputs = tuple(net(d) for d in x.unbind(1))
        val_loss += triplet_loss(*outputs).item()
print(val_loss / len(test))
""", CONVERTED_DATA + TRIPLET + """\
for (x,) in train:
    accelerator.backward(triplet_loss(*(net(d) for d in x.unbind(1))))
    optimizer.step()
val_loss = 0.0
with torch.no_grad():
    for (x,) in test:
        outputs = tuple(net(d) for d in x.unbind(1))
        outputs = accelerator.gather_for_metrics(outputs)
        for outputs in zip(*(member.split(test.batch_sampler.batch_size) for member in outputs)):
            val_loss += triplet_loss(*outputs).item()
accelerator.print(val_loss / len(test.batch_sampler.batch_sampler))
accelerator.end_training()
""")


def test_a_forward_in_another_comprehension_stays_where_it_is_and_is_reported() -> None:
    """``sum(net(d).mean() for d in ...)``: no sequence of per-sample outputs to gather; the forward is not moved
    out of the generator (it reads ``d``), and the metric is reported as each process's own (ACC016)."""
    code = DATA + """\
for (x,) in train:
    net(x).sum().backward()
    optimizer.step()
total = 0.0
with torch.no_grad():
    for (x,) in test:
        total += sum(net(d).mean() for d in x.unbind(1)).item()
print(total)
"""
    new = converted(code)
    assert "        total += sum(net(d).mean() for d in x.unbind(1)).item()\n" in new, new
    assert "= net(d)" not in new and "gather_for_metrics" not in new, new
    assert "ACC016:13" in codes(code)
    mapped = code.replace("sum(net(d).mean() for d in x.unbind(1))", "sum(map(lambda d: net(d).mean(), x.unbind(1)))")
    assert "= net(d)" not in converted(mapped) and "ACC016:13" in codes(mapped)


def test_a_target_the_loop_may_set_to_none_is_gathered_on_its_own() -> None:
    """siamese-triplet's ``target = target if len(target) > 0 else None``: gathered in one tuple with the outputs, a
    None sent the whole tuple through ``gather_object`` ("too many values to unpack" on 2 processes); the target is
    gathered under ``if target is not None:``, the net's tuple of outputs on its own."""
    before = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
net = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
train = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 2)), batch_size=4)
test = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 2)), batch_size=4)
for x, y in train:
    torch.nn.functional.mse_loss(net(x), y).backward()
    optimizer.step()
total = 0.0
with torch.no_grad():
    for x, target in test:
        target = target if len(target) > 0 else None
        outputs = net(x)
        if target is not None:
            total += (outputs - target).pow(2).sum().item()
print(total / len(test.dataset))
"""
    after = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator
accelerator = Accelerator()
net = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(net.parameters(), lr=0.1)
train = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 2)), batch_size=4)
test = DataLoader(TensorDataset(torch.randn(8, 4), torch.randn(8, 2)), batch_size=4)
net, optimizer, train, test = accelerator.prepare(net, optimizer, train, test)
for x, y in train:
    accelerator.backward(torch.nn.functional.mse_loss(net(x), y))
    optimizer.step()
total = 0.0
with torch.no_grad():
    for x, target in test:
        target = target if len(target) > 0 else None
        outputs = net(x)
        outputs = accelerator.gather_for_metrics(outputs)
        if target is not None:
            target = accelerator.gather_for_metrics(target)
        if target is not None:
            total += (outputs - target).pow(2).sum().item()
accelerator.print(total / len(test.dataset))
accelerator.end_training()
"""
    assert_converts(before, after)
    assert codes(before) == []


GENERATOR = """\
import torch
import torch.nn as nn
class VAE(nn.Module):
    def __init__(self):
        super().__init__()
        self.dec = nn.Linear(2, 4)
    def forward(self, z):
        return self.dec(z)
    def sample(self, n):
        return torch.sigmoid(self.dec(torch.randn(n, 2)))
    def train_step(self, x):
        loss = (self(torch.randn(len(x), 2)) - x).pow(2).mean()
        loss.backward()
        return loss.item()
model = VAE()
optimizer = torch.optim.Adam(model.parameters())
"""


def _acc025(code: str) -> list[str]:
    return [c for c in codes(GENERATOR + code) if c.startswith("ACC025:")]


def test_a_sample_for_a_figure_converts_and_one_that_reaches_the_loss_is_refused() -> None:
    """timbmg/VAE-CVAE-MNIST: ``x = vae.inference(z)`` decoded for a figure every k batches was refused (ACC025, whose
    advice would break the program). Refused now only where the sample can reach a backward: through a name, a
    list, a helper's return, or a method that backpropagates itself."""
    loop = """\
for x in torch.rand(8, 3, 4):
    loss = (model(torch.randn(3, 2)) - x).pow(2).mean()
    EXTRA
    loss.backward()
    optimizer.step()
"""
    converts = [
        "frames = [model.sample(4).mean().item()]",  # a print, a list of frames
        "with torch.no_grad():\n        img = model.sample(4)",
        "img = model.sample(4).detach()\n    loss = loss + img.sum() * 0",  # no gradient leaves a detached value
    ]
    for extra in converts:
        assert _acc025(loop.replace("EXTRA", extra)) == [], extra
    refused = [
        "loss = loss + model.sample(4).mean()",
        "kept = []\n    kept.append(model.sample(4))\n    loss = loss + torch.stack(kept).mean()",
        "self_loss = model.train_step(x)",  # the method backpropagates itself
    ]
    for extra in refused:
        assert _acc025(loop.replace("EXTRA", extra)), extra
    helper = """\
def sample_loss(m):
    return m.sample(4).mean()
for x in torch.rand(8, 3, 4):
    loss = (model(torch.randn(3, 2)) - x).pow(2).mean() + HELPER
    loss.backward()
    optimizer.step()
"""
    # timbmg/VAE-CVAE-MNIST rebinds the batch's own name: ``x = vae.inference(z)`` after the step; the next pass
    # takes a new ``x`` from the loader before the loss reads it. A name the loop does not rebind carries the
    # sample into the next pass's loss
    rebound = """\
prev = torch.zeros(4)
for i, x in enumerate(torch.rand(8, 3, 4)):
    loss = (model(torch.randn(3, 2)) - x).pow(2).mean() + 0 * prev.sum()
    loss.backward()
    optimizer.step()
    if i % 4 == 0:
        x = model.sample(3)
        print(x.mean().item())
"""
    assert _acc025(rebound) == []
    assert _acc025(rebound.replace("x = model.sample(3)", "prev = model.sample(3)[0]"))
    assert _acc025(helper.replace("HELPER", "sample_loss(model)")), "a helper's returned sample reaches the loss"
    assert not _acc025(helper.replace("HELPER", "0 * len(str(sample_loss(model).item()))"))


def test_an_evaluation_helper_generating_with_the_model_converts() -> None:
    """``model.generate(...)`` in a helper the training calls between epochs (its value printed): converted, the
    accelerate target reaching the method through ``unwrap_model``."""
    code = GENERATOR + """\
def show(m):
    print(m.sample(2).shape)
for epoch in range(2):
    for x in torch.rand(8, 3, 4):
        loss = (model(torch.randn(3, 2)) - x).pow(2).mean()
        loss.backward()
        optimizer.step()
    show(model)
"""
    assert _acc025(code[len(GENERATOR):]) == []
    new = converted(code, target="accelerate")
    assert "    accelerator.print(accelerator.unwrap_model(m).sample(2).shape)\n" in new, new


WRITER_HEAD = """\
import imageio
import numpy as np
import torch
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
frames = []
for x in torch.ones(4, 2):
    model(x).sum().backward()
    optimizer.step()
    frames.append(np.zeros((4, 4), dtype=np.uint8))
"""


def test_a_gif_written_at_the_end_of_training_is_written_by_the_main_process() -> None:
    """EmilienDupont/wgan-gp: ``imageio.mimsave('./training_{}_epochs.gif'.format(epochs), frames)`` was written by
    every process to one path, no warning (``imageio.mimsave`` was not among the known writers)."""
    assert_converts(WRITER_HEAD + "imageio.mimsave('./training_{}_epochs.gif'.format(2), frames)\n", """\
import imageio
import numpy as np
import torch
from accelify.runtime import Accelerator
accelerator = Accelerator(cpu=True)
model = torch.nn.Linear(2, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
model, optimizer = accelerator.prepare(model, optimizer)
frames = []
for x in torch.ones(4, 2):
    accelerator.backward(model(x).sum())
    optimizer.step()
    frames.append(np.zeros((4, 4), dtype=np.uint8))
if accelerator.is_main_process:
    imageio.mimsave('./training_{}_epochs.gif'.format(2), frames)
accelerator.end_training()
""")


@pytest.mark.parametrize("write", [
    # known writers, by library
    "imageio.mimwrite('progress.gif', frames)",
    "import imageio.v2 as iio\niio.mimsave('progress.gif', frames)",
    "import imageio.v3 as iio\niio.imwrite('progress.gif', np.stack(frames))",
    "import cv2\ncv2.imwrite('last.png', frames[-1])",
    "np.savez_compressed('frames.npz', *frames)",
    "from scipy.io import wavfile\nwavfile.write('out.wav', 16000, frames[-1])",
    "import soundfile as sf\nsf.write('out.wav', frames[-1], 16000)",
    "import torchaudio\ntorchaudio.save('out.wav', torch.zeros(1, 8), 16000)",
    "import joblib\njoblib.dump(frames, 'frames.pkl')",
    "import matplotlib.pyplot as plt\nplt.imsave('last.png', frames[-1])",
    "import pandas as pd\npd.DataFrame(frames[-1]).to_json('last.json')",
    "np.stack(frames).tofile('frames.bin')",
    # any library call named like a write that is handed a path
    "import skvideo.io\nskvideo.io.vwrite('progress.mp4', np.stack(frames))",
    "from PIL import Image\nsave_dir = 'samples'\nImage.fromarray(frames[-1]).save(f'{save_dir}/last.png')",
    "from transformers import AutoTokenizer\noutput_dir = 'out'\ntokenizer = AutoTokenizer.from_pretrained('t5-small')\n"
    "tokenizer.save_pretrained(output_dir)",
])
def test_a_file_every_process_names_alike_is_written_by_the_main_process(write: str) -> None:
    new = converted(WRITER_HEAD + write + "\n")
    last = write.splitlines()[-1]
    assert f"if accelerator.is_main_process:\n    {last}\n" in new, new


@pytest.mark.parametrize("call", [
    "import sys\nsys.stdout.write('loss 0.5\\n')",  # a handle's write: its open is the write
    "import lightning\ntrainer = lightning.Trainer()\ntrainer.save_checkpoint('last.ckpt')",  # a collective of its own
    "cache = make_cache()\ncache.save()",  # no path
    "report = make_report()\nreport.write_summary(frames)",  # no path
])
def test_calls_that_write_no_shared_file_are_left(call: str) -> None:
    new = converted(WRITER_HEAD + call + "\n")
    assert "is_main_process" not in new, new


HELPERS = """\
import imageio
import numpy as np


def save_gif(frames, path):
    imageio.mimsave(path, [np.asarray(f) for f in frames])
"""


def test_a_write_in_a_helper_without_the_accelerator_runs_on_the_main_process_at_its_calls() -> None:
    """``save_gif(frames, path)`` in a module the accelerator is not passed to: each call of it, a statement of its
    own after the accelerator exists, runs on the main process; a call whose value is used cannot be, and the write
    itself runs there, through the runtime's process state (``PartialState().is_main_process``; it was ACC048)."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    module = [ModuleText("utils", "utils.py", HELPERS)]
    code = WRITER_HEAD.replace("import imageio\n", "from utils import save_gif\n") + 'save_gif(frames, "progress.gif")\n'
    result = convert_source(code, modules=module)
    assert result.warnings == (), [w.format() for w in result.warnings]
    assert 'if accelerator.is_main_process:\n    save_gif(frames, "progress.gif")\n' in result.new, result.new
    again = convert_source(result.new, modules=module)
    assert again.status == "unchanged" and again.warnings == ()
    used = convert_source(code.replace("save_gif(frames", "done = save_gif(frames"), modules=module)
    found = [f"{w.code}:{w.line}" for r in (used, *used.companions) for w in r.warnings]
    assert found == [], found  # a call whose value is kept: the write in the helper runs on the main process instead
    assert "is_main_process" not in used.new
    assert "    if PartialState().is_main_process:\n        imageio.mimsave(" in used.companions[0].new


JSON_HELPERS = """\
import json


def save_dict_to_json(d, json_path):
    with open(json_path, "w") as f:
        json.dump(d, f, indent=4)
"""


def test_a_with_open_in_a_helper_is_written_at_its_calls_not_reported() -> None:
    """I3's ``snapshotargs(args)`` and J4's ``save_dict_to_json(d, path)``: ``with open(path, "w") as f:`` in a
    helper the accelerator is not passed to, whose every call is a statement of its own after the accelerator exists:
    each call runs on the main process, and no ACC024 is left on a file only the main process now writes (the
    warning named a defect the conversion had already fixed)."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    module = [ModuleText("utils", "utils.py", JSON_HELPERS)]
    code = WRITER_HEAD.replace("import imageio\n", "from utils import save_dict_to_json\n") + \
        'save_dict_to_json({"loss": 1.0}, "metrics.json")\n'
    result = convert_source(code, modules=module)
    found = [f"{w.code}:{w.line}" for r in (result, *result.companions) for w in r.warnings]
    assert found == [], found
    assert 'if accelerator.is_main_process:\n    save_dict_to_json({"loss": 1.0}, "metrics.json")\n' in result.new
    again = convert_source(result.new, modules=module)
    assert again.status == "unchanged" and again.warnings == ()
    used = convert_source(code.replace("save_dict_to_json({", "done = save_dict_to_json({"), modules=module)
    found = [f"{w.code}:{w.line}" for r in (used, *used.companions) for w in r.warnings]
    assert found == [], found  # a call whose value is kept cannot be guarded: the ``with open`` in the helper is
    assert "    if PartialState().is_main_process:\n        with open(json_path, \"w\") as f:\n" in used.companions[0].new


def test_a_call_named_like_a_method_of_the_program_is_left_to_that_method() -> None:
    """``trainer.save("model.pt")`` on an object the call graph cannot follow, where the program defines ``save``:
    its writes (and a barrier before a checkpoint in it) are that method's; guarded at the call, only the main process
    would reach the barrier."""
    code = WRITER_HEAD + """\
class Trainer:
    def save(self, path):
        torch.save(model.state_dict(), path)
def make_trainer():
    return Trainer()
trainers = [make_trainer()]
trainers[0].save("model.pt")
"""
    assert "    trainers[0].save(" not in converted(code)
