"""WarnExecutedFiles: a script that runs another file's code through ``exec`` or ``runpy`` is reported.

``exec(open("experiments/inverse.py").read())`` (set P's P9, a physics-informed network whose experiments are files
the main script executes in its own globals), ``exec(compile(open(path).read(), path, "exec"))``,
``runpy.run_path(path)``: the code that runs is read from disk when the script runs, so the conversion cannot see it.
A training there is not converted, and launched on N processes the script would train N independent copies, with
nothing said. Reported (ACC062) wherever the program runs such a call, whether or not it trains elsewhere; an
``exec`` of a string the script writes itself is Python the conversion sees in no form either, but reads no file:
left alone.
"""

from __future__ import annotations

import libcst as cst
import libcst.matchers as m

from accelify.codemods import codes
from accelify.codemods.analysis.snippets import code_of
from accelify.codemods.engine.context import Context
from accelify.codemods.engine.rule import Example, Rule

_RUNPY = ("runpy.run_path", "runpy.run_module")


class WarnExecutedFiles(Rule):
    name = "exec_files"
    description = "Report code run from another file through exec or runpy, which the conversion cannot see."
    examples = (
        Example(
            before='''\
import torch
model = torch.nn.Linear(2, 1)
exec(open("experiments/train_model.py").read())
''',
            after='''\
import torch
model = torch.nn.Linear(2, 1)
exec(open("experiments/train_model.py").read())
''',
            warnings=("ACC062:3",),
        ),
        Example(  # a string the script writes itself: no file read
            before='''\
import torch
model = torch.nn.Linear(2, 1)
exec("scale = 2")
''',
            after='''\
import torch
model = torch.nn.Linear(2, 1)
exec("scale = 2")
''',
            fires=False,
        ),
    )

    def run(self, ctx: Context) -> None:
        for site in ctx.facts.calls:
            if site.qualname in _RUNPY or (_is_exec(site.node) and _reads_a_file(site.node)):
                if ctx.plan.never_run(site.scope):
                    continue
                ctx.warn(codes.EXECUTED_FILE, site.node, call=code_of(site.node))

    def recheck(self, ctx: Context) -> None:
        """Converted code: the call is left as it was, so it is reported again."""
        self.run(ctx)


def _is_exec(call: cst.Call) -> bool:
    return m.matches(call.func, m.Name("exec") | m.Name("execfile")) and bool(call.args)


def _reads_a_file(call: cst.Call) -> bool:
    """``exec(open(path).read())``, ``exec(compile(open(path).read(), path, "exec"))``, ``exec(Path(p).read_text())``,
    ``execfile(path)``: the code comes from a file."""
    if m.matches(call.func, m.Name("execfile")):
        return True
    code = call.args[0].value
    return bool(m.findall(code, m.Call(func=m.Attribute(attr=m.Name("read") | m.Name("read_text") | m.Name("read_bytes")))))
