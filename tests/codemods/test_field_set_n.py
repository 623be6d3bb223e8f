"""Set N's evaluation shape (N4, a dependency parser): a loader of one unpadded sentence per batch, evaluated by
decoding each sentence's scores on the CPU and counting the heads found. Gathered, the processes' sentences have
other lengths (the gather fails) and ``scores[0]`` reads process 0's alone; the counts were reduced instead, as
NumPy numbers, until the sixteenth stop: the last round of such a loader is completed with duplicates, which the
reduced counts counted again (set W's W7). Such a loader, walked only by evaluation, is now left out of ``prepare``."""

from __future__ import annotations

from _convert import codes, converted, dedent

PARSER = dedent(
    """
    import torch
    from torch.utils.data import DataLoader


    def decode(scores):
        return scores.argmax(axis=1)


    def predict(net, loader):
        net.eval()
        correct, total = 0, 0
        with torch.no_grad():
            for words, heads in loader:
                scores = net(words)
                pred = decode(scores[0].cpu().numpy())
                gold = heads[0].numpy()
                correct += (pred == gold).sum()
                total += len(gold)
        return correct / total


    def train(net, train_loader, test_loader, epochs):
        optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
        for epoch in range(epochs):
            for words, heads in train_loader:
                loss = torch.nn.functional.cross_entropy(net(words)[0], heads[0])
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            print(f"epoch {epoch} uas {predict(net, test_loader):.4f}")


    if __name__ == "__main__":
        data = [(torch.randint(0, 50, (n,)), torch.randint(0, n, (n,))) for n in (3, 5, 4, 6)]
        net = torch.nn.Sequential(torch.nn.Embedding(50, 8), torch.nn.Linear(8, 8))
        train_loader, test_loader = DataLoader(data, batch_size=1), DataLoader(data, batch_size=1)
        train(net, train_loader, test_loader, 2)
    """
)


def test_a_loop_that_takes_each_batch_for_one_sample_walks_its_loader_whole() -> None:
    new = converted(PARSER)
    assert "gather_for_metrics" not in new and "accelerator.reduce" not in new, new
    assert "    net, optimizer, train_loader = accelerator.prepare(net, optimizer, train_loader)\n" in new, new
    assert codes(PARSER) == []


def test_the_counts_of_such_a_loop_over_a_prepared_loader_are_reduced() -> None:
    """Walked by the training too (here: the accuracy on the training loader), it is prepared: the counts are reduced
    as NumPy numbers (a float64 tensor given its type back)."""
    shared = PARSER.replace("predict(net, test_loader)", "predict(net, train_loader)")
    assert shared != PARSER
    new = converted(shared)
    assert "gather_for_metrics" not in new
    assert ("        correct = type(correct)(accelerator.reduce(torch.tensor(correct, dtype=torch.float64, "
            "device=accelerator.device), \"sum\").item())\n") in new, new


def test_the_same_loop_over_whole_batches_still_gathers() -> None:
    whole = PARSER.replace("pred = decode(scores[0].cpu().numpy())", "pred = scores.argmax(-1)").replace(
        "gold = heads[0].numpy()", "gold = heads").replace("total += len(gold)", "total += gold.numel()").replace(
        "batch_size=1", "batch_size=2")  # (batches of one sample are counted per process: the test below)
    assert whole != PARSER
    assert "scores, heads = accelerator.gather_for_metrics((scores, heads))" in converted(whole)


def test_a_second_name_for_a_batch_part_bound_after_the_forward_is_not_gathered_before_it_exists() -> None:
    """``gold = heads`` after ``scores = net(words)``: the gather right after the forward took ``gold`` too, read
    before the loop had bound it (an UnboundLocalError at the first batch); it is made from the gathered ``heads``."""
    whole = PARSER.replace("pred = decode(scores[0].cpu().numpy())", "pred = scores.argmax(-1)").replace(
        "gold = heads[0].numpy()", "gold = heads").replace("batch_size=1", "batch_size=2")
    assert "scores, heads = accelerator.gather_for_metrics((scores, heads))\n" in converted(whole)


