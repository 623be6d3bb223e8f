"""A closed-form ridge-regression baseline with feature normalisation: torch as a numeric library only.

No model, no optimizer, no data loader and no device: there is nothing for accelify to convert.
"""
import argparse

import torch


def standardize(x, eps=1e-6):
    mean = x.mean(dim=0, keepdim=True)
    std = x.std(dim=0, keepdim=True)
    return (x - mean) / (std + eps), mean, std


def ridge(x, y, alpha):
    """Solve (X^T X + alpha I) w = X^T y."""
    eye = torch.eye(x.shape[1], dtype=x.dtype)
    return torch.linalg.solve(x.T @ x + alpha * eye, x.T @ y)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--samples", type=int, default=400)
    parser.add_argument("--features", type=int, default=16)
    args = parser.parse_args()

    torch.manual_seed(0)
    x = torch.randn(args.samples, args.features, dtype=torch.float64) * torch.linspace(0.5, 3.0, args.features)
    true_w = torch.randn(args.features, 1, dtype=torch.float64)
    y = x @ true_w + 0.3 * torch.randn(args.samples, 1, dtype=torch.float64)

    x_std, _, _ = standardize(x)
    split = int(0.8 * args.samples)
    for alpha in (0.0, 0.1, 1.0, 10.0):
        w = ridge(x_std[:split], y[:split], alpha)
        val_mse = torch.mean((x_std[split:] @ w - y[split:]) ** 2).item()
        print(f"alpha {alpha} val_mse {val_mse:.6f}")


if __name__ == "__main__":
    main()
