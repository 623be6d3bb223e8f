"""Loaders stored into a dict's items after the dict was made (the Udacity-course layout, K10):

    loaders = {}
    loaders["train"] = DataLoader(train_set, batch_size=32, shuffle=True)
    loaders["valid"] = DataLoader(valid_set, batch_size=32)

or one item per key of a literal list (``for phase in ["train", "val"]: loaders[phase] = DataLoader(...)``).
When every item the program stores is known (string keys, in the block that makes the dict or a loop over a
literal list of keys there), the dict is a holder of loaders like ``{"train": DataLoader(...), ...}``: its items
are prepared (``rules/prepare.py``) in the one prepare call with the model and optimizer where the dict is in hand
before it (made in that block, or bound there to what a helper returns), as a named loader would be, else in place
right after the last one is stored, and everything that walks
``loaders["train"]`` or ``loaders[phase]`` sees a prepared loader. Where the keys cannot be known (a computed key,
an item stored under an ``if``, the dict read or passed on before its last item is stored, items stored anywhere
else) nothing is found here, and the seeds rule reports the unprepared items (ACC053).
"""

from __future__ import annotations

from dataclasses import dataclass

import libcst as cst
import libcst.matchers as m

from accelify.codemods.analysis.facts import Binding, Facts
from accelify.codemods.analysis.names import ImportMap
from accelify.codemods.analysis.roles import classify


@dataclass(eq=False)
class FilledDict:
    """``loaders = {}`` (``binding``) whose items ``keys`` (their source text, quotes kept: ``'train'``) are each
    stored a DataLoader before ``after`` ends, a statement of the dict's own block."""

    binding: Binding
    keys: list[str]
    after: cst.BaseStatement

    def holds(self, item: cst.Subscript) -> bool:
        """Whether ``loaders[key]`` reads one of the known items: a string key among them, or a key not written out
        (``loaders[phase]``)."""
        key = item.slice[0].slice if len(item.slice) == 1 else None
        if isinstance(key, cst.Index) and isinstance(key.value, cst.SimpleString):
            return key.value.evaluated_value in {_text(k) for k in self.keys}
        return True

    def items(self) -> list[str]:
        """``loaders['train']``, ... : the items to prepare, in the order they are stored."""
        return [f"{self.binding.key}[{key}]" for key in self.keys]


def _text(key: str) -> object:
    """The value of a string key's source text (``'train'`` -> ``train``)."""
    return cst.SimpleString(key).evaluated_value


def empty_dict(value: cst.BaseExpression | None) -> bool:
    """``{}`` or ``dict()``."""
    if isinstance(value, cst.Dict):
        return not value.elements
    return isinstance(value, cst.Call) and isinstance(value.func, cst.Name) and value.func.value == "dict" and not value.args


def filled_dicts(facts: Facts) -> list[FilledDict]:
    """Every dict of the program made empty and then filled with data loaders under known keys."""
    found = []
    for binding in facts.bindings():
        if "." in binding.key or not empty_dict(binding.value) or len(binding.scope.bindings.get(binding.key, [])) != 1:
            continue  # (a name bound again may hold another dict by the time the loop walks it)
        filled = _filled(facts, binding)
        if filled is not None:
            found.append(filled)
    return found


def _filled(facts: Facts, binding: Binding) -> FilledDict | None:
    block = _block(facts, binding.stmt)
    if block is None:
        return None
    name, imports, classes = binding.key, binding.where.imports, facts.classes
    keys: list[str] = []
    last: cst.BaseStatement | None = None
    read_at: int | None = None  # the first statement after the dict that reads it otherwise
    start = block.index(binding.stmt) + 1
    for index, stmt in enumerate(block[start:], start):
        stored = _stored_keys(stmt, name, imports, classes)
        if stored is not None:
            if read_at is not None:
                return None  # read (walked, passed on) before this item is stored
            keys += stored
            last = stmt
        elif _mentions(stmt, name):
            read_at = index if read_at is None else read_at
    if last is None or len(set(keys)) != len(keys):
        return None
    known = sum(_item_stores(stmt, name) for stmt in block[start:block.index(last) + 1])
    if _item_stores(binding.where.node, name) != known:
        return None  # an item stored somewhere else too (under an ``if``, a computed key, a nested function)
    return FilledDict(binding, keys, last)


