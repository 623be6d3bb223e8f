"""The recorder's data-loader events (``accelify_verify_recorder.py``): where each loader is iterated, the batches
drawn per epoch, and whether a DataLoader epoch is in progress (what is printed, logged or returned meanwhile is a
per-step value).

Like the recorder, this module imports nothing of accelify and nothing but the standard library.
"""

from __future__ import annotations

from typing import Any

EPOCHS_KEPT = 4  # batches drawn per epoch, kept for this many first epochs of each loader


class LoaderEvents:
    """Mixed into the recorder: its ``lock``, ``loaders``, ``site_objects``, ``last_loader``, ``draws`` and
    ``in_epoch`` state, updated by the DataLoader patches (``accelify_verify_patches.py``)."""

    def on_iter(self, loader: Any, caller: Any) -> str:
        """The key of ``loader`` iterated from frame ``caller``: ``file:line#k``, the k-th loader seen there."""
        site = self._site(caller)
        with self.lock:
            objects = self.site_objects.get(site)
            if objects is None:
                from torch.utils.weak import WeakIdKeyDictionary

                objects = self.site_objects[site] = WeakIdKeyDictionary()
            if loader not in objects:
                objects[loader] = len(objects)
            key = f"{site}#{objects[loader]}"
            info = self.loaders.get(key)
            if info is None:
                info = self.loaders[key] = {"site": site, "class": type(loader).__name__, "len": None,
                                            "iterations": 0, "draws": 0, "epoch_draws": [], "epochs": 0, "current": 0,
                                            "batch": None, "training": False}
            info["iterations"] += 1
            info["current"] = 0
            info["split"] = getattr(loader, "_accelify_verify_split", 1)  # exact mode: a share of each batch
            info["len"] = self.batches_per_epoch(loader)
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
                info["current"] = 0
            self.in_epoch = False

    def training_epochs(self) -> int:
        """Epochs run to their end so far by the loaders whose batches fed a backward."""
        with self.lock:
            return sum(info["epochs"] for info in self.loaders.values() if info["training"])
