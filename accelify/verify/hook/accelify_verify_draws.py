"""Exact mode of ``accelify verify``: random draws and batch statistics on a share of the batch made the original's.

Each process of the exact N-process run holds rows ``[lo, hi)`` of the original's batch (``ExactMode.share``).
These patches make what the script computes on that share what the original computed on the whole batch:

- ``F.dropout`` on a tensor whose first dimension is the share's draws its mask for the whole batch and keeps the
  share's rows; on another shape (sequence-first tensors) the step is marked inexact, as are ``dropout2d`` and the
  other feature dropouts (their masks are drawn per process);
- ``torch.randn/rand/randint`` and ``randn_like/rand_like`` shaped like the share draw for the whole batch, and so do
  the in-place draws into a tensor shaped like it (``std.new(std.size()).normal_()``, ``uniform_``, ``bernoulli_``);
- BatchNorm in training mode normalises every process's rows together (an autograd-aware all-gather over exact
  mode's own Gloo group); a batch that does not split evenly marks the step inexact;
- ``cross_entropy``/``nll_loss`` with class weights or ignored targets mark the step inexact (the mean over each
  share, averaged, is not the batch's weighted mean).

Like the recorder, this module imports nothing of accelify.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

from accelify_verify_exact import ExactMode, _slice


def patch_torch(torch: ModuleType, exact: ExactMode) -> None:
    """Dropout off; batch-shaped random draws drawn whole and shared; BatchNorm on a share marked inexact."""
    import torch.nn.functional as F

    dropout = F.dropout

    @functools.wraps(dropout)
    def shared_dropout(input: Any, p: float = 0.5, training: bool = True, inplace: bool = False) -> Any:
        share = exact.share
        if share is None or not training or not 0 < p < 1 or not isinstance(input, torch.Tensor) or input.dim() == 0:
            return dropout(input, p, training, inplace)
        rows, lo, hi = share
        if input.shape[0] != hi - lo or rows == hi - lo:
            exact.inexact.add("dropout on a tensor whose first dimension is not the batch's")
            return dropout(input, p, training, inplace)
        # what torch's CPU dropout computes, with the mask drawn for the whole batch
        noise = _slice(input.new_empty((rows, *input.shape[1:])).bernoulli_(1 - p), rows, lo, hi, torch)
        noise = noise.div(1 - p)
        return input.mul_(noise) if inplace else input * noise

    F.dropout = shared_dropout

    def marked(name: str) -> Any:
        original = getattr(F, name)

        @functools.wraps(original)
        def feature_dropout(input: Any, *args: Any, **kwargs: Any) -> Any:
            training = kwargs.get("training", args[1] if len(args) > 1 else True)
            p = kwargs.get("p", args[0] if args else 0.5)
            if exact.share is not None and training and p:  # (``Dropout2d(p=0.0)`` draws nothing: set W's W5)
                exact.inexact.add(f"{name} draws its mask per process")
            return original(input, *args, **kwargs)

        return feature_dropout

    for name in ("dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"):
        if hasattr(F, name):
            setattr(F, name, marked(name))

    def whole(original: Any, like: bool) -> Any:
        @functools.wraps(original)
        def draw(*args: Any, **kwargs: Any) -> Any:
            share = exact.share
            if share is None or getattr(exact.local, "inside", False):
                return original(*args, **kwargs)
            rows, lo, hi = share
            exact.local.inside = True
            try:
                if like:
                    tensor = args[0] if args else kwargs.get("input")
                    if not isinstance(tensor, torch.Tensor) or tensor.dim() == 0 or tensor.shape[0] != hi - lo:
                        return original(*args, **kwargs)
                    full = tensor.new_empty((rows, *tensor.shape[1:]))
                    drawn = original(full, *args[1:], **{k: v for k, v in kwargs.items() if k != "input"})
                else:
                    size, rest, key = _size_of(original, args, kwargs)
                    if size is None or not size or size[0] != hi - lo:
                        return original(*args, **kwargs)
                    drawn = original(*rest, **{**kwargs, key: (rows, *size[1:])}) if key else \
                        original(*rest, (rows, *size[1:]), **kwargs)
                return _slice(drawn, rows, lo, hi, torch)
            finally:
                exact.local.inside = False

        return draw

    for name, like in (("randn", False), ("rand", False), ("randint", False), ("randn_like", True),
                       ("rand_like", True)):
        setattr(torch, name, whole(getattr(torch, name), like))

    def whole_in_place(original: Any) -> Any:
        """``eps = std.new(std.size()).normal_()`` (a VAE's noise): an in-place draw into a tensor shaped like the
        share draws the whole batch's values and keeps the share's rows; with a tensor argument (``bernoulli_(p)``
        of per-row probabilities) the step is marked inexact instead."""
        @functools.wraps(original)
        def draw(self: Any, *args: Any, **kwargs: Any) -> Any:
            share = exact.share
            if share is None or getattr(exact.local, "inside", False) or self.dim() == 0:
                return original(self, *args, **kwargs)
            rows, lo, hi = share
            if self.shape[0] != hi - lo or rows == hi - lo:
                return original(self, *args, **kwargs)
            if any(isinstance(a, torch.Tensor) for a in (*args, *kwargs.values())):
                exact.inexact.add(f"`Tensor.{original.__name__}` with a tensor argument draws per process")
                return original(self, *args, **kwargs)
            exact.local.inside = True
            try:
                full = self.new_empty((rows, *self.shape[1:]))
                original(full, *args, **kwargs)
                with torch.no_grad():
                    self.copy_(_slice(full, rows, lo, hi, torch))
                return self
            finally:
                exact.local.inside = False

        return draw

    for name in ("normal_", "uniform_", "bernoulli_", "exponential_", "log_normal_", "cauchy_", "geometric_"):
        if hasattr(torch.Tensor, name):
            setattr(torch.Tensor, name, whole_in_place(getattr(torch.Tensor, name)))

    batch_norm = F.batch_norm

    @functools.wraps(batch_norm)
    def whole_batch_norm(input: Any, *args: Any, **kwargs: Any) -> Any:
        training = kwargs.get("training", args[4] if len(args) > 4 else False)
        share = exact.share
        if not training or share is None or not isinstance(input, torch.Tensor) or input.dim() == 0:
            return batch_norm(input, *args, **kwargs)
        rows, lo, hi = share
        if input.shape[0] != hi - lo or rows == hi - lo:
            return batch_norm(input, *args, **kwargs)
        group = exact.gather_group()
        if group is None or rows % (hi - lo):
            exact.inexact.add("BatchNorm statistics over a shard")
            return batch_norm(input, *args, **kwargs)
        # the statistics of the whole batch, as the original computed them: gather every process's rows (the
        # gather's backward sums each process's gradient for them), normalise all, keep this process's rows
        import warnings

        from torch.distributed.nn.functional import all_gather

        with warnings.catch_warnings():  # deprecated for functional collectives, whose backward Gloo lacks
            warnings.simplefilter("ignore", FutureWarning)
            parts = all_gather(input.contiguous(), group=group)
        whole = torch.cat(parts, dim=0)
        return batch_norm(whole, *args, **kwargs)[lo:hi]

    F.batch_norm = whole_batch_norm

    def weighted(name: str) -> Any:
        original = getattr(F, name)

        @functools.wraps(original)
        def mean_over_share(input: Any, target: Any, weight: Any = None, *args: Any, **kwargs: Any) -> Any:
            if exact.share is not None and kwargs.get("reduction", "mean") == "mean":
                ignore = kwargs.get("ignore_index", -100)
                if weight is not None:
                    exact.inexact.add(f"{name} with class weights: the mean over each share, averaged over the "
                                      "processes, is not the batch's weighted mean")
                elif isinstance(target, torch.Tensor) and not target.is_floating_point() and \
                        bool((target == ignore).any()):
                    exact.inexact.add(f"{name} ignores some targets: the mean over each share, averaged over the "
                                      "processes, is not the batch's mean")
            return original(input, target, weight, *args, **kwargs)

        return mean_over_share

    for name in ("cross_entropy", "nll_loss"):
        setattr(F, name, weighted(name))
    from accelify_verify_sums import patch_losses

    patch_losses(F, exact)


def _size_of(function: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, tuple[Any, ...], str]:
    """The shape a ``torch.randn``-like call asks for, the arguments before it, and its keyword (or "")."""
    if function.__name__ == "randint":  # randint(high, size) or randint(low, high, size)
        if "size" in kwargs:
            return tuple(kwargs["size"]), args, "size"
        sizes = [i for i, a in enumerate(args) if isinstance(a, (tuple, list))]
        if not sizes:
            return None, args, ""
        i = sizes[0]
        return tuple(args[i]), args[:i], ""
    if "size" in kwargs:
        return tuple(kwargs["size"]), args, "size"
    if args and isinstance(args[0], (tuple, list)):
        return tuple(args[0]), (), ""
    if args and all(isinstance(a, int) for a in args):
        return tuple(args), (), ""
    return None, args, ""
