"""Experiment trackers (JSONL, TensorBoard): init_trackers, log, get_tracker, end_training.

``Accelerator`` keeps the started trackers (``accelerator.trackers``) and delegates to
:func:`start_trackers`, :func:`log_to`, :func:`find_tracker` and :func:`finish_trackers`, passing the
trackers, its ``log_with`` and logging folder, and whether this is the main process.

Trackers run on the main process only (unless a tracker sets ``main_process_only = False``); the
other processes hold the same tracker objects, never started, so a script may call
``accelerator.log(...)`` everywhere without an ``if accelerator.is_main_process`` guard.

``log_with`` accepts tracker names (``"jsonl"``, ``"tensorboard"``), ``"all"`` (every tracker whose
dependencies are installed) and :class:`GeneralTracker` instances, alone or in a list.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import time
from pathlib import Path
from typing import Any, Iterable, Mapping

from .errors import ConfigurationError


class GeneralTracker:
    """Base class of experiment trackers; subclass it to plug in your own (Hugging Face's interface).

    A subclass defines ``name`` (str), ``requires_logging_directory`` (bool) and a ``tracker``
    property (the underlying run/writer object), and overrides ``start``, ``store_init_configuration``,
    ``log`` and ``finish`` as needed. ``main_process_only = True`` (the default) means the
    ``Accelerator`` calls those methods on the main process only.

    Example (with two processes, only rank 0 prints)::

        class PrintTracker(GeneralTracker):
            name = "print"
            requires_logging_directory = False
            tracker = None
            def log(self, values, step=None, **kwargs):
                print(step, values)

        accelerator = Accelerator(log_with=PrintTracker())
    """

    main_process_only: bool = True

    def __init__(self, _blank: bool = False) -> None:
        if _blank:
            return
        missing = [attr for attr in ("name", "requires_logging_directory") if not hasattr(self, attr)]
        if "tracker" not in dir(self):
            missing.append("tracker")
        if missing:
            raise TypeError(
                f"{type(self).__name__} is missing the tracker attribute(s) {', '.join(missing)}; "
                "define them in the class (name: str, requires_logging_directory: bool, tracker: property)."
            )

    def start(self) -> None:
        """Open the run (called by ``init_trackers``, on the main process)."""

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        """Record the run's hyperparameters ``values``."""

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        """Record ``values`` (name -> number/str) at ``step``."""

    def finish(self) -> None:
        """Flush and close the run (called by ``end_training``)."""


def _jsonable(value: Any) -> Any:
    """Turn tensors, numpy scalars, paths and nested containers into JSON-compatible values."""
    if isinstance(value, (str, bool)) or value is None:
        return value
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set)):
        return [_jsonable(v) for v in value]
    tolist = getattr(value, "tolist", None)  # tensors, numpy arrays and numpy scalars
    if callable(tolist):
        return _jsonable(tolist())
    return str(value)


