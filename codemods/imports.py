"""AddAcceleratorImport: ``from accelify.runtime import Accelerator`` (or ``from accelerate import
Accelerator`` with ``--target accelerate``) after the last top-level import, once an accelerator is created.

Before::

    from tqdm import tqdm

After::

    from tqdm import tqdm
    from accelify.runtime import Accelerator
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis import is_docstring, is_import
from accelify.codemods.context import Context
from accelify.codemods.rule import Rule


def schedule_import(ctx: Context, module: str, name: str) -> None:
    """The one way rules add an import: a ``from module import name`` after the top import block."""
    body = ctx.facts.module.body
    new = cst.SimpleStatementLine(
        [cst.ImportFrom(module=cst.parse_expression(module), names=[cst.ImportAlias(cst.Name(name))])]  # type: ignore[arg-type]
    )
    anchor = None
    for stmt in body:
        if is_import(stmt):
            anchor = stmt
        elif anchor is not None or not is_docstring(stmt):
            break
    if anchor is not None:
        ctx.edits.insert_after(anchor, [new])
    elif body:
        ctx.edits.insert_before(body[1] if is_docstring(body[0]) and len(body) > 1 else body[0], [new])


class AddAcceleratorImport(Rule):
    name = "import"
    description = "Import Accelerator from the target library."

    def run(self, ctx: Context) -> None:
        if ctx.accelerators:
            schedule_import(ctx, ctx.import_module, "Accelerator")
            ctx.change(f"import Accelerator from {ctx.import_module}")