N4_SLICED = """import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Sentences(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            length = int(torch.randint(3, 8, (1,), generator=g))
            words = torch.randint(0, 50, (length,), generator=g)
            heads = torch.randint(0, length, (length,), generator=g)
            self.items.append((words, heads))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Parser(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 16)
        self.dep = nn.Linear(32, 16)

    def forward(self, words):
        h, _ = self.lstm(self.emb(words))
        return self.head(h) @ self.dep(h).transpose(1, 2)  # [1, L, L]


def predict_dep(scores):                     # N4: one decoding per sentence of the batch
    return np.array([m.cpu().detach().numpy().argmax(axis=0) for m in scores])


def predict(net, loader):
    net.eval()
    correct, total = 0, 0
    with torch.no_grad():
        for words, heads in loader:
            scores = net(words)
            pred = predict_dep(scores)[:, 1:]   # N4: sliced, not scores[0]
            gold = heads.numpy()[:, 1:]
            correct += np.sum(gold == pred)
            total += pred.size
    return correct / total


def train(net, train_loader, test_loader, epochs):
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        net.train()
        for words, heads in train_loader:
            scores = net(words)
            loss = loss_fn(scores[0], heads[0])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f} uas {predict(net, test_loader):.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    train_loader = DataLoader(Sentences(40, 1), shuffle=True)
    test_loader = DataLoader(Sentences(12, 2))
    net = Parser()
    train(net, train_loader, test_loader, 2)
"""


def test_batches_of_one_sentence_sliced_and_counted_with_numpy_are_reduced() -> None:
    """N4 itself slices the batch (``predict_dep(scores)[:, 1:]``, a helper returning ``np.array``) and counts with
    ``np.sum``/``.size``; its loaders give one sentence per batch (no ``batch_size``). Gathered, the sentences' shapes
    differ (crash); the counts are reduced instead."""
    new = converted(N4_SLICED)
    assert "gather_for_metrics" not in new
    assert "        total = accelerator.reduce(torch.tensor(total, device=accelerator.device), \"sum\").item()\n" in new
    assert codes(N4_SLICED) == []


N4_EVAL_LOSS = """import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, Dataset


class Sentences(Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.items = []
        for _ in range(n):
            length = int(torch.randint(3, 8, (1,), generator=g))
            words = torch.randint(0, 50, (length,), generator=g)
            heads = torch.randint(0, length, (length,), generator=g)
            self.items.append((words, heads))

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return self.items[i]


class Parser(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(50, 16)
        self.lstm = nn.LSTM(16, 16, batch_first=True, bidirectional=True)
        self.head = nn.Linear(32, 16)
        self.dep = nn.Linear(32, 16)

    def forward(self, words):
        h, _ = self.lstm(self.emb(words))
        return self.head(h) @ self.dep(h).transpose(1, 2)  # [1, L, L]


def predict_dep(scores):                     # N4: one decoding per sentence of the batch
    return np.array([m.cpu().detach().numpy().argmax(axis=0) for m in scores])


def loss_func(scores, heads):                # N4: the loss of the whole batch (its one sentence)
    return nn.functional.cross_entropy(scores.squeeze(0), heads.squeeze(0))


def predict(net, loader):
    net.eval()
    correct, total, loss = 0, 0, 0
    with torch.no_grad():
        for words, heads in loader:
            scores = net(words)
            loss += loss_func(scores, heads).item()   # N4's evaluation loss
            pred = predict_dep(scores)[:, 1:]   # N4: sliced, not scores[0]
            gold = heads.numpy()[:, 1:]
            correct += np.sum(gold == pred)
            total += pred.size
    return correct / total


def train(net, train_loader, test_loader, epochs):
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-2)
    loss_fn = nn.CrossEntropyLoss()
    for epoch in range(epochs):
        net.train()
        for words, heads in train_loader:
            scores = net(words)
            loss = loss_fn(scores[0], heads[0])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch} loss {loss.item():.4f} uas {predict(net, test_loader):.4f}")


if __name__ == "__main__":
    torch.manual_seed(0)
    train_loader = DataLoader(Sentences(40, 1), shuffle=True)
    test_loader = DataLoader(Sentences(12, 2))
    net = Parser()
    train(net, train_loader, test_loader, 2)
"""


