"""accelify.codemods: LibCST rules that turn a single-device PyTorch script into an Accelerate-style one.

``RULES`` is the one ordered list the engine runs; every rule module in this package is in it
(a test checks). Order matters: placement runs before threading and the device rule, because they
look at which uses of ``device`` placement removed.
"""

from __future__ import annotations

from accelify.codemods.accelerator import CreateAccelerator
from accelify.codemods.backward import SwapBackward
from accelify.codemods.clipping import SwapClipping
from accelify.codemods.device import ReplaceDevice
from accelify.codemods.end import EndTraining
from accelify.codemods.evaluation import GatherForMetrics
from accelify.codemods.imports import AddAcceleratorImport
from accelify.codemods.leftovers import ReportLeftovers
from accelify.codemods.load import LoadUnwrapped
from accelify.codemods.placement import RemovePlacement
from accelify.codemods.prepare import InsertPrepare
from accelify.codemods.printing import SwapPrint
from accelify.codemods.progress import DisableProgress
from accelify.codemods.rule import Rule
from accelify.codemods.save import SaveOnMain
from accelify.codemods.tensors import PlaceTensors
from accelify.codemods.thread import ThreadAccelerator
from accelify.codemods.unsupported import WarnUnsupported
from accelify.codemods.writes import MainProcessWrites

RULES: tuple[type[Rule], ...] = (
    WarnUnsupported,
    CreateAccelerator,
    AddAcceleratorImport,
    RemovePlacement,
    ThreadAccelerator,
    ReplaceDevice,
    PlaceTensors,
    InsertPrepare,
    SwapBackward,
    SwapClipping,
    GatherForMetrics,
    SwapPrint,
    DisableProgress,
    SaveOnMain,
    MainProcessWrites,
    LoadUnwrapped,
    EndTraining,
    ReportLeftovers,
)

RULE_NAMES: tuple[str, ...] = tuple(rule.name for rule in RULES)

__all__ = ["RULES", "RULE_NAMES", "Rule"]
