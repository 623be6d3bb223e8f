"""DeiT / DETR-style main.py: the loops live in engine.py, the models in models.py, the best checkpoint and a JSON
log line per epoch go to --output_dir.

Imitates facebookresearch/deit main.py (single-process path): `get_args_parser()` used as a parent parser, the output
folder created in the `__main__` block, `main(args)` building everything with `device = torch.device(args.device)`,
`model_without_ddp = model` (the alias that checkpoints are taken from), `train_one_epoch` / `evaluate` from engine.py,
`if max_accuracy < test_stats["acc1"]:` saving the best checkpoint, and `log.txt` appended with json lines.
"""
import argparse
import json
from pathlib import Path

import torch
from torch.utils.data import DataLoader, TensorDataset

from engine import evaluate, train_one_epoch
from models import create_model
from accelify.runtime import Accelerator


def get_args_parser():
    parser = argparse.ArgumentParser("DeiT training and evaluation script", add_help=False)
    parser.add_argument("--batch-size", default=32, type=int)
    parser.add_argument("--epochs", default=3, type=int)
    parser.add_argument("--model", default="mixer_tiny", type=str, metavar="MODEL", help="Name of model to train")
    parser.add_argument("--drop", type=float, default=0.1, metavar="PCT", help="Dropout rate (default: 0.1)")
    parser.add_argument("--clip-grad", type=float, default=1.0, metavar="NORM", help="Clip gradient norm")
    parser.add_argument("--lr", type=float, default=2e-3, metavar="LR", help="learning rate (default: 2e-3)")
    parser.add_argument("--weight-decay", type=float, default=0.05, help="weight decay (default: 0.05)")
    parser.add_argument("--output_dir", default="output", help="path where to save, empty for no saving")
    parser.add_argument("--device", default="cuda", help="device to use for training / testing")
    parser.add_argument("--seed", default=0, type=int)
    return parser


def build_dataset(n, seed, num_classes=10):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(num_classes, 32, generator=torch.Generator().manual_seed(1000))
    labels = torch.randint(0, num_classes, (n,), generator=g)
    return TensorDataset(centers[labels] + 2.5 * torch.randn(n, 32, generator=g), labels)


def main(args):
    accelerator = Accelerator(cpu=args.device == "cpu")
    accelerator.print(args)

    # fix the seed for reproducibility
    seed = args.seed
    torch.manual_seed(seed)

    dataset_train = build_dataset(640, seed=1)
    dataset_val = build_dataset(250, seed=2)
    data_loader_train = DataLoader(dataset_train, batch_size=args.batch_size, shuffle=True, drop_last=True)
    data_loader_val = DataLoader(dataset_val, batch_size=int(1.5 * args.batch_size), shuffle=False, drop_last=False)

    accelerator.print(f"Creating model: {args.model}")
    model = create_model(args.model, num_classes=10, drop_rate=args.drop)

    model_without_ddp = model
    n_parameters = sum(p.numel() for p in model.parameters() if p.requires_grad)
    accelerator.print("number of params:", n_parameters)

    optimizer = torch.optim.AdamW(model_without_ddp.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    model, optimizer, data_loader_train, data_loader_val = accelerator.prepare(
        model, optimizer, data_loader_train, data_loader_val
    )
    lr_scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=args.epochs)
    criterion = torch.nn.CrossEntropyLoss(label_smoothing=0.1)

    output_dir = Path(args.output_dir)
    test_stats = evaluate(data_loader_val, model, accelerator)
    accelerator.print(f"Accuracy of the network on the {len(dataset_val)} test images before training: {test_stats['acc1']:.1f}% (loss {test_stats['loss']:.4f})")

    accelerator.print(f"Start training for {args.epochs} epochs")
    max_accuracy = 0.0
    for epoch in range(args.epochs):
        train_stats = train_one_epoch(model, criterion, data_loader_train, optimizer, accelerator, epoch, args.clip_grad)
        lr_scheduler.step()

        test_stats = evaluate(data_loader_val, model, accelerator)
        accelerator.print(f"Accuracy of the network on the {len(dataset_val)} test images: {test_stats['acc1']:.1f}%")

        if max_accuracy < test_stats["acc1"]:
            max_accuracy = test_stats["acc1"]
            if args.output_dir:
                checkpoint_paths = [output_dir / "best_checkpoint.pth"]
                for checkpoint_path in checkpoint_paths:
                    accelerator.wait_for_everyone()
                    accelerator.save({
                        "model": model_without_ddp.state_dict(),
                        "optimizer": optimizer.state_dict(),
                        "lr_scheduler": lr_scheduler.state_dict(),
                        "epoch": epoch,
                        "args": args,
                    }, checkpoint_path)

        accelerator.print(f"Max accuracy: {max_accuracy:.2f}%")

        log_stats = {**{f"train_{k}": v for k, v in train_stats.items()},
                     **{f"test_{k}": v for k, v in test_stats.items()},
                     "epoch": epoch,
                     "n_parameters": n_parameters}

        if args.output_dir:
            if accelerator.is_main_process:
                with (output_dir / "log.txt").open("a") as f:
                    f.write(json.dumps(log_stats) + "\n")
    accelerator.end_training()


if __name__ == "__main__":
    parser = argparse.ArgumentParser("DeiT training and evaluation script", parents=[get_args_parser()])
    args = parser.parse_args()
    if args.output_dir:
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    main(args)
