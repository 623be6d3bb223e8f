"""The corpus cases and the planted wrong conversions, as the tests read them.

A corpus case is ``corpus/<name>/`` (see ``corpus/README.md``): ``input.py``, its local modules in ``input_modules/``
(imported by ``input.py`` by file name), ``expected.py`` (and ``expected_modules/``), ``run.toml``. A planted case is
``tests/verify/planted/<name>/``: ``original.py``, a wrong ``converted.py``, and ``case.toml`` naming the check that
``accelify verify`` must fail first, with words its detail and its meaning must contain; ``right.py``, where there is
one, is the right conversion, which verify must pass.
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass
from pathlib import Path

from accelify.program import ModuleText
from accelify.verify import ScriptFiles

ROOT = Path(__file__).resolve().parents[1]
CORPUS = ROOT / "corpus"
PLANTED = ROOT / "tests" / "verify" / "planted"
SCRIPT = "train.py"  # the name every case's script runs under (loops are reported as train.py:LINE)

CASE_DIRS = sorted(p.parent for p in CORPUS.glob("*/input.py"))
IDS = [d.name for d in CASE_DIRS]
PLANTED_IDS = sorted(p.parent.name for p in PLANTED.glob("*/case.toml"))
RIGHT_IDS = sorted(p.parent.name for p in PLANTED.glob("*/right.py"))


@dataclass(frozen=True)
class Case:
    """One corpus folder and its ``run.toml``."""

    name: str
    directory: Path
    runs: tuple[tuple[str, ...], ...]
    compare: re.Pattern[str]
    distributed: bool
    status: str | None  # the conversion's status when run.toml names it ("attention" for a refused file)
    metric: re.Pattern[str] | None  # lines an evaluation before training prints: equal on 1 and on 2 processes
    deadlock_prone: bool  # a collective near a branch: the 2-process run is repeated with 3 seeds

    @classmethod
    def load(cls, directory: Path) -> "Case":
        cfg = tomllib.loads((directory / "run.toml").read_text(encoding="utf-8"))
        runs = cfg["runs"] if "runs" in cfg else [cfg.get("args", [])]
        return cls(
            name=directory.name,
            directory=directory,
            runs=tuple(tuple(run) for run in runs),
            compare=re.compile(cfg["compare"]),
            distributed=bool(cfg.get("distributed", True)),
            status=cfg.get("status"),
            metric=re.compile(cfg["metric"]) if "metric" in cfg else None,
            deadlock_prone=bool(cfg.get("deadlock_prone", False)),
        )

    def source(self) -> str:
        return (self.directory / "input.py").read_text(encoding="utf-8")

    def files(self) -> ScriptFiles:
        """``input.py`` as ``train.py``, with the modules of ``input_modules/`` next to it (packages in their folders)."""
        return ScriptFiles(SCRIPT, self.source(), tuple((m.path, m.text) for m in case_modules(self.directory)))

    def compared(self, stdout: str) -> list[str]:
        return [line for line in stdout.splitlines() if self.compare.search(line)]

    def metrics(self, stdout: str) -> list[str]:
        """The lines of ``stdout`` the ``metric`` regex picks (none when the case has no metric)."""
        return [line for line in stdout.splitlines() if self.metric and self.metric.search(line)]


def case_modules(directory: Path, *folders: str) -> list[ModuleText]:
    """A case's local modules: every ``.py`` under ``input_modules/`` (``trainer/trainer.py`` is the module
    ``trainer.trainer``, ``base/__init__.py`` the package ``base``), each read from the first of ``folders`` that has
    it (``expected_modules``), else from ``input_modules``."""
    root = directory / "input_modules"
    out = []
    for path in sorted(root.rglob("*.py")):
        relative = path.relative_to(root).as_posix()
        source = next(directory / f / relative for f in (*folders, "input_modules") if (directory / f / relative).is_file())
        unit = relative[:-3].replace("/", ".").removesuffix(".__init__")
        out.append(ModuleText(unit, relative, source.read_text(encoding="utf-8")))
    return out


@dataclass(frozen=True)
class PlantedCase:
    """A planted wrong conversion and the verdict ``accelify verify`` must give it."""

    name: str
    directory: Path
    description: str
    check: str  # the first failing check
    detail: str  # words its detail contains
    meaning: str  # words its meaning contains
    timeout: float
    steps: int
    batches: int = 0  # the epoch limit (VerifyOptions.batches, .epochs); 0: none
    epochs: int = 0

    @classmethod
    def load(cls, name: str) -> "PlantedCase":
        directory = PLANTED / name
        cfg = tomllib.loads((directory / "case.toml").read_text(encoding="utf-8"))
        return cls(name, directory, cfg["description"], cfg["check"], cfg["detail"], cfg["meaning"],
                   float(cfg.get("timeout", 120)), int(cfg.get("steps", 5)), int(cfg.get("batches", 0)),
                   int(cfg.get("epochs", 0)))

    def original(self) -> ScriptFiles:
        return ScriptFiles(SCRIPT, (self.directory / "original.py").read_text(encoding="utf-8"))

    def converted(self) -> ScriptFiles:
        return ScriptFiles(SCRIPT, (self.directory / "converted.py").read_text(encoding="utf-8"))

    def right(self) -> ScriptFiles | None:
        """The right conversion (``right.py``), which verify must pass; None for a case without one."""
        path = self.directory / "right.py"
        return ScriptFiles(SCRIPT, path.read_text(encoding="utf-8")) if path.exists() else None
