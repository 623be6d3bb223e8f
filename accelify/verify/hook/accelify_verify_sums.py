"""Exact mode of ``accelify verify``: a loss summed over the batch's rows, told from a mean by its values.

Each process of the exact N-process run takes ``b/N`` rows of the original's batch of ``b``. A mean loss over its
rows, averaged over the processes by DDP, is the original's mean: nothing to do. A loss summed over the rows
(``reduction="sum"``, a hand-written ``.sum()``) would give 1/N of the original's update, though a real launch
(whole batches per process) is right. At each backward on a share the processes add up their loss values (a Gloo
all-reduce over exact mode's own group) and compare the total with the original's loss at the same backward, read
from the original's record (``ACCELIFY_VERIFY_REFERENCE``; a loss the original's run, running meanwhile, has not
written yet is waited for: ``accelify_verify_reference.py``):

- the total equals it: a sum over the rows; the backward's gradient is scaled by N (the loss value, and what the
  script prints, stay the script's own). Unless the loss is the sum of the loss functions called on the batch's
  share (``F.mse_loss``, ``nn.CrossEntropyLoss``, ...: the ``torch.nn.functional`` losses, which the ``nn`` loss
  modules call), each reduced by its mean, divided by N: a mean the conversion divided by N (by values alone it
  looks like a sum). Its gradient is left at 1/N of the original's, so ``same as original`` fails naming the 1/N
  (a mean times the share's rows, a sum by hand, is still scaled);
- N times it: a mean (a sum divided by the batch size is one); left alone;
- another power of N: a sum or a mean the conversion scaled; scaled or left alike, so the conversion's wrong factor
  shows in the update;
- anything else (a mean plus a sum): the step is marked inexact.

Each script line that calls backward is probed for its first ``PROBES`` backwards (a collective each, so it costs
no more than a step's all-reduce); once they agree the line keeps its factor for the rest of the run, since a
collective per step cost ~3 ms a step on a loaded 2-core machine. A hand-written mean divided by N
(``(x - y).pow(2).mean() / N``) still looks like a sum: only the loss functions' ``reduction`` tells the two apart.
Like the recorder, this module imports nothing of accelify.
"""

from __future__ import annotations

import os
from types import ModuleType
from typing import Any

ENV_REFERENCE = "ACCELIFY_VERIFY_REFERENCE"  # record prefix of the original's one-process run (its losses)
PROBES = 2  # backwards of one script line compared (a collective each) before its verdict is kept for the rest
SUM_MATCH = 1e-5  # relative closeness of the processes' summed losses to the original's loss (or a power of N of it):
# exact mode makes every other source of difference the same (dropout, whole-batch BatchNorm, shared draws, in-place
# draws), so a mean or a sum over the rows meets it to float rounding; a batch-level term beside a mean (a norm over
# the whole batch, a KL sum divided by a constant batch size) does not, however small, and is marked inexact instead
# of taken for a mean (at 5 %, such a term passed as a mean and failed "same as original" on a right conversion)


