"""Where ``prepare`` goes when the objects are built in branches (the plan's decision 3, continued from
``prepare_site.py``).

Two questions, both about the ``if`` statements between the objects and the training:

- the training itself runs in a branch (a research entry point's ``if "distill" in version:`` that builds the
  student and its optimizer in an ``if/elif`` per configuration, then trains there), or in a ``with`` block: prepare
  goes into the branch that trains, after the last statement there that builds an object; an object bound before
  the ``if`` is in hand there too. Where more than one branch trains, no one place comes before every training: a problem naming them.
- an object bound in an ``if`` that not every way through binds (``if a: net = A() elif b: net = B()``, no
  ``else``): prepared after the ``if`` when every way that reaches prepare's place has bound it (a plain statement
  up to that place reads it, or the training right after it does whenever it runs: the original would stop there
  with a ``NameError`` otherwise), else in its branch, right where it is built.
"""

from __future__ import annotations

import libcst as cst

from accelify.codemods.analysis.blocks import binds_on_every_path, block_of, unconditional
from accelify.codemods.analysis.facts import Facts, Scope
from accelify.codemods.analysis.prepared_uses import Alias
from accelify.codemods.analysis.problems import CREATED_AFTER_LOOP, TRAININGS_IN_BRANCHES
from accelify.codemods.analysis.snippets import code_of


def branch_blocks(branch: cst.If) -> list[list[cst.BaseStatement]]:
    """The statements of each way through ``branch``: its body, each ``elif``'s, its ``else``'s."""
    blocks = [block_of(branch) or []]
    other = branch.orelse
    while other is not None:
        if isinstance(other, cst.If):
            blocks.append(block_of(other) or [])
            other = other.orelse
        else:
            blocks.append(list(other.body.body) if isinstance(other.body, cst.IndentedBlock) else [])
            other = None
    return blocks


