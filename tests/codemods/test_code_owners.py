"""Each warning code has one message, and names the rules that raise it: exactly those rule files use it.

"Where is ACC026?" is then one hop: ``codes.py`` says ``rules/refusals.py``, and that is the only place it is raised.
"""

from __future__ import annotations

import re
from pathlib import Path

from accelify.codemods import codes
from accelify.codemods.rules import RULE_NAMES

CODEMODS = Path(__file__).resolve().parents[2] / "codemods"
STEPS = {"notebook_launch": CODEMODS / "engine" / "notebook_launch.py"}  # the engine's own step that warns
NAMES = {value: name for name, value in vars(codes).items() if isinstance(value, codes.Code)}


def test_one_message_per_code() -> None:
    seen: dict[str, list[str]] = {}
    for code in codes.ALL:
        seen.setdefault(code.code, []).append(NAMES[code])
    assert {c: names for c, names in seen.items() if len(names) > 1} == {}


def test_every_code_names_the_rules_that_raise_it() -> None:
    for code in codes.ALL:
        assert code.rules, f"{code.code} names no rule"
        assert set(code.rules) <= set(RULE_NAMES) | set(STEPS), f"{code.code} names an unknown rule: {code.rules}"


def test_a_code_is_used_exactly_where_it_says() -> None:
    files = {name: CODEMODS / "rules" / f"{name}.py" for name in RULE_NAMES} | STEPS
    used: dict[str, set[str]] = {}
    for owner, path in files.items():
        text = path.read_text(encoding="utf-8")
        for name in set(re.findall(r"\bcodes\.([A-Z_0-9]+)\b", text)):
            used.setdefault(name, set()).add(owner)
    for code in codes.ALL:
        assert used.get(NAMES[code], set()) == set(code.rules), f"{code.code} ({NAMES[code]}) is used in {used.get(NAMES[code])}"


def test_nothing_but_rules_and_the_notebook_step_raise_a_code() -> None:
    """The analysis finds problems; only a rule turns one into a warning code (``rules/refusals.py`` for the plan's)."""
    for path in (CODEMODS / "analysis").glob("*.py"):
        assert "codes" not in re.findall(r"^from accelify\.codemods import (\w+)", path.read_text(encoding="utf-8"), re.M), path
