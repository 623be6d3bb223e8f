"""How much the whole conversion pipeline costs compared with a bare LibCST round trip.

Takes the corpus inputs (``corpus/*/input.py``), repeats them to about 5,000 lines, and times in the same process:

- baseline: ``libcst.parse_module(code).code`` for every file;
- pipeline: ``accelify.pipeline.convert_source(code)`` for every file (parse, analysis, rules,
  transform, re-parse check, warnings with positions).

Prints both times and the ratio pipeline / baseline (target: <= 3.0). Usage::

    python benchmarks/convert_speed.py [--lines 5000] [--rounds 5]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import libcst

from accelify.pipeline import convert_source

ROOT = Path(__file__).resolve().parent.parent


def load_sources(lines: int) -> list[tuple[str, str]]:
    """``(path, code)`` pairs, the corpus inputs repeated until they hold about ``lines`` lines."""
    files = sorted((ROOT / "corpus").glob("*/input.py"))
    if not files:
        raise SystemExit(f"no corpus inputs under {ROOT / 'corpus'}: run this from a checkout of the repository")
    sources = [(str(f), f.read_text(encoding="utf-8")) for f in files]
    out: list[tuple[str, str]] = []
    total = 0
    while total < lines:
        for path, code in sources:
            out.append((path, code))
            total += code.count("\n")
            if total >= lines:
                break
    return out


def best_times(rounds: int, *fns) -> list[float]:  # type: ignore[no-untyped-def]
    """The fastest of ``rounds`` timings of each function, the functions taking turns so that a burst
    of other load on the machine slows all of them alike."""
    best = [float("inf")] * len(fns)
    for _ in range(rounds):
        for i, fn in enumerate(fns):
            start = time.perf_counter()
            fn()
            best[i] = min(best[i], time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--lines", type=int, default=5000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    sources = load_sources(args.lines)
    n_lines = sum(code.count("\n") for _, code in sources)

    def baseline() -> None:
        for _, code in sources:
            libcst.parse_module(code).code

    def pipeline() -> None:
        for path, code in sources:
            convert_source(code, path=path)

    pipeline()  # import the rules once, outside the timing
    base, full = best_times(args.rounds, baseline, pipeline)
    print(f"files: {len(sources)}  lines: {n_lines}")
    print(f"libcst parse + code: {base:.3f} s  ({n_lines / base:,.0f} lines/s)")
    print(f"accelify pipeline:   {full:.3f} s  ({n_lines / full:,.0f} lines/s)")
    print(f"ratio pipeline / parse+code: {full / base:.2f}  (target <= 3.0)")


if __name__ == "__main__":
    main()
