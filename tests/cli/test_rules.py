"""``accelify rules`` / ``accelify rule KEY`` and docs/RULES.md: the catalogue generated from the rules' examples."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from accelify import catalogue
from accelify.cli import main
from accelify.codemods.codes import ALL
from accelify.codemods.rules import RULES

ROOT = Path(__file__).resolve().parents[2]


def test_docs_rules_md_is_the_generated_catalogue() -> None:
    written = (ROOT / catalogue.DOC_PATH).read_text(encoding="utf-8")
    assert written == catalogue.markdown(), (
        "docs/RULES.md is stale: run `python -m accelify.catalogue > docs/RULES.md` and commit it")


def test_rules_lists_every_rule_and_code() -> None:
    result = CliRunner().invoke(main, ["rules"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for code in ALL:
        assert code.code in result.output
    for rule in RULES:
        assert rule.name in result.output


def test_rule_explains_a_code_with_its_fix_and_an_example_that_reports_it() -> None:
    result = CliRunner().invoke(main, ["rule", "acc16"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert result.output.startswith("ACC016: the evaluation output here could not be gathered")
    assert "What to do: name what the metric is computed from" in result.output
    assert "Before:" in result.output and "Reported: ACC016:" in result.output


def test_rule_explains_a_rule_by_name_with_its_conversion() -> None:
    result = CliRunner().invoke(main, ["rule", "prepare"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "accelerator.prepare(" in result.output and "After:" in result.output
    assert 'disable = ["prepare"]' in result.output


def test_an_unknown_key_is_an_error_that_says_where_the_list_is() -> None:
    result = CliRunner().invoke(main, ["rule", "ACC999"])
    assert result.exit_code == 2
    assert "no rule or warning code is named 'ACC999'" in result.stderr and "accelify rules" in result.stderr


def test_a_code_example_is_one_whose_conversion_reports_that_code() -> None:
    for entry in catalogue.codes():
        if entry.example is not None:
            assert any(w.split(":")[0] == entry.key for w in entry.example.warnings), entry.key


def test_every_code_has_an_example_but_the_notebook_steps() -> None:
    """``accelify rule ACC0nn`` shows a before/after for every code a rule raises; ACC101/ACC102 are the
    notebook step's (``engine/notebook_launch.py``), not a rule's, so no rule example can report them."""
    missing = [e.key for e in catalogue.codes() if e.example is None and e.key not in ("ACC101", "ACC102")]
    assert missing == [], f"warning codes with no example (add one to the rule that owns each): {missing}"
