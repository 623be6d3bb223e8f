"""A tiny character-bigram language model trained with AdamW, per-step OneCycleLR and gradient clipping."""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator

TEXT = (
    "the quick brown fox jumps over the lazy dog while the cat sleeps on the warm mat "
    "and the bird sings in the tall green tree near the quiet river bank "
) * 6


def build_dataset(text, context):
    vocab = sorted(set(text))
    stoi = {ch: i for i, ch in enumerate(vocab)}
    ids = torch.tensor([stoi[ch] for ch in text])
    windows = ids.unfold(0, context + 1, 1)
    return TensorDataset(windows[:, :-1], windows[:, 1:]), len(vocab)


class TinyLM(nn.Module):
    def __init__(self, vocab_size, dim=24):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.mix = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, idx):
        h = torch.tanh(self.mix(self.embed(idx)))
        return self.head(h)


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--max-lr", type=float, default=0.02)
    parser.add_argument("--context", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(42)
    dataset, vocab_size = build_dataset(TEXT, args.context)
    train_loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)

    model = TinyLM(vocab_size)
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.max_lr, weight_decay=0.05)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(
        optimizer, max_lr=args.max_lr, total_steps=args.epochs * len(train_loader), pct_start=0.3
    )
    model, optimizer, train_loader, scheduler = accelerator.prepare(
        model, optimizer, train_loader, scheduler
    )

    step = 0
    for epoch in range(args.epochs):
        model.train()
        for inputs, targets in train_loader:
            logits = model(inputs)
            loss = F.cross_entropy(logits.view(-1, vocab_size), targets.view(-1))
            optimizer.zero_grad()
            accelerator.backward(loss)
            accelerator.clip_grad_norm_(model.parameters(), max_norm=1.0)
            optimizer.step()
            scheduler.step()
            if step % 10 == 0:
                accelerator.print(f"step {step} lr {scheduler.get_last_lr()[0]:.6f} loss {loss.item():.5f}")
            step += 1
    accelerator.print(f"final lr {scheduler.get_last_lr()[0]:.6f}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
