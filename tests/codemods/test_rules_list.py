"""Every rule module in codemods/rules/ is in the one ordered list; a module's file name is its rule's name."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import accelify.codemods.rules as rules_package
from accelify.codemods.engine.rule import Rule
from accelify.codemods.rules import RULES


def _rule_classes() -> dict[str, list[type[Rule]]]:
    found: dict[str, list[type[Rule]]] = {}
    for info in pkgutil.iter_modules(rules_package.__path__):
        module = importlib.import_module(f"accelify.codemods.rules.{info.name}")
        found[info.name] = [
            obj
            for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__
        ]
    return found


def test_every_rule_module_is_in_the_ordered_list() -> None:
    defined = _rule_classes()
    assert defined, "no rule modules found"
    classes = [cls for group in defined.values() for cls in group]
    assert set(classes) == set(RULES), f"missing from RULES: {set(classes) - set(RULES)}"
    assert len(RULES) == len(set(RULES))


def test_one_rule_per_module_named_for_the_rule() -> None:
    for module, classes in _rule_classes().items():
        assert len(classes) == 1, f"codemods/rules/{module}.py defines {len(classes)} rules"
        assert classes[0].name == module, f"codemods/rules/{module}.py holds rule {classes[0].name!r}"


def test_no_rule_module_outside_rules() -> None:
    import accelify.codemods as codemods

    for info in pkgutil.iter_modules(codemods.__path__):
        if info.ispkg:
            continue
        module = importlib.import_module(f"accelify.codemods.{info.name}")
        stray = [
            obj for _, obj in inspect.getmembers(module, inspect.isclass)
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__
        ]
        assert not stray, f"accelify.codemods.{info.name} defines rules {stray}: rules live in codemods/rules/"


def test_rules_have_unique_names_and_descriptions() -> None:
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        assert rule.description and inspect.getmodule(rule).__doc__  # type: ignore[union-attr]


def test_placement_runs_before_threading_and_device() -> None:
    order = [rule.name for rule in RULES]
    assert order.index("placement") < order.index("threading") < order.index("device")
    assert order[:2] == ["lightning", "unsupported"] and order[-1] == "leftovers"
