"""``analysis/placed.py``: a script that never chooses a device gets ``Accelerator()`` when the runtime places
everything training touches, and keeps ``cpu=True`` when it makes tensors training reads (they would stay on the
CPU while the model and the batches go to the GPU)."""

from __future__ import annotations

import pytest

from _convert import converted, dedent

HEAD = """\
import torch
from torch.utils.data import DataLoader, TensorDataset
x = torch.randn(8, 2)
y = (x.sum(1) > 0).long()
loader = DataLoader(TensorDataset(x, y), batch_size=4)
model = torch.nn.Linear(2, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
"""

PINNED = {
    "noise made in the loop": """
        for xb, yb in loader:
            out = model(xb + 0.1 * torch.randn(xb.shape))
            torch.nn.functional.cross_entropy(out, yb).backward()
            optimizer.step()
        """,
    "a tensor made before and read in training": """
        weights = torch.tensor([1.0, 2.0])
        for xb, yb in loader:
            torch.nn.functional.cross_entropy(model(xb), yb, weight=weights).backward()
            optimizer.step()
        """,
    "the data itself read after prepare": """
        for xb, yb in loader:
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        print(model(x).argmax(1))
        """,
    "a loop over tensors, not a loader": """
        for xb in x.split(4):
            model(xb).sum().backward()
            optimizer.step()
        """,
}


@pytest.mark.parametrize("name", list(PINNED))
def test_pinned_to_the_cpu(name: str) -> None:
    assert "Accelerator(cpu=True)" in converted(HEAD + dedent(PINNED[name]))


def test_placed_by_the_runtime() -> None:
    out = converted(dedent("""
        import torch
        from torch.utils.data import ConcatDataset, DataLoader, TensorDataset
        def make_data(n):
            x = torch.randn(n, 2)
            return TensorDataset(x, (x.sum(1) > 0).long())
        base = make_data(8)
        extra = TensorDataset(torch.randn(4, 2), torch.zeros(4, dtype=torch.long))
        loader = DataLoader(ConcatDataset([base, extra]), batch_size=4)
        model = torch.nn.Linear(2, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for xb, yb in loader:
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        """))
    assert "accelerator = Accelerator()\n" in out


def test_a_model_that_makes_tensors_in_its_forward_stays_on_the_cpu() -> None:
    out = converted(dedent("""
        import torch
        from torch.utils.data import DataLoader, TensorDataset
        class Net(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = torch.nn.Linear(2, 2)
            def forward(self, x):
                return self.fc(x) + torch.zeros(2)
        loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.zeros(8, dtype=torch.long)), batch_size=4)
        model = Net()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for xb, yb in loader:
            torch.nn.functional.cross_entropy(model(xb), yb).backward()
            optimizer.step()
        """))
    assert "Accelerator(cpu=True)" in out


def test_each_of_two_trainers_chosen_by_a_command_is_judged_on_its_own(tmp_path, monkeypatch) -> None:
    """``main.py train`` or ``main.py train-ae`` runs one of two trainers, each converted on its own: the other's
    ``torch.randn`` data (and the call that runs it) kept both pinned to the CPU, useless on the GPU machine they are
    for (field test J10, a diffusion CLI with two trainers)."""
    from accelify.pipeline import convert_path

    trainer = dedent("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset


        def {name}(epochs):
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 4)), batch_size=8, shuffle=True)
            model = torch.nn.Linear(4, 4)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
        """)
    (tmp_path / "train.py").write_text(trainer.format(name="train"))
    (tmp_path / "train_ae.py").write_text(trainer.format(name="train_ae"))
    (tmp_path / "main.py").write_text(dedent("""\
        import sys

        if __name__ == "__main__":
            if sys.argv[1] == "train":
                from train import train
                train(2)
            elif sys.argv[1] == "train-ae":
                from train_ae import train_ae
                train_ae(2)
        """))
    monkeypatch.chdir(tmp_path)
    result = convert_path("main.py")
    made = [line.strip() for part in result.companions for line in part.new.splitlines() if "Accelerator(" in line]
    assert made == ["accelerator = Accelerator()", "accelerator = Accelerator()"], made


def test_a_save_helper_two_trainers_share_saves_each_ones_unwrapped_model(tmp_path, monkeypatch) -> None:
    """Both trainers hand their model to ``utils.save_checkpoint(model, filename)``: converted one at a time, each
    saw the other's call (no accelerator there, a model not prepared in its conversion), so the helper got ACC009
    and the checkpoints `module.` keys that the repository's own sampling command cannot load (field test J10)."""
    from accelify.pipeline import convert_path

    trainer = dedent("""\
        import torch
        from torch.utils.data import DataLoader, TensorDataset

        from utils import save_checkpoint


        def {name}(epochs):
            loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randn(64, 4)), batch_size=8)
            model = torch.nn.Linear(4, 4)
            optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
            for epoch in range(epochs):
                for x, y in loader:
                    optimizer.zero_grad()
                    torch.nn.functional.mse_loss(model(x), y).backward()
                    optimizer.step()
                save_checkpoint(model, "{name}.pt")
        """)
    (tmp_path / "train.py").write_text(trainer.format(name="train"))
    (tmp_path / "train_ae.py").write_text(trainer.format(name="train_ae"))
    (tmp_path / "utils.py").write_text("import torch\n\n\ndef save_checkpoint(model, filename):\n"
                                       "    torch.save(model.state_dict(), filename)\n")
    (tmp_path / "main.py").write_text(dedent("""\
        import sys

        if sys.argv[1] == "train":
            from train import train
            train(2)
        else:
            from train_ae import train_ae
            train_ae(2)
        """))
    monkeypatch.chdir(tmp_path)
    result = convert_path("main.py")
    parts = {part.path: part for part in result.companions}
    assert result.status == "converted" and not [w for p in parts.values() for w in p.warnings], result.reason
    assert "accelerator.save(accelerator.unwrap_model(model).state_dict(), filename)" in parts["utils.py"].new
    for name in ("train", "train_ae"):
        assert f'save_checkpoint(model, "{name}.pt", accelerator)' in parts[f"{name}.py"].new


def test_a_teacher_made_beside_the_student_is_placed_where_it_is_made() -> None:
    """A distillation script that never chooses a device: the teacher (a model ``prepare`` does not receive, run on
    the prepared loader's batches) pinned the conversion to the CPU (``cpu=True``: correct, and useless on the GPU
    machine it is for). Made by a statement of its own where the student is prepared, it is placed there, and the
    accelerator picks the machine's device. A teacher rebound (or made elsewhere) still pins it."""
    script = dedent("""
        import torch
        import torch.nn.functional as F
        from torch.utils.data import DataLoader, TensorDataset
        teacher = torch.nn.Linear(8, 4)
        teacher.eval()
        student = torch.nn.Linear(8, 4)
        optimizer = torch.optim.SGD(student.parameters(), lr=0.1)
        loader = DataLoader(TensorDataset(torch.randn(32, 8)), batch_size=4)
        for (x,) in loader:
            with torch.no_grad():
                soft = F.softmax(teacher(x), dim=1)
            loss = F.kl_div(F.log_softmax(student(x), dim=1), soft, reduction="batchmean")
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        """)
    out = converted(script)
    assert "accelerator = Accelerator()\nteacher = torch.nn.Linear(8, 4).to(accelerator.device)\n" in out, out
    rebound = converted(script.replace("teacher.eval()\n", "teacher = teacher.eval()\n"))
    assert "Accelerator(cpu=True)" in rebound and ".to(accelerator.device)" not in rebound, rebound
