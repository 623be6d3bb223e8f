"""CI measures the tool through ``accelify verify``: every corpus case, converted by the tool, must verify.

Each case runs once in the session's pool (``tests/verification_pool.py``): the original and the conversion on one
process, the conversion on 2 Gloo processes, each to the end of the script with the case's first ``run.toml``
arguments. A conversion that regresses fails here with verify's verdict and table: no check may fail, and only the
checks a script's structure can leave unjudged may be skipped (see ``STRUCTURAL``). Cases the tool leaves unchanged
on purpose (``distributed = false``) must come back with the status ``run.toml`` names (default unchanged), with
every check skipped for that reason.
"""

from __future__ import annotations

import io

import pytest
from corpus_cases import CORPUS, IDS, Case
from verification_pool import VerificationPool

from accelify.console import make_console
from accelify.verify import VerifyReport
from accelify.verify.report import SKIPPED
from accelify.console.verify import print_verify_report

pytestmark = pytest.mark.multiprocess

# Checks a script's own structure can leave unjudged (skipped with the reason): batches that do not come from a
# DataLoader (sharding; in exact mode, the processes' batches), weights updated without a torch.optim optimizer (the
# parameter checks and the schedule), and a first step exact mode cannot make exact (BatchNorm in training mode over
# a share of the batch, a batch that does not split evenly: "same as original", and the printed, logged and returned
# values checks when every aggregate came after such a step).
STRUCTURAL = {"data sharded", "same parameters", "model wrapped", "parameters agree", "same data", "same schedule",
              "parameters train", "same as original", "same printed values", "same logged values",
              "same returned values"}


def table(report: VerifyReport) -> str:
    """The report as the terminal would show it, for a failure message."""
    buffer = io.StringIO()
    print_verify_report(make_console(buffer), report)
    return buffer.getvalue()


# verify's own limits, not conversions found wrong (none at present). A loss that depends on which samples share a
# batch (`mining_loss_helper`, `unknown_loss_parameter`) is no longer one: exact mode would give each process a slice
# of every batch, so verify runs such a program as a real launch (accelify/verify/batch_membership.py).
VERIFY_LIMITS: dict[str, str] = {}

# Conversions verify finds wrong (the converter's to fix, not verify's): "same printed values" shows the converted
# script printing an epoch aggregate computed from process 0's share of the data, without a reduce (none at present:
# engine_module's AverageMeters in a dict are reduced now, analysis/meter_sums.py).
CONVERSIONS_FOUND_WRONG: dict[str, str] = {}
EXPECTED_FAILURES = VERIFY_LIMITS | CONVERSIONS_FOUND_WRONG


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=EXPECTED_FAILURES[n], strict=True))
                                  if n in EXPECTED_FAILURES else n for n in IDS])
def test_corpus_case_verifies(verification_pool: VerificationPool, name: str) -> None:
    case = Case.load(CORPUS / name)
    report = verification_pool.corpus(name)
    if not case.distributed:
        assert report.conversion == (case.status or "unchanged"), table(report)
        assert all(check.status == SKIPPED for check in report.checks), table(report)
        assert not report.runs
        return
    assert not report.failed and report.conversion == "converted", f"corpus/{name}: {report.verdict}\n{table(report)}"
    unjudged = {c.name for c in report.checks if c.status == SKIPPED}
    assert unjudged <= STRUCTURAL, f"corpus/{name}: skipped {sorted(unjudged - STRUCTURAL)}\n{table(report)}"
    one_process = report.run("converted")
    assert one_process is not None and one_process.backwards and one_process.backwards[0] > 0, "it never trained"
    distributed = report.run("distributed")
    assert distributed is not None and distributed.backwards[0] == distributed.backwards[1] > 0
    if "same parameters" not in unjudged:  # a torch.optim optimizer stepped: as often on every process
        assert one_process.steps[0] > 0 and distributed.steps[0] == distributed.steps[1] > 0
