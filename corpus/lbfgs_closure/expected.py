"""L-BFGS with a closure, pytorch/examples time_sequence_prediction/train.py style, on mini-batches of sine waves.

The two-layer LSTMCell model, `seq.double()`, `optim.LBFGS(seq.parameters(), lr=0.8)`, the closure that zeroes the
gradients, prints the loss, calls backward and returns the loss, and the no-grad prediction of the test waves follow
the example; the training waves come from a DataLoader, two batches per step, as in the forum recipes for mini-batch
L-BFGS. The example never picks a device: everything runs on the CPU.
"""
import argparse

import torch
import torch.nn as nn
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


class Sequence(nn.Module):
    def __init__(self, hidden=16):
        super(Sequence, self).__init__()
        self.hidden = hidden
        self.lstm1 = nn.LSTMCell(1, hidden)
        self.lstm2 = nn.LSTMCell(hidden, hidden)
        self.linear = nn.Linear(hidden, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), self.hidden, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


def sine_waves(n, length, seed):
    g = torch.Generator().manual_seed(seed)
    shifts = torch.randint(-20, 20, (n, 1), generator=g).double()
    t = torch.arange(length, dtype=torch.double)[None, :] + shifts
    return torch.sin(t / 4.0)


if __name__ == '__main__':
    accelerator = Accelerator(cpu=True)
    parser = argparse.ArgumentParser()
    parser.add_argument('--steps', type=int, default=2, help='steps to run')
    parser.add_argument('--seed', type=int, default=0)
    opt = parser.parse_args()
    # set random seed to 0
    torch.manual_seed(opt.seed)
    # load data and make training set
    data = sine_waves(35, 21, seed=1)
    train_set = TensorDataset(data[3:, :-1], data[3:, 1:])
    loader = DataLoader(train_set, batch_size=16, shuffle=True)
    test_input = data[:3, :-1]
    test_target = data[:3, 1:]
    # build the model
    seq = Sequence()
    seq.double()
    criterion = nn.MSELoss()
    # use LBFGS as optimizer since we can load the whole data to train
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=6, tolerance_change=1e-4)
    seq, optimizer, loader = accelerator.prepare(seq, optimizer, loader)
    #begin to train
    for i in range(opt.steps):
        accelerator.print('STEP: ', i)
        for input, target in loader:
            def closure():
                optimizer.zero_grad()
                out = seq(input)
                loss = criterion(out, target)
                accelerator.print('loss: %.8f' % loss.item())
                accelerator.backward(loss)
                return accelerator.reduce(loss.detach(), "mean")
            optimizer.step(closure)
        # begin to predict, no need to track gradient here
        with torch.no_grad():
            future = 10
            pred = seq(test_input, future=future)
            loss = criterion(pred[:, :-future], test_target)
            accelerator.print('test loss: %.8f' % loss.item())
    accelerator.end_training()
