"""Corpus goldens: every ``corpus/<name>/input.py`` converts to its hand-written ``expected.py``.

Also: converting ``expected.py`` again changes nothing (idempotence), ``--target accelerate`` differs only in the
import line, and the conversion reports exactly the warnings ``run.toml`` lists. ``pytest --update-goldens``
rewrites ``expected.py`` from the current tool instead of comparing (review the diff before committing it).
"""

from __future__ import annotations

import difflib
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from accelify.pipeline import convert_source

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus"
CASES = sorted(p.parent for p in CORPUS.glob("*/input.py"))
IDS = [case.name for case in CASES]

ACCELIFY_IMPORT = "from accelify.runtime import Accelerator"
ACCELERATE_IMPORT = "from accelerate import Accelerator"
WARNING_SPEC = re.compile(r"^ACC\d{3}:\d+$")


def _config(case: Path) -> dict[str, Any]:
    return tomllib.loads((case / "run.toml").read_text(encoding="utf-8"))


def _diff(expected: str, actual: str, name: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(keepends=True),
        actual.splitlines(keepends=True),
        fromfile=f"corpus/{name}/expected.py",
        tofile="converted",
    )
    return "".join(lines)


def test_corpus_has_the_listed_scenarios() -> None:
    assert len(CASES) >= 12, f"the corpus must hold at least 12 cases, found {IDS}"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_case_layout(case: Path) -> None:
    """Every case has the three files, both scripts compile, and run.toml is well formed."""
    for name in ("input.py", "expected.py", "run.toml"):
        assert (case / name).is_file(), f"corpus/{case.name} is missing {name}"
    for name in ("input.py", "expected.py"):
        compile((case / name).read_text(encoding="utf-8"), str(case / name), "exec")
    cfg = _config(case)
    assert isinstance(cfg.get("scenario"), str) and cfg["scenario"], "run.toml needs a `scenario`"
    re.compile(cfg["compare"])
    assert not ("args" in cfg and "runs" in cfg), "run.toml takes `args` or `runs`, not both"
    runs = cfg.get("runs", [cfg.get("args", [])])
    assert runs and all(isinstance(run, list) and all(isinstance(a, str) for a in run) for run in runs)
    assert all(WARNING_SPEC.match(w) for w in cfg.get("warnings", [])), "warnings are written as 'ACCnnn:line'"
    expected = (case / "expected.py").read_text(encoding="utf-8")
    source = (case / "input.py").read_text(encoding="utf-8")
    if expected == source:
        assert cfg.get("distributed") is False, "an unchanged script is not launched on 2 processes"
    else:
        assert expected.count(ACCELIFY_IMPORT) == 1, "a converted script imports the Accelerator once"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_input_converts_to_expected(case: Path, update_goldens: bool) -> None:
    source = (case / "input.py").read_text(encoding="utf-8")
    result = convert_source(source, path=str(case / "input.py"))
    assert result.error is None, f"conversion failed: {result.error}"
    if update_goldens:
        (case / "expected.py").write_text(result.new, encoding="utf-8")
        return
    expected = (case / "expected.py").read_text(encoding="utf-8")
    assert result.new == expected, "conversion differs from the golden:\n" + _diff(expected, result.new, case.name)
    default = "unchanged" if expected == source else "converted"
    assert result.status == _config(case).get("status", default), result.reason


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conversion_reports_the_listed_warnings(case: Path) -> None:
    result = convert_source((case / "input.py").read_text(encoding="utf-8"), path="input.py")
    found = sorted(f"{w.code}:{w.line}" for w in result.warnings)
    listed = sorted(_config(case).get("warnings", []))
    assert found == listed, "warnings differ from run.toml:\n" + "\n".join(w.format() for w in result.warnings)
    for warning in result.warnings:
        assert warning.format().startswith(f"input.py:{warning.line}:{warning.col}: {warning.code} ")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_expected_converts_to_itself(case: Path) -> None:
    expected = (case / "expected.py").read_text(encoding="utf-8")
    result = convert_source(expected, path=str(case / "expected.py"))
    assert result.error is None, f"conversion failed: {result.error}"
    assert result.new == expected, "converting expected.py changed it:\n" + _diff(expected, result.new, case.name)
    refused = _config(case).get("status") == "attention"
    assert result.status == ("attention" if refused else "unchanged")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_accelerate_target_differs_only_in_the_import(case: Path) -> None:
    source = (case / "input.py").read_text(encoding="utf-8")
    expected = (case / "expected.py").read_text(encoding="utf-8").replace(ACCELIFY_IMPORT, ACCELERATE_IMPORT)
    result = convert_source(source, path=str(case / "input.py"), target="accelerate")
    assert result.error is None, f"conversion failed: {result.error}"
    assert result.new == expected, "accelerate target differs:\n" + _diff(expected, result.new, case.name)
