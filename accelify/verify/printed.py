"""The printed-values checks: every aggregate the script prints, logs or returns on N processes equals the original's.

What the check reads: every line each run printed to stdout that holds a digit (``print``, ``accelerator.print``,
``sys.stdout.write``, a logging handler writing to stdout), recorded by the recorder with the script line that
printed it and whether a DataLoader's epoch was in progress at that moment (``hook/accelify_verify_stdout.py``).

How it tells an aggregate from a per-step value:

- a line printed while an epoch of a loader was in progress (a batch drawn, the epoch not ended: inside a batch
  loop) is a per-step value: on N processes process 0 sees its share of the batch, so it may legitimately differ
  and is not compared;
- a line printed after a loader's epoch ended (or before any batch) is an aggregate (an epoch average, an accuracy,
  a best value): it must equal the original's;
- except a number that is the last step's loss (``print(f"epoch {e} loss {loss.item()}")`` after the loop, the
  conventional per-step loss printed from one process): in the converted script's one-process run and in process 0's
  it stands in the same ratio to the loss handed to the last ``backward`` (1, or the accumulation divisor; or N or
  1/N times it: a loss divided by the batch's size, of which process 0 has 1/N), so it is recognised as that step's
  loss and not compared.

Which numbers are compared: the converted script's one-process run is the determinism control. A number is
compared only where the original and the one-process conversion printed the same value (timings, memory, run ids
differ between two runs and are left out thereby); numbers written with a time unit (``0.5s``, ``12 ms``,
``3 it/s``) and clock times (``12:03:44``) are left out too, since the N-process run is slower than both. The lines
of the original and of process 0 are matched in order by their text with the numbers blanked (``difflib``); a line
only one of them printed is not compared.

Tolerance: one unit in the last printed digit of either value, plus the exact mode's float tolerance at the step
the line was printed (``exactness.tolerance``: rtol 1e-4, growing after ``HORIZON`` steps). After
``COMPARED_STEPS`` steps, where parameters are no longer compared either (two exact runs with Adam drift apart by
more than any fixed tolerance: 1.3 % after 832 steps of the cost benchmark's script, 68 % after 3008), the first
value a line prints there fails only as a factor (about N times or 1/N of the original's), and its later values are
not compared with the original; a share's value is still caught between the processes, to the end.

Between the processes: exact mode records what ``accelerator.print`` would have printed on the processes that print
nothing (silent lines), and a process that prints with ``print`` records its lines anyway. An aggregate reduced over
the processes is the same on every process, bit for bit, whatever the float drift; one computed from a process's own
shard differs. So each compared number of process 0 must also equal the other processes' (the last-step loss
excepted, as above). This holds after an inexact step too, where the original can no longer be compared, and it
catches a share's metric late in a long run, where the growing float tolerance against the original would let a
share's value within a percent pass.

Logged and returned values: the same comparison makes two more checks, ``same logged values`` (what the script
logs with ``SummaryWriter.add_scalar``, ``accelerator.log``, ``wandb.log`` or ``logging``:
``hook/accelify_verify_logged.py``) and ``same returned values`` (what the script's own functions return after a
loader's epoch ran inside them, ``val_loss = evaluate(model, val_loader)``: ``hook/accelify_verify_returns.py``),
so an aggregate used only to pick the best checkpoint or to stop early is compared too; a branch on a value of one
process's share shows as the differing value it tests. Numbers handed over as values (not printed text) are compared
without the printed digit's slack.

Like ``same as original``, the check needs the processes to share the original's batches (a prepared DataLoader;
else it is skipped) and stops at the first step exact mode marked inexact (a batch that does not split evenly,
...): a line printed after it legitimately differs and is not compared; where that leaves nothing compared, the
check is skipped with the reason.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

from accelify.verify.exactness import COMPARED_STEPS, NOT_SHARED, tolerance
from accelify.verify.records import PaddedGather, PrintedLine, ProcessRecord
from accelify.verify.report import FAILED, PASSED, SKIPPED, CheckResult
from accelify.verify.runner import RunOutcome

NAME = "same printed values"
BASE_RTOL, ATOL = 1e-4, 1e-9
NEAR = 0.25  # a value within 25% of original/N (or N x original) is named as such
PRECISE = 1e-3  # a printed number is taken for a reduced sum only when printed this precisely (relative unit) or more
_NUMBER = re.compile(r"(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?|\b(?:nan|inf)\b", re.IGNORECASE)
_SIGNED = re.compile(r"[-+]?(?:" + _NUMBER.pattern + ")", re.IGNORECASE)
_TIME_UNIT = re.compile(r"\s?(?:ms|us|µs|ns|s|sec|secs|seconds?|mins?|minutes?|h|hrs?|hours?|it/s|s/it)\b",
                        re.IGNORECASE)


@dataclass(frozen=True)
class Channel:
    """Where the compared values come from: one check each (``vias``: the recorder's ``via`` of their lines)."""

    name: str
    verb: str  # "printed": the original printed ...
    vias: tuple[str, ...]
    noun: str  # "this printed value is process 0's share"
    gerund: str  # "reduce it ... before dividing and printing"


PRINTED = Channel(NAME, "printed", ("print",), "printed value", "printing")
LOGGED = Channel("same logged values", "logged", ("logging", "add_scalar", "accelerator.log", "wandb.log"),
                 "logged value", "logging")
RETURNED = Channel("same returned values", "returned", ("return",), "returned value", "returning it")
CHANNELS = (PRINTED, LOGGED, RETURNED)
EXACT_VIAS = ("add_scalar", "accelerator.log", "wandb.log", "return")  # numbers handed over, not printed as text


@dataclass(frozen=True)
class Number:
    """One number of a printed line: its text, value, and whether it may be compared at all."""

    text: str
    value: float
    comparable: bool

    @property
    def unit(self) -> float:
        """One unit in the last printed digit (``0.125`` -> 0.001, ``1.5e-03`` -> 1e-4, ``456`` -> 1)."""
        mantissa, _, exponent = self.text.lower().lstrip("+-").partition("e")
        decimals = len(mantissa.partition(".")[2])
        try:
            return 10.0 ** (int(exponent or 0) - decimals)
        except ValueError:
            return 0.0


def numbers(text: str) -> list[Number]:
    """The numbers of ``text`` in order, each with whether it is comparable (not part of a name, a time, a clock)."""
    found = []
    for match in _NUMBER.finditer(text):
        start, end = match.span()
        token = match.group()
        if start and text[start - 1] == "-" and (start < 2 or not text[start - 2].isalnum()):
            token, start = "-" + token, start - 1  # a minus sign, not a hyphen inside a word or a range
        before, after = text[start - 1] if start else " ", text[end] if end < len(text) else " "
        clock = (before == ":" and text[start - 2:start - 1].isdigit()) or (
            after == ":" and text[end + 1:end + 2].isdigit())
        comparable = not (before.isalpha() or before == "_" or after.isalpha() or after == "_" or clock
                          or _TIME_UNIT.match(text, end))
        found.append(Number(token, float(token), comparable))
    return found


def template(text: str) -> str:
    """The line with every number blanked: what two runs of the same print statement share."""
    return _SIGNED.sub("#", text).strip()


def _same(a: Number, b: Number, rtol: float, printed: bool = True) -> bool:
    """Equal within ``rtol``, and one unit in the last digit of either where the numbers were printed as text."""
    if a.value != a.value or b.value != b.value:  # nan
        return (a.value != a.value) == (b.value != b.value)
    unit = max(a.unit, b.unit) if printed else 0.0
    return abs(a.value - b.value) <= unit + ATOL + rtol * max(abs(a.value), abs(b.value))


def _aggregates(record: ProcessRecord, channel: Channel = PRINTED) -> list[PrintedLine]:
    return [line for line in record.lines if not line.in_epoch and line.via in channel.vias]


def _matches(ours: list[PrintedLine], theirs: list[PrintedLine]) -> dict[int, int]:
    """Index in ``theirs`` of each line of ``ours`` with the same template, matched in order."""
    matcher = difflib.SequenceMatcher(None, [template(l.text) for l in ours], [template(l.text) for l in theirs],
                                      autojunk=False)
    return {block.a + k: block.b + k for block in matcher.get_matching_blocks() for k in range(block.size)}


LAST_LOSSES = 4  # a step may make several backwards (a GAN's discriminator, then its generator): the last few count


def _last_loss(record: ProcessRecord, line: PrintedLine) -> list[float | None]:
    """The losses of the last backwards before ``line`` (the last first)."""
    if not line.backwards or line.backwards > len(record.backwards):
        return []
    return [record.backwards[line.backwards - 1 - k].loss for k in range(min(LAST_LOSSES, line.backwards))]


def _step_loss(value: float, losses: list[float | None], control: float, controls: list[float | None], unit: float,
               n: int) -> bool:
    """``value`` stands to one of the last backwards' ``losses`` as ``control`` to the control run's loss of the same
    backward (or N times that, or 1/N: the loss divided by the batch's rows, of which process 0 has 1/N): it is that
    step's loss (``d_loss`` printed beside ``g_loss``, the backward before the last)."""
    for loss, control_loss in zip(losses, controls):
        if not loss or not control_loss:
            continue
        ratio = control / control_loss
        if ratio != 0 and any(abs(value - ratio * k * loss) <= unit + 1e-4 * abs(value) for k in (1, n, 1 / n)):
            return True
    return False


def skipped_value_checks(reason: str, processes: int) -> list[CheckResult]:
    """The printed, logged and returned values checks, skipped for ``reason``."""
    return [CheckResult(channel.name, f"{processes} processes", SKIPPED, reason) for channel in CHANNELS]


def value_checks(distributed: RunOutcome, original: RunOutcome, control: RunOutcome, n: int) -> list[CheckResult]:
    """Compare what process 0 of ``distributed`` printed, logged and returned with ``original``'s, ``control`` (the
    converted script on one process) telling values of the training from values that vary between runs (see the
    module docstring)."""
    if not original.ok or not original.records or not control.ok or not control.records:
        return skipped_value_checks("a one-process run, the reference or the control, did not finish", n)
    if not distributed.ok or not distributed.records:
        return skipped_value_checks(f"the run on {n} processes did not finish", n)
    main, *others = sorted(distributed.records, key=lambda r: r.rank)
    if not main.batches:
        return skipped_value_checks(NOT_SHARED, n)
    return [printed_check(main, original.records[0], control.records[0], n, tuple(others), channel)
            for channel in CHANNELS]


def printed_check(run: ProcessRecord, original: ProcessRecord, control: ProcessRecord, n: int,
                  others: tuple[ProcessRecord, ...] = (), channel: Channel = PRINTED) -> CheckResult:
    """Compare process 0's aggregates of ``channel`` (``run``) with the original's, and with what the other
    processes (``others``) printed or would have printed (see the module docstring)."""
    stage, verb, name = f"{n} processes", channel.verb, channel.name
    inexact = next((step for step in run.steps if step.inexact), None)
    ours, theirs, controls = (_aggregates(r, channel) for r in (original, run, control))
    in_run, in_control = _matches(ours, theirs), _matches(ours, controls)
    peers = [(record, _aggregates(record, channel), _matches(theirs, _aggregates(record, channel)))
             for record in others]
    compared = lines = step_losses = varying = late = agreed = launched = 0
    late_seen: set[tuple[str, int]] = set()  # (site, position) of numbers already judged past COMPARED_STEPS
    for i, j in sorted(in_run.items()):
        k = in_control.get(i)
        if k is None:
            continue
        line, control_line = theirs[j], controls[k]
        mine, again, got = numbers(ours[i].text), numbers(control_line.text), numbers(line.text)
        if not (len(mine) == len(again) == len(got)):
            continue
        exact = inexact is None or line.steps < inexact.n  # after an inexact step values legitimately differ
        late += not exact
        rtol = max(BASE_RTOL, tolerance(line.steps)[0])
        control_loss = _last_loss(control, control_line)
        counted = False
        for position, (a, c, d) in enumerate(zip(mine, again, got)):
            if not (a.comparable and d.comparable):
                continue
            if a.value != c.value and not (a.value != a.value and c.value != c.value):
                varying += 1  # two one-process runs printed different values: not a value of the training
                continue
            printed = d
            if _batch_sum(run, line, d):  # a real launch reduces 1/N of it here (hook/accelify_verify_epochsums.py)
                d, launched = Number(d.text, d.value / n, True), launched + 1
            same = exact and _same(a, d, rtol, line.via not in EXACT_VIAS)
            if exact and not same and line.steps > COMPARED_STEPS and (
                    (line.site, position) in late_seen or not _factor(a.value, d.value, n)):
                # past the steps whose parameters are compared, exact runs drift apart (Adam turns float noise in a
                # near-zero gradient into a full step, and a small loss late in training differs by any ratio): a
                # site's first value there is still judged by its factor (about N times or 1/N), its later ones not
                # at all; an aggregate must still be the same on every process (below)
                same = True
            if line.steps > COMPARED_STEPS:
                late_seen.add((line.site, position))
            if not same and printed is d and _step_loss(d.value, _last_loss(run, line), c.value, control_loss,
                                                        d.unit, n):
                step_losses += 1  # the last step's loss on process 0's share: conventional
                continue
            if exact and not same:
                launch = "" if printed is d else (
                    f"; a sum of per-batch means reduced with {_reduction(run, line, printed)!r}: a real launch, "
                    f"where each process sums the means of 1/{n} of the batches, {verb} {d.value:.6g}")
                return CheckResult(
                    name, stage, FAILED,
                    f"{_where(line)}the original {verb} {ours[i].text.strip()!r}{_how(line)}, process 0 of {n} "
                    f"{verb} {line.text.strip()!r} ({a.text} vs {printed.text}, after {line.steps} optimizer steps"
                    f"{launch})", _cause(a.value, d.value, n, channel, launched=printed is not d,
                                         padded=_padded_gather(run, line)))
            d = printed
            compared, counted = compared + exact, counted or exact
            for record, printed, matched in peers:
                peer = matched.get(j)
                found = numbers(printed[peer].text) if peer is not None else []
                if len(found) != len(got) or not found[position].comparable:
                    continue
                e = found[position]
                if e.value == d.value or _step_loss(e.value, _last_loss(record, printed[peer]), c.value,
                                                    control_loss, e.unit, n):
                    agreed += 1
                    continue
                return CheckResult(
                    name, stage, FAILED,
                    f"{_where(line)}after the same {line.steps} optimizer steps process 0 {verb} "
                    f"{line.text.strip()!r}{_how(line)}, process {record.rank} {printed[peer].text.strip()!r} "
                    f"({d.text} vs {e.text}): a value {verb} once per epoch differs between the processes",
                    _share(channel))
        lines += counted
    notes = []
    if agreed:
        notes.append(f"{agreed} equal on every process")
    if launched:
        notes.append(f"{launched} sum{'s' if launched != 1 else ''} of per-batch means reduced over the processes "
                     f"judged as a real launch computes {'them' if launched != 1 else 'it'} (1/{n} of exact mode's)")
    if step_losses:
        notes.append(f"{step_losses} last-step loss{'es' if step_losses != 1 else ''} {verb} after a loop "
                     "(process 0's share, as is conventional) not compared")
    if varying:
        differ = "s that differ" if varying != 1 else " that differs"
        notes.append(f"{varying} number{differ} between two one-process runs (timings, ids) not compared")
    if late:
        notes.append(f"{late} line{'s' if late != 1 else ''} printed after step {inexact.n} compared between the "
                     f"processes only (not exact from there: {inexact.inexact[0]})")
    if _no_epoch_ended(original):
        notes.append("the step limit ended the runs before any training epoch ended: what the script does at an "
                     "epoch's end was not run (verify without --steps, or with --batches, to reach it)")
    tail = f"; {'; '.join(notes)}" if notes else ""
    if not compared and late:
        return CheckResult(name, stage, SKIPPED, f"not exact from step {inexact.n} on ({inexact.inexact[0]}): every "
                                                 f"aggregate was {verb} after it{tail}")
    if not compared:
        return CheckResult(name, stage, PASSED, f"no number {verb} outside a batch loop to compare (values {verb} "
                                                f"inside one are per-step and may differ){tail}")
    return CheckResult(name, stage, PASSED, f"{compared} number{'s' if compared != 1 else ''} in {lines} "
                                            f"line{'s' if lines != 1 else ''} {verb} after an epoch equal the "
                                            f"original's{tail}")


def _no_epoch_ended(original: ProcessRecord) -> bool:
    """The original stopped at the step limit (not the epoch limit) before a loader that fed a backward ended an
    epoch: a check of what is printed after an epoch saw nothing of it."""
    if not original.stopped or original.stop_reason != "steps":
        return False
    training = [loader for loader in original.loaders.values() if loader.training]
    return bool(training) and not any(loader.epoch_draws for loader in training)


def _where(line: PrintedLine) -> str:
    return f"{line.site}: " if line.site and not line.site.startswith("<") else ""


def _how(line: PrintedLine) -> str:
    return f" (with {line.via})" if line.via not in ("print", "return") else ""


def _batch_sum_marks(run: ProcessRecord, line: PrintedLine, number: Number) -> list[tuple[str, float]]:
    """(reduction, result) of each element reduced at the line's step that is a sum of per-batch means and is the
    printed ``number``: it rounds to it, and the number is printed with a fraction and four significant digits or
    more (an epoch counter ``3`` is no sum of losses ``3.02``)."""
    text = number.text.lower()
    if not ("." in text or "e" in text) or not number.value or number.unit > PRECISE * abs(number.value):
        return []
    return [(mark.op, value) for mark in run.reduces if mark.steps == line.steps
            for value, flag in zip(mark.values, mark.batch_sums)
            if flag and abs(number.value - value) <= number.unit / 2 + BASE_RTOL * abs(value)]


def _batch_sum(run: ProcessRecord, line: PrintedLine, number: Number) -> bool:
    """``number`` is the result of a reduce of a sum of per-batch means: exact mode walks N times the batches a
    process of a real launch walks, so a real launch has 1/N of it (``hook/accelify_verify_epochsums.py``)."""
    return bool(number.comparable and _batch_sum_marks(run, line, number))


def _reduction(run: ProcessRecord, line: PrintedLine, number: Number) -> str:
    marks = _batch_sum_marks(run, line, number)
    return marks[0][0] if marks else "sum"


def _factor(original: float, value: float, n: int) -> bool:
    """Whether ``value`` is about ``original / n`` or ``n`` times it (within ``NEAR``)."""
    return bool(original) and (abs(value - original / n) <= NEAR * abs(original / n)
                               or abs(value - original * n) <= NEAR * abs(original * n))


def _padded_gather(run: ProcessRecord, line: PrintedLine) -> PaddedGather | None:
    """The first ``gather`` of a padded batch's share before ``line`` was printed (None when there is none)."""
    return next((mark for mark in run.padded_gathers if mark.steps <= line.steps), None)


def _cause(original: float, value: float, n: int, channel: Channel = PRINTED, launched: bool = False,
           padded: PaddedGather | None = None) -> str:
    """Why process 0 printed (logged, returned) another value than the original, in words a user acts on
    (``launched``: ``value`` is what a real launch computes from a reduced sum of per-batch means; ``padded``: a
    ``gather`` that kept the rows duplicated to even out a batch)."""
    if launched and original and abs(value - original / n) <= NEAR * abs(original / n):
        return (f"in a real launch the value is about 1/{n} of the original: each process sums the per-batch means "
                f"of its 1/{n} of the batches, and a 'mean' over the processes keeps 1/{n} of the total; reduce the "
                f"sums with accelerator.reduce(total, 'sum') before {channel.gerund}")
    if original and abs(value - original / n) <= NEAR * abs(original / n):
        return (f"the value is about 1/{n} of the original: an average over one process's shard divided by the "
                f"whole data set's size; reduce it across processes (accelerator.reduce(total, 'sum'), or "
                f"accelerator.gather_for_metrics on the values) before dividing and {channel.gerund}")
    if original and abs(value - original * n) <= NEAR * abs(original * n):
        return (f"the value is about {n}x the original: a sum over the processes of values that are already "
                "averages (reduce with 'mean', or sum the totals before dividing)")
    if padded is not None:
        return (f"the values gathered with accelerator.gather at {padded.site} count rows twice: a batch of "
                f"{padded.rows} rows does not split evenly over the {n} processes, and gather keeps the rows "
                f"duplicated to even it out ({padded.gathered} gathered); gather them with "
                "accelerator.gather_for_metrics, which drops them")
    return _share(channel)


def _share(channel: Channel) -> str:
    return (f"this {channel.noun} is process 0's share: it is computed from the prepared loader's shard only; gather "
            f"(accelerator.gather_for_metrics) or reduce (accelerator.reduce) it over the processes before "
            f"{channel.gerund}")
