"""Every rule module in codemods/ is in the one ordered list, with a name and a before/after docstring."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import accelify.codemods as codemods
from accelify.codemods import RULES
from accelify.codemods.rule import Rule


def _rule_classes() -> list[type[Rule]]:
    found = []
    for info in pkgutil.iter_modules(codemods.__path__):
        module = importlib.import_module(f"accelify.codemods.{info.name}")
        for _, obj in inspect.getmembers(module, inspect.isclass):
            if issubclass(obj, Rule) and obj is not Rule and obj.__module__ == module.__name__:
                found.append(obj)
    return found


def test_every_rule_module_is_in_the_ordered_list() -> None:
    defined = _rule_classes()
    assert defined, "no rule classes found"
    assert set(defined) == set(RULES), f"missing from RULES: {set(defined) - set(RULES)}"
    assert len(RULES) == len(set(RULES))


def test_rules_have_unique_names_and_documented_examples() -> None:
    names = [rule.name for rule in RULES]
    assert len(names) == len(set(names))
    for rule in RULES:
        module = inspect.getmodule(rule)
        assert rule.description and module is not None and module.__doc__
        assert "Before" in module.__doc__, f"{module.__name__} docstring shows no before/after"


def test_placement_runs_before_threading_and_device() -> None:
    order = [rule.name for rule in RULES]
    assert order.index("placement") < order.index("threading") < order.index("device")
    assert order[0] == "unsupported" and order[-1] == "leftovers"
