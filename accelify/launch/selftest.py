"""``accelify test``: launch the bundled check script with the configured processes, collect its results."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from dataclasses import dataclass

from pathlib import Path

from accelify.launch.plan import LaunchOptions, LaunchPlan, resolve_plan
from accelify.launch.run import LaunchResult, execute

CHECK_SCRIPT = Path(__file__).with_name("check_script.py")  # the script `accelify test` launches


@dataclass(frozen=True)
class CheckResult:
    """One row of the report: the check's name, whether every process passed it, and a detail."""

    name: str
    passed: bool
    detail: str


@dataclass(frozen=True)
class SelfTestOutcome:
    """The checks that ran (empty if the script died before reporting) and how the launch ended."""

    checks: tuple[CheckResult, ...]
    launch: LaunchResult

    @property
    def passed(self) -> bool:
        return self.launch.exit_code == 0 and bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else (self.launch.exit_code or 1)


def plan_checks(config_file: str | None = None) -> LaunchPlan:
    """The launch plan of the check script: the config file's processes, devices and settings."""
    return resolve_plan(LaunchOptions(script=str(CHECK_SCRIPT), config_file=config_file))


def run_checks(plan: LaunchPlan) -> SelfTestOutcome:
    """Launch the check script with ``plan`` and read the report its main process writes.

    With two processes every check runs on both, and passes only if it passed on both.
    """
    fd, report = tempfile.mkstemp(prefix="accelify-test-", suffix=".json")
    os.close(fd)
    try:
        args = ("--report", report, "--expect-processes", str(plan.world_size))
        launch = execute(dataclasses.replace(plan, script_args=args))
        with open(report, encoding="utf-8") as fh:
            text = fh.read()
    finally:
        os.unlink(report)
    rows = json.loads(text) if text.strip() else []
    checks = tuple(CheckResult(r["name"], bool(r["passed"]), str(r["detail"])) for r in rows)
    return SelfTestOutcome(checks=checks, launch=launch)
