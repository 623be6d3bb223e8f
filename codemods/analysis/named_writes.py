"""A call named like a write (``*save*``, ``*write*``, ``dump``) that is handed a path: a file every process writes.

The table of known writers (``write_calls.WRITERS``) cannot hold every library a training script uses to keep a GIF,
a video, a sound or a table (``imageio.mimsave``, ``skvideo.io.vwrite``, ``wavfile.write``, ``img.save``,
``tokenizer.save_pretrained(out_dir)``). A call of a library (not a function of the program: its own writes are found
where they happen) whose name says it saves or writes, with an argument that is a path (a string that names a file
or a folder, an f-string or ``.format`` of one, ``os.path.join(...)``, ``Path(...)``, ``d / "x.png"``, or a name such
as ``save_path``, ``args.output_dir``, ``fname``), writes that file: the writes rule keeps it to the main process as
it does a known writer's.

Not such a write: a file handle's ``write``/``writelines``, or any method of a handle a ``with`` opened (``zf.writestr``:
the handle's opening is the write), ``torch.save`` (the
save rule's), saves that are collectives on their own (``save_checkpoint``, ``save_state``, ``save_model`` of a
trainer or an engine: every process must call them), a ``dumps`` (returns text), and a ``*writer`` constructor (a handle
kept open: reported where it is made).
"""

from __future__ import annotations

import re

import libcst as cst

from accelify.codemods.analysis.facts import CallSite
from accelify.codemods.analysis.names import dotted
from accelify.codemods.analysis.plan import Plan

_WRITE_NAME = re.compile(r"save|write|dump")
_NOT_WRITES = ("write", "writelines", "dumps", "save_checkpoint", "save_state", "save_model")
_PATH_NAME = re.compile(r"path|file|fname|dir$|dir_|folder")
_EXTENSION = re.compile(r"\.[A-Za-z][A-Za-z0-9]{0,5}$")
_PATH_MAKERS = ("os.path.join", "pathlib.Path", "pathlib.PurePath", "Path", "os.path.abspath", "os.path.expanduser")


def writes_by_name(plan: Plan, site: CallSite) -> bool:
    """Whether ``site`` is a library call named like a write that is handed a path (see the module docstring)."""
    func = site.node.func
    name = func.attr.value if isinstance(func, cst.Attribute) else func.value if isinstance(func, cst.Name) else ""
    lowered = name.lower()
    if not _WRITE_NAME.search(lowered) or lowered in _NOT_WRITES or lowered.endswith(("writer", "dumps")):
        return False
    if (site.qualname or "").startswith("torch.") and not (site.qualname or "").startswith("torchvision."):
        return False  # ``torch.save``: the save rule's
    if plan.callee(site) is not None or _defined_in_program(plan, name):
        return False  # a function of the program (or one named alike): the writes in it are found where they happen
    if isinstance(func, cst.Attribute) and isinstance(func.value, cst.Name):
        binding = plan.binding_of(site.scope, func.value.value)
        if binding is not None and isinstance(binding.stmt, cst.With):
            return False  # ``zf.writestr(...)`` of ``with ZipFile(p, "w") as zf``: the handle's opening is the write
    return any(path_like(a.value) for a in site.node.args if a.keyword is None or _path_keyword(a.keyword.value))


def _defined_in_program(plan: Plan, name: str) -> bool:
    """Whether a function or method of the program is named ``name`` (``trainer.save(path)`` whose object the call
    graph cannot follow): its writes, and the barrier the save rule may put before them, are its own."""
    units = [plan.facts, *plan.facts.units.values()]
    return any(s.kind == "function" and s.name == name for facts in units for s in facts.scopes)


def _path_keyword(keyword: str) -> bool:
    return bool(_PATH_NAME.search(keyword.lower())) or keyword in ("uri", "fp", "f", "filename", "save_to")


def path_like(expr: cst.BaseExpression) -> bool:
    """Whether ``expr`` reads as a file or folder path (see the module docstring)."""
    if isinstance(expr, cst.SimpleString):
        return _path_text(str(expr.evaluated_value))
    if isinstance(expr, cst.FormattedString):
        return _path_text("".join(p.value for p in expr.parts if isinstance(p, cst.FormattedStringText)))
    if isinstance(expr, cst.ConcatenatedString):
        return path_like(expr.left) or path_like(expr.right)
    if isinstance(expr, cst.BinaryOperation) and isinstance(expr.operator, (cst.Divide, cst.Add)):
        return path_like(expr.left) or path_like(expr.right)
    if isinstance(expr, cst.Call):
        func = expr.func
        if isinstance(func, cst.Attribute) and func.attr.value == "format":
            return path_like(func.value)  # ``"./training_{}_epochs.gif".format(epochs)``
        if (dotted(func) or "") in _PATH_MAKERS:
            return True
        if isinstance(func, cst.Name) and func.value == "str" and len(expr.args) == 1:
            return path_like(expr.args[0].value)
        return False
    if isinstance(expr, (cst.Name, cst.Attribute)):
        last = expr.value if isinstance(expr, cst.Name) else expr.attr.value
        return bool(_PATH_NAME.search(last.lower()))
    return False


def _path_text(text: str) -> bool:
    """A string that names a file (``progress.gif``) or a folder (``out/``, ``./samples``)."""
    return "/" in text or "\\" in text or bool(_EXTENSION.search(text.strip()))
