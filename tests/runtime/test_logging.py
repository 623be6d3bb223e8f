"""get_logger: levels, caller file:line, rank prefix, no import-time handlers, and a 2-process launch."""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest

from accelify.runtime import get_logger
from accelify.runtime.errors import ConfigurationError

WORKERS = Path(__file__).parent / "workers"


def test_records_point_at_the_caller_and_levels_apply(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger("accelify.tests.levels", log_level="debug")
    with caplog.at_level(logging.DEBUG, logger="accelify.tests.levels"):
        logger.debug("first")
        line = sys._getframe().f_lineno - 1
        logger.info("everywhere", main_process_only=False)
        logger.warning_once("careful %s", 1)
        logger.warning_once("careful %s", 1)
    messages = [r.getMessage() for r in caplog.records]
    assert messages == ["first", "[RANK 0] everywhere", "careful 1"]
    assert {r.filename for r in caplog.records} == {"test_logging.py"}
    assert caplog.records[0].lineno == line and caplog.records[2].lineno == line + 3
    assert logging.getLogger("accelify.tests.levels").level == logging.DEBUG


def test_level_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "warning")
    assert get_logger("accelify.tests.env1").logger.level == logging.WARNING
    monkeypatch.setenv("ACCELIFY_LOG_LEVEL", "ERROR")
    assert get_logger("accelify.tests.env2").logger.level == logging.ERROR
    assert get_logger("accelify.tests.env3", log_level="INFO").logger.level == logging.INFO
    monkeypatch.setenv("ACCELIFY_LOG_LEVEL", "LOUD")
    with pytest.raises(ConfigurationError, match="ACCELIFY_LOG_LEVEL='LOUD'"):
        get_logger("accelify.tests.env4")


def test_main_process_only_skips_other_ranks(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("RANK", "1")  # torchrun's rank, before any process group exists
    logger = get_logger("accelify.tests.rank", log_level="INFO")
    with caplog.at_level(logging.INFO, logger="accelify.tests.rank"):
        logger.info("hidden")
        logger.info("shown", main_process_only=False)
    assert [r.getMessage() for r in caplog.records] == ["[RANK 1] shown"]
    caplog.clear()
    monkeypatch.delenv("RANK")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")  # srun's rank is read the same way
    monkeypatch.setenv("SLURM_PROCID", "1")
    with caplog.at_level(logging.INFO, logger="accelify.tests.rank"):
        logger.info("hidden")
    assert caplog.records == []
    monkeypatch.setenv("RANK", "one")  # malformed: logging still works (the Accelerator reports the variable)
    with caplog.at_level(logging.INFO, logger="accelify.tests.rank"):
        logger.info("main")
    assert [r.getMessage() for r in caplog.records] == ["main"]


@pytest.mark.multiprocess
def test_no_handlers_at_import_or_creation() -> None:
    code = (
        "import logging; before = list(logging.getLogger().handlers);"
        "from accelify.runtime import get_logger; log = get_logger('x', log_level='INFO');"
        "assert logging.getLogger().handlers == before and not log.logger.handlers;"
        "assert logging.getLogger().level == logging.WARNING; print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == "ok", out.stderr


@pytest.mark.multiprocess
def test_two_processes(run_distributed) -> None:
    out = run_distributed(WORKERS / "logging_order.py").stdout
    logs = [line for line in out.splitlines() if line.startswith("LOG ")]
    assert "LOG DEBUG main only @logging_order.py:20" in logs
    assert sum("main only" in line for line in logs) == 1
    assert "LOG INFO [RANK 0] everyone @logging_order.py:21" in logs
    assert "LOG INFO [RANK 1] everyone @logging_order.py:21" in logs
    ordered = [line for line in logs if "ordered" in line]
    assert ordered == ["LOG INFO [RANK 0] ordered @logging_order.py:24", "LOG INFO [RANK 1] ordered @logging_order.py:24"]
    assert sum("once" in line for line in logs) == 1
    assert out.count("LOGGING-OK") == 2
