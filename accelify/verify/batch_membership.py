"""Evaluation losses that depend on which samples share a batch, which exact mode cannot reproduce.

The conversion computes a loss of the program's own that may mix a batch's samples (pairs or triplets mined within
it, a contrastive loss over the rest of the batch) on each process's whole batches in an evaluation loop, and
reduces the running sum after the loop (``rules/evaluation.py``): under ``accelify launch`` every process is dealt
whole batches of the original's sampler, so the sum is the original's. Exact mode hands each process a slice of
every batch instead, and a loss mined within a slice is another quantity. :func:`membership_losses` finds such loops
in the converted program (an evaluation loop, no backward in it, adding a loss to a name that is reduced across
processes right after the loop), so that verification runs it on N processes as a real launch does and says why
the exact checks are skipped, instead of failing a right conversion.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import libcst as cst
import libcst.matchers as m

from accelify.verify.size_tests import LineFinder, found_lines

if TYPE_CHECKING:
    from accelify.verify.workspace import ScriptFiles

_REDUCE = m.SimpleStatementLine(body=[m.Assign(value=m.Call())])  # ``x = accelerator.reduce(...).item()``
_REDUCE_CALL = m.Call(func=m.Attribute(attr=m.Name("reduce")))


def membership_losses(files: ScriptFiles) -> list[str]:
    """``file:line`` of each running loss of an evaluation loop that the conversion reduces after the loop."""
    return found_lines(files, _Finder)


def explain(found: list[str], processes: int) -> str:
    """The reason the exact checks are skipped."""
    return (f"the exact check could not run: {found[0]} adds up a loss computed on each process's own batches, which "
            "may depend on which samples share a batch (pairs or triplets mined within it), and exact mode gives each "
            f"process a slice of every batch; the normal {processes}-process run was checked instead")


class _Finder(LineFinder):
    def visit_IndentedBlock(self, node: cst.IndentedBlock) -> None:
        body = list(node.body)
        for index, stmt in enumerate(body):
            if not isinstance(stmt, cst.For) or m.findall(stmt, m.Call(func=m.Attribute(attr=m.Name("backward")))):
                continue
            reduced = set()
            for after in body[index + 1:]:
                if not m.matches(after, _REDUCE) or not m.findall(after, _REDUCE_CALL):
                    break
                assign = after.body[0]  # type: ignore[attr-defined]
                reduced |= {t.target.value for t in assign.targets if isinstance(t.target, cst.Name)}
            for aug in m.findall(stmt.body, m.AugAssign(target=m.Name(), operator=m.AddAssign())):
                assert isinstance(aug, cst.AugAssign) and isinstance(aug.target, cst.Name)
                if aug.target.value in reduced and _mentions_loss(aug.value):
                    self.found(aug)


def _mentions_loss(expr: cst.BaseExpression) -> bool:
    """``loss.item()``, ``loss_fn(embeddings, y).item()``: a value named or made as a loss."""
    return any("loss" in name.value.lower() or "criterion" in name.value.lower()
               for name in m.findall(expr, m.Name()) if isinstance(name, cst.Name))
