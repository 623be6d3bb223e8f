# Shape (field set J, J3 (d)): a metric object of the program's own class fed at every batch of a loop over the
# training loader, adding what it is fed to its attributes, read after the epoch: siamese-triplet's
# AccumulatedAccuracyMetric. On N processes it holds one process's share: the conversion reports it (ACC028).
import torch
from torch.utils.data import DataLoader, TensorDataset


class AccumulatedAccuracy:
    """Counts the correct predictions it is fed, batch after batch."""

    def __init__(self):
        self.correct = 0
        self.total = 0

    def __call__(self, outputs, target):
        self.correct += (outputs.argmax(1) == target).sum().item()
        self.total += target.size(0)

    def value(self):
        return 100.0 * self.correct / self.total


torch.manual_seed(0)
loader = DataLoader(TensorDataset(torch.randn(64, 4), torch.randint(0, 2, (64,))), batch_size=8)
model = torch.nn.Linear(4, 2)
optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
for epoch in range(2):
    metric = AccumulatedAccuracy()
    for x, y in loader:
        optimizer.zero_grad()
        outputs = model(x)
        torch.nn.functional.cross_entropy(outputs, y).backward()
        optimizer.step()
        metric(outputs, y)
    print(f"epoch {epoch} accuracy {metric.value():.2f}")
