"""How ``accelify migrate`` scales: parallel speed-up, the cost of a file that is not a candidate,
peak memory as the tree grows, and the pipeline's cost per line against a bare LibCST round trip.

Generates trees in a temporary folder: a quarter training scripts (the corpus inputs under varied
names and folders), the rest ordinary modules that do not import torch. Each measurement runs
``accelify migrate`` (the CLI, preview mode: nothing written) in a fresh process, which reports its
own time and peak memory and its workers'. Prints, with the machine's load average:

- speed-up of ``--jobs 2`` over ``--jobs 1`` on 1,000 files (target >= 1.7 on 2 idle cores);
- time per non-candidate file, walk and text test included (target <= 1 ms: no parse);
- peak memory of the parent and of a worker, for 1,000 and 4,000 files (target <= 300 MB, flat);
- the pipeline's time per candidate line / ``libcst.parse_module(code).code`` on the same files
  (target <= 3.0).

Usage::

    python benchmarks/migrate_scale.py [--files 1000] [--big 4000] [--rounds 3]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
NAMES = ("train", "finetune", "pretrain", "main", "run_experiment", "trainer", "fit", "script", "baseline", "ablation")

RUNNER = r"""
import json, os, sys, threading, time
from accelify.cli import main

TICK = os.sysconf("SC_CLK_TCK")
seen = {}  # pid -> (peak RSS in MB, CPU seconds), last reading


def descendants(root):
    children = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
                children.setdefault(int(fields[1]), []).append((int(entry), fields))
            except (OSError, IndexError):
                pass
    out, todo = {}, [root]
    while todo:
        for pid, fields in children.get(todo.pop(), []):
            out[pid] = (int(fields[11]) + int(fields[12])) / TICK
            todo.append(pid)
    return out


def sample(stop):
    while not stop.is_set():
        for pid, cpu in descendants(os.getpid()).items():
            try:
                with open(f"/proc/{pid}/status") as handle:
                    peak = next(int(l.split()[1]) for l in handle if l.startswith("VmHWM")) / 1024
            except (OSError, StopIteration):
                continue
            seen[pid] = (max(peak, seen.get(pid, (0, 0))[0]), cpu)
        stop.wait(0.05)


stop = threading.Event()
thread = threading.Thread(target=sample, args=(stop,), daemon=True)
thread.start()
start, cpu0 = time.perf_counter(), time.process_time()
try:
    main(["migrate", *sys.argv[1:]], standalone_mode=False)
    code = 0
except SystemExit as exit_:
    code = exit_.code
seconds, cpu = time.perf_counter() - start, time.process_time() - cpu0
stop.set()
thread.join()
with open("/proc/self/status") as handle:
    parent = next(int(l.split()[1]) for l in handle if l.startswith("VmHWM")) / 1024
print(json.dumps({"seconds": seconds, "parent_mb": parent, "worker_mb": max((m for m, _ in seen.values()), default=0),
                  "cpu": cpu + sum(c for _, c in seen.values()), "exit": code}))
