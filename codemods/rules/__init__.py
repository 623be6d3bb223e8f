"""The conversion rules, one per module; the module's file name is the rule's ``name``.

``RULES`` is the one ordered list the engine runs; every rule module in this package is in it (a
test checks). Order matters: placement runs before threading and the device rule, because they look
at which uses of ``device`` placement removed; ``unsupported`` runs first (it may stop the file) and
``leftovers`` last (it reports what no rule took).
"""

from __future__ import annotations

from accelify.codemods.rule import Rule
from accelify.codemods.rules.accelerator import CreateAccelerator
from accelify.codemods.rules.accumulation import AccumulateGradients
from accelify.codemods.rules.amp import ConvertAmp
from accelify.codemods.rules.attributes import UnwrapAttributes
from accelify.codemods.rules.backward import SwapBackward
from accelify.codemods.rules.clipping import SwapClipping
from accelify.codemods.rules.closure import ReduceClosureLoss
from accelify.codemods.rules.data_parallel import RemoveDataParallel
from accelify.codemods.rules.device import ReplaceDevice
from accelify.codemods.rules.end import EndTraining
from accelify.codemods.rules.evaluation import GatherForMetrics
from accelify.codemods.rules.imports import AddAcceleratorImport
from accelify.codemods.rules.leftovers import ReportLeftovers
from accelify.codemods.rules.load import LoadUnwrapped
from accelify.codemods.rules.placement import RemovePlacement
from accelify.codemods.rules.prepare import InsertPrepare
from accelify.codemods.rules.print import SwapPrint
from accelify.codemods.rules.progress import DisableProgress
from accelify.codemods.rules.save import SaveOnMain
from accelify.codemods.rules.retry import WarnRetry
from accelify.codemods.rules.seeds import SeedPerProcess
from accelify.codemods.rules.startup import SafeStartup
from accelify.codemods.rules.tensors import PlaceTensors
from accelify.codemods.rules.threading import ThreadAccelerator
from accelify.codemods.rules.trigger import StopTogether
from accelify.codemods.rules.unsupported import WarnUnsupported
from accelify.codemods.rules.writes import MainProcessWrites

RULES: tuple[type[Rule], ...] = (
    WarnUnsupported,
    CreateAccelerator,
    AddAcceleratorImport,
    RemovePlacement,
    RemoveDataParallel,
    ConvertAmp,
    ThreadAccelerator,
    ReplaceDevice,
    PlaceTensors,
    InsertPrepare,
    SwapBackward,
    SwapClipping,
    AccumulateGradients,
    ReduceClosureLoss,
    GatherForMetrics,
    StopTogether,
    WarnRetry,
    SwapPrint,
    DisableProgress,
    SaveOnMain,
    MainProcessWrites,
    SafeStartup,
    SeedPerProcess,
    LoadUnwrapped,
    UnwrapAttributes,
    EndTraining,
    ReportLeftovers,
)

RULE_NAMES: tuple[str, ...] = tuple(rule.name for rule in RULES)

__all__ = ["RULES", "RULE_NAMES", "Rule"]
