"""Dev script: run one corpus case's original and expected conversion, on 1 and 2 CPU processes, and compare.

    python corpus/tools/runcase.py CASE [CASE ...] [--skip orig,exp1,acc1,exp2] [--keep]

For each case it lays out (in a temporary folder per variant) `train.py` plus the local modules, as README.md says:

- orig: `input.py` + `input_modules/*.py`, one process, plain `python train.py ARGS`;
- exp1: `expected.py` + `input_modules/` overlaid by `expected_modules/`, one process;
- acc1: `expected_accelerate.py` (or `expected.py` with the import swapped) + `expected_accelerate_modules/` (or the
  exp1 modules with the import swapped), one process, under Hugging Face Accelerate;
- exp2: the exp1 layout on 2 processes (`torch.distributed.run --standalone --nproc-per-node=2`);
- acc2: the acc1 layout on 2 processes under Hugging Face Accelerate (`ACCELERATE_USE_CPU=1`, without which Accelerate
  runs each CPU process alone), only for cases with an `expected_accelerate.py`.

Then it checks: the compared lines (and the `metric` lines) of exp1 and acc1 equal the original's; exp2 exits 0, rank 0
prints the compared lines with finite numbers, rank 1 none, and its metric lines equal the original's. exp1/acc1/exp2
run under a small shim that reports on stderr what was prepared and whether a data loader that was not prepared was
iterated on more than one process (an unsharded training loader). This is a checking aid, not a test.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1]
PYTHON = sys.executable
ACCELIFY_IMPORT = "from accelify.runtime import Accelerator"
ACCELERATE_IMPORT = "from accelerate import Accelerator"
RANK = re.compile(r"^\[default(\d+)\]:(.*)$")
NUMBER = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\bnan\b|\binf\b)", re.IGNORECASE)

SHIM = r'''
import os, runpy, sys, atexit
script = sys.argv[1]
sys.argv = sys.argv[1:]
sys.path.insert(0, os.path.dirname(os.path.abspath(script)))
import torch
from torch.utils.data import DataLoader
rank = os.environ.get("RANK", "0")
prepared = []
raw_iterated = []
def _log(msg):
    sys.stderr.write(f"[shim rank{rank}] {msg}\n")
def _describe(o):
    name = type(o).__name__
    if hasattr(o, "module") and isinstance(o, torch.nn.Module):
        return f"{name}({type(o.module).__name__})"
    return name
def _patch(cls):
    orig = cls.prepare
    def prepare(self, *args, **kw):
        out = orig(self, *args, **kw)
        outs = out if isinstance(out, tuple) else (out,)
        prepared.append(", ".join(_describe(o) for o in outs))
        return out
    cls.prepare = prepare
try:
    import accelify.runtime as _ar
    _patch(_ar.Accelerator)
except Exception:
    pass
if os.environ.get("SHIM_ACCELERATE"):
    import accelerate as _acc
    _patch(_acc.Accelerator)
_orig_iter = DataLoader.__iter__
def _iter(self):
    if type(self) is DataLoader and int(os.environ.get("WORLD_SIZE", "1")) > 1 and not os.environ.get("SHIM_ACCELERATE"):
        raw_iterated.append(f"{type(self.dataset).__name__}(len={len(self.dataset)})")
    return _orig_iter(self)
DataLoader.__iter__ = _iter
def _report():
    for p in prepared:
        _log(f"prepared: {p}")
    if raw_iterated:
        _log(f"UNPREPARED loaders iterated: {sorted(set(raw_iterated))}")
atexit.register(_report)
runpy.run_path(script, run_name="__main__")
'''


def load(case: Path) -> dict:
    cfg = tomllib.loads((case / "run.toml").read_text(encoding="utf-8"))
    cfg["runs"] = cfg.get("runs", [cfg.get("args", [])])
    return cfg


def layout(case: Path, variant: str, root: Path) -> Path:
    folder = Path(tempfile.mkdtemp(prefix=f"{case.name}-{variant}-", dir=root))
    modules = {p.name: p.read_text(encoding="utf-8") for p in sorted((case / "input_modules").glob("*.py"))}
    if variant == "orig":
        main = (case / "input.py").read_text(encoding="utf-8")
    else:
        main = (case / "expected.py").read_text(encoding="utf-8")
        modules.update({p.name: p.read_text(encoding="utf-8") for p in sorted((case / "expected_modules").glob("*.py"))})
        if variant == "acc1":
            special = case / "expected_accelerate.py"
            main = special.read_text(encoding="utf-8") if special.exists() else main.replace(ACCELIFY_IMPORT, ACCELERATE_IMPORT)
            modules = {k: v.replace(ACCELIFY_IMPORT, ACCELERATE_IMPORT) for k, v in modules.items()}
            modules.update(
                {p.name: p.read_text(encoding="utf-8") for p in sorted((case / "expected_accelerate_modules").glob("*.py"))}
            )
    (folder / "train.py").write_text(main, encoding="utf-8")
    for name, text in modules.items():
        (folder / name).write_text(text, encoding="utf-8")
    (folder / "_shim.py").write_text(SHIM, encoding="utf-8")
    return folder


def env(**extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELIFY_", "ACCELERATE_", "TORCHELASTIC_"))}
    for key in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        e.pop(key, None)
    e.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", CUDA_VISIBLE_DEVICES="", PYTHONHASHSEED="0")
    e.update(extra)
    return e


def run(folder: Path, runs: list[list[str]], nproc: int, shim: bool, extra_env: dict[str, str]) -> tuple[int, list[str], list[str], float]:
    outs, errs = ["", ""], ["", ""]
    start = time.time()
    code = 0
    for args in runs:
        script = ["_shim.py", "train.py"] if shim else ["train.py"]
        if nproc == 1:
            cmd = [PYTHON, *script, *args]
        else:
            cmd = [PYTHON, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={nproc}", "--tee", "3", *script, *args]
        try:
            proc = subprocess.run(cmd, cwd=folder, capture_output=True, text=True, env=env(**extra_env), timeout=300)
        except subprocess.TimeoutExpired as exc:
            return 124, [str(exc.stdout), ""], [f"TIMEOUT (hang?) {exc}", ""], time.time() - start
        if nproc == 1:
            outs[0] += proc.stdout
            errs[0] += proc.stderr
        else:
            for text, sink in ((proc.stdout, outs), (proc.stderr, errs)):
                for line in text.splitlines():
                    m = RANK.match(line)
                    if m and int(m.group(1)) < 2:
                        sink[int(m.group(1))] += m.group(2) + "\n"
                    else:
                        sink[0] += line + "\n"
        code = proc.returncode
        if code:
            break
    return code, outs, errs, time.time() - start


def picked(pattern: str | None, text: str) -> list[str]:
    if not pattern:
        return []
    rx = re.compile(pattern)
    return [line for line in text.splitlines() if rx.search(line)]


def check(case: Path, skip: set[str], keep: bool, root: Path, seed_env: dict[str, str]) -> bool:
    cfg = load(case)
    ok = True
    results = {}
    print(f"=== {case.name}: {cfg['scenario']}")
    for variant in ("orig", "exp1", "acc1", "exp2", "acc2"):
        if variant in skip or (variant in ("exp2", "acc2") and not cfg.get("distributed", True)):
            continue
        if variant == "acc2" and not (case / "expected_accelerate.py").exists():
            continue
        folder = layout(case, "acc1" if variant == "acc2" else variant, root)
        nproc = 2 if variant in ("exp2", "acc2") else 1
        extra = dict(seed_env)
        if variant in ("acc1", "acc2"):
            extra["SHIM_ACCELERATE"] = "1"
        if variant == "acc2":
            extra["ACCELERATE_USE_CPU"] = "1"
        code, outs, errs, secs = run(folder, cfg["runs"], nproc, shim=variant != "orig", extra_env=extra)
        results[variant] = (code, outs, errs)
        lines = picked(cfg["compare"], outs[0])
        print(f"--- {variant}: exit {code}, {secs:.1f}s, {len(lines)} compared lines, folder {folder}")
        for line in errs[0].splitlines() + errs[1].splitlines():
            if line.startswith("[shim") or "Warning" in line or "Error" in line or "error" in line:
                print("   ", line[:300])
        if code:
            ok = False
            print(outs[0][-2000:], errs[0][-4000:], errs[1][-2000:], sep="\n")
            continue
        if variant == "orig":
            for line in lines:
                print("    |", line)
            for line in picked(cfg.get("metric"), outs[0]):
                print("    | metric:", line)
            if not lines:
                ok = False
                print("    !! the original prints no compared line")
        if not keep:
            shutil.rmtree(folder, ignore_errors=True)
    if "orig" in results and results["orig"][0] == 0:
        base = picked(cfg["compare"], results["orig"][1][0])
        base_metric = picked(cfg.get("metric"), results["orig"][1][0])
        for variant in ("exp1", "acc1"):
            if variant in results and results[variant][0] == 0:
                got = picked(cfg["compare"], results[variant][1][0])
                if got != base:
                    ok = False
                    print(f"    !! {variant} compared lines differ:")
                    for a, b in zip(base + [""] * len(got), got + [""] * len(base)):
                        if a != b:
                            print(f"       orig: {a}\n       {variant}: {b}")
                            break
        if "acc2" in results and results["acc2"][0] == 0:
            rank0 = picked(cfg["compare"], results["acc2"][1][0])
            metric2 = picked(cfg.get("metric"), results["acc2"][1][0])
            if not rank0 or (cfg.get("metric") and metric2 != base_metric):
                ok = False
                print(f"    !! acc2: rank0 printed {len(rank0)} compared lines; metric {metric2} vs {base_metric}")
            else:
                print(f"    acc2 (Accelerate, 2 processes): {len(rank0)} compared lines, metric lines equal")
        if "exp2" in results and results["exp2"][0] == 0:
            rank0 = picked(cfg["compare"], results["exp2"][1][0])
            rank1 = picked(cfg["compare"], results["exp2"][1][1])
            for line in rank0:
                print("    2p|", line)
            if not rank0 or rank1:
                ok = False
                print(f"    !! exp2: rank0 printed {len(rank0)} compared lines, rank1 {len(rank1)}")
            for line in rank0:
                if any(not math.isfinite(float(t)) for t in NUMBER.findall(line)):
                    ok = False
                    print(f"    !! non-finite: {line}")
            metric2 = picked(cfg.get("metric"), results["exp2"][1][0])
            if cfg.get("metric"):
                if metric2 != base_metric or not base_metric:
                    ok = False
                    print(f"    !! exp2 metric lines differ: {base_metric} vs {metric2}")
                else:
                    print(f"    metric lines equal on 2 processes: {metric2}")
    print(f"=== {case.name}: {'OK' if ok else 'FAILED'}")
    return ok


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("cases", nargs="+")
    parser.add_argument("--skip", default="", help="comma-separated variants to skip: orig,exp1,acc1,exp2")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders")
    parser.add_argument("--seed-env", default="", help="NAME=VALUE passed to every run")
    parser.add_argument("--seeds", default="", help="deadlock check: run exp2 again once per seed, with `--seed N` appended to every run")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="runcase-"))
    seed_env = dict([args.seed_env.split("=", 1)]) if args.seed_env else {}
    results = [check(CORPUS / name.rstrip("/").split("/")[-1], set(filter(None, args.skip.split(","))), args.keep, root, seed_env) for name in args.cases]
    for seed in filter(None, args.seeds.split(",")):
        for name in args.cases:
            case = CORPUS / name.rstrip("/").split("/")[-1]
            cfg = load(case)
            runs = [list(run) + ["--seed", seed] for run in cfg["runs"]]
            folder = layout(case, "exp2", root)
            code, outs, errs, secs = run(folder, runs, 2, shim=False, extra_env=seed_env)
            rank0, rank1 = picked(cfg["compare"], outs[0]), picked(cfg["compare"], outs[1])
            good = code == 0 and rank0 and not rank1
            results.append(bool(good))
            print(f"=== {case.name} seed {seed} on 2 processes: exit {code}, {secs:.1f}s, rank0 {len(rank0)} lines: {'OK' if good else 'FAILED'}")
            if not good:
                print(outs[0][-1500:], errs[0][-3000:], errs[1][-1500:], sep="\n")
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    sys.exit(0 if all(results) else 1)


if __name__ == "__main__":
    main()
