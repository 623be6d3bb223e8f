"""Statements that call a helper making start-up files, run under ``with accelerator.main_process_first():``.

The shared-files and data-set-files rules find those statements (``analysis/helper_calls.py``); this writes the edit.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.helper_calls import already_first
from accelify.codemods.analysis.snippets import with_block
from accelify.codemods.engine.context import Context


def first_at(ctx: Context, found: list[tuple[Scope, cst.BaseStatement]]) -> None:
    """Each statement of ``found`` (``helper_calls``' answer) under ``with accelerator.main_process_first():``, but
    one an edit already runs there."""
    for scope, holder in found:
        if not already_first(ctx, holder):
            ctx.replace(holder, holder, lambda s, a=ctx.accelerator_in(scope): with_block(  # type: ignore[misc]
                f"{a}.main_process_first()", [s]))  # type: ignore[list-item]
