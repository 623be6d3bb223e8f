"""A character-level language model that samples text with its own `model.generate(...)` after every epoch.

Imitates minGPT's projects/chargpt and karpathy/makemore: a CharDataset of (block, next-block) index pairs, a small
recurrent model with a `generate(idx, max_new_tokens)` method, a validation loss in nats per character, and a greedy
sample printed from a fixed prompt.
"""
import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data import DataLoader, Dataset
from accelify.runtime import Accelerator

WORDS = ["the", "cat", "sat", "on", "a", "mat", "and", "dog", "ran", "to", "its", "red", "ball"]


class CharDataset(Dataset):
    """Emits batches of characters"""

    def __init__(self, data, block_size):
        chars = sorted(list(set(data)))
        self.stoi = {ch: i for i, ch in enumerate(chars)}
        self.itos = {i: ch for i, ch in enumerate(chars)}
        self.vocab_size = len(chars)
        self.block_size = block_size
        self.data = data

    def __len__(self):
        return len(self.data) - self.block_size

    def __getitem__(self, idx):
        # grab a chunk of (block_size + 1) characters from the data
        chunk = self.data[idx:idx + self.block_size + 1]
        # encode every character to an integer
        dix = [self.stoi[s] for s in chunk]
        # return as tensors
        x = torch.tensor(dix[:-1], dtype=torch.long)
        y = torch.tensor(dix[1:], dtype=torch.long)
        return x, y


class CharRNN(nn.Module):
    def __init__(self, vocab_size, n_embd=16, n_hidden=48):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.rnn = nn.GRU(n_embd, n_hidden, batch_first=True)
        self.lm_head = nn.Linear(n_hidden, vocab_size)

    def forward(self, idx):
        h, _ = self.rnn(self.wte(idx))
        return self.lm_head(h)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens):
        """Take a conditioning sequence of indices idx (LongTensor of shape (b,t)) and complete it greedily."""
        for _ in range(max_new_tokens):
            logits = self(idx)[:, -1, :]
            idx_next = logits.argmax(dim=-1, keepdim=True)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def make_text(n_words, seed):
    g = torch.Generator().manual_seed(seed)
    picks = torch.randint(0, len(WORDS), (n_words,), generator=g).tolist()
    return " ".join(WORDS[i] for i in picks) + " "


def main():
    accelerator = Accelerator()
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--block-size", type=int, default=12)
    parser.add_argument("--batch-size", type=int, default=32)
    args = parser.parse_args()

    torch.manual_seed(42)
    device = accelerator.device
    text = make_text(160, seed=1)
    split = int(0.9 * len(text))
    train_dataset = CharDataset(text[:split], args.block_size)
    val_dataset = CharDataset(text[split:], args.block_size)
    val_dataset.stoi, val_dataset.itos = train_dataset.stoi, train_dataset.itos
    train_loader = DataLoader(train_dataset, batch_size=args.batch_size, shuffle=True)
    val_loader = DataLoader(val_dataset, batch_size=args.batch_size)

    model = CharRNN(train_dataset.vocab_size)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )

    def evaluate():
        model.eval()
        loss_sum, n_chars = 0.0, 0
        with torch.no_grad():
            for x, y in val_loader:
                logits = model(x)
                logits, y = accelerator.gather_for_metrics((logits, y))
                loss_sum += F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1), reduction="sum").item()
                n_chars += y.numel()
        model.train()
        return loss_sum / n_chars

    accelerator.print(f"val loss before training {evaluate():.4f} nats/char")
    prompt = "the "
    for epoch in range(args.epochs):
        for it, (x, y) in enumerate(train_loader):
            logits = model(x)
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), y.reshape(-1))
            model.zero_grad(set_to_none=True)
            accelerator.backward(loss)
            optimizer.step()
            if it % 6 == 0:
                accelerator.print(f"epoch {epoch} iter {it}: train loss {loss.item():.5f}")
        context = torch.tensor([[train_dataset.stoi[s] for s in prompt]], dtype=torch.long, device=device)
        y = model.generate(context, max_new_tokens=24)[0]
        completion = "".join(train_dataset.itos[int(i)] for i in y)
        accelerator.print(f"epoch {epoch} val loss {evaluate():.4f} sample: {completion!r}")
    accelerator.end_training()


if __name__ == "__main__":
    main()