class JSONLTracker(GeneralTracker):
    """Dependency-free tracker: one JSON object per ``log`` call.

    Writes ``<logging_dir>/<run_name>/metrics.jsonl`` (lines like
    ``{"step": 3, "loss": 0.25, "_time": 1700000000.0}``) and ``config.json`` (the init configuration).
    With two processes, only rank 0 writes.
    """

    name = "jsonl"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        if kwargs:
            raise ConfigurationError(
                f"JSONLTracker takes no options, got {', '.join(sorted(kwargs))}; remove them from init_kwargs['jsonl']."
            )
        self.run_name = run_name
        self.run_dir = Path(logging_dir) / run_name
        self._file: Any = None

    @property
    def tracker(self) -> Any:
        """The open ``metrics.jsonl`` file object (None before ``start``)."""
        return self._file

    @property
    def metrics_path(self) -> Path:
        return self.run_dir / "metrics.jsonl"

    def start(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._file = open(self.metrics_path, "a", encoding="utf-8")  # noqa: SIM115 - closed in finish()

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        path = self.run_dir / "config.json"
        tmp = path.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(_jsonable(values), indent=2, sort_keys=True) + "\n", encoding="utf-8")
        os.replace(tmp, path)

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        if self._file is None:
            raise ConfigurationError("JSONLTracker.log was called before start(); call accelerator.init_trackers(...) first.")
        record = {"step": step, **{str(k): _jsonable(v) for k, v in values.items()}, "_time": time.time()}
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()

    def finish(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None


class TensorBoardTracker(GeneralTracker):
    """TensorBoard tracker (needs the ``tensorboard`` package): ``<logging_dir>/<run_name>/events.*``.

    Scalars go to ``add_scalar``, strings to ``add_text``, dicts of scalars to ``add_scalars``;
    ``init_kwargs={"tensorboard": {...}}`` is passed to ``SummaryWriter``. Rank 0 only.
    """

    name = "tensorboard"
    requires_logging_directory = True

    def __init__(self, run_name: str, logging_dir: str | os.PathLike[str], **kwargs: Any) -> None:
        super().__init__()
        self.run_name = run_name
        self.logging_dir = os.path.join(os.fspath(logging_dir), run_name)
        self.init_kwargs = kwargs
        self.writer: Any = None

    @property
    def tracker(self) -> Any:
        """The ``torch.utils.tensorboard.SummaryWriter`` (None before ``start``)."""
        return self.writer

    def start(self) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(self.logging_dir, **self.init_kwargs)

    def store_init_configuration(self, values: dict[str, Any]) -> None:
        flat = {k: (v if isinstance(v, (int, float, str, bool)) else str(v)) for k, v in values.items()}
        self.writer.add_hparams(flat, metric_dict={}, run_name=".")
        self.writer.flush()

    def log(self, values: dict[str, Any], step: int | None = None, **kwargs: Any) -> None:
        for key, value in values.items():
            value = _jsonable(value)
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                self.writer.add_scalar(key, value, global_step=step, **kwargs)
            elif isinstance(value, str):
                self.writer.add_text(key, value, global_step=step, **kwargs)
            elif isinstance(value, dict):
                self.writer.add_scalars(key, value, global_step=step, **kwargs)
        self.writer.flush()

    def finish(self) -> None:
        if self.writer is not None:
            self.writer.close()


# name -> (class, required importable module or None)
_BUILTIN: dict[str, tuple[type[GeneralTracker], str | None]] = {
    "jsonl": (JSONLTracker, None),
    "tensorboard": (TensorBoardTracker, "tensorboard"),
}


def available_trackers() -> list[str]:
    """Names of the built-in trackers whose dependencies are installed (what ``log_with="all"`` means)."""
    return [
        name for name, (_, module) in _BUILTIN.items() if module is None or importlib.util.find_spec(module) is not None
    ]


def filter_trackers(log_with: Any, logging_dir: str | os.PathLike[str] | None) -> list[str | GeneralTracker]:
    """Validate ``log_with`` and return the tracker names/instances to start, without duplicates.

    Raises ``ConfigurationError`` for an unknown name (listing the available ones), a tracker whose
    package is missing, or a file-writing tracker without a logging directory.
    """
    if log_with is None:
        return []
    items: Iterable[Any] = log_with if isinstance(log_with, (list, tuple)) else [log_with]
    known = available_trackers()
    out: list[str | GeneralTracker] = []
    for item in items:
        if isinstance(item, GeneralTracker):
            out.append(item)
            continue
        name = str(getattr(item, "value", item)).lower()  # accept enum-like LoggerType members
        names = known if name == "all" else [name]
        for one in names:
            if one not in _BUILTIN:
                raise ConfigurationError(
                    f"log_with={item!r} is not a known tracker; available here: {', '.join(known)} "
                    f"(or 'all', or a GeneralTracker instance)."
                )
            if one not in known:
                raise ConfigurationError(
                    f"log_with={one!r} needs the {_BUILTIN[one][1]!r} package, which is not installed; "
                    f"`pip install {_BUILTIN[one][1]}` or choose one of: {', '.join(known)}."
                )
            if _BUILTIN[one][0].requires_logging_directory and logging_dir is None:
                raise ConfigurationError(
                    f"The {one!r} tracker writes files and needs a logging directory; pass "
                    "Accelerator(project_dir=...) or ProjectConfiguration(logging_dir=...)."
                )
            if one not in out:
                out.append(one)
    return out


def make_trackers(
    log_with: Any,
    project_name: str,
    logging_dir: str | os.PathLike[str] | None,
    init_kwargs: Mapping[str, Mapping[str, Any]] | None = None,
) -> list[GeneralTracker]:
    """Build (not start) the trackers ``log_with`` asks for; ``init_kwargs[name]`` goes to each constructor."""
    init_kwargs = init_kwargs or {}
    trackers: list[GeneralTracker] = []
    for item in filter_trackers(log_with, logging_dir):
        if isinstance(item, GeneralTracker):
            trackers.append(item)
            continue
        cls = _BUILTIN[item][0]
        trackers.append(cls(project_name, logging_dir, **dict(init_kwargs.get(item, {}))))  # type: ignore[call-arg]
    return trackers


def _runs(tracker: GeneralTracker, is_main_process: bool) -> bool:
    return is_main_process or not getattr(tracker, "main_process_only", True)


def start_trackers(log_with: Any, project_name: str, logging_dir: str | os.PathLike[str] | None, *,
                   is_main_process: bool, config: dict[str, Any] | None = None,
                   init_kwargs: dict[str, dict[str, Any]] | None = None) -> list[GeneralTracker]:
    """``Accelerator.init_trackers``: build every tracker of ``log_with`` for run ``project_name``, start
    those this process runs, store ``config`` in them, and return them all.

    With two processes, rank 0 creates ``<logging_dir>/<project_name>/metrics.jsonl`` (for
    ``log_with="jsonl"``); rank 1 gets the same tracker objects and starts nothing.
    """
    trackers = make_trackers(log_with, project_name, logging_dir, init_kwargs)
    for tracker in trackers:
        if _runs(tracker, is_main_process):
            tracker.start()
    if config is not None:
        for tracker in trackers:
            if _runs(tracker, is_main_process):
                tracker.store_init_configuration(config)
    return trackers


def log_to(trackers: Iterable[GeneralTracker], values: dict[str, Any], *, is_main_process: bool,
           step: int | None = None, log_kwargs: dict[str, dict[str, Any]] | None = None) -> None:
    """``Accelerator.log``: send ``values`` to every tracker this process runs (the main process's)."""
    log_kwargs = log_kwargs or {}
    for tracker in trackers:
        if _runs(tracker, is_main_process):
            tracker.log(values, step=step, **log_kwargs.get(tracker.name, {}))


def find_tracker(trackers: list[GeneralTracker], name: str, unwrap: bool = False) -> Any:
    """``Accelerator.get_tracker``: the started tracker called ``name`` (its underlying object with ``unwrap``).

    With no trackers started, an inert ``GeneralTracker`` so rank-agnostic code keeps working.
    """
    if not trackers:
        return GeneralTracker(_blank=True)
    for tracker in trackers:
        if tracker.name == name:
            return tracker.tracker if unwrap else tracker
    raise ConfigurationError(
        f"No started tracker is called {name!r}; started: {', '.join(t.name for t in trackers)}."
    )


def finish_trackers(trackers: Iterable[GeneralTracker], *, is_main_process: bool) -> None:
    """``Accelerator.end_training``'s first half: finish every tracker this process runs."""
    for tracker in trackers:
        if _runs(tracker, is_main_process):
            tracker.finish()
