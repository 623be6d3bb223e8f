"""Segmentation training, milesial/Pytorch-UNet train.py style, with a retry on out-of-memory.

The model is built under `if __name__ == "__main__":` and passed with the device to `train_model(model, device,
...)`, which builds the dataset split, the loaders, the optimizer, a ReduceLROnPlateau on the validation Dice score
and runs the epochs with a tqdm bar; batches are converted with `.to(device=device, dtype=..., memory_format=...)`.
If training runs out of memory, the script enables checkpointing on the model (`model.use_checkpointing()`) and
trains again.
"""
import argparse
import os
from pathlib import Path

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch import optim
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, TensorDataset, random_split
from tqdm import tqdm
from accelify.runtime import Accelerator

dir_checkpoint = Path("./checkpoints/")


class TinyUNet(nn.Module):
    def __init__(self, n_channels, n_classes):
        super().__init__()
        self.n_channels = n_channels
        self.n_classes = n_classes
        self.checkpointing = False
        self.inc = nn.Sequential(nn.Conv2d(n_channels, 8, 3, padding=1), nn.ReLU())
        self.down = nn.Sequential(nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.up = nn.ConvTranspose2d(16, 8, 2, stride=2)
        self.outc = nn.Conv2d(16, n_classes, 1)

    def forward(self, x):
        run = (lambda m, t: checkpoint(m, t, use_reentrant=False)) if self.checkpointing else (lambda m, t: m(t))
        x1 = run(self.inc, x)
        x2 = run(self.down, x1)
        return self.outc(torch.cat([x1, self.up(x2)], dim=1))

    def use_checkpointing(self):
        self.checkpointing = True


def blobs_dataset(n, seed, size=16):
    """Images with one bright square each; the mask marks the square."""
    g = torch.Generator().manual_seed(seed)
    images = 0.3 * torch.randn(n, 3, size, size, generator=g)
    masks = torch.zeros(n, size, size, dtype=torch.uint8)
    corners = torch.randint(0, size - 6, (n, 2), generator=g)
    for i, (r, c) in enumerate(corners.tolist()):
        masks[i, r:r + 6, c:c + 6] = 1
        images[i, :, r:r + 6, c:c + 6] += 1.0
    return TensorDataset(images.double(), masks)


def dice_coeff(input, target, epsilon=1e-6):
    # Average of Dice coefficient for all images of a batch
    sum_dim = (-1, -2)
    inter = 2 * (input * target).sum(dim=sum_dim)
    sets_sum = input.sum(dim=sum_dim) + target.sum(dim=sum_dim)
    sets_sum = torch.where(sets_sum == 0, inter, sets_sum)
    dice = (inter + epsilon) / (sets_sum + epsilon)
    return dice.mean()


@torch.inference_mode()
def evaluate(net, dataloader, accelerator):
    net.eval()
    num_val_batches = len(dataloader.batch_sampler.batch_sampler)
    dice_score = 0

    # iterate over the validation set
    for image, mask_true in dataloader:
        # move images and labels to correct device and type
        image = image.to(dtype=torch.float32, memory_format=torch.channels_last)
        mask_true = mask_true.to(dtype=torch.long)

        # predict the mask
        mask_pred = net(image)
        mask_pred, mask_true = accelerator.gather_for_metrics((mask_pred, mask_true))
        for mask_pred, mask_true in zip(mask_pred.split(dataloader.batch_sampler.batch_size), mask_true.split(dataloader.batch_sampler.batch_size)):
            mask_pred = F.one_hot(mask_pred.argmax(dim=1), net.n_classes).permute(0, 3, 1, 2).float()
            mask_true = F.one_hot(mask_true, net.n_classes).permute(0, 3, 1, 2).float()
            # compute the Dice score, ignoring background
            dice_score += dice_coeff(mask_pred[:, 1:], mask_true[:, 1:])

    net.train()
    return dice_score / max(num_val_batches, 1)


def train_model(model, accelerator, epochs=3, batch_size=8, learning_rate=1e-3, val_percent=0.2, save_checkpoint=True,
                weight_decay=1e-8, momentum=0.9, gradient_clipping=1.0):
    # 1. Create dataset
    dataset = blobs_dataset(160, seed=3)

    # 2. Split into train / validation partitions
    n_val = int(len(dataset) * val_percent)
    n_train = len(dataset) - n_val
    train_set, val_set = random_split(dataset, [n_train, n_val], generator=torch.Generator().manual_seed(0))

    # 3. Create data loaders
    loader_args = dict(batch_size=batch_size, num_workers=0, pin_memory=True)
    train_loader = DataLoader(train_set, shuffle=True, **loader_args)
    val_loader = DataLoader(val_set, shuffle=False, drop_last=True, **loader_args)

    # 4. Set up the optimizer, the loss and the learning rate scheduler
    optimizer = optim.RMSprop(model.parameters(), lr=learning_rate, weight_decay=weight_decay, momentum=momentum)
    model, optimizer, train_loader, val_loader = accelerator.prepare(
        model, optimizer, train_loader, val_loader
    )
    scheduler = optim.lr_scheduler.ReduceLROnPlateau(optimizer, "max", patience=0, factor=0.5)  # goal: maximize Dice score
    criterion = nn.CrossEntropyLoss()
    global_step = 0

    accelerator.print(f"Validation Dice score before training: {evaluate(model, val_loader, accelerator):.4f}")

    # 5. Begin training
    for epoch in range(1, epochs + 1):
        model.train()
        epoch_loss = 0
        with tqdm(total=n_train, desc=f"Epoch {epoch}/{epochs}", unit="img", disable=not accelerator.is_local_main_process) as pbar:
            for images, true_masks in train_loader:
                assert images.shape[1] == model.n_channels, \
                    f"Network has been defined with {model.n_channels} input channels, " \
                    f"but loaded images have {images.shape[1]} channels."

                images = images.to(dtype=torch.float32, memory_format=torch.channels_last)
                true_masks = true_masks.to(dtype=torch.long)

                masks_pred = model(images)
                loss = criterion(masks_pred, true_masks)

                optimizer.zero_grad(set_to_none=True)
                accelerator.backward(loss)
                accelerator.clip_grad_norm_(model.parameters(), gradient_clipping)
                optimizer.step()

                pbar.update(images.shape[0])
                global_step += 1
                epoch_loss += loss.item()
                pbar.set_postfix(**{"loss (batch)": loss.item()})
            epoch_loss = accelerator.reduce(torch.tensor(epoch_loss, dtype=torch.float64, device=accelerator.device), "mean").item()

        val_score = evaluate(model, val_loader, accelerator)
        scheduler.step(val_score)
        accelerator.print(f"Epoch {epoch}: loss {epoch_loss / len(train_loader):.5f} "
              f"validation Dice {val_score:.4f} lr {optimizer.param_groups[0]['lr']:.2e}")

        if save_checkpoint:
            Path(dir_checkpoint).mkdir(parents=True, exist_ok=True)
            state_dict = accelerator.unwrap_model(model).state_dict()
            accelerator.wait_for_everyone()
            accelerator.save(state_dict, str(dir_checkpoint / "checkpoint_epoch{}.pth".format(epoch)))
            accelerator.print(f"Checkpoint {epoch} saved!")


def get_args():
    parser = argparse.ArgumentParser(description="Train the UNet on images and target masks")
    parser.add_argument("--epochs", "-e", metavar="E", type=int, default=3, help="Number of epochs")
    parser.add_argument("--batch-size", "-b", dest="batch_size", metavar="B", type=int, default=8, help="Batch size")
    parser.add_argument("--learning-rate", "-l", metavar="LR", type=float, default=1e-3, help="Learning rate", dest="lr")
    parser.add_argument("--classes", "-c", type=int, default=2, help="Number of classes")
    parser.add_argument("--seed", type=int, default=0, help="Random seed")
    return parser.parse_args()


if __name__ == "__main__":
    accelerator = Accelerator()
    args = get_args()

    device = accelerator.device
    accelerator.print(f"Using device {device}")

    torch.manual_seed(args.seed)
    model = TinyUNet(n_channels=3, n_classes=args.classes)
    model = model.to(memory_format=torch.channels_last)
    try:
        train_model(
            model=model,
            epochs=args.epochs,
            batch_size=args.batch_size,
            learning_rate=args.lr,
            accelerator=accelerator,
        )
    except RuntimeError as e:
        if "out of memory" in str(e):
            accelerator.print("Detected OutOfMemoryError! "
                  "Enabling checkpointing to reduce memory usage, but this slows down training.")
            torch.cuda.empty_cache()
            model.use_checkpointing()
            train_model(
                model=model,
                epochs=args.epochs,
                batch_size=args.batch_size,
                learning_rate=args.lr,
                accelerator=accelerator,
            )
        else:
            raise
    accelerator.end_training()