class LossScale:
    """``scale(n, value)``: the factor backward ``n`` (loss ``value`` on this process's share) scales its gradient by."""

    def __init__(self, exact: Any) -> None:
        self.exact = exact
        self._reference: Any = None  # the original's losses (accelify_verify_reference.ReferenceLosses)
        self._seen: dict[str, list[float | None]] = {}  # backward's script line -> its probes' factors
        self._kept: dict[str, float | None] = {}  # ... and the factor kept after PROBES equal ones (None: inexact)
        self.means: set[str] = set()  # script lines whose loss was found to be a mean over the batch's rows
        self.losses: list[tuple[str, float | None]] = []  # (reduction, value) of each loss function called on this
        # batch's share since the last backward (cleared at each new batch, and at each backward)

    def reference(self, n: int) -> float | None:
        """The loss of backward ``n`` of the original's one-process run (``ENV_REFERENCE``), waited for while that
        run is still running; None without it."""
        if self._reference is None:
            from accelify_verify_reference import ReferenceLosses

            self._reference = ReferenceLosses(os.environ.get(ENV_REFERENCE, ""))
        return self._reference.loss(n)

    def __call__(self, n: int, value: float, site: str) -> float:
        """How much backward ``n`` (loss ``value`` on this process's share, called at the script's ``site``) must
        scale its gradient to give the original's update: N for a loss summed over the batch's rows, 1 for a mean
        (see the module docstring). A line's first ``PROBES`` backwards are probed (a collective each: every process
        reaches the same decision at the same backward); once they agree, the line keeps that factor."""
        losses, self.losses = self.losses, []
        if site in self.means:
            self.exact.epoch_sums.mean_backward(value)  # a per-batch mean: summed per epoch (epochsums)
        if site in self._kept:
            kept = self._kept[site]
            if kept is None:
                self.exact.inexact.add(f"the loss at {site} is neither the mean nor the sum over the batch's rows")
            return 1.0 if kept is None else kept
        factor = self._probe(n, value, losses, site)
        if factor is not False:
            seen = self._seen.setdefault(site, [])
            seen.append(factor)  # type: ignore[arg-type]
            if len(seen) >= PROBES and len(set(seen[-PROBES:])) == 1:
                self._kept[site] = seen[-1]
        return 1.0 if factor is None or factor is False else factor

    def _probe(self, n: int, value: float, losses: "list[tuple[str, float | None]] | tuple[()]" = (),
               site: str = "") -> "float | None | bool":
        """The factor for backward ``n``: N (a sum), 1 (a mean), None (neither: marked inexact), or False when it
        cannot be probed (no share, no reference loss, no group)."""
        exact = self.exact
        share = exact.share
        if share is None or share[0] == share[2] - share[1]:
            return False
        group = exact.gather_group()
        if group is None:
            return False
        original = self.reference(n)
        if original is None:
            return False
        torch = exact.recorder.torch
        total = torch.tensor([value], dtype=torch.float64)
        torch.distributed.all_reduce(total, group=group)  # every process of the step calls backward: lockstep
        world = exact._world()[1]
        summed = float(total.item())
        ratio = summed / original if original else 0.0
        if ratio > 0:
            import math

            power = round(math.log(ratio) / math.log(world))
            if abs(ratio - world ** power) <= SUM_MATCH * world ** power:
                # N^k: a mean over the rows (k = 1), the processes' losses average to the original's; k <= 0: a sum
                # over the rows (k = 0, they add up to it), scaled by the conversion when k < 0 (scaled here too, so
                # the conversion's 1/N shows in the update); k > 1 a mean scaled by the conversion, shown likewise
                if power == 0 and _divided_mean(value, losses, world):
                    return 1.0  # a mean over the rows, divided by N by the conversion: its 1/N shows in the update
                if power == 1 and site not in self.means:
                    self.means.add(site)
                    exact.epoch_sums.mean_backward(value)
                return float(world) if power <= 0 else 1.0
        if summed != 0 or original != 0:
            exact.inexact.add(f"the loss of backward {n} is neither the mean nor the sum over the batch's rows "
                              f"(the processes' losses add up to {summed:.6g}, the original's was {original:.6g})")
            return None
        return 1.0


LEGACY = ("size_average", "reduce")


def _divided_mean(value: float, losses: list[tuple[str, float | None]], world: int) -> bool:
    """The loss handed to backward (``value``) is the sum of the mean-reduced losses computed on this share,
    divided by ``world``: a mean over the rows the conversion divided by N (not a mean times the rows, a sum)."""
    if not losses or any(reduction != "mean" or out is None for reduction, out in losses):
        return False
    total = sum(out for _, out in losses if out is not None)
    return abs(value - total / world) <= 1e-5 * max(abs(value), abs(total / world)) + 1e-12


def patch_losses(functional: ModuleType, exact: Any) -> None:
    """Every loss of ``torch.nn.functional`` with a ``reduction`` parameter notes its reduction (``mean``,
    ``batchmean`` as mean, ``sum``, ``none``) and its value in ``exact.loss_scale.losses`` while a share is held."""
    import functools
    import inspect

    for name in dir(functional):
        original = getattr(functional, name)
        if not name.endswith("_loss") and name not in ("cross_entropy", "binary_cross_entropy",
                                                       "binary_cross_entropy_with_logits", "kl_div"):
            continue
        try:
            signature = inspect.signature(original)
        except (TypeError, ValueError):
            continue
        if "reduction" not in signature.parameters:
            continue

        def noting(original: Any = original, signature: Any = signature) -> Any:
            @functools.wraps(original)
            def loss(*args: Any, **kwargs: Any) -> Any:
                if exact.share is not None:
                    try:
                        bound = signature.bind_partial(*args, **kwargs).arguments
                        legacy = any(bound.get(k) is not None for k in LEGACY)
                        reduction = "legacy" if legacy else str(bound.get("reduction", "mean"))
                    except TypeError:
                        reduction = "unknown"
                    out = original(*args, **kwargs)
                    value = float(out.detach().double().item()) if getattr(out, "numel", lambda: 0)() == 1 else None
                    exact.loss_scale.losses.append(("mean" if reduction == "batchmean" else reduction, value))
                    if reduction == "mean" and value is not None:
                        exact.epoch_sums.mean_loss(value)
                    return out
                return original(*args, **kwargs)

            return loss

        setattr(functional, name, noting())
