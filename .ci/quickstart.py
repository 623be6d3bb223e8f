"""Print the N-th Quickstart command of README.md (1-based), exactly as written there.

`.ci/run` runs what this prints, so CI runs the README's commands verbatim: a command that
fails on a new user's machine fails CI. The Quickstart must hold exactly two ```bash blocks
of one line each.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def quickstart_commands(text: str) -> list[str]:
    """The one-line commands of the ```bash blocks between ``## Quickstart`` and the next ``## `` heading."""
    match = re.search(r"^## Quickstart\n(.*?)(?=^## )", text, re.MULTILINE | re.DOTALL)
    if match is None:
        raise SystemExit("README.md has no '## Quickstart' section")
    blocks = re.findall(r"^```bash\n(.*?)^```", match.group(1), re.MULTILINE | re.DOTALL)
    commands = [block.strip() for block in blocks]
    if len(commands) != 2 or any("\n" in command for command in commands):
        raise SystemExit(f"the Quickstart must hold exactly two one-line ```bash commands, found: {commands!r}")
    return commands


if __name__ == "__main__":
    print(quickstart_commands(README.read_text(encoding="utf-8"))[int(sys.argv[1]) - 1])
