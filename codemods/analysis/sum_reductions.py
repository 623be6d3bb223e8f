"""The statement that reduces (or gathers) a running sum across processes, by its kind
(``analysis/shard_sums.py``): what ``rules/averages.py`` inserts after the loop."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.meter_sums import MeterSums
from accelify.codemods.analysis.shard_sums import Accumulator
from accelify.codemods.analysis.sum_kinds import MADE_TENSOR


def reduction_code(acc: Accumulator, accelerator: str, torch: str, mean: bool) -> str:
    """The code that makes ``acc`` the whole data set's after its loop (``accelerator`` and ``torch`` as the module
    spells them): ``"mean"`` when ``mean``, else ``"sum"``; a list of per-batch values is gathered."""
    reduction = '"mean"' if mean else '"sum"'
    if acc.keys:  # a defaultdict of sums: every key written out, in the same order on every process
        keys = ", ".join(repr(k) for k in acc.keys) + ("," if len(acc.keys) == 1 else "")
        value = f"{torch}.tensor(float({acc.name}[key]), dtype={torch}.float64, device={accelerator}.device)"
        return f"for key in ({keys}):\n    {acc.name}[key] = {accelerator}.reduce({value}, {reduction}).item()"
    if acc.kind == "tensor":
        return f"{acc.name} = {accelerator}.reduce({acc.name}, {reduction})"
    if acc.kind == MADE_TENSOR:  # made on the CPU (``torch.Tensor([0])``), which the GPU's collectives cannot reduce
        on_device = f"{acc.name}.to({accelerator}.device)"
        return f"{acc.name} = {accelerator}.reduce({on_device}, {reduction}).to({acc.name}.device)"
    if acc.kind == "object list":  # per-batch dicts, as many as each process kept: every process's, in one list
        return f"{acc.name} = {accelerator}.gather_for_metrics({acc.name}, use_gather_object=True)"
    if acc.kind == "tensor list":  # per-batch tensors of one shape, on the device: every process's, in one list
        return f"{acc.name} = list({accelerator}.gather({torch}.stack({acc.name})))"
    if acc.kind in ("list", "int list"):  # per-batch numbers, as long on every process: every process's, in one list
        dtype = "" if acc.kind == "int list" else f"dtype={torch}.float64, "
        return f"{acc.name} = {accelerator}.gather({torch}.tensor({acc.name}, {dtype}device={accelerator}.device)).tolist()"
    dtype = f"dtype={torch}.float64, " if acc.kind in ("float", "number") or mean else ""
    reduced = f"{accelerator}.reduce({torch}.tensor({acc.name}, {dtype}device={accelerator}.device), {reduction}).item()"
    if acc.kind == "number" and not mean:
        reduced = f"type({acc.name})({reduced})"  # an int stays an int, a float a float
    return f"{acc.name} = {reduced}"


def meter_code(meters: MeterSums, accelerator: str, torch: str) -> list[str]:
    """The code that makes every meter ``meters`` holds the whole data set's after its loop: each summed attribute
    reduced (``"sum"``, exact: ``int64`` or ``float64``, an ``.item()`` of either kept as its type), then each
    attribute ``update`` computes from the sums computed again (``meters["loss"].avg = meters["loss"].sum / ...``)."""
    out = []
    for code, meter, kinds in meters.meters:
        for attr, kind in kinds:
            value = f"{code}.{attr}"
            if kind == "tensor":  # a tensor was fed: the sum is one (``as_tensor`` takes a sum never added to as well)
                out.append(f"{value} = {accelerator}.reduce({torch}.as_tensor({value}, device={accelerator}.device).detach(), \"sum\")")
                continue
            dtype = "" if kind == "int" else f"dtype={torch}.float64, "
            reduced = f"{accelerator}.reduce({torch}.tensor({value}, {dtype}device={accelerator}.device), \"sum\").item()"
            out.append(f"{value} = {f'type({value})({reduced})' if kind == 'number' else reduced}")
        holder = cst.parse_expression(code)
        for attr, expr in meter.derived:
            computed = expr.visit(_Self(holder))
            out.append(f"{code}.{attr} = {cst.Module(body=[]).code_for_node(computed)}")
    return out


class _Self(cst.CSTTransformer):
    """``self`` in an expression of ``update`` replaced by the meter's code."""

    def __init__(self, holder: cst.BaseExpression) -> None:
        self.holder = holder

    def leave_Name(self, original: cst.Name, updated: cst.Name) -> cst.BaseExpression:
        return self.holder if original.value == "self" else updated
