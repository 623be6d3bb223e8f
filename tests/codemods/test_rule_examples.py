"""Every rule's ``examples`` run: the documentation of a rule is its test (Fixit's VALID/INVALID idea).

For each example: the whole conversion of ``before`` is ``after`` with exactly the listed warnings; the
output converts to itself; and the rule's part is checked by converting again with the rule disabled:
a firing example then differs (in code or warnings), a near miss (``fires=False``) does not.
"""

from __future__ import annotations

import pytest

from accelify.codemods.engine.rule import Example, Rule
from accelify.codemods.rules import RULES
from accelify.pipeline import convert_source
from accelify.program import ModuleText

CASES = [(rule, example) for rule in RULES for example in rule.examples]
IDS = [f"{rule.name}-{'fires' if e.fires else 'near-miss'}-{i}" for i, (rule, e) in enumerate(CASES)]


def _warnings(result) -> list[str]:  # noqa: ANN001
    return sorted([f"{w.code}:{w.line}" for w in result.warnings]
                  + [f"{w.code}:{c.path}:{w.line}" for c in result.companions for w in c.warnings])


def _convert(example: Example, source: str, modules: dict[str, str] | None = None, **options: object):  # noqa: ANN202
    """``source`` converted with the example's modules (their texts from ``modules`` where given)."""
    texts = [ModuleText(path[:-3], path, (modules or {}).get(path, before)) for path, before, _ in example.module_texts]
    return convert_source(source, target=example.target, modules=texts, **options)  # type: ignore[arg-type]


def _module_news(result) -> dict[str, str]:  # noqa: ANN001
    return {c.path: c.new for c in result.companions}


@pytest.mark.parametrize(("rule", "example"), CASES, ids=IDS)
def test_example_converts_as_shown(rule: type[Rule], example: Example) -> None:
    result = _convert(example, example.source)
    assert result.error is None, result.error
    assert result.new == example.expected, f"{rule.name}: the conversion differs from the example:\n{result.new}"
    news = _module_news(result)
    for path, before, after in example.module_texts:
        assert news.get(path, before) == after, f"{rule.name}: {path} differs from the example:\n{news.get(path)}"
    assert _warnings(result) == sorted(example.warnings)
    again = _convert(example, result.new, {path: news.get(path, before) for path, before, _ in example.module_texts})
    assert again.new == result.new, f"{rule.name}: converting the example's output again changed it"


@pytest.mark.parametrize(("rule", "example"), CASES, ids=IDS)
def test_example_shows_the_rule_at_work(rule: type[Rule], example: Example) -> None:
    whole = _convert(example, example.source)
    without = _convert(example, example.source, disabled={rule.name})
    differs = whole.new != without.new or _warnings(whole) != _warnings(without) \
        or _module_news(whole) != _module_news(without)
    if example.fires:
        assert differs, f"{rule.name}: the example converts the same with the rule disabled: it shows nothing"
    else:
        assert not differs, f"{rule.name}: the near miss is changed by the rule"


@pytest.mark.parametrize("rule", RULES, ids=[r.name for r in RULES])
def test_every_rule_shows_a_rewrite_and_a_near_miss(rule: type[Rule]) -> None:
    assert any(e.fires for e in rule.examples), f"{rule.name} has no example where it fires"
    assert any(not e.fires for e in rule.examples), f"{rule.name} has no near-miss example"
    assert "Before::" in (rule.__doc__ or ""), "the class docstring shows the first example"
