"""The conversion rules, one per module; the module's file name is the rule's ``name``.

``RULES`` is the one ordered list the engine runs; every rule module in this package is in it (a
test checks). A rule never imports another rule: what it needs to know it asks the plan, and what another
rule did it reads from the proposed edits. Where a rule reads another's edits, the order matters: each such
pair is named, with the reason, in ``tests/codemods/test_rule_order.py``; any other order of the list gives
the same conversions (the same test runs the examples and the corpus in shuffled orders).
"""

from __future__ import annotations

from accelify.codemods.engine.rule import Rule
from accelify.codemods.rules.accelerator import CreateAccelerator
from accelify.codemods.rules.accumulation import AccumulateGradients
from accelify.codemods.rules.amp import ConvertAmp
from accelify.codemods.rules.apex import RemoveApex
from accelify.codemods.rules.averages import ReduceAverages
from accelify.codemods.rules.plateau_metrics import ReducePlateauMetric
from accelify.codemods.rules.attributes import UnwrapAttributes
from accelify.codemods.rules.backward import SwapBackward
from accelify.codemods.rules.batch_index import WarnBatchIndex
from accelify.codemods.rules.exec_files import WarnExecutedFiles
from accelify.codemods.rules.clipping import SwapClipping
from accelify.codemods.rules.closure import ReduceClosureLoss
from accelify.codemods.rules.collectives import ReplaceCollectives
from accelify.codemods.rules.comprehended_shares import WarnComprehendedShares
from accelify.codemods.rules.cuda_types import PlaceCudaTypes
from accelify.codemods.rules.dataset_files import DatasetFilesFirst
from accelify.codemods.rules.data_parallel import RemoveDataParallel
from accelify.codemods.rules.ddp import RemoveDistributedWrapper
from accelify.codemods.rules.detached_fakes import DetachSharedForward
from accelify.codemods.rules.device import ReplaceDevice
from accelify.codemods.rules.end import EndTraining
from accelify.codemods.rules.evaluation import GatherForMetrics
from accelify.codemods.rules.forward_methods import RefuseForwardMethods
from accelify.codemods.rules.full_batches import KeepFullBatches
from accelify.codemods.rules.gathered_sums import SumPerOriginalBatch
from accelify.codemods.rules.gathered_shapes import ShapeFromGather
from accelify.codemods.rules.gated_backward import WarnGatedBackward
from accelify.codemods.rules.host_copies import HostCopies
from accelify.codemods.rules.imports import AddAcceleratorImport
from accelify.codemods.rules.leftovers import ReportLeftovers
from accelify.codemods.rules.lightning import RefuseLightning
from accelify.codemods.rules.model_parallel import RefuseModelParallel
from accelify.codemods.rules.load import LoadUnwrapped
from accelify.codemods.rules.logging import MainProcessLogging
from accelify.codemods.rules.loguru import MainProcessLoguru
from accelify.codemods.rules.micro_steps import AccumulateMicroSteps
from accelify.codemods.rules.mixed_loaders import WarnMixedLoaders
from accelify.codemods.rules.pass_indexed import WarnPassIndexed
from accelify.codemods.rules.placement import RemovePlacement
from accelify.codemods.rules.prepare import InsertPrepare
from accelify.codemods.rules.prepared_parts import WarnPreparedParts
from accelify.codemods.rules.named_parameters import UnwrapNames
from accelify.codemods.rules.plan_warnings import WarnPlanProblems
from accelify.codemods.rules.print import SwapPrint
from accelify.codemods.rules.refusals import RefusePlanProblems
from accelify.codemods.rules.process_group import RemoveProcessGroup
from accelify.codemods.rules.ranks import MapRanks
from accelify.codemods.rules.progress import DisableProgress
from accelify.codemods.rules.save import SaveOnMain
from accelify.codemods.rules.retry import WarnRetry
from accelify.codemods.rules.sampler import RemoveDistributedSampler
from accelify.codemods.rules.seeds import SeedPerProcess
from accelify.codemods.rules.shared_files import WriteOnceReadAll
from accelify.codemods.rules.shared_draws import SeedSharedDraws
from accelify.codemods.rules.spawn import CollapseSpawn
from accelify.codemods.rules.startup import SafeStartup
from accelify.codemods.rules.tensors import PlaceTensors
from accelify.codemods.rules.threading import ThreadAccelerator
from accelify.codemods.rules.tracing import TraceUnwrapped
from accelify.codemods.rules.trigger import StopTogether
from accelify.codemods.rules.unsupported import WarnUnsupported
from accelify.codemods.rules.unused_imports import RemoveUnusedImports
from accelify.codemods.rules.unwrap_module import UnwrapModule
from accelify.codemods.rules.writes import MainProcessWrites

RULES: tuple[type[Rule], ...] = (
    RefuseLightning,
    WarnUnsupported,
    RefuseModelParallel,
    RefuseForwardMethods,
    RefusePlanProblems,
    WarnPlanProblems,
    CreateAccelerator,
    AddAcceleratorImport,
    RemovePlacement,
    RemoveDataParallel,
    RemoveDistributedWrapper,
    RemoveDistributedSampler,
    ReplaceCollectives,
    RemoveProcessGroup,
    CollapseSpawn,
    MapRanks,
    RemoveApex,
    AccumulateMicroSteps,
    ConvertAmp,
    TraceUnwrapped,
    WriteOnceReadAll,
    MainProcessLogging,
    ThreadAccelerator,
    ReplaceDevice,
    PlaceTensors,
    InsertPrepare,
    WarnPreparedParts,
    KeepFullBatches,
    WarnBatchIndex,
    WarnExecutedFiles,
    DetachSharedForward,
    SwapBackward,
    SwapClipping,
    AccumulateGradients,
    ReduceClosureLoss,
    GatherForMetrics,
    HostCopies,
    PlaceCudaTypes,
    SumPerOriginalBatch,
    ReduceAverages,
    ReducePlateauMetric,
    WarnComprehendedShares,
    ShapeFromGather,
    StopTogether,
    WarnRetry,
    SwapPrint,
    DisableProgress,
    UnwrapNames,
    SaveOnMain,
    MainProcessLoguru,
    MainProcessWrites,
    DatasetFilesFirst,
    SafeStartup,
    SeedPerProcess,
    SeedSharedDraws,
    WarnGatedBackward,
    WarnPassIndexed,
    WarnMixedLoaders,
    UnwrapModule,
    LoadUnwrapped,
    UnwrapAttributes,
    EndTraining,
    RemoveUnusedImports,
    ReportLeftovers,
)

RULE_NAMES: tuple[str, ...] = tuple(rule.name for rule in RULES)

__all__ = ["RULES", "RULE_NAMES", "Rule"]
