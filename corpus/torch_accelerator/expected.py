"""The PyTorch quickstart's structure (device from torch.accelerator), on synthetic 8x8 "clothing" images."""
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

accelerator = Accelerator()
torch.manual_seed(0)


def fake_fashion(n, seed):
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(n, 1, 8, 8, generator=g)
    labels = images.flatten(1)[:, :10].argmax(dim=1)  # the brightest of the first ten pixels
    return TensorDataset(images, labels)


training_data = fake_fashion(600, seed=1)
test_data = fake_fashion(200, seed=2)

batch_size = 50

# Create data loaders.
train_dataloader = DataLoader(training_data, batch_size=batch_size)
test_dataloader = DataLoader(test_data, batch_size=batch_size)

device = accelerator.device
accelerator.print(f"Using {device} device")


# Define model
class NeuralNetwork(nn.Module):
    def __init__(self):
        super().__init__()
        self.flatten = nn.Flatten()
        self.linear_relu_stack = nn.Sequential(
            nn.Linear(8 * 8, 64),
            nn.ReLU(),
            nn.Linear(64, 64),
            nn.ReLU(),
            nn.Linear(64, 10),
        )

    def forward(self, x):
        x = self.flatten(x)
        logits = self.linear_relu_stack(x)
        return logits


model = NeuralNetwork()
loss_fn = nn.CrossEntropyLoss()
optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
model, optimizer, train_dataloader, test_dataloader = accelerator.prepare(
    model, optimizer, train_dataloader, test_dataloader
)


def train(dataloader, model, loss_fn, optimizer):
    size = len(dataloader.dataset)
    model.train()
    for batch, (X, y) in enumerate(dataloader):
        # Compute prediction error
        pred = model(X)
        loss = loss_fn(pred, y)

        # Backpropagation
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

        if batch % 4 == 0:
            loss, current = loss.item(), (batch + 1) * len(X)
            accelerator.print(f"loss: {loss:>7f}  [{current:>5d}/{size:>5d}]")


def test(dataloader, model, loss_fn):
    size = len(dataloader.dataset)
    num_batches = len(dataloader.batch_sampler.batch_sampler)
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for X, y in dataloader:
            pred = model(X)
            pred, y = accelerator.gather_for_metrics((pred, y))
            for pred, y in zip(pred.split(dataloader.batch_sampler.batch_size), y.split(dataloader.batch_sampler.batch_size)):
                test_loss += loss_fn(pred, y).item()
                correct += (pred.argmax(1) == y).type(torch.float).sum().item()
    test_loss /= num_batches
    correct /= size
    accelerator.print(f"Test Error: \n Accuracy: {(100*correct):>0.1f}%, Avg loss: {test_loss:>8f} \n")


epochs = 3
for t in range(epochs):
    accelerator.print(f"Epoch {t+1}\n-------------------------------")
    train(train_dataloader, model, loss_fn, optimizer)
    test(test_dataloader, model, loss_fn)
accelerator.print("Done!")

accelerator.wait_for_everyone()
accelerator.save(accelerator.unwrap_model(model).state_dict(), "model.pth")
accelerator.print("Saved PyTorch Model State to model.pth")
accelerator.end_training()
