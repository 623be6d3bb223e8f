"""The training and evaluation loops, shared by the training scripts of the project."""
import torch
import torch.nn.functional as F


def train_epoch(model, loader, optimizer, accelerator):
    model.train()
    running = 0.0
    for images, labels in loader:
        optimizer.zero_grad()
        loss = F.cross_entropy(model(images), labels)
        accelerator.backward(loss)
        optimizer.step()
        running += loss.item()
    running = accelerator.reduce(torch.tensor(running, dtype=torch.float64, device=accelerator.device), "mean").item()
    return running / len(loader)


@torch.no_grad()
def evaluate(model, loader, accelerator):
    model.eval()
    correct = total = 0
    loss_sum = 0.0
    for images, labels in loader:
        logits = model(images)
        logits, labels = accelerator.gather_for_metrics((logits, labels))
        loss_sum += F.cross_entropy(logits, labels, reduction="sum").item()
        correct += (logits.argmax(1) == labels).sum().item()
        total += labels.size(0)
    return loss_sum / total, correct / total


def fit(model, train_dl, test_dl, optimizer, scheduler, epochs, accelerator):
    val_acc = 0.0
    for epoch in range(epochs):
        train_loss = train_epoch(model, train_dl, optimizer, accelerator)
        scheduler.step()
        val_loss, val_acc = evaluate(model, test_dl, accelerator)
        accelerator.print(f"epoch {epoch} train_loss {train_loss:.5f} val_loss {val_loss:.5f} val_acc {val_acc:.4f}")
    return val_acc
