"""``get_logger``: a standard ``logging`` logger that knows which process it runs in.

Records are logged on the main process only unless ``main_process_only=False`` (then every process
logs, prefixed ``[RANK n]``); ``in_order=True`` makes the processes log one after another. Records
point at the caller's file and line. Nothing here adds handlers: configure output as usual
(``logging.basicConfig(...)``).
"""

from __future__ import annotations

import logging
from typing import Any, MutableMapping

from .errors import ConfigurationError

def _process() -> tuple[int, int]:
    """(rank, number of processes that can synchronise) from the process group, else the launcher's rank."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank(), dist.get_world_size()
    from .process_group import declared_processes

    try:
        rank = declared_processes()[2]
    except ConfigurationError:  # a malformed variable: the Accelerator reports it; logging must not fail
        rank = None
    return rank or 0, 1


def _wait_for_everyone() -> None:
    try:
        from .state import PartialState
    except ImportError:
        import torch.distributed as dist

        dist.barrier()
        return
    PartialState().wait_for_everyone()


class MultiProcessAdapter(logging.LoggerAdapter):
    """A ``LoggerAdapter`` whose logging calls take ``main_process_only`` and ``in_order``.

    With two processes: ``logger.info("x")`` logs once (process 0); ``logger.info("x",
    main_process_only=False)`` logs ``[RANK 0] x`` and ``[RANK 1] x``; ``logger.info("x",
    in_order=True)`` logs both, process 0 first, waiting for each other (every process must call it).
    """

    def __init__(self, logger: logging.Logger, extra: MutableMapping[str, Any] | None = None) -> None:
        super().__init__(logger, extra or {})
        self._warned: set[tuple[str, tuple[Any, ...]]] = set()

    def log(  # type: ignore[override]
        self,
        level: int,
        msg: object,
        *args: Any,
        main_process_only: bool = True,
        in_order: bool = False,
        **kwargs: Any,
    ) -> None:
        """Log ``msg`` at ``level`` on the main process, on every process, or on each in turn."""
        rank, world = _process()
        if in_order and world > 1:
            for turn in range(world):
                if turn == rank and self.isEnabledFor(level):
                    self._emit(level, f"[RANK {rank}] {msg}", args, kwargs)
                _wait_for_everyone()
            return
        if not self.isEnabledFor(level):
            return
        if not main_process_only or in_order:
            self._emit(level, f"[RANK {rank}] {msg}", args, kwargs)
        elif rank == 0:
            self._emit(level, msg, args, kwargs)

    def _emit(self, level: int, msg: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        msg, kwargs = self.process(msg, kwargs)
        # count this module's frames out, so records point at the caller (logging skips its own)
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 2
        self.logger.log(level, msg, *args, **kwargs)

    def warning_once(self, msg: object, *args: Any, **kwargs: Any) -> None:
        """``warning`` that logs a given message (with the same arguments) only the first time."""
        key = (str(msg), tuple(repr(a) for a in args))
        if key in self._warned:
            return
        self._warned.add(key)
        kwargs["stacklevel"] = kwargs.get("stacklevel", 1) + 1
        self.log(logging.WARNING, msg, *args, **kwargs)


def get_logger(name: str, log_level: str | int | None = None) -> MultiProcessAdapter:
    """The logger ``name`` wrapped for multi-process use; see :class:`MultiProcessAdapter`.

    The level comes from ``log_level``, else ``ACCELIFY_LOG_LEVEL``, else ``ACCELERATE_LOG_LEVEL``;
    without any, the logger's level is left as configured. Example::

        logger = get_logger(__name__, log_level="DEBUG")
        logger.info("loaded", main_process_only=False)  # with two processes: "[RANK 0] loaded", "[RANK 1] loaded"
    """
    source = "log_level"
    if log_level is None:
        from .launch_settings import log_level as level_from_environment

        found = level_from_environment()  # read at each call, as Hugging Face does: a script may set it late
        if found is not None:
            log_level, source = found
    logger = logging.getLogger(name)
    if log_level is not None:
        level = log_level.upper() if isinstance(log_level, str) else log_level
        try:
            logger.setLevel(level)
        except (ValueError, TypeError) as exc:
            raise ConfigurationError(
                f"{source}={log_level!r} is not a logging level; use DEBUG, INFO, WARNING, ERROR or CRITICAL."
            ) from exc
    return MultiProcessAdapter(logger)
