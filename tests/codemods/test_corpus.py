"""Corpus goldens: every ``corpus/<name>/input.py`` converts to its hand-written ``expected.py``.

A multi-file case converts as a program: ``input.py`` with its local modules (``input_modules/``), each module
expected as in ``expected_modules/`` (absent: unchanged). Also: converting the expected files again changes nothing
(idempotence), ``--target accelerate`` gives ``expected_accelerate.py`` where the case has one (else
``expected.py`` with the import line swapped), and the conversion reports exactly the warnings ``run.toml`` lists.
``pytest --update-goldens`` rewrites the expected files from the current tool instead of comparing (review the
diff before committing it).
"""

from __future__ import annotations

import difflib
import functools
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

from accelify.pipeline import convert_source
from accelify.program import ModuleText
from accelify.results import Result
from corpus_cases import case_modules

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "corpus"
CASES = sorted(p.parent for p in CORPUS.glob("*/input.py"))
IDS = [case.name for case in CASES]

ACCELIFY_IMPORT = "from accelify.runtime import Accelerator"
ACCELERATE_IMPORT = "from accelerate import Accelerator"
WARNING_SPEC = re.compile(r"^(?:[\w/]+\.py:)?ACC\d{3}:\d+$")


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


def _modules(case: Path, *folders: str) -> list[ModuleText]:
    """The case's local modules, each taken from the first of ``folders`` that has it (packages in their folders)."""
    return case_modules(case, *folders)


def _convert(case: Path, script: str, folders: tuple[str, ...], target: str = "accelify") -> Result:
    code = (case / script).read_text(encoding="utf-8")
    return convert_source(code, path="input.py", target=target, modules=_modules(case, *folders))


@functools.cache
def _converted_input(case: Path) -> Result:
    """The default conversion of the case's ``input.py``, made once for the tests that read different things from it
    (its text against the golden, its warnings against run.toml): inputs are never rewritten, so it cannot go stale."""
    return _convert(case, "input.py", ())


def _module_outputs(case: Path, result: Result, folders: tuple[str, ...]) -> dict[str, tuple[str, str]]:
    """For each local module: (what the conversion left in it, what the case expects)."""
    converted = {c.path: c.new for c in result.companions}
    expected = {m.path: m.text for m in _modules(case, *folders)}
    original = {m.path: m.text for m in _modules(case)}
    return {name: (converted.get(name, original[name]), expected[name]) for name in original}


def _swap(text: str) -> str:
    return text.replace(ACCELIFY_IMPORT, ACCELERATE_IMPORT)


RUN_KEYS = {"scenario", "args", "runs", "compare", "distributed", "warnings", "status", "metric", "deadlock_prone"}


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
    unknown = set(cfg) - RUN_KEYS
    assert not unknown, f"run.toml keys not in corpus/README.md: {sorted(unknown)}"
    if "metric" in cfg:
        re.compile(cfg["metric"])
        assert cfg.get("distributed", True), "a metric case is compared with its 2-process run"
    if cfg.get("deadlock_prone"):
        assert cfg.get("distributed", True), "a deadlock-prone case is run on 2 processes"
        assert "--seed" in (case / "input.py").read_text(encoding="utf-8"), "a deadlock-prone script takes --seed"
    expected = (case / "expected.py").read_text(encoding="utf-8")
    source = (case / "input.py").read_text(encoding="utf-8")
    if expected == source and not (case / "expected_modules").is_dir():
        assert cfg.get("distributed") is False, "an unchanged script is not launched on 2 processes"
    elif expected != source and (case / "expected_modules").is_dir() and ACCELIFY_IMPORT not in expected:
        # the accelerator made in a module of the program (a trainer class's): the script may reach the runtime's
        # process state only (its prints and figures once the trainer trained)
        assert expected.count("from accelify.runtime import PartialState") == 1, "the script imports the runtime once"
    elif expected != source:
        assert expected.count(ACCELIFY_IMPORT) == 1, "a converted script imports the Accelerator once"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_input_converts_to_expected(case: Path, update_goldens: bool) -> None:
    result = _converted_input(case)
    assert result.error is None, f"conversion failed: {result.error}"
    if update_goldens:
        (case / "expected.py").write_text(result.new, encoding="utf-8")
        for companion in result.companions:
            if companion.changed:
                (case / "expected_modules" / companion.path).parent.mkdir(parents=True, exist_ok=True)
                (case / "expected_modules" / companion.path).write_text(companion.new, encoding="utf-8")
        return
    expected = (case / "expected.py").read_text(encoding="utf-8")
    assert result.new == expected, "conversion differs from the golden:\n" + _diff(expected, result.new, case.name)
    for name, (got, want) in _module_outputs(case, result, ("expected_modules",)).items():
        assert got == want, f"local module {name} differs from the golden:\n" + _diff(want, got, f"{case.name}/{name}")
    source = (case / "input.py").read_text(encoding="utf-8")
    # (an entry script the conversion leaves as it is, whose local modules it converts, is converted)
    default = "unchanged" if expected == source and not (case / "expected_modules").is_dir() else "converted"
    assert result.status == _config(case).get("status", default), result.reason


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_conversion_reports_the_listed_warnings(case: Path) -> None:
    result = _converted_input(case)
    found = sorted(f"{w.code}:{w.line}" for w in result.warnings)
    found += sorted(f"{c.path}:{w.code}:{w.line}" for c in result.companions for w in c.warnings)
    listed = sorted(_config(case).get("warnings", []))
    every = [w for part in (result, *result.companions) for w in part.warnings]
    assert found == listed, "warnings differ from run.toml:\n" + "\n".join(w.format() for w in every)
    for warning in result.warnings:
        assert warning.format().startswith(f"input.py:{warning.line}:{warning.col}: {warning.code} ")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_expected_converts_to_itself(case: Path) -> None:
    result = _convert(case, "expected.py", ("expected_modules",))
    expected = (case / "expected.py").read_text(encoding="utf-8")
    assert result.error is None, f"conversion failed: {result.error}"
    assert result.new == expected, "converting expected.py changed it:\n" + _diff(expected, result.new, case.name)
    assert all(not c.changed for c in result.companions), "converting the expected modules again changed them"
    refused = _config(case).get("status") == "attention"
    assert result.status == ("attention" if refused else "unchanged")


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_accelerate_target(case: Path, update_goldens: bool) -> None:
    """``--target accelerate``: ``expected_accelerate.py`` where the case has one, else the import line swapped."""
    result = _convert(case, "input.py", (), target="accelerate")
    assert result.error is None, f"conversion failed: {result.error}"
    own = case / "expected_accelerate.py"
    if update_goldens:
        swapped = _swap((case / "expected.py").read_text(encoding="utf-8"))
        if result.new != swapped:
            own.write_text(result.new, encoding="utf-8")
        elif own.is_file():
            own.unlink()
        return
    expected = own.read_text(encoding="utf-8") if own.is_file() else _swap((case / "expected.py").read_text(encoding="utf-8"))
    assert result.new == expected, "accelerate target differs:\n" + _diff(expected, result.new, case.name)
    folders = ("expected_accelerate_modules", "expected_modules")
    for name, (got, want) in _module_outputs(case, result, folders).items():
        want = want if (case / "expected_accelerate_modules" / name).is_file() else _swap(want)
        assert got == want, f"local module {name} (accelerate) differs:\n" + _diff(want, got, f"{case.name}/{name}")