class BranchSites:
    """Mixed into ``PrepareSite`` (the facts, ``drives_training`` and ``_problem`` are the plan's)."""

    facts: Facts
    branch_sites: list[tuple[list[cst.BaseStatement], cst.BaseStatement | None]]
    accelerator_block: list[cst.BaseStatement] | None

    def drives_training(self, scope: Scope, stmt: cst.BaseStatement) -> bool: ...  # the plan's (``PrepareSite``)

    def _problem(self, kind: str, node: cst.CSTNode, *, refuse: bool = True, **fields: str) -> None: ...

    def _into_training_branch(self, scope: Scope, aliases: list[Alias], block: list[cst.BaseStatement],
                              last: cst.BaseStatement | None) -> tuple[list[cst.BaseStatement], cst.BaseStatement | None] | None:
        """``block`` and ``last`` (the statement of ``block`` after which prepare goes), or, while ``last`` is an
        ``if`` that trains in its branches, the first branch that trains and the last statement in it that builds an
        object (None there when all were built before the ``if``: prepare goes first thing in the branch), and so on
        down. Each other branch that trains (J4's ``else:`` training without the teacher) gets the same prepare after
        its own last object (``branch_sites``), and the accelerator is made before the ``if`` (``accelerator_block``).
        None, with a problem recorded, where a branch that trains does not bind an object, or trains before binding
        them."""
        sites = self._prepare_places(scope, aliases, block, last)
        if sites is None:
            return None
        self.branch_sites = sites[1:]
        if sites[0][0] is not block:
            # the accelerator before the ``if`` that trains: the setup before it (logging, data sets made on every
            # process) sees it there, as in a script that trains at its top level
            self.accelerator_block = block
        return sites[0]

    def _prepare_places(self, scope: Scope, aliases: list[Alias], block: list[cst.BaseStatement],
               last: cst.BaseStatement | None) -> list[tuple[list[cst.BaseStatement], cst.BaseStatement | None]] | None:
        """Each place prepare goes, block and statement, first the first branch's (``_into_training_branch``)."""
        if not (isinstance(last, (cst.If, cst.With)) and self.drives_training(scope, last)):
            return [(block, last)]
        blocks = branch_blocks(last) if isinstance(last, cst.If) else [block_of(last) or []]
        sites: list[tuple[list[cst.BaseStatement], cst.BaseStatement | None]] = []
        for inner in [b for b in blocks if any(self.drives_training(scope, s) for s in b)]:
            site = self._site_in(scope, aliases, block, last, inner)
            found = self._prepare_places(scope, aliases, inner, site) if site is not False else None  # type: ignore[arg-type]
            if found is None:
                return None
            sites.extend(found)
        if len(sites) > 1:
            self.accelerator_block = block  # before the outermost ``if`` that trains in two places (set last)
        return sites

    def _site_in(self, scope: Scope, aliases: list[Alias], block: list[cst.BaseStatement], branch: cst.BaseStatement,
                 inner: list[cst.BaseStatement]) -> cst.BaseStatement | None | bool:
        """The last statement of ``inner`` (a branch of ``branch``, a statement of ``block``) that builds an object:
        None when every object was built before ``branch``; False, with a problem recorded, when an object of the
        branch is bound only in another, or the branch trains before its last object is built."""
        tops: list[cst.BaseStatement] = []
        for alias in aliases:
            if alias.stmt is None or self.facts.top_in(alias.stmt, block) is not branch:
                continue  # bound before the ``if``: in hand in every branch
            here = [s for s in [alias.stmt] + [b.stmt for b in scope.bindings.get(alias.key, [])]
                    if s is not None and self.facts.top_in(s, inner) is not None]
            if not here:
                self._problem(TRAININGS_IN_BRANCHES, branch, names=f"`{alias.key}`", test=branch_test(branch),
                              why="a branch that trains does not bind it")
                return False
            tops.extend(self.facts.top_in(s, inner) for s in here)  # type: ignore[misc]
        last = max(tops, key=inner.index, default=None)
        if last is not None and any(self.drives_training(scope, s) for s in inner[:inner.index(last)]):
            culprit = next(a for a in aliases if a.stmt is not None and self.facts.top_in(a.stmt, inner) is last)
            self._problem(CREATED_AFTER_LOOP, culprit.stmt, name=culprit.key)  # type: ignore[arg-type]
            return False
        return last

    def _bound_only_if(self, scope: Scope, alias: Alias, block: list[cst.BaseStatement],
                       last: cst.BaseStatement | None) -> bool:
        """Whether ``alias`` is bound by a plain statement in an ``if`` of ``block`` that not every way through
        binds, with no binding of its name before that ``if`` outside any branch or loop, and neither a statement of
        ``block`` after that ``if`` and up to ``last`` (where prepare goes) that reads the name whenever it runs, nor
        the training right after ``last`` reading it whenever it runs: ``if args.model == "a": net = A() elif
        args.model == "b": net = B()`` then ``net = net.cuda()`` is bound on every way that reaches prepare (the
        original reads it there), so it is prepared there, whichever branch built it."""
        obj, stmt = alias.obj, alias.stmt
        if stmt is None or alias.many or obj.stmt is not stmt or obj.where is not scope or obj.key != alias.key:
            return False
        top = self.facts.top_in(stmt, block)
        if not isinstance(top, cst.If) or not isinstance(stmt, cst.SimpleStatementLine):
            return False
        binders = [b.stmt for b in scope.bindings.get(alias.key, []) if b.stmt is not None]
        if any(self.facts.after(top, b) and unconditional(self.facts, b) for b in binders):
            return False
        if binds_on_every_path(self.facts, top, binders):
            return False
        if last is not None and last in block and self._read_after(scope, alias.key, block, top, last):
            return False
        return not self._read_by_training(scope, alias.key, block, last or top)

    def _read_after(self, scope: Scope, key: str, block: list[cst.BaseStatement], first: cst.BaseStatement,
                    last: cst.BaseStatement) -> bool:
        """Whether a plain statement of ``block`` after ``first`` and up to ``last`` reads ``key``."""
        start, end = block.index(first), block.index(last)
        for ref in scope.refs.get(key, []):
            holder = scope.holders.get(id(ref))
            if holder is not None and holder in block and start < block.index(holder) <= end \
                    and isinstance(holder, cst.SimpleStatementLine):
                return True
        return False

    def _read_by_training(self, scope: Scope, key: str, block: list[cst.BaseStatement],
                          last: cst.BaseStatement) -> bool:
        """Whether the first statement of ``block`` after ``last`` that trains reads ``key`` whenever it runs (in
        its loops' bodies, not under an ``if``, ``while`` or ``try`` of its own): ``for epoch in range(n):
        train_kd(model, teacher, optimizer, train_dl)``. No statement rebinds ``key`` between ``last`` and it."""
        if last not in block:
            return False
        following = block[block.index(last) + 1:]
        training = next((s for s in following if self.drives_training(scope, s)), None)
        if training is None:
            return False
        between = following[:following.index(training)]
        if any(self.facts.top_in(b.stmt, between) is not None for b in scope.bindings.get(key, []) if b.stmt is not None):
            return False
        for ref in scope.refs.get(key, []):
            holder = scope.holders.get(id(ref))
            chain = self.facts.chain(holder) if holder is not None else []
            if training not in chain:
                continue
            inside = chain[1:chain.index(training) + 1]
            if not any(isinstance(s, (cst.If, cst.While, cst.Try)) for s in inside[:-1]) and \
                    not (isinstance(training, (cst.If, cst.While, cst.Try)) and holder is not training):
                return True
        return False


def branch_test(branch: cst.If | cst.With) -> str:
    """What the message calls the statement: its ``if`` test (a ``with`` has one way through: no problem names it)."""
    return code_of(branch.test if isinstance(branch, cst.If) else branch.items[0].item).strip()


def _names(aliases: list[Alias]) -> str:
    """``model``, ``optimizer`` as the message writes them, once each."""
    return ", ".join(f"`{key}`" for key in dict.fromkeys(a.key for a in aliases))
