"""Values the launcher sets, as a hand-written distributed script reads them, in the accelerator's terms.

``int(os.environ["RANK"])``, ``os.environ.get("LOCAL_RANK", -1)``, ``dist.get_rank()``,
``dist.get_world_size()``: what each holds (a ``Rank``: ``process_index``, ``local_process_index`` or
``num_processes``, and whether the script's own value is -1 when it runs alone), and the literal values the
tests on them compare with. ``distributed.py`` finds the keys holding them; ``rank_tests.py`` reads the
tests on them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import libcst as cst

from accelify.codemods.analysis.names import ImportMap

GET_RANK = "torch.distributed.get_rank"
GET_WORLD_SIZE = "torch.distributed.get_world_size"

# What each launcher variable and query is, in the accelerator's terms.
LAUNCH_VARIABLES = {"RANK": "process_index", "LOCAL_RANK": "local_process_index", "WORLD_SIZE": "num_processes"}
QUERIES = {GET_RANK: "process_index", GET_WORLD_SIZE: "num_processes"}
SINGLE_VALUE = {"process_index": 0, "local_process_index": 0, "num_processes": 1}  # what one process sees
MAIN_TESTS = ("{a}.is_main_process", "{a}.is_local_main_process")
SINGLE_TESTS = ("{a}.num_processes == 1",)  # true exactly when the script runs alone: main there too


@dataclass(frozen=True)
class Rank:
    """What a value holds: ``kind`` is an accelerator attribute (``process_index``, ...); ``sentinel`` when the
    script's own value is -1 running alone (``--local_rank``, ``os.environ.get("RANK", -1)``)."""

    kind: str
    sentinel: bool = False


class LauncherKeys(Protocol):
    """What the tests on launcher values read of the program's distributed code (``distributed.Distributed``)."""

    keys: dict[str, Rank]  # names and ``args.x`` holding a launcher value
    modes: set[str]  # mode flags (``args.distributed``)
    spawn_indexes: set[str]  # the index ``mp.spawn`` gives its worker


def env_read(expr: cst.BaseExpression, imports: ImportMap) -> tuple[str, bool] | None:
    """``os.environ["RANK"]`` / ``os.environ.get("RANK", -1)`` / ``os.getenv(...)``, under ``int(...)`` or not:
    (the variable, whether its default is -1)."""
    if isinstance(expr, cst.Call) and imports.qualname(expr.func) in ("int", "builtins.int") and len(expr.args) == 1:
        expr = expr.args[0].value
    name: cst.BaseExpression | None = None
    default: cst.BaseExpression | None = None
    if isinstance(expr, cst.Subscript) and imports.qualname(expr.value) == "os.environ" and len(expr.slice) == 1:
        index = expr.slice[0].slice
        name = index.value if isinstance(index, cst.Index) else None
    elif isinstance(expr, cst.Call) and imports.qualname(expr.func) in ("os.environ.get", "os.getenv") and expr.args:
        name = expr.args[0].value
        default = expr.args[1].value if len(expr.args) > 1 else None
    if not isinstance(name, cst.SimpleString) or name.evaluated_value not in LAUNCH_VARIABLES:
        return None
    return str(name.evaluated_value), default is not None and is_minus_one(default)


def source(expr: cst.BaseExpression, imports: ImportMap) -> Rank | None:
    """What a launcher value expression holds: an environment read or a ``dist`` query."""
    read = env_read(expr, imports)
    if read is not None:
        return Rank(LAUNCH_VARIABLES[read[0]], read[1])
    if isinstance(expr, cst.Call) and not expr.args:
        kind = QUERIES.get(imports.qualname(expr.func) or "")
        if kind is not None:
            return Rank(kind)
    return None


def constant(expr: cst.BaseExpression) -> object:
    """The value of an int, -int or True/False/None literal (else a sentinel no value equals)."""
    if isinstance(expr, cst.Integer):
        return int(expr.value)
    if isinstance(expr, cst.UnaryOperation) and isinstance(expr.operator, cst.Minus) and isinstance(expr.expression, cst.Integer):
        return -int(expr.expression.value)
    if isinstance(expr, cst.Name) and expr.value in ("True", "False", "None"):
        return {"True": True, "False": False, "None": None}[expr.value]
    return _NOTHING


def constants(expr: cst.BaseExpression) -> set[object]:
    if isinstance(expr, (cst.List, cst.Tuple, cst.Set)):
        return {constant(e.value) for e in expr.elements}
    return set()


def is_minus_one(expr: cst.BaseExpression) -> bool:
    return constant(expr) == -1 or (isinstance(expr, cst.SimpleString) and expr.evaluated_value == "-1")


class _Nothing:
    def __eq__(self, other: object) -> bool:
        return False

    def __hash__(self) -> int:
        return 0


_NOTHING = _Nothing()
