"""The names an expression or statement reads, a forward the evaluation rule takes out read as its gathered name.

``total += F.mse_loss(model(x), y).item()``: the evaluation rule puts ``output = model(x)`` and the gather before the
statement and replaces ``model(x)`` there by ``output`` (``Agreement.forward_names``). What the statement reads once
converted is ``output`` and ``y``, not ``x`` (this process's own batch); the rules that judge a sum over a gathered
pass (``gathered_values``, ``batch_chains``, ``batch_tails``) read it so.
"""

from __future__ import annotations

from collections.abc import Mapping

import libcst as cst
import libcst.matchers as m


def names_read(node: cst.CSTNode, forwards: Mapping[cst.CSTNode, str] | None = None) -> list[str]:
    """The variables ``node`` reads (not attribute names, not keywords), in the order they come, once each; a forward
    call in ``forwards`` reads as the gathered name that replaces it (those first)."""
    skip = {id(a.attr) for a in m.findall(node, m.Attribute())} | {id(a.keyword) for a in m.findall(node, m.Arg()) if a.keyword}
    taken = [c for c in m.findall(node, m.Call()) if c in forwards] if forwards else []
    skip |= {id(n) for c in taken for n in m.findall(c, m.Name())}
    names = [forwards[c] for c in taken] if forwards else []  # type: ignore[index]
    return list(dict.fromkeys([*names, *(n.value for n in m.findall(node, m.Name()) if id(n) not in skip)]))  # type: ignore[attr-defined]
