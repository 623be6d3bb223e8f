"""Code as text and back: the source of a node, and parsed snippets rules and analyses build new code from.

Parsing is cached (nodes are immutable, so one parse serves every use of the same text).
"""

from __future__ import annotations

from functools import lru_cache

import libcst as cst

_EMPTY = cst.Module(body=[])


def code_of(node: cst.CSTNode) -> str:
    """Source text of a node (for messages and for building new statements)."""
    return _EMPTY.code_for_node(node)


@lru_cache(maxsize=512)
def expression(code: str) -> cst.BaseExpression:
    """A parsed expression."""
    return cst.parse_expression(code)


@lru_cache(maxsize=512)
def statement(code: str) -> cst.BaseStatement:
    """A parsed statement."""
    return cst.parse_statement(code)


def unwrap(node: cst.CSTNode, accelerator: str) -> cst.Call:
    """``accelerator.unwrap_model(<node>)``."""
    return cst.Call(func=expression(f"{accelerator}.unwrap_model"), args=[cst.Arg(node)])  # type: ignore[arg-type]


def on_main_process(stmt: cst.CSTNode, accelerator: str) -> cst.If:
    """``if <accelerator>.is_main_process:`` around ``stmt`` (its blank lines go before the ``if``)."""
    assert isinstance(stmt, cst.BaseStatement)
    return cst.If(test=expression(f"{accelerator}.is_main_process"),
                  body=cst.IndentedBlock([stmt.with_changes(leading_lines=[])]), leading_lines=stmt.leading_lines)


def made_on_main_process(node: cst.CSTNode, accelerator: str) -> cst.CSTNode:
    """``SummaryWriter(dir)`` -> ``SummaryWriter(dir) if accelerator.is_main_process else None``."""
    assert isinstance(node, cst.BaseExpression)
    if isinstance(node, cst.IfExp):  # ``SummaryWriter(d) if args.tensorboard else None``: one more condition
        test = cst.BooleanOperation(left=node.test.with_changes(lpar=[cst.LeftParen()], rpar=[cst.RightParen()])
                                    if isinstance(node.test, (cst.BooleanOperation, cst.IfExp)) else node.test,
                                    operator=cst.And(), right=expression(f"{accelerator}.is_main_process"))
        return node.with_changes(test=test)
    return cst.IfExp(test=expression(f"{accelerator}.is_main_process"), body=node, orelse=cst.Name("None"))



def with_block(header: str, body: list[cst.BaseStatement]) -> cst.BaseStatement:
    """``with <header>:`` over ``body``; the first statement's blank lines go before the ``with``, its comments stay inside."""
    shell = statement(f"with {header}:\n    pass\n")
    assert isinstance(shell, cst.With)
    first = body[0]
    blank = []
    for line in first.leading_lines:
        if line.comment is not None:
            break
        blank.append(line)
    body = [first.with_changes(leading_lines=list(first.leading_lines)[len(blank):]), *body[1:]]
    return shell.with_changes(body=cst.IndentedBlock(body), leading_lines=blank)
