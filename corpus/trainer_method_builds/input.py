"""A trainer class as many authors write it: the model is built in __init__, and train() builds the data
loaders (kept on self) and the optimizer, then runs the epochs; evaluation() walks the test loader with the model
and returns the per-sample predictions, from which the accuracy is computed against the test labels."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


class Classifier(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.hidden = nn.Linear(8, hidden)
        self.out = nn.Linear(hidden, 1)

    def forward(self, x):
        return torch.sigmoid(self.out(torch.relu(self.hidden(x))))


class Execute:
    def __init__(self, args):
        self.args = args
        weights = torch.randn(8, 1)
        self.x_train = torch.randn(96, 8)
        self.y_train = (self.x_train @ weights > 0).float()
        self.x_test = torch.randn(50, 8)
        self.y_test = (self.x_test @ weights > 0).float()
        self.model = Classifier(args.hidden)

    def train(self):
        training_set = TensorDataset(self.x_train, self.y_train)
        test_set = TensorDataset(self.x_test, self.y_test)
        self.loader_training = DataLoader(training_set, batch_size=self.args.batch_size)
        self.loader_test = DataLoader(test_set, batch_size=8)
        optimizer = torch.optim.RMSprop(self.model.parameters(), lr=self.args.lr)
        print("before training test_accuracy %.5f" % self.calculate_accuracy(self.y_test, self.evaluation()))
        for epoch in range(self.args.epochs):
            self.model.train()
            for x_batch, y_batch in self.loader_training:
                y_pred = self.model(x_batch)
                loss = F.binary_cross_entropy(y_pred, y_batch)
                optimizer.zero_grad()
                loss.backward()
                optimizer.step()
            test_predictions = self.evaluation()
            test_accuracy = self.calculate_accuracy(self.y_test, test_predictions)
            print("epoch %d loss %.5f test_accuracy %.5f" % (epoch + 1, loss.item(), test_accuracy))

    @staticmethod
    def calculate_accuracy(labels, predictions):
        right = 0
        for true, pred in zip(labels, predictions):
            if (pred > 0.5) == (true == 1):
                right += 1
        return right / len(labels)

    def evaluation(self):
        predictions = []
        self.model.eval()
        with torch.no_grad():
            for x_batch, y_batch in self.loader_test:
                y_pred = self.model(x_batch)
                predictions += list(y_pred.squeeze(1).tolist())
        return predictions


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.01)
    args = parser.parse_args()
    torch.manual_seed(0)
    execute = Execute(args)
    execute.train()
