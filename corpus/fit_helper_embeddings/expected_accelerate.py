"""siamese-triplet's MNIST notebook in one script: a `fit` helper module with a per-epoch StepLR (and a resume
catch-up loop), the embedding network trained under a second name (`model = embedding_net`), and the embeddings
extracted into arrays sized by the data set, walking a loader with the model's own `get_embedding` method."""
import argparse

import numpy as np
import torch
from torch import nn
from torch.optim import lr_scheduler
from torch.utils.data import DataLoader, TensorDataset

from trainer import fit
from accelerate import Accelerator

accelerator = Accelerator()
parser = argparse.ArgumentParser()
parser.add_argument("--epochs", type=int, default=4)
args = parser.parse_args()


class EmbeddingNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Sequential(nn.Linear(8, 16), nn.PReLU(), nn.Linear(16, 2))

    def forward(self, x):
        return self.fc(x)

    def get_embedding(self, x):
        return self.forward(x)


def extract_embeddings(dataloader, model):
    with torch.no_grad():
        model.eval()
        embeddings = np.zeros((len(dataloader.dataset), 2))
        labels = np.zeros(len(dataloader.dataset))
        k = 0
        for images, target in dataloader:
            output = accelerator.unwrap_model(model).get_embedding(images)
            output, target, images = accelerator.gather_for_metrics((output, target, images))
            embeddings[k:k + len(images)] = output.numpy()
            labels[k:k + len(images)] = target.cpu().numpy()
            k += len(images)
    return embeddings, labels


def summary(embeddings, labels):
    zero_rows = int((np.abs(embeddings).sum(1) == 0).sum())
    return "mean {:.4f} zero rows {} labels {:.0f}".format(embeddings.mean(), zero_rows, labels.sum())


torch.manual_seed(0)
train_set = TensorDataset(torch.randn(128, 8), torch.randint(0, 2, (128,)))
test_set = TensorDataset(torch.randn(64, 8), torch.randint(0, 2, (64,)))
train_loader = DataLoader(train_set, batch_size=16, shuffle=True)
test_loader = DataLoader(test_set, batch_size=16)

embedding_net = EmbeddingNet()
model = embedding_net
optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
model, optimizer, train_loader, test_loader = accelerator.prepare(
    model, optimizer, train_loader, test_loader
)
scheduler = lr_scheduler.StepLR(optimizer, 2, gamma=0.1)
embeddings, labels = extract_embeddings(test_loader, model)
accelerator.print("before training test embeddings " + summary(embeddings, labels))
fit(train_loader, model, nn.CrossEntropyLoss(), optimizer, scheduler, args.epochs, accelerator=accelerator)
embeddings, labels = extract_embeddings(test_loader, model)
accelerator.print("after training test embeddings " + summary(embeddings, labels))
accelerator.end_training()
