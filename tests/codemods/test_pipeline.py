"""The pipeline: statuses, encodings, suppression, results that pickle (the contract example is corpus/contract_example)."""

from __future__ import annotations

import pickle
from pathlib import Path

import pytest

from accelify.pipeline import convert_path, convert_source
from accelify.results import Result

SCRIPT = "import torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


def test_statuses() -> None:
    assert convert_source(SCRIPT).status == "converted"
    assert convert_source("x = 1\n").status == "skipped"
    assert convert_source("import torch\nprint(torch.ones(1))\n").status == "unchanged"
    skipped = convert_source("# accelify: skip-file\n" + SCRIPT)
    assert (skipped.status, skipped.new, skipped.reason) == ("skipped", skipped.old, "# accelify: skip-file")


def test_syntax_error_is_a_failed_result_with_its_position() -> None:
    result = convert_source("import torch\ndef f(:\n", path="bad.py")
    assert result.status == "failed" and result.new == result.old
    assert result.error == "bad.py:2:7: syntax error: invalid syntax"


def test_a_tab_and_spaces_in_one_indentation_names_the_line_python_reads_and_the_parser_does_not() -> None:
    """O5 (a SimCLR script): ``\\t       return ...`` inside a function indented with spaces. Python reads it; LibCST's
    tokenizer stops with "no matching outer block for dedent" at 1:1, which the file does not have."""
    code = "import torch\n\n\ndef f(x):\n    if x:\n\t       return 1\n    return 2\n"
    result = convert_source(code, path="mixed.py")
    assert result.status == "failed" and result.new == code
    assert result.error is not None and result.error.startswith("mixed.py:6:1: cannot be read: Python reads this file")
    assert "re-indent the file with spaces" in result.error


def test_result_is_frozen_and_picklable() -> None:
    result = convert_source(SCRIPT + "x = y.cuda(1)\n", path="t.py")
    again = pickle.loads(pickle.dumps(result))
    assert again == result and isinstance(again, Result)
    with pytest.raises(AttributeError):
        result.status = "failed"  # type: ignore[misc]
    assert again.to_json()["warnings"][0]["code"] == "ACC013"


@pytest.mark.parametrize(
    ("prefix", "encoding"),
    [(b"", "utf-8"), (b"\xef\xbb\xbf", "utf-8-sig"), (b"# -*- coding: latin-1 -*-\n", "iso-8859-1")],
)
def test_encodings_round_trip(tmp_path: Path, prefix: bytes, encoding: str) -> None:
    body = SCRIPT + "print('caf\u00e9')\n"
    data = prefix + body.encode("latin-1" if encoding == "iso-8859-1" else "utf-8")
    path = tmp_path / "t.py"
    path.write_bytes(data)
    result = convert_path(path)
    assert result.status == "converted" and result.encoding == encoding
    assert "accelerator.print('caf\u00e9')" in result.new
    assert result.new.encode(encoding).startswith(prefix)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"import torch\x00\x01", "binary"),
        (b"import torch\nx = '\xff\xfe'\n", "cannot be decoded as utf-8"),
        (b"# -*- coding: klingon -*-\nimport torch\n", "encoding declaration"),
    ],
)
def test_unreadable_files_fail_cleanly(tmp_path: Path, data: bytes, message: str) -> None:
    path = tmp_path / "bad.py"
    path.write_bytes(data)
    result = convert_path(path)
    assert result.status == "failed" and message in (result.error or "")
    assert path.read_bytes() == data


def test_directory_and_missing_paths_fail_cleanly(tmp_path: Path) -> None:
    assert "is a directory" in (convert_path(tmp_path).error or "")
    assert "does not exist" in (convert_path(tmp_path / "nope.py").error or "")


def test_crlf_newlines_and_comments_are_preserved() -> None:
    code = "import torch  # the lib\r\n" + SCRIPT.replace("\n", "\r\n") + "loss.backward()  # step\r\n"
    new = convert_source(code).new
    assert "import torch  # the lib\r\n" in new and "accelerator.backward(loss)  # step\r\n" in new
    assert "\n" not in new.replace("\r\n", "")


def test_disabled_rules_do_not_run() -> None:
    new = convert_source(SCRIPT + "print(1)\n", disabled={"print"}).new
    assert "\nprint(1)\n" in new and "accelerator.prepare" in new


def test_unknown_target_is_an_error() -> None:
    from accelify.errors import UnknownTargetError

    with pytest.raises(UnknownTargetError, match="accelerate"):
        convert_source(SCRIPT, target="deepspeed")


def test_statement_skip_comment() -> None:
    new = convert_source(SCRIPT + "loss.backward()  # accelify: skip\n# accelify: skip\nprint(1)\n").new
    assert "loss.backward()  # accelify: skip\n# accelify: skip\nprint(1)\n" in new
