"""``analysis/evaluation_loops.is_forward``: a method the model's own class defines, given the batch in a loop that
never calls the model itself (``model.get_embedding(images)``), is the loop's forward: an evaluation's outputs are
gathered before they fill an array sized by the data set (siamese-triplet's ``extract_embeddings``, J3 (e))."""

from __future__ import annotations

from _convert import converted, dedent
from accelify.pipeline import convert_source

NET = """\
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 2)

    def forward(self, x):
        return self.fc(x)

    def get_embedding(self, x):
        return self.forward(x)

    def init_state(self, size):
        return torch.zeros(size, 2)


loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))), batch_size=4)
model = Net()
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for x, y in loader:
    optimizer.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    optimizer.step()
"""


def test_a_model_method_given_the_batch_is_gathered_before_it_fills_the_array() -> None:
    new = converted(NET + dedent("""
        with torch.no_grad():
            embeddings = np.zeros((len(loader.dataset), 2))
            k = 0
            for images, target in loader:
                embeddings[k:k + len(images)] = model.get_embedding(images).numpy()
                k += len(images)
        print(embeddings.sum())
        """))
    assert ("        output = model.get_embedding(images)\n"
            "        output, images = accelerator.gather_for_metrics((output, images))\n"
            "        embeddings[k:k + len(images)] = output.numpy()\n"
            "        k += len(images)\n") in new, new
    accelerate = converted(NET + dedent("""
        with torch.no_grad():
            embeddings = np.zeros((len(loader.dataset), 2))
            k = 0
            for images, target in loader:
                embeddings[k:k + len(images)] = model.get_embedding(images).numpy()
                k += len(images)
        print(embeddings.sum())
        """), target="accelerate")
    assert "output = accelerator.unwrap_model(model).get_embedding(images)\n" in accelerate, accelerate


def test_a_method_beside_a_call_of_the_model_is_not_the_forward() -> None:
    """``state = model.init_state(len(x))`` first, then ``model(x)``: the forward gathered is ``model(x)``'s."""
    new = converted(NET + dedent("""
        correct = 0
        with torch.no_grad():
            for x, y in loader:
                state = model.init_state(len(x))
                output = model(x)
                correct += (output.argmax(1) == y).sum().item()
        print(correct / len(loader.dataset))
        """))
    assert ("        state = model.init_state(len(x))\n"
            "        output = model(x)\n"
            "        output, y = accelerator.gather_for_metrics((output, y))\n") in new, new


def test_a_method_given_no_batch_is_not_the_forward() -> None:
    """A loop that only calls ``model.init_state(4)`` (no batch in it) runs no forward: nothing is gathered."""
    new = converted(NET + dedent("""
        total = 0.0
        with torch.no_grad():
            for x, y in loader:
                total += model.init_state(4).sum().item()
        print(total)
        """))
    assert "gather_for_metrics" not in new, new


def test_rows_written_into_an_array_sized_by_the_data_set_from_a_loop_not_gathered_are_reported() -> None:
    """No ``no_grad``, no ``eval()``: not an evaluation, nothing gathered, so each process fills 1/N of the rows and
    the rest stay zero: reported (ACC028) at each write; an evaluation's gathered rows are not."""
    code = NET + dedent("""
        embeddings = np.zeros((len(loader.dataset), 2))
        labels = np.zeros(len(loader.dataset))
        k = 0
        for images, target in loader:
            embeddings[k:k + len(images)] = model(images).detach().numpy()
            labels[k:k + len(images)] = target.numpy()
            k += len(images)
        print(embeddings.sum(), labels.sum())
        """)
    lines = code.splitlines()
    writes = [i for i, text in enumerate(lines, 1) if text.startswith(("    embeddings[k:", "    labels[k:"))]
    result = convert_source(code)
    assert [f"{w.code}:{w.line}" for w in result.warnings] == [f"ACC028:{n}" for n in writes]
    gathered = convert_source(code.replace("embeddings = np.zeros", "model.eval()\nembeddings = np.zeros"))
    assert "gather_for_metrics" in gathered.new and [w.code for w in gathered.warnings] == [], gathered.new