def test_batches_of_one_sentence_with_an_evaluation_loss_nothing_reads_are_still_reduced() -> None:
    """N4's evaluation also sums ``loss_func(scores, headers).item()`` (never read after the loop): the loop's own
    loss sent it to the gather after the loss (crash), before the batch-of-one check; that sum decides nothing."""
    new = converted(N4_EVAL_LOSS)
    assert "gather_for_metrics" not in new
    assert "        total = accelerator.reduce(torch.tensor(total, device=accelerator.device), \"sum\").item()\n" in new


VOCABULARY_PICKLED = dedent(
    """
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    class Vocabulary:
        def __init__(self, words):
            self.words = words

        def save(self, path):
            torch.save(self, path)


    def main():
        vocab = Vocabulary(["a", "b"])
        loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        vocab.save("vocab.pkl")


    if __name__ == "__main__":
        main()
    """
)


def test_a_class_that_pickles_itself_is_not_given_the_accelerator_as_an_attribute() -> None:
    """N4's vocabulary (``torch.save(self, path)``): threading stored ``self.accelerator`` on it, and the pickle of the
    object then failed ('cannot pickle weakref'). The object keeps nothing of the accelerator."""
    new = converted(VOCABULARY_PICKLED)
    assert "self.accelerator" not in new


EMA_COPY = dedent(
    """
    import copy
    import torch
    from torch.utils.data import DataLoader, TensorDataset


    class EMA:
        def __init__(self, model, decay=0.9):
            self.ema = copy.deepcopy(model)
            self.decay = decay


    def main():
        loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)
        model = torch.nn.Linear(2, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        ema = EMA(model)
        target = copy.deepcopy(model)
        for x, y in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        torch.save(ema.ema.state_dict(), "ema.pt")


    if __name__ == "__main__":
        main()
    """
)


def test_a_copy_of_the_prepared_model_copies_the_module_not_its_wrapper() -> None:
    """N8's ``ModelEMA(model)`` (``copy.deepcopy(model)`` in its constructor), made after ``prepare``: the copy was of
    the DDP wrapper, its checkpoint keys ``module.*``, and the ``strict=False`` load of it restored nothing, silently."""
    new = converted(EMA_COPY)
    assert "    ema = EMA(accelerator.unwrap_model(model))\n" in new
    assert "    target = copy.deepcopy(accelerator.unwrap_model(model))\n" in new


FILE_NAMES = dedent(
    """
    import torch
    from torch.utils.data import DataLoader, Dataset


    class Test(Dataset):
        def __len__(self):
            return 20

        def __getitem__(self, i):
            return f"img_{i}.png", torch.randn(8)


    def predict(model, loader):
        names_all, probs_all = [], []
        with torch.no_grad():
            for names, x in loader:
                logits = model(x)
                names_all.extend(list(names))
                probs_all.append(torch.sigmoid(logits))
        return names_all, torch.cat(probs_all)


    def main():
        train_loader = DataLoader([(torch.randn(8), torch.randn(2)) for _ in range(16)], batch_size=4)
        test_loader = DataLoader(Test(), batch_size=8)
        model = torch.nn.Linear(8, 2)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        for x, y in train_loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        names, probs = predict(model, test_loader)
        print(len(names), tuple(probs.shape))


    if __name__ == "__main__":
        main()
    """
)


def test_a_batch_part_of_file_names_is_gathered_as_objects_on_its_own() -> None:
    """N8's test prediction: ``for names, x in loader`` (file names and images). Gathered in one tuple with the
    logits, the tuple went through ``gather_object`` whole and its parts came back flattened together (a crash at
    the unpacking); the names are gathered on their own, as objects."""
    new = converted(FILE_NAMES)
    assert "            logits = accelerator.gather_for_metrics(logits)\n" in new
    assert "            names = accelerator.gather_for_metrics(names, use_gather_object=True)\n" in new
