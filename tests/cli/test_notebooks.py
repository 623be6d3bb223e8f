"""Notebooks: goldens compared cell by cell, IPython lines kept, notebook_launcher, JSON layout, bad notebooks.

Goldens: ``tests/cli/notebooks/<case>/input.ipynb`` converts to ``expected.ipynb`` (outputs and
metadata identical, code cells as written there) with the warnings in ``warnings.txt``;
``pytest --update-goldens tests/cli/test_notebooks.py`` rewrites them on purpose.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from accelify.cli import main
from accelify.notebook import JsonStyle
from accelify.pipeline import convert_notebook, convert_notebook_text

CASES = sorted((Path(__file__).parent / "notebooks").glob("*/input.ipynb"))


def notebook(*sources: str, indent: int = 1) -> str:
    cells = [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}, indent=indent) + "\n"


def sources(text: str) -> list[str]:
    return ["".join(c["source"]) if isinstance(c["source"], list) else c["source"] for c in json.loads(text)["cells"]]


@pytest.mark.parametrize("case", CASES, ids=[c.parent.name for c in CASES])
def test_golden(case: Path, update_goldens: bool) -> None:
    result = convert_notebook(str(case))
    expected_path, warnings_path = case.with_name("expected.ipynb"), case.with_name("warnings.txt")
    warnings = "".join(f"{w.code} {w.path.rsplit(':', 1)[1]}:{w.line}\n" for w in result.warnings)
    if update_goldens:
        expected_path.write_text(result.new, encoding="utf-8")
        warnings_path.write_text(warnings, encoding="utf-8")
    assert result.status == "converted", result.error
    old, new, expected = (json.loads(t) for t in (case.read_text(), result.new, expected_path.read_text()))
    assert len(new["cells"]) == len(old["cells"]) == len(expected["cells"])
    for number, (before, after, want) in enumerate(zip(old["cells"], new["cells"], expected["cells"]), start=1):
        assert after == want, f"cell {number}"
        assert {k: v for k, v in after.items() if k != "source"} == {k: v for k, v in before.items() if k != "source"}
        if before["cell_type"] != "code":
            assert after == before, f"cell {number}: a {before['cell_type']} cell changed"
    assert new["metadata"] == old["metadata"] and new["nbformat"] == old["nbformat"]
    assert result.new == expected_path.read_text(encoding="utf-8")  # the notebook's own JSON layout
    assert warnings == warnings_path.read_text(encoding="utf-8")
    again = convert_notebook_text(result.new, path=str(case))
    assert again.status == "unchanged" and again.new == result.new


def test_golden_magics_and_notebook_launcher() -> None:
    case = Path(__file__).parent / "notebooks" / "magics_outputs" / "expected.ipynb"
    cells = sources(case.read_text())
    assert cells[1].startswith('%matplotlib inline\n%load_ext autoreload\n!echo "installing nothing"\n')
    assert "!this line is a docstring, not a shell escape" in cells[5]
    assert cells[6] == "%%time\nnotebook_launcher(main, (3, 0.1))"
    assert cells[7] == "%%bash\necho done" and cells[8] == "main?"


def _program(text: str) -> str:
    """The code cells as one script, IPython lines and non-Python cells left out (what a kernel runs)."""
    out = []
    for cell in json.loads(text)["cells"]:
        source = "".join(cell["source"])
        if cell["cell_type"] != "code" or source.startswith("%%bash"):
            continue
        out.extend(line for line in source.splitlines() if not re.match(r"\s*([%!]|\w+\?$)", line))
    return "\n".join(out) + "\n"


@pytest.mark.multiprocess
def test_the_converted_notebook_computes_what_the_original_did(tmp_path: Path, clean_env) -> None:  # type: ignore[no-untyped-def]
    """Both notebooks' code, run one after the other in one process (torch imported once)."""
    case = Path(__file__).parent / "notebooks" / "magics_outputs"
    scripts = []
    for name in ("input.ipynb", "expected.ipynb"):
        script = tmp_path / f"{name}.py"
        script.write_text(_program((case / name).read_text()))
        scripts.append(str(script))
    runner = "import runpy, sys\nfor path in sys.argv[1:]:\n    print('=== ' + path)\n    runpy.run_path(path, run_name='__main__')\n"
    proc = subprocess.run([sys.executable, "-c", runner, *scripts], capture_output=True, text=True, timeout=180,
                          cwd=tmp_path, env=clean_env({"CUDA_VISIBLE_DEVICES": ""}))
    assert proc.returncode == 0, proc.stderr
    _, original, converted = proc.stdout.split("=== ")
    printed = [[line for line in part.splitlines() if line.startswith("epoch")] for part in (original, converted)]
    assert len(printed[0]) == 3 and printed[0] == printed[1]