"""


def ordinary_module(rng: random.Random, index: int) -> str:
    """A plain Python module of 40-120 lines that does not import torch."""
    lines = [f'"""Helpers number {index}."""', "", "import os", "import json", "from dataclasses import dataclass", ""]
    for k in range(rng.randint(3, 8)):
        lines += [
            "", "@dataclass", f"class Record{k}:", f'    """A record ({k})."""', "", "    name: str", "    size: int = 0", "",
            "    def describe(self) -> str:", f'        return f"{{self.name}}: {{self.size}} ({k})"', "",
            f"def load_{k}(path):", "    with open(path) as handle:", "        data = json.load(handle)",
            f"    return [Record{k}(**item) for item in data if item.get('size', 0) > {k}]",
        ]
    return "\n".join(lines) + "\n"


def generate(folder: Path, files: int, seed: int = 0) -> tuple[int, int]:
    """A tree of ``files`` files, a quarter training scripts; returns (candidates, lines in them)."""
    rng = random.Random(seed)
    corpus = [p.read_text(encoding="utf-8") for p in sorted((ROOT / "corpus").glob("*/input.py"))]
    if not corpus:
        raise SystemExit(f"no corpus inputs under {ROOT / 'corpus'}: run this from a checkout of the repository")
    scripts = files // 4
    lines = 0
    for i in range(files):
        group = folder / f"project_{i % 37:02d}" / ("experiments" if i % 3 else "src")
        group.mkdir(parents=True, exist_ok=True)
        if i < scripts:
            text = corpus[i % len(corpus)]
            (group / f"{NAMES[i % len(NAMES)]}_{i:04d}.py").write_text(text, encoding="utf-8")
            lines += text.count("\n")
        else:
            (group / f"util_{i:04d}.py").write_text(ordinary_module(rng, i), encoding="utf-8")
    (folder / "pyproject.toml").write_text("[project]\nname = 'bench'\n")
    return scripts, lines


def migrate(folder: Path, jobs: int) -> dict[str, float]:
    proc = subprocess.run([sys.executable, "-c", RUNNER, str(folder), "--jobs", str(jobs), "--exit-zero"],
                          capture_output=True, text=True, cwd=folder)
    if proc.returncode != 0:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def load() -> str:
    return "load average %.1f %.1f %.1f" % os.getloadavg()


def best(rounds: int, fn):  # type: ignore[no-untyped-def]
    results = [fn() for _ in range(rounds)]
    return min(results, key=lambda r: r["seconds"])


def pipeline_ratio(folder: Path, rounds: int) -> tuple[float, float, int]:
    """Best-of-rounds time of convert_path vs parse + codegen over the candidate files of ``folder``."""
    import libcst

    from accelify.migrate.discovery import CANDIDATE, walk
    from accelify.pipeline import convert_path
    from accelify.settings import SettingsFinder

    paths = [e.path for e in walk(folder, SettingsFinder()) if e.kind == CANDIDATE]
    texts = [p.read_text(encoding="utf-8") for p in paths]
    n_lines = sum(t.count("\n") for t in texts)
    convert_path(paths[0])  # import the rules outside the timing
    times = {"base": float("inf"), "full": float("inf")}
    for _ in range(rounds):
        start = time.perf_counter()
        for text in texts:
            libcst.parse_module(text).code
        times["base"] = min(times["base"], time.perf_counter() - start)
        start = time.perf_counter()
        for path in paths:
            convert_path(path)
        times["full"] = min(times["full"], time.perf_counter() - start)
    return times["base"], times["full"], n_lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--files", type=int, default=1000)
    parser.add_argument("--big", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"cores: {len(os.sched_getaffinity(0))}  {load()}")
    with tempfile.TemporaryDirectory() as tmp:
        small, big, plain = Path(tmp) / "small", Path(tmp) / "big", Path(tmp) / "plain"
        scripts, lines = generate(small, args.files)
        print(f"tree: {args.files} files, {scripts} training scripts ({lines} lines), {args.files - scripts} plain modules")

        one = best(args.rounds, lambda: migrate(small, 1))
        two = best(args.rounds, lambda: migrate(small, 2))
        print(f"--jobs 1: {one['seconds']:.2f} s ({one['cpu']:.1f} s CPU)   --jobs 2: {two['seconds']:.2f} s "
              f"({two['cpu']:.1f} s CPU, all processes)   speed-up {one['seconds'] / two['seconds']:.2f}  "
              f"(target >= 1.7)  [{load()}]")

        count = args.files - args.files // 4
        plain.mkdir()
        rng = random.Random(1)
        for i in range(count):
            (plain / f"mod_{i:04d}.py").write_text(ordinary_module(rng, i), encoding="utf-8")
        empty = best(args.rounds, lambda: migrate(plain, 1))
        nothing = Path(tmp) / "nothing"
        nothing.mkdir()
        baseline = best(args.rounds, lambda: migrate(nothing, 1))  # start-up and imports alone
        per_file = (empty["seconds"] - baseline["seconds"]) / count * 1000
        print(f"non-candidate files: {count} in {empty['seconds'] - baseline['seconds']:.3f} s beyond an empty run: "
              f"{per_file:.3f} ms per file  (target <= 1 ms)  [{load()}]")

        generate(big, args.big, seed=2)
        for name, folder, files in (("small", small, args.files), ("big", big, args.big)):
            run = migrate(folder, 2)
            print(f"peak memory, {files} files, --jobs 2: parent {run['parent_mb']:.0f} MB, largest worker "
                  f"{run['worker_mb']:.0f} MB  (target <= 300 MB per process, flat)")

        base, full, n_lines = pipeline_ratio(small, args.rounds)
        print(f"pipeline: {full / n_lines * 1e6:.1f} us/line   libcst parse + code: {base / n_lines * 1e6:.1f} us/line   "
              f"ratio {full / base:.2f}  (target <= 3.0)  [{load()}]")


if __name__ == "__main__":
    main()
