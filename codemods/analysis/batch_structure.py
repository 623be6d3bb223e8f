"""What the processes agree on about a batch whose values they do not: whether it is there, and whether it is empty.

A collated batch is never None, and a batch is never empty: ``len(target) > 0`` is false only where the data set's
items carry an empty part (``(x, [])``, a data set without targets), the same for every item, so on every process
alike. A name the loop sets to a batch or to None by such a test (``target = target if len(target) > 0 else None``)
is None on every process alike, so ``if target is not None:`` is a branch every process takes the same way (a gather
under it is no latent deadlock). Sizes compared with other values are not judged here: those agree only under even
batches of a map-style data set (``accelify/verify/even_batches.py`` proves that for the static deadlock check).

Mixed into ``Agreement`` (``agreement.py``), whose ``_local``, ``_reaching`` and ``_over_prepared`` it uses.
"""

from __future__ import annotations

from typing import Any

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Scope
from accelify.codemods.analysis.short_batches import sized_batch

_IS_NONE = m.Comparison(comparisons=[m.ComparisonTarget(m.Is() | m.IsNot(), m.Name("None"))])


class BatchStructure:
    """The batch-structure questions of the agreement analysis."""

    facts: Any
    plan: Any
    edits: Any

    def _local(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement, seen: frozenset) -> bool: ...

    def _reaching(self, key: str, bindings: list[Binding], at: cst.BaseStatement) -> tuple[list[Binding], bool]: ...

    def _over_prepared(self, loop: Any) -> bool: ...

    def structure_agrees(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement,
                         seen: frozenset) -> bool | None:
        """True where ``expr`` is a test on a batch's structure the processes agree on (``x is None`` of a name that
        is a batch or None alike everywhere, ``len(batch) > 0``); None where it is no such test (the caller judges
        it as a value)."""
        if not isinstance(expr, cst.Comparison) or len(expr.comparisons) != 1:
            return None
        if m.matches(expr, _IS_NONE):
            return not self._none_local(scope, expr.left, at, seen)
        if m.matches(expr.comparisons[0].comparator, m.Integer("0")):
            held = sized_batch(expr.left) or _counted(expr.left)
            if held is not None and self._batch_part(scope, cst.Name(held), at):
                return True
        return None

    def _batch_part(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement) -> bool:
        """Whether the name ``expr`` holds, on every path to ``at``, a batch (or a part of one) of a prepared loader
        the loop around walks."""
        reaching = self._reaching_bindings(scope, expr, at)
        return bool(reaching) and all(self._batch_binding(b) for b in reaching)

    def _reaching_bindings(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement) -> list[Binding]:
        """The assignments of the function-local name ``expr`` that may reach ``at``; empty where another value
        (a parameter's, a global's) may."""
        if not isinstance(expr, cst.Name) or scope.kind != "function" or expr.value not in scope.bindings:
            return []
        bindings = [b for b in scope.bindings[expr.value] if b.stmt not in self.edits.removed]
        reaching, entry = self._reaching(expr.value, bindings, at)
        return [] if entry else reaching

    def _batch_binding(self, binding: Binding) -> bool:
        if not isinstance(binding.stmt, cst.For):
            return False
        loop = next((lp for lp in binding.where.loops if lp.node is binding.stmt), None)
        return loop is not None and self._over_prepared(loop) and binding.key in self.plan.batch_names(loop)

    def _none_local(self, scope: Scope, expr: cst.BaseExpression, at: cst.BaseStatement, seen: frozenset) -> bool:
        """Whether ``expr is None`` may differ between processes."""
        if m.matches(expr, m.Name("None")) or self._batch_part(scope, expr, at):
            return False  # a collated batch is never None
        if isinstance(expr, cst.IfExp):
            return (self._local(scope, expr.test, at, seen) or self._none_local(scope, expr.body, at, seen)
                    or self._none_local(scope, expr.orelse, at, seen))
        reaching = self._reaching_bindings(scope, expr, at)
        if reaching and all(b.value is not None or self._batch_binding(b) for b in reaching) \
                and not any(id(b) in seen for b in reaching):
            more = seen | {id(b) for b in reaching}
            return any(b.value is not None and self._none_local(b.where, b.value, b.stmt, more) for b in reaching)
        return self._local(scope, expr, at, seen)


def _counted(expr: cst.BaseExpression) -> str | None:
    """``x`` of ``x.numel()`` (a batch's sizes otherwise: ``short_batches.sized_batch``)."""
    if m.matches(expr, m.Call(func=m.Attribute(value=m.Name(), attr=m.Name("numel")), args=[])):
        return expr.func.value.value  # type: ignore[attr-defined]
    return None