def _block(facts: Facts, stmt: cst.BaseStatement) -> list[cst.BaseStatement] | None:
    """The statements of the block directly holding ``stmt`` (a module's, a function's, an ``if``'s body)."""
    parent = facts.parent_stmt.get(stmt)
    if parent is None:  # a module's statement: the module of the program that holds it
        return next((list(u.module.body) for u in facts.units.values() if stmt in u.module.body), None)
    inner = getattr(getattr(parent, "body", None), "body", ())
    body = list(inner) if isinstance(inner, (list, tuple)) else []
    return body if stmt in body else None


def _stored_keys(stmt: cst.BaseStatement, name: str, imports: ImportMap, classes: dict[str, list[str]]) -> list[str] | None:
    """The keys ``stmt`` stores a loader under: ``name["train"] = DataLoader(...)``, or a ``for`` over a literal list
    of string keys whose body stores ``name[key] = DataLoader(...)`` once and reads the dict nowhere else."""
    store = _loader_store(stmt, name, imports, classes)
    if store is not None:
        key = store.slice[0].slice.value  # type: ignore[attr-defined]
        return [key.value] if isinstance(key, cst.SimpleString) else None
    if not isinstance(stmt, cst.For) or stmt.orelse is not None or not isinstance(stmt.target, cst.Name):
        return None
    if not isinstance(stmt.iter, (cst.List, cst.Tuple)) or not stmt.iter.elements or not all(
            isinstance(e.value, cst.SimpleString) for e in stmt.iter.elements):
        return None
    body = stmt.body.body if isinstance(stmt.body, cst.IndentedBlock) else ()
    stores = [s for s in body if (found := _loader_store(s, name, imports, classes)) is not None
              and m.matches(found.slice[0].slice, m.Index(m.Name(stmt.target.value)))]
    others = [s for s in body if s not in stores]
    if len(stores) != 1 or any(_mentions(s, name) for s in others):
        return None
    return [e.value.value for e in stmt.iter.elements]  # type: ignore[attr-defined]


def _loader_store(stmt: cst.BaseStatement, name: str, imports: ImportMap, classes: dict[str, list[str]]) -> cst.Subscript | None:
    """``name[key] = DataLoader(...)``: its target."""
    if not isinstance(stmt, cst.SimpleStatementLine) or len(stmt.body) != 1 or not isinstance(assign := stmt.body[0], cst.Assign):
        return None
    if len(assign.targets) != 1 or classify(assign.value, imports, classes) != "loader":
        return None
    target = assign.targets[0].target
    if m.matches(target, m.Subscript(value=m.Name(name), slice=[m.SubscriptElement(slice=m.Index())])):
        return target  # type: ignore[return-value]
    return None


def _mentions(node: cst.CSTNode, name: str) -> bool:
    return bool(m.findall(node, m.Name(name)))


def _item_stores(node: cst.CSTNode, name: str) -> int:
    """How many statements under ``node`` store into, delete or update an item of ``name`` (nested functions too:
    one filling a module's dict stores into the same dict)."""
    stores = m.findall(node, m.Assign(targets=[m.ZeroOrMore(), m.AssignTarget(target=m.Subscript(value=m.Name(name))), m.ZeroOrMore()]))
    stores += m.findall(node, m.AugAssign(target=m.Subscript(value=m.Name(name))))
    stores += m.findall(node, m.Del(target=m.Subscript(value=m.Name(name))))
    changes = m.findall(node, m.Call(func=m.Attribute(value=m.Name(name), attr=m.OneOf(
        m.Name("update"), m.Name("setdefault"), m.Name("pop"), m.Name("popitem"), m.Name("clear")))))
    return len(stores) + len(changes)
