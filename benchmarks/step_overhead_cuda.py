"""Per-step overhead on one GPU: raw PyTorch vs accelify.runtime vs Hugging Face Accelerate, side by side.

Run on a GPU machine: ``python benchmarks/step_overhead_cuda.py`` (or ``python benchmarks/step_overhead.py
--cuda``, or ``accelify test --gpu``, which also runs the GPU test suite). Two models, both in bf16:

* ``mlp``: the tiny MLP of ``step_overhead.py`` (a step is mostly launch overhead: the worst case for a wrapper);
* ``transformer``: a small transformer encoder language model (4 layers, d_model 256, 128 tokens).

Each is trained three ways in the same process, alternating step by step in a shuffled order (the helpers of
``step_overhead.py``): by hand (``torch.autocast``, pinned batches copied with ``non_blocking=True``), through
``accelify.runtime`` (``Accelerator(mixed_precision="bf16")``, a non-blocking ``DataLoaderConfiguration``), and
through Hugging Face Accelerate with the same settings when it is installed. A step ends with
``torch.cuda.synchronize()``, so its time includes the GPU's work. The ratios printed are medians of paired
step-time ratios. Targets: accelify <= 1.01x the hand-written loop; Hugging Face Accelerate has measured
1.02-1.15x on such loops. Nothing is asserted; ``--json`` writes the numbers for ``accelify test --gpu``.

Without CUDA it says so and exits 2; ``--device cpu`` runs the same loops on the CPU as a smoke test of this
script (its numbers are not a GPU measurement and are labelled so).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import types
from pathlib import Path
from typing import Any, Callable

import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import step_overhead  # the CPU benchmark: its MLP, its paired measurement and its ratio
from step_overhead import make_model, measure, paired_ratio, stepper

ACCELIFY_TARGET = 1.01
ACCELERATE_MEASURED = (1.02, 1.15)
VOCAB, SEQ, TOKENS_BATCH, MLP_BATCH = 1000, 128, 16, 64


class TinyLM(nn.Module):
    """A small transformer encoder language model: embedding, 4 layers, a linear head."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.embed = nn.Embedding(VOCAB, 256)
        layer = nn.TransformerEncoderLayer(256, 4, 1024, dropout=0.0, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 4, enable_nested_tensor=False)
        self.head = nn.Linear(256, VOCAB)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens))).flatten(0, 1)


