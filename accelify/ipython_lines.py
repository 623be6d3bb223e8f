"""IPython syntax in notebook cells: its lines masked as placeholder comments for conversion, then restored.

A line magic (``%matplotlib inline``), a shell escape (``!pip install ...``, ``files = !ls``), a help
request (``model?``) and a cell magic's first line are not Python: :func:`mask` replaces each with a
numbered placeholder comment (keeping the original), :func:`unmask` puts the originals back,
re-indented where the conversion moved them. :mod:`accelify.notebook` uses both.
"""

from __future__ import annotations

import re


# Cell magics whose body is Python: the first line is a placeholder, the rest is converted.
PYTHON_CELL_MAGICS = frozenset({"%%time", "%%timeit", "%%capture", "%%prun", "%%debug", "%%python", "%%python3"})
_MAGIC = "# @@accelify-magic-{}@@"
MAGIC_LINE = re.compile(r"^([ \t]*)# @@accelify-magic-(\d+)@@[ \t]*$")
_TIMED = "# @@accelify-timed-{}@@"
TIMED_LINE = re.compile(r"^([ \t]*)(.*?)[ \t]*# @@accelify-timed-(\d+)@@[ \t]*$")
_TIMING_MAGICS = ("%time", "%timeit", "%prun")
_VALUED_OPTIONS = ("-n", "-r", "-p", "-l", "-s", "-T", "-D")
_IPYTHON_LINE = re.compile(
    r"""^\s*(?:
        [%!?]                                   # %magic, !shell, ?help
      | [\w.\[\]]+\?{1,2}\s*$                   # obj? / obj??
      | [\w\s.,\[\]()*]+=\s*[%!]               # files = !ls, t = %timeit -o f()
    )""",
    re.VERBOSE,
)


def _advance(line: str, depth: int, quote: str | None) -> tuple[int, str | None]:
    """Bracket depth and open triple-quoted string after ``line`` (strings and comments skipped)."""
    i, n = 0, len(line)
    while i < n:
        c = line[i]
        if quote is not None:
            if c == "\\":
                i += 2
            elif line.startswith(quote, i):
                i, quote = i + len(quote), None
            else:
                i += 1
            continue
        if c == "#":
            break
        if c in "\"'":
            quote = line[i : i + 3] if line[i : i + 3] in ('"""', "'''") else c
            i += len(quote)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth = max(depth - 1, 0)
        i += 1
    return depth, quote if quote in ('"""', "'''") else None


def _timed(line: str) -> tuple[str, str] | None:
    """``%timeit -r 1 -n 1 train(model=model)`` split into the magic with its options (``%timeit -r 1 -n 1 ``) and
    the Python statement it runs; None for any other line (``t = %timeit -o f()``, a magic of several lines)."""
    stripped = line.strip()
    words = stripped.split(" ")
    if not words or words[0] not in _TIMING_MAGICS or stripped.endswith("\\"):
        return None
    index = 1
    while index < len(words) and (words[index] == "" or words[index].startswith("-")):
        word = words[index]
        index += 2 if word in _VALUED_OPTIONS else 1  # ``-n 1``: the option and its value; ``-n1``, ``-q``: one
    statement = " ".join(words[index:]).strip()
    if not statement:
        return None
    try:
        compile(statement, "<magic>", "exec")
    except SyntaxError:
        return None
    prefix = stripped[: len(stripped) - len(statement)]
    return prefix, statement


def mask(source: str, magics: dict[int, str]) -> str:
    """``source`` with its IPython lines replaced by numbered placeholder comments (kept in ``magics``).

    Only a line that starts a statement can be IPython syntax: not one inside brackets (``% (a, b)``
    continuing a format), a triple-quoted string, or after a backslash."""
    out: list[str] = []
    depth, quote, continued, magic_continues = 0, None, False, False
    for index, line in enumerate(source.split("\n")):
        stripped = line.lstrip()
        starts = depth == 0 and quote is None and not continued
        is_cell_magic = index == 0 and stripped.startswith("%%")
        timed = _timed(line) if starts and not magic_continues and not is_cell_magic else None
        if timed is not None:  # ``%timeit -r 1 -n 1 train(model=model, ...)``: the statement is the program's
            number = len(magics)
            magics[number] = timed[0]
            out.append(line[: len(line) - len(stripped)] + timed[1] + "  " + _TIMED.format(number))
            continue
        if magic_continues or is_cell_magic or (starts and _IPYTHON_LINE.match(line)):
            number = len(magics)
            magics[number] = line
            out.append(line[: len(line) - len(stripped)] + _MAGIC.format(number))
            magic_continues = line.rstrip().endswith("\\")
            continue
        depth, quote = _advance(line, depth, quote)
        continued = quote is None and line.rstrip().endswith("\\") and not line.lstrip().startswith("#")
        out.append(line)
    return "\n".join(out)


def unmask(text: str, magics: dict[int, str]) -> str | None:
    """The placeholders replaced by their original lines (re-indented where the conversion moved them), and the
    timing magics put back in front of their statements (as the conversion left them)."""
    out = []
    for line in text.split("\n"):
        timed = TIMED_LINE.match(line)
        if timed is not None:
            prefix = magics.pop(int(timed.group(3)), None)
            if prefix is None:
                return None
            out.append(timed.group(1) + prefix + timed.group(2))
            continue
        match = MAGIC_LINE.match(line)
        if match is None:
            out.append(line)
            continue
        original = magics.pop(int(match.group(2)), None)
        if original is None:
            return None
        stripped = original.lstrip()
        out.append(original if original[: len(original) - len(stripped)] == match.group(1) else match.group(1) + stripped)
    return "\n".join(out)

