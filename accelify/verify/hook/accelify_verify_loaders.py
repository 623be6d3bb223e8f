"""The recorder's data-loader events (``accelify_verify_recorder.py``): where each loader is iterated, the batches
drawn per epoch, and whether a DataLoader epoch is in progress (what is printed, logged or returned meanwhile is a
per-step value); and the epoch limit.

The epoch limit (``ACCELIFY_VERIFY_BATCHES`` K, ``ACCELIFY_VERIFY_EPOCHS`` E) makes a run reach what a program does
at an epoch's end (validation, epoch averages, a per-epoch scheduler, the best-checkpoint test) without running whole
epochs: every DataLoader epoch ends after K batches (its iterator raises StopIteration, so the script's own code after
the loop runs) and ``len(loader)`` says K, training and evaluation loaders alike, so every run walks the same first K
batches of each loader (exact mode prepares a loader whole and splits each batch: the same K batches). A loader
prepared for a real N-process launch (whole batches, sharded) holds ceil(K/N) of them per process: the N processes
together walk about K, as the one process does. The process ends, as at the step limit, when a loader whose batches
fed a backward is iterated at a site whose training loaders already ran E epochs (a loader made anew each epoch
at the same line counts with its predecessors). A loader the script wraps (``itertools.cycle``, a generator that
re-iterates it) may never end an epoch: a cap on optimizer steps, K x (E + 1) per optimizer, ends such a run as the
step limit does.

Like the recorder, this module imports nothing of accelify and nothing but the standard library.
"""

from __future__ import annotations

from typing import Any

EPOCHS_KEPT = 4  # batches drawn per epoch, kept for this many first epochs of each loader


class LoaderEvents:
    """Mixed into the recorder: its ``lock``, ``loaders``, ``site_objects``, ``last_loader``, ``draws`` and
    ``in_epoch`` state, updated by the DataLoader patches (``accelify_verify_patches.py``)."""

    def loader_limit(self, loader: Any) -> int | None:
        """Batches per epoch ``loader`` yields under the epoch limit (None: no limit): K, or ceil(K/N) for a loader
        sharded over N processes with whole batches (a real launch's prepared loader)."""
        if not self.batch_limit:
            return None
        sharding = loader if hasattr(loader, "num_processes") else getattr(loader, "batch_sampler", None)  # HF's
        shards = getattr(sharding, "num_processes", 1)
        if not isinstance(shards, int) or shards < 1 or getattr(sharding, "split_batches", False) is True:
            shards = 1
        return -(-self.batch_limit // shards)

    def backstop(self) -> int:
        """Optimizer steps after which the epoch limit ends a run whose loader epochs never end (a wrapped loader)."""
        return self.batch_limit * (self.epoch_limit + 1) * max(1, self.optimizers_seen)

    def _limit_reached(self, key: str, site: str) -> bool:
        """``key``'s loader starts an epoch past the epoch limit: it fed a backward (or is new at a line whose loaders
        did) and the training loaders of ``site`` ran the limit's epochs."""
        info = self.loaders.get(key)
        trained = [i for i in self.loaders.values() if i["site"] == site and i["training"]]
        if not trained or (info is not None and not info["training"] and info["iterations"]):
            return False
        return sum(i.get("trained_epochs", 0) for i in trained) >= self.epoch_limit

    def on_iter(self, loader: Any, caller: Any) -> str:
        """The key of ``loader`` iterated from frame ``caller``: ``file:line#k``, the k-th loader seen there; at the
        epoch limit the process ends here."""
        site = self._site(caller)
        with self.lock:
            objects = self.site_objects.get(site)
            if objects is None:
                from torch.utils.weak import WeakIdKeyDictionary

                objects = self.site_objects[site] = WeakIdKeyDictionary()
            if loader not in objects:
                objects[loader] = len(objects)
            key = f"{site}#{objects[loader]}"
            if self.epoch_limit and self._limit_reached(key, site):
                self.stop("epochs")
            info = self.loaders.get(key)
            if info is None:
                info = self.loaders[key] = {"site": site, "class": type(loader).__name__, "len": None,
                                            "iterations": 0, "draws": 0, "epoch_draws": [], "epochs": 0, "current": 0,
                                            "batch": None, "training": False}
            info["iterations"] += 1
            info["current"] = 0
            info["backwards_at_start"] = self.backwards
            info["split"] = getattr(loader, "_accelify_verify_split", 1)  # exact mode: a share of each batch
            info["len"] = self.batches_per_epoch(loader)
            limit = self.loader_limit(loader)
            if limit is not None and info["len"] is not None:  # an iterable dataset's length, read without len()
                info["len"] = min(info["len"], limit)
        return key

    def on_draw(self, key: str, batch: Any) -> None:
        with self.lock:
            info = self.loaders.get(key)
            if info is not None:
                info["draws"] += 1
                info["current"] += 1
                self.draws += 1
                if info["batch"] is None:
                    rows = self.leading_size(batch, self.torch.Tensor)
                    split = info.get("split", 1)
                    info["batch"] = -(-rows // split) if rows is not None and split > 1 else rows
            self.last_loader = key
            self.in_epoch = True

    def on_epoch_end(self, key: str) -> None:
        with self.lock:
            info = self.loaders.get(key)
            if info is not None:
                info["epochs"] += 1
                if len(info["epoch_draws"]) < EPOCHS_KEPT:  # written with every step: kept short
                    info["epoch_draws"].append(info["current"])
                if self.backwards > info.get("backwards_at_start", self.backwards):
                    info["trained_epochs"] = info.get("trained_epochs", 0) + 1  # an epoch that trained
                info["current"] = 0
            self.in_epoch = False

    def training_epochs(self) -> int:
        """Epochs run to their end so far by the loaders whose batches fed a backward."""
        with self.lock:
            return sum(info["epochs"] for info in self.loaders.values() if info["training"])
