"""A log file a ``with`` block opens around the training, written to on the main process only.

``with open(runs_file, "a") as f:`` around the epochs, with ``f.write(...)`` after each one: kept to the main process
whole, the block would train alone and wait at its first backward forever; left as it is, N processes append every
line to the one file. The other processes open ``os.devnull`` with the same mode instead (``open(runs_file, "a") if
accelerator.is_main_process else open(os.devnull, "a")``): the block runs on every process as before, and only the
main process's lines reach the file. Only where the handle is written and nothing else (``f.write``,
``f.writelines``, ``f.flush()``, ``print(..., file=f)``): a handle read, seeked or handed on would see an empty file.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.write_calls import mode_argument

_WRITE_MODES = frozenset(("w", "a", "wt", "at", "tw", "ta", "wb", "ab", "bw", "ba"))
_WRITE_METHODS = frozenset(("write", "writelines", "flush"))


def write_mode(call: cst.Call) -> str | None:
    """The literal mode of ``open(path, mode)`` when it writes or appends and never reads; else None."""
    mode = mode_argument(call, 1)
    if not isinstance(mode, cst.SimpleString) or mode.prefix.lower() not in ("", "u"):
        return None
    value = mode.evaluated_value
    return value if isinstance(value, str) and value in _WRITE_MODES else None


def null_sink_for_others(site: CallSite, block: cst.With) -> str | None:
    """The mode of ``with open(path, mode) as f:`` (``site`` the ``open`` call) when the block only writes through
    ``f``, so that ``open(os.devnull, mode)`` can stand in for it on the other processes; None otherwise."""
    if site.qualname != "open" or not m.matches(site.node.func, m.Name("open")):
        return None
    item = next((i for i in block.items if i.item is site.node), None)
    if item is None or item.asname is None or not isinstance(item.asname.name, cst.Name):
        return None
    mode = write_mode(site.node)
    return mode if mode is not None and _written_only(block.body, item.asname.name.value) else None


def _written_only(body: cst.CSTNode, name: str) -> bool:
    """Whether every read of ``name`` in ``body`` writes through it (``name.write(...)``, ``print(..., file=name)``),
    and nothing binds it again."""
    allowed: set[int] = set()
    for call in m.findall(body, m.Call()):
        assert isinstance(call, cst.Call)
        func = call.func
        if isinstance(func, cst.Attribute) and m.matches(func.value, m.Name(name)) and func.attr.value in _WRITE_METHODS:
            allowed.add(id(func.value))
        elif m.matches(func, m.Name("print")):
            allowed |= {id(a.value) for a in call.args if a.keyword is not None and a.keyword.value == "file"
                        and m.matches(a.value, m.Name(name))}
    uses = [n for n in m.findall(body, m.Name(name))]
    if m.findall(body, m.AssignTarget(target=m.Name(name)) | m.AsName(name=m.Name(name))):
        return False
    return all(id(n) in allowed for n in uses)
