"""Tests on launcher values, read as the accelerator's: ``rank == 0`` -> ``{a}.is_main_process``.

A hand-written distributed script decides who logs, saves and evaluates by testing the launcher's values
(``if args.local_rank in [-1, 0]:``, ``if master_process:``, ``if not args.distributed or args.rank % n == 0:``).
Each function here says what such a test amounts to in the accelerator's terms (``{a}`` is the accelerator), or
None when it is no such test (``distributed.py`` uses them to find the code only the main process runs).
"""

from __future__ import annotations

from typing import Iterator

import libcst as cst

from accelify.codemods.analysis.facts import Scope
from accelify.codemods.analysis.launcher_values import MAIN_TESTS, LauncherKeys, Rank, constant, constants, source
from accelify.codemods.analysis.names import dotted


def rank_of(expr: cst.BaseExpression, scope: Scope, found: LauncherKeys) -> Rank | None:
    """What launcher value ``expr`` holds (a key, a read, a query), or None."""
    key = dotted(expr)
    if key is not None and key in found.keys:
        return found.keys[key]
    return source(expr, scope.imports)


def rank_test(node: cst.BaseExpression, scope: Scope, found: LauncherKeys) -> str | None:
    """The accelerator's way to say what a test on a launcher value says, with ``{a}`` for the accelerator:
    ``rank == 0`` -> ``{a}.is_main_process``; None when ``node`` is no such test."""
    if not isinstance(node, cst.Comparison) or len(node.comparisons) != 1:
        return None
    target = node.comparisons[0]
    operator, left, right = target.operator, node.left, target.comparator
    modulo = None
    if isinstance(left, cst.BinaryOperation) and isinstance(left.operator, cst.Modulo):
        modulo, left = left, left.left  # ``args.rank % ngpus_per_node == 0``: the first process of a machine
    rank = rank_of(left, scope, found)
    if rank is None:
        return None
    value = constant(right)
    values = constants(right)
    equal, unequal = isinstance(operator, cst.Equal), isinstance(operator, (cst.NotEqual,))
    if modulo is not None:
        return MAIN_TESTS[0] if equal and value == 0 and rank.kind == "process_index" else None
    if rank.kind == "num_processes":
        return None
    main = MAIN_TESTS[0] if rank.kind == "process_index" else MAIN_TESTS[1]
    if rank.sentinel and value == -1 and (equal or unequal):
        return "{a}.num_processes == 1" if equal else "{a}.num_processes > 1"
    if rank.sentinel and values == {-1, 0} and isinstance(operator, (cst.In, cst.NotIn)):
        return main if isinstance(operator, cst.In) else f"not {main}"
    if value == 0 and (equal or unequal):
        if rank.sentinel:  # -1 alone: not the main process there
            return f"{{a}}.num_processes > 1 and {main}" if equal else f"{{a}}.num_processes == 1 or not {main}"
        return main if equal else f"not {main}"
    if value == 0 and isinstance(operator, cst.GreaterThan) and not rank.sentinel:
        return f"not {main}"
    return None


def spawn_test(node: cst.BaseExpression, found: LauncherKeys) -> str | None:
    """``args.gpu is None or args.gpu == 0`` on the spawned worker's index: not spawned, or its first process:
    ``{a}.is_local_main_process``."""
    if not (isinstance(node, cst.BooleanOperation) and isinstance(node.operator, cst.Or)):
        return None
    kinds = set()
    for side in (node.left, node.right):
        if not (isinstance(side, cst.Comparison) and len(side.comparisons) == 1 and dotted(side.left) in found.spawn_indexes):
            return None
        operator, value = side.comparisons[0].operator, constant(side.comparisons[0].comparator)
        if isinstance(operator, cst.Is) and value is None:
            kinds.add("alone")
        elif isinstance(operator, cst.Equal) and value == 0:
            kinds.add("first")
    return MAIN_TESTS[1] if kinds == {"alone", "first"} else None


def mode_test(node: cst.BaseExpression, scope: Scope, found: LauncherKeys) -> str | None:
    """``not args.multiprocessing_distributed or (args.multiprocessing_distributed and args.rank % n == 0)``: a
    boolean test made only of mode flags and one kind of rank test says what that rank test says."""
    leaves = list(_leaves(node))
    if len(leaves) < 2:
        return None
    tests = set()
    modes = 0
    for leaf in leaves:
        if dotted(leaf) in found.modes:
            modes += 1
            continue
        test = rank_test(leaf, scope, found)
        if test is None:
            return None
        tests.add(test)
    return tests.pop() if modes and len(tests) == 1 else None


def _leaves(node: cst.BaseExpression) -> Iterator[cst.BaseExpression]:
    if isinstance(node, cst.BooleanOperation):
        yield from _leaves(node.left)
        yield from _leaves(node.right)
    elif isinstance(node, cst.UnaryOperation) and isinstance(node.operator, cst.Not):
        yield from _leaves(node.expression)
    else:
        yield node
