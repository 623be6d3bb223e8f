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


# helper R5's re-run of set N's real programs (after the first fixes): the layouts the shapes above had missed

N9_EPOCH_HELPER = """import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self, width=16):
        super().__init__()
        self.fc1 = nn.Linear(8, width)
        self.fc2 = nn.Linear(width, 3)

    def forward(self, x):
        return self.fc2(F.relu(self.fc1(x)))


def train_model(loader, model, optimizer, device):      # one epoch, N9's train_model
    model.train()
    for x, y in loader:
        x, y = x.to(device), y.to(device)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item()


def train_main(loader, model, device, epochs=2):        # N9's train_main: builds its Adam, calls the epoch helper
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    for epoch in range(epochs):
        print("main", epoch, train_model(loader, model, optimizer, device))


def distillation(student, teacher, loader, device, epochs=2, T=2.0):
    optimizer = torch.optim.Adam(student.parameters(), lr=1e-2)
    teacher.eval()
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
    ds = TensorDataset(torch.randn(256, 8), torch.randint(0, 3, (256,)))
    loader = DataLoader(ds, batch_size=16, shuffle=True)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    teacher = Net(64).to(device)
    train_main(loader, teacher, device)
    student = Net(8).to(device)
    distillation(student, teacher, loader, device)


if __name__ == "__main__":
    main()
"""


def test_a_training_function_whose_batch_loop_is_in_a_per_epoch_helper_prepares_the_loader_it_hands_on() -> None:
    """N9's ``train_main`` builds its Adam and calls ``train_model(loader, model, optimizer, device)`` once per epoch:
    the loader it hands on is its to prepare (was a false ACC020 'walks it as it was before prepare')."""
    new = converted(N9_EPOCH_HELPER)
    assert "    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n" in new
    assert "    student, optimizer, loader = accelerator.prepare(student, optimizer, loader)\n" in new
    assert codes(N9_EPOCH_HELPER) == []


FOLD_FACTORY = """import argparse

import numpy as np
import torch
import torch.nn as nn

from torch.utils.data import DataLoader, Subset, TensorDataset


def create_backbone(num_classes):
    model = make_model(num_classes)
    return model


def make_model(num_classes):
    return nn.Linear(6, num_classes)


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
        model = create_backbone(2).to(device)
        refiner = nn.Linear(2, 2).to(device)               # N8: LabelGraphRefiner on the logits
        optimizer = torch.optim.Adam(list(model.parameters()) + list(refiner.parameters()), lr=1e-2)
        criterion = nn.CrossEntropyLoss()
        for epoch in range(args.epochs):
            model.train()
            for x, y in train_loader:
                x, y = x.to(device), y.to(device)
                optimizer.zero_grad()
                loss = criterion(refiner(model(x)), y)
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


def test_a_fold_loop_whose_model_comes_from_a_factory_prepares_each_fold() -> None:
    """N8's ``model = create_backbone(2).to(device)`` (a factory returning what a library builds) and a refiner both
    trained by the fold's optimizer: a training per pass, as with the model built inline (was ACC007 x2)."""
    new = converted(FOLD_FACTORY)
    assert "        model, refiner, optimizer = accelerator.prepare(model, refiner, optimizer)\n" in new
    assert codes(FOLD_FACTORY) == []


DEAD_CALLER = LIST_OF_SAMPLES + dedent(
    """


    def experiment(dims, data):
        for d in dims:
            model, history = train_model(nn.Linear(1, 1), data, 2)
    """
)


def test_a_second_caller_nothing_runs_does_not_decide_what_the_training_function_holds() -> None:
    """N15's ``experiment_embedding_dims`` (its call commented out) calls the training function with its own
    parameter: the data was then 'not followed' (ACC021) and the accelerator could not reach the function. The caller
    nothing runs is left as it is."""
    new = converted(DEAD_CALLER)
    assert "    model, optimizer = accelerator.prepare(model, optimizer)\n" in new
    assert "        model, history = train_model(nn.Linear(1, 1), data, 2)\n" in new
    assert [c.split(":")[0] for c in codes(DEAD_CALLER)] == ["ACC022"]
