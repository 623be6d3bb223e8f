"""Mixed precision with a GradScaler: gradients unscaled before clipping, and the LR scheduler not stepped when the
scaler skipped the optimizer step.

Imitates the PyTorch "Automatic Mixed Precision" recipe and examples page (`scaler.scale(loss).backward()`,
`scaler.unscale_(optimizer)`, `clip_grad_norm_`, `scaler.step`, `scaler.update`), with the well-known forum idiom
that compares `scaler.get_scale()` before and after `update()` to skip `scheduler.step()` on skipped steps. AMP is off
by default (`--amp`), and only used on CUDA.
"""
import argparse

import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset
from accelify.runtime import Accelerator


def make_model(in_size, out_size, num_layers):
    layers = []
    for _ in range(num_layers - 1):
        layers.append(torch.nn.Linear(in_size, in_size))
        layers.append(torch.nn.ReLU())
    layers.append(torch.nn.Linear(in_size, out_size))
    return torch.nn.Sequential(*layers)


def make_data(n, in_size, out_size, seed):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, in_size, generator=g)
    w = torch.randn(in_size, out_size, generator=torch.Generator().manual_seed(0)) / in_size ** 0.5
    return TensorDataset(x, torch.tanh(x @ w) + 0.05 * torch.randn(n, out_size, generator=g))


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--max-norm", type=float, default=0.5)
    parser.add_argument("--amp", action="store_true", help="float16 autocast with a GradScaler (CUDA only)")
    args = parser.parse_args()
    accelerator = Accelerator(mixed_precision="fp16" if args.amp and torch.cuda.is_available() else "no")

    torch.manual_seed(0)
    device = accelerator.device
    use_amp = args.amp and device.type == "cuda"
    accelerator.print(f"mixed precision: {use_amp}")

    loader = DataLoader(make_data(640, 24, 4, seed=1), batch_size=args.batch_size, shuffle=True, drop_last=True)
    net = make_model(24, 4, num_layers=3)
    loss_fn = nn.MSELoss()
    opt = torch.optim.SGD(net.parameters(), lr=args.lr, momentum=0.9)
    scheduler = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=args.lr, total_steps=args.epochs * len(loader))
    net, opt, loader, scheduler = accelerator.prepare(net, opt, loader, scheduler)

    for epoch in range(args.epochs):
        for input, target in loader:
            with accelerator.autocast():
                output = net(input)
                loss = loss_fn(output, target)
            accelerator.backward(loss)

            # Unscales the gradients of optimizer's assigned params in-place
            # Since the gradients of optimizer's assigned params are now unscaled, clips as usual.
            # You may use the same value for max_norm here as you would without gradient scaling.
            accelerator.clip_grad_norm_(net.parameters(), max_norm=args.max_norm)

            # optimizer's gradients are already unscaled, so scaler.step does not unscale them,
            # although it still skips optimizer.step() if the gradients contain infs or NaNs.
            opt.step()

            # Updates the scale for next iteration; a smaller scale means the step was skipped.
            skip_lr_sched = accelerator.optimizer_step_was_skipped
            if not skip_lr_sched:
                scheduler.step()

            opt.zero_grad()  # set_to_none=True here can modestly improve performance
        accelerator.print(f"epoch {epoch} loss {loss.item():.6f} lr {scheduler.get_last_lr()[0]:.6f}")

    checkpoint = {"model": accelerator.unwrap_model(net).state_dict(), "optimizer": opt.state_dict()}
    accelerator.wait_for_everyone()
    accelerator.save(checkpoint, "amp_checkpoint.pt")
    accelerator.end_training()


if __name__ == "__main__":
    main()
