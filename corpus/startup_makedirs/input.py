"""Start-up side effects: output folders created if missing, the arguments written to a JSON file, checkpoints.

Imitates pytorch/examples fast_neural_style/neural_style.py: a `check_paths(args)` helper that creates the save and
checkpoint folders (`if not os.path.exists(d): os.makedirs(d)`, exiting on OSError), a subcommand parser, `train(args)`
that builds everything, periodic checkpoints inside the batch loop and a final save.
"""
import argparse
import json
import os
import sys

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class Denoiser(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Sequential(nn.Conv1d(1, 8, 5, padding=2), nn.ReLU(), nn.Conv1d(8, 1, 5, padding=2))

    def forward(self, x):
        return x - self.body(x)


def noisy_signals(n, seed):
    g = torch.Generator().manual_seed(seed)
    t = torch.linspace(0, 1, 32)
    clean = torch.sin(6.28 * (1 + 3 * torch.rand(n, 1, generator=g)) * t).unsqueeze(1)
    return TensorDataset(clean + 0.3 * torch.randn(n, 1, 32, generator=g), clean)


def check_paths(args):
    try:
        if not os.path.exists(args.save_model_dir):
            os.makedirs(args.save_model_dir)
        if args.checkpoint_model_dir is not None and not (os.path.exists(args.checkpoint_model_dir)):
            os.makedirs(args.checkpoint_model_dir)
    except OSError as e:
        print(e)
        sys.exit(1)


def train(args):
    device = torch.device("cuda" if args.cuda else "cpu")
    torch.manual_seed(args.seed)

    sample_dir = os.path.join(args.save_model_dir, "samples")
    if not os.path.isdir(sample_dir):
        os.mkdir(sample_dir)
    with open(os.path.join(args.save_model_dir, "args.json"), "w") as f:
        json.dump(vars(args), f, indent=2, sort_keys=True)

    train_loader = DataLoader(noisy_signals(480, seed=3), batch_size=args.batch_size, shuffle=True)
    fixed_noisy, _ = noisy_signals(4, seed=99)[:]
    fixed_noisy = fixed_noisy.to(device)
    denoiser = Denoiser().to(device)
    optimizer = torch.optim.Adam(denoiser.parameters(), args.lr)
    mse_loss = nn.MSELoss()

    for e in range(args.epochs):
        denoiser.train()
        agg_loss = 0.0
        count = 0
        for batch_id, (x, target) in enumerate(train_loader):
            n_batch = len(x)
            count += n_batch
            optimizer.zero_grad()
            x, target = x.to(device), target.to(device)
            loss = mse_loss(denoiser(x), target)
            loss.backward()
            optimizer.step()
            agg_loss += loss.item()
            if (batch_id + 1) % args.log_interval == 0:
                mesg = "Epoch {}:\t[{}/{}]\tloss: {:.6f}".format(e + 1, count, len(train_loader.dataset), agg_loss / (batch_id + 1))
                print(mesg)
            if args.checkpoint_model_dir is not None and (batch_id + 1) % args.checkpoint_interval == 0:
                denoiser.eval()
                ckpt_model_filename = "ckpt_epoch_" + str(e) + "_batch_id_" + str(batch_id + 1) + ".pth"
                ckpt_model_path = os.path.join(args.checkpoint_model_dir, ckpt_model_filename)
                torch.save(denoiser.state_dict(), ckpt_model_path)
                denoiser.train()
        denoiser.eval()
        with torch.no_grad():
            sample = denoiser(fixed_noisy)
        torch.save(sample, os.path.join(sample_dir, "sample_epoch_{}.pt".format(e + 1)))

    # save model
    denoiser.eval()
    save_model_path = os.path.join(args.save_model_dir, "epoch_" + str(args.epochs) + ".model")
    torch.save(denoiser.state_dict(), save_model_path)
    print("\nDone, trained model saved at", save_model_path)


def main():
    main_arg_parser = argparse.ArgumentParser(description="parser for the denoiser")
    subparsers = main_arg_parser.add_subparsers(title="subcommands", dest="subcommand")
    train_arg_parser = subparsers.add_parser("train", help="parser for training arguments")
    train_arg_parser.add_argument("--epochs", type=int, default=2)
    train_arg_parser.add_argument("--batch-size", type=int, default=16)
    train_arg_parser.add_argument("--save-model-dir", type=str, default="saved_models")
    train_arg_parser.add_argument("--checkpoint-model-dir", type=str, default=None)
    train_arg_parser.add_argument("--checkpoint-interval", type=int, default=10)
    train_arg_parser.add_argument("--lr", type=float, default=3e-3)
    train_arg_parser.add_argument("--log-interval", type=int, default=5)
    train_arg_parser.add_argument("--seed", type=int, default=42)
    train_arg_parser.add_argument("--cuda", type=int, default=0, help="set it to 1 for running on GPU, 0 for CPU")
    args = main_arg_parser.parse_args()

    if args.subcommand is None:
        print("ERROR: specify either train or eval")
        sys.exit(1)
    if args.cuda and not torch.cuda.is_available():
        print("ERROR: cuda is not available, try running on CPU")
        sys.exit(1)

    if args.subcommand == "train":
        check_paths(args)
        train(args)


if __name__ == "__main__":
    main()