def test_keyword_arguments_or_a_used_result_are_left_with_a_warning() -> None:
    text = notebook(
        "import torch\n",
        "def main(lr):\n    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=lr)\n"
        "    return model\n",
        "main(lr=0.1)",
        "model = main(0.1)",
    )
    result = convert_notebook_text(text, path="nb.ipynb")
    assert result.status == "converted"
    assert sources(result.new)[2:] == ["main(lr=0.1)", "model = main(0.1)"]
    found = [(w.code, w.path, w.line) for w in result.warnings if w.code == "ACC102"]
    assert found == [("ACC102", "nb.ipynb:cell_3", 1), ("ACC102", "nb.ipynb:cell_4", 1)]
    assert "passes keyword arguments" in result.warnings[0].message


def test_json_layout_is_kept(tmp_path: Path) -> None:
    for indent in (1, 2, 4):
        text = notebook("import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n# é\n",
                        indent=indent)
        assert JsonStyle.of(text).dumps(json.loads(text)) == text
        result = convert_notebook_text(text, path="nb.ipynb")
        assert result.status == "converted" and result.new.split("\n")[1].startswith(" " * indent + '"cells"')
    escaped = json.dumps(json.loads(notebook("# é\nimport torch\n")), indent=1, ensure_ascii=True)
    assert JsonStyle.of(escaped).dumps(json.loads(escaped)) == escaped


@pytest.mark.parametrize(
    ("text", "status", "message"),
    [
        ('{"cells": [', "failed", "nb.ipynb:1:12: not valid notebook JSON"),
        ("[1, 2]", "failed", "not a Jupyter notebook"),
        ('{"worksheets": [], "nbformat": 3}', "skipped", "an nbformat 3 notebook"),
        (json.dumps({"cells": [], "metadata": {"kernelspec": {"language": "R"}}}), "skipped", "a R notebook"),
        (notebook("import torch\n", "x = (\n"), "failed", "nb.ipynb:cell_2:1:5: syntax error: '(' was never closed"),
        (notebook("import os\n"), "skipped", "does not import torch"),
    ],
)
def test_bad_notebooks(text: str, status: str, message: str) -> None:
    result = convert_notebook_text(text, path="nb.ipynb")
    assert result.status == status
    assert message in (result.error or result.reason or ""), result
    assert result.new == result.old == text


def test_convert_cli_shows_the_cell_diff_and_writes_the_notebook(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    monkeypatch.chdir(tmp_path)
    text = notebook("%pip install tqdm\nimport torch\n", "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\nprint(1)")
    (tmp_path / "nb.ipynb").write_text(text)
    checked = CliRunner().invoke(main, ["convert", "--check", "nb.ipynb"])
    assert checked.exit_code == 1
    assert "--- a/nb.ipynb:cell_1\n+++ b/nb.ipynb:cell_1\n" in checked.stdout
    assert "-print(1)\n+model, opt = accelerator.prepare(model, opt)\n+accelerator.print(1)\n" in checked.stdout
    assert (tmp_path / "nb.ipynb").read_text() == text
    assert CliRunner().invoke(main, ["convert", "--in-place", "nb.ipynb"]).exit_code == 0
    cells = sources((tmp_path / "nb.ipynb").read_text())
    assert cells[0].startswith("%pip install tqdm\nimport torch\n") and "accelerator.print(1)" in cells[1]
    assert CliRunner().invoke(main, ["convert", "--check", "nb.ipynb"]).exit_code == 0


def test_only_a_line_that_starts_a_statement_is_ipython() -> None:
    """`% (a, b)` continuing a format inside brackets is Python; `!ls` on its own line is a shell escape."""
    cell = ('import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n'
            'print("loss %f %d"\n      % (1.0, 2))\nnote = """\n!not a shell escape\n"""\n!ls\nx = 1 + \\\n    2')
    result = convert_notebook_text(notebook(cell), path="nb.ipynb")
    assert result.status == "converted", result.error
    new = sources(result.new)[0]
    assert 'accelerator.print("loss %f %d"\n      % (1.0, 2))' in new
    assert 'note = """\n!not a shell escape\n"""\n!ls\nx = 1 + \\\n    2' in new
