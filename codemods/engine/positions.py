"""Line and column of chosen nodes, from one code-generation pass (no metadata wrapper).

``PositionProvider`` costs about two parses; this costs one ``Module.code`` and runs only when a
conversion has warnings to report.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Optional

import libcst as cst
from libcst._nodes.internal import CodegenState


@dataclass
class _Locator(CodegenState):
    targets: frozenset = frozenset()
    found: dict = field(default_factory=dict)
    _line: int = 1
    _col: int = 0
    _seen: int = 0

    def _advance(self) -> None:
        for token in self.tokens[self._seen :]:
            newlines = token.count("\n")
            if newlines:
                self._line += newlines
                self._col = len(token) - token.rfind("\n") - 1
            else:
                self._col += len(token)
        self._seen = len(self.tokens)

    @contextmanager
    def record_syntactic_position(
        self,
        node: cst.CSTNode,
        *,
        start_node: Optional[cst.CSTNode] = None,
        end_node: Optional[cst.CSTNode] = None,
    ) -> Iterator[None]:
        if node in self.targets and node not in self.found:
            self._advance()
            self.found[node] = (self._line, self._col + 1)
        yield


def locate(module: cst.Module, nodes: Iterable[cst.CSTNode]) -> dict[cst.CSTNode, tuple[int, int]]:
    """``node -> (line, column)``, both 1-based, for every node of ``module`` in ``nodes``."""
    targets = frozenset(nodes)
    if not targets:
        return {}
    state = _Locator(default_indent=module.default_indent, default_newline=module.default_newline, targets=targets)
    module._codegen(state)
    return state.found