def mlp_data(steps: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    n = steps * MLP_BATCH
    data = TensorDataset(torch.randn(n, 128, generator=g), torch.randint(0, 10, (n,), generator=g))
    return DataLoader(data, batch_size=MLP_BATCH, pin_memory=True)


def lm_data(steps: int) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    n = steps * TOKENS_BATCH
    tokens = torch.randint(0, VOCAB, (n, SEQ), generator=g)
    data = TensorDataset(tokens, torch.roll(tokens, -1, dims=1))  # predict the next token
    return DataLoader(data, batch_size=TOKENS_BATCH, pin_memory=True)


MODELS: dict[str, tuple[Callable[[], nn.Module], Callable[[int], DataLoader]]] = {
    "mlp": (make_model, mlp_data),
    "transformer": (TinyLM, lm_data),
}


def _loss(out: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(out, y.flatten())


def synchronised(step: Callable[[], None], device: torch.device) -> Callable[[], None]:
    """``step`` followed by a wait for the GPU, so the timed step includes its kernels."""
    if device.type != "cuda":
        return step

    def run() -> None:
        step()
        torch.cuda.synchronize(device)

    return run


def raw_loop(name: str, device: torch.device, steps: int) -> Callable[[], None]:
    build, data = MODELS[name]
    model = build().to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)

    def body(i: int, batch: Any) -> None:
        x, y = (t.to(device, non_blocking=True) for t in batch)
        with torch.autocast(device.type, dtype=torch.bfloat16):
            loss = _loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()

    return stepper(data(steps), body)


def accelerated_loop(accelerator: Any, name: str, steps: int) -> Callable[[], None]:
    """The converted script's loop, the same for accelify.runtime and Hugging Face Accelerate."""
    build, data = MODELS[name]
    model = build()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    model, optimizer, loader = accelerator.prepare(model, optimizer, data(steps))

    def body(i: int, batch: Any) -> None:
        x, y = batch
        loss = _loss(model(x), y)
        accelerator.backward(loss)
        optimizer.step()
        optimizer.zero_grad()

    return stepper(loader, body)


def accelerators(device: torch.device) -> dict[str, Any]:
    """accelify's accelerator, and Hugging Face's when installed, both bf16 with non-blocking copies."""
    from accelify.runtime import Accelerator

    cpu = device.type == "cpu"
    config = types.SimpleNamespace(non_blocking=True, split_batches=False, even_batches=True, dispatch_batches=None)
    found: dict[str, Any] = {"accelify": Accelerator(mixed_precision="bf16", cpu=cpu, dataloader_config=config)}
    try:
        from accelerate import Accelerator as HFAccelerator
        from accelerate import DataLoaderConfiguration
    except ImportError:
        return found
    found["accelerate"] = HFAccelerator(mixed_precision="bf16", cpu=cpu,
                                        dataloader_config=DataLoaderConfiguration(non_blocking=True))
    return found


def run(device: torch.device, models: list[str]) -> dict[str, Any]:
    """Measure every model; the result is what ``--json`` writes."""
    steps = step_overhead.STEPS
    accs = accelerators(device)
    rows = []
    for name in models:
        loops = {"raw": synchronised(raw_loop(name, device, steps), device)}
        for library, accelerator in accs.items():
            loops[library] = synchronised(accelerated_loop(accelerator, name, steps), device)
        samples = measure(loops)
        row: dict[str, Any] = {"model": name, "median_ms": {k: statistics.median(v) * 1e3 for k, v in samples.items()}}
        for library in accs:
            row[library] = paired_ratio(samples, library, "raw")
        rows.append(row)
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu (smoke run, not a GPU measurement)"
    return {"device": where, "torch": torch.__version__, "targets": {"accelify": ACCELIFY_TARGET,
            "accelerate_measured": list(ACCELERATE_MEASURED)}, "rows": rows}


def report(results: dict[str, Any]) -> str:
    lines = [f"step overhead on {results['device']} (torch {results['torch']}), bf16, median of paired step-time "
             "ratios against the hand-written loop:"]
    for row in results["rows"]:
        ms = ", ".join(f"{k} {v:.3f}" for k, v in row["median_ms"].items())
        lines.append(f"  {row['model']}: accelify {row['accelify']:.3f}x (target <= {ACCELIFY_TARGET})"
                     + (f", Hugging Face Accelerate {row['accelerate']:.3f}x (measured elsewhere "
                        f"{ACCELERATE_MEASURED[0]}-{ACCELERATE_MEASURED[1]}x)" if "accelerate" in row else
                        ", Hugging Face Accelerate not installed")
                     + f"; median step ms: {ms}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"],
                        help="cuda (default); cpu only to smoke-test this script")
    parser.add_argument("--models", default="mlp,transformer", help="comma-separated: mlp, transformer")
    parser.add_argument("--steps", type=int, default=step_overhead.STEPS, help="steps per round (and warm-up)")
    parser.add_argument("--rounds", type=int, default=step_overhead.ROUNDS, help="measured rounds")
    parser.add_argument("--json", type=Path, help="also write the results here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("step_overhead_cuda: no GPU is visible (torch.cuda.is_available() is False, torch "
              f"{torch.__version__}, CUDA build {torch.version.cuda or 'none'}): this benchmark measures CUDA steps; "
              "run it on a GPU machine.", file=sys.stderr)
        return 2
    step_overhead.STEPS, step_overhead.ROUNDS = args.steps, args.rounds  # measure() reads them
    results = run(torch.device(args.device), [m.strip() for m in args.models.split(",") if m.strip()])
    print(report(results))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
