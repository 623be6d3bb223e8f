"""Several trainings in one run: training functions each preparing what they train (``analysis/training_functions.py``:
PyTorch's knowledge-distillation tutorial layout; set N's N9 and N10 were refused with a false ACC014), a training per
pass of a loop (``Plan._trains_per_pass``: set N's N8, a k-fold written inline, refused with a false ACC007), and
where the plan still says no (a function called per epoch with a model built once, an optimizer rebuilt per epoch)."""

from __future__ import annotations

from _convert import codes, converted, dedent

KD = dedent(
    """
    import torch
    import torch.nn.functional as F
    from torch.utils.data import DataLoader, TensorDataset


    def train_main(loader, model, epochs=2):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        model.to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        for epoch in range(epochs):
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss = F.cross_entropy(model(x), y)
                loss.backward()
                optimizer.step()
            print("main", epoch, loss.item())


    def distillation(student, teacher, loader, epochs=2, T=2.0):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        student.to(device)
        teacher.to(device)
        teacher.eval()
        optimizer = torch.optim.Adam(student.parameters(), lr=1e-2)
        for epoch in range(epochs):
            for x, y in loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                with torch.no_grad():
                    t = teacher(x)
                s = student(x)
                kd = F.kl_div(F.log_softmax(s / T, 1), F.softmax(t / T, 1), reduction="batchmean") * T * T
                loss = kd + F.cross_entropy(s, y)
                loss.backward()
                optimizer.step()
            print("kd", epoch, loss.item())


    def main():
        torch.manual_seed(0)
        loader = DataLoader(TensorDataset(torch.randn(64, 8), torch.randint(0, 3, (64,))), batch_size=16, shuffle=True)
        teacher = torch.nn.Linear(8, 3)
        train_main(loader, teacher)
        student = torch.nn.Linear(8, 3)
        distillation(student, teacher, loader)
        torch.save(student.state_dict(), "student.pt")


    if __name__ == "__main__":
        main()
    """
)


def test_teacher_and_student_each_prepared_where_they_train() -> None:
    new = converted(KD)
    assert "def train_main(loader, model, epochs=2, *, accelerator):" in new
    assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n" in new
    # the student's function prepares the student (models first), not the teacher it is handed, which trains no more
    assert "    student, optimizer, loader = accelerator.prepare(student, optimizer, loader)\n" in new
    assert "        with torch.no_grad():\n                t = teacher(x)\n" in new
    # one accelerator, where both are called, passed to each
    assert new.count("Accelerator()") == 1 and "def main():\n    accelerator = Accelerator()\n" in new
    assert "    distillation(student, teacher, loader, accelerator=accelerator)\n" in new
    assert "    accelerator.save(student.state_dict(), \"student.pt\")\n" in new
    assert codes(KD) == []


def test_the_same_functions_chosen_by_a_flag_each_prepare_what_they_are_handed() -> None:
    flagged = KD.replace(
        "    train_main(loader, teacher)\n    student = torch.nn.Linear(8, 3)\n    distillation(student, teacher, loader)\n",
        "    student = torch.nn.Linear(8, 3)\n    if len(__import__('sys').argv) > 1:\n"
        "        train_main(loader, teacher)\n    else:\n        distillation(student, teacher, loader)\n",
    )
    assert flagged != KD
    new = converted(flagged)
    # handed their models by ``main``, which makes the one accelerator (was ACC014); trainers a flag chooses that
    # build everything they train make their own (``test_trainer_choice.py``)
    assert new.count("accelerator = Accelerator()") == 1
    assert "        train_main(loader, teacher, accelerator=accelerator)\n" in new
    assert "    student, optimizer, loader = accelerator.prepare(student, optimizer, loader)\n" in new


def test_a_function_called_per_epoch_with_a_model_built_once_is_not_a_training_function() -> None:
    per_epoch = KD.replace("    distillation(student, teacher, loader)\n",
                           "    for _ in range(2):\n        distillation(student, teacher, loader, epochs=1)\n")
    assert per_epoch != KD
    # an optimizer built per epoch over the same student: prepared once it cannot be; refused as before (ACC014)
    assert [c.split(":")[0] for c in codes(per_epoch)] == ["ACC014"]


