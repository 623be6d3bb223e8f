"""Training data a program serves itself: the iterable of a loop that walks indices (``range``), and the batches a
``while`` loop draws from a generator of the program's own (``gen.__next__()``, ``next(gen)``), where no DataLoader
feeds the training (the seeds rule's ACC022)."""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import CallSite, Facts, Loop
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan


def ranged(loop: Loop) -> bool:
    """Whether the loop walks ``range(...)`` (possibly under ``enumerate``/a progress bar): indices, not data."""
    source = loop.node.iter
    while isinstance(source, cst.Call) and source.args and loop.scope.imports.qualname(source.func) != "range" \
            and dotted(source.func) in ("enumerate", "tqdm", "tqdm.tqdm", "trange"):
        source = source.args[0].value
    return isinstance(source, cst.Call) and (dotted(source.func) in ("range", "trange", "tqdm.trange")
                                             or loop.scope.imports.qualname(source.func) == "range")


def generator_draw(facts: Facts, plan: Plan) -> CallSite | None:
    """``x, y = gen.__next__()`` (or ``next(gen)``) in a ``while`` loop that trains, ``gen`` a name of the script
    (a batch generator of its own, ``data.train_generator(bs)``): no DataLoader feeds that training. The draw."""
    for site in facts.calls:
        func = site.node.func
        if isinstance(func, cst.Attribute) and func.attr.value in ("__next__", "next") and not site.node.args:
            receiver: cst.BaseExpression = func.value
        elif site.qualname == "next" and site.node.args:
            receiver = site.node.args[0].value
        else:
            continue
        key = dotted(receiver)
        if key is None or site.scope.resolve(key.split(".")[0]) is None:
            continue
        loop = next((st for st in facts.chain(site.stmt)[1:] if isinstance(st, cst.While)), None)
        if loop is not None and any(plan.reaches_backward(s) for s in facts.calls if loop in facts.chain(s.stmt)[1:]):
            return site
    return None
