"""The warning codes are one list (codemods/codes.py), and the README's table names every one of them."""

from __future__ import annotations

import re
from pathlib import Path

from accelify.codemods import codes

README = Path(__file__).resolve().parents[2] / "README.md"


def test_every_code_is_in_the_readme_table() -> None:
    table = {code for line in README.read_text(encoding="utf-8").splitlines() if line.startswith("| ACC")
             for code in re.findall(r"ACC\d{3}", line.split("|")[1])}
    defined = {c.code for c in codes.ALL}
    assert defined == table, f"README table differs: missing {sorted(defined - table)}, stale {sorted(table - defined)}"


def test_codes_have_a_message_and_a_fix() -> None:
    for code in codes.ALL:
        assert re.fullmatch(r"ACC\d{3}", code.code) and code.message and code.fix
        assert not code.message.endswith(".") and not code.fix.endswith("."), code.code