KFOLD = """import argparse

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Subset, TensorDataset


def evaluate(model, loader, device):
    model.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for x, y in loader:
            x, y = x.to(device), y.to(device)
            correct += (model(x).argmax(1) == y).sum().item()
            total += y.size(0)
    return correct / total


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--folds", type=int, default=3)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    torch.manual_seed(0)
    data = TensorDataset(torch.randn(120, 6), torch.randint(0, 2, (120,)))
    folds = np.array_split(np.arange(len(data)), args.folds)
    scores = []
    for k in range(args.folds):
        val_idx = folds[k]
        train_idx = np.concatenate([f for i, f in enumerate(folds) if i != k])
        train_loader = DataLoader(Subset(data, train_idx), batch_size=10, shuffle=True)
        val_loader = DataLoader(Subset(data, val_idx), batch_size=10)
        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
        criterion = nn.CrossEntropyLoss()
        for epoch in range(args.epochs):
            model.train()
            for x, y in train_loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss = criterion(model(x), y)
                loss.backward()
                optimizer.step()
            acc = evaluate(model, val_loader, device)
            print(f"fold {k} epoch {epoch} loss {loss.item():.4f} val acc {acc:.4f}")
        scores.append(acc)
        torch.save(model.state_dict(), f"fold{k}.pt")
    print(f"cv acc {np.mean(scores):.4f}")


if __name__ == "__main__":
    main()
"""


def test_a_fold_loop_that_builds_and_trains_its_model_prepares_each_fold() -> None:
    new = converted(KFOLD)
    # one accelerator before the folds; each fold's loaders where they are built, its model and optimizer after them
    assert new.count("Accelerator()") == 1 and "def main():\n    accelerator = Accelerator()\n" in new
    assert "        train_loader = accelerator.prepare(train_loader)\n" in new
    assert ("        optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)\n"
            "        model, optimizer = accelerator.prepare(model, optimizer)\n") in new
    assert "        accelerator.save(accelerator.unwrap_model(model).state_dict(), f\"fold{k}.pt\")\n" in new
    assert codes(KFOLD) == []


def test_an_optimizer_rebuilt_per_epoch_over_a_model_built_once_stays_refused() -> None:
    per_epoch = KFOLD.replace(
        "    for k in range(args.folds):\n", "    model = nn.Linear(6, 2)\n    for k in range(args.folds):\n"
    ).replace("        model = nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 2)).to(device)\n", "")
    assert per_epoch.count("model = ") == 1
    assert {c.split(":")[0] for c in codes(per_epoch)} == {"ACC007"}


LIST_OF_SAMPLES = dedent(
    """
    import torch
    from torch import nn


    def train_model(model, data, n_epochs):
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
        for epoch in range(n_epochs):
            model = model.train()
            for x in data:
                optimizer.zero_grad()
                loss = (model(x) - x).abs().sum()
                loss.backward()
                optimizer.step()
        return model.eval(), []


    if __name__ == "__main__":
        data = [torch.randn(20, 1) for _ in range(8)]
        model = nn.Linear(1, 1)
        model, history = train_model(model, data, 2)
        torch.save(model, "model.pth")
    """
)


def test_a_model_switched_to_train_mode_by_rebinding_is_still_the_one_handed_in() -> None:
    """N15's ``model = model.train()`` in the function that trains what it is handed: the name still holds the
    handed model, which is prepared there (was a false ACC014); the data a list walked one sample per step (ACC022:
    every process trains on all of it, true); and ``return model.eval(), history`` hands back the prepared model,
    so the whole-module save unwraps it (a pickled DDP wrapper cannot be loaded without a process group)."""
    new = converted(LIST_OF_SAMPLES)
    assert "    model, optimizer = accelerator.prepare(model, optimizer)\n" in new
    assert '    accelerator.save(accelerator.unwrap_model(model), "model.pth")\n' in new
    assert [c.split(":")[0] for c in codes(LIST_OF_SAMPLES)] == ["ACC022"]
