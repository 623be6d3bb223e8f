"""The names DESIGN.md's "Names the user's documents rely on" lists, used as the documents show them.

Single process, no launches. Names another test already exercises as documented are not repeated here:
gradient accumulation (test_accumulation), bf16/fp16 and ``optimizer_step_was_skipped`` (test_precision),
``clip_grad_*``, ``gather``, ``unwrap_model``, ``set_trigger``/``check_trigger`` (test_accelerator),
``pad_across_processes`` (test_ops), ``ACCELERATE_LOG_LEVEL`` (test_logging), the troubleshooting guide's
``find_executable_batch_size`` pattern (test_memory), ``notebook_launcher`` and its errors
(test_notebook_launcher), the debug-mode shape-mismatch message (test_debug), ``ACCELERATE_CONFIG_FILE``
lookup order (test_config_file).
"""

from __future__ import annotations

import io
import logging
from pathlib import Path

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from accelify.runtime import Accelerator, DistributedType, get_logger, write_basic_config
from accelify.runtime.config import find_config_file, load_config
from accelify.runtime.launch_settings import LAUNCH_CONFIG_VAR

# Every member of Hugging Face Accelerate 1.15's DistributedType: scripts compare against any of them.
HF_DISTRIBUTED_TYPES = (
    "NO", "MULTI_CPU", "MULTI_GPU", "MULTI_NPU", "MULTI_MLU", "MULTI_SDAA", "MULTI_MUSA", "MULTI_XPU",
    "DEEPSPEED", "FSDP", "XLA", "MEGATRON_LM", "MULTI_HPU", "MULTI_NEURON",
)


def test_distributed_type_has_every_member_scripts_compare_against() -> None:
    for name in HF_DISTRIBUTED_TYPES:
        assert getattr(DistributedType, name) == name
    acc = Accelerator(cpu=True)
    # the usual script test: only NO/MULTI_CPU/MULTI_GPU/FSDP are ever reported
    assert acc.distributed_type not in (DistributedType.MULTI_GPU, DistributedType.MULTI_NPU, DistributedType.DEEPSPEED)
    assert acc.distributed_type == DistributedType.NO


def test_constructor_arguments_as_documented() -> None:
    data = TensorDataset(torch.arange(8.0).reshape(8, 1))
    acc = Accelerator(device_placement=False, cpu=True, split_batches=True, rng_types=["torch", "generator"],
                      gradient_accumulation_steps=2, mixed_precision="bf16")
    assert acc.device == torch.device("cpu") and acc.split_batches and acc.gradient_accumulation_steps == 2
    assert acc.mixed_precision == "bf16"
    loader = acc.prepare(DataLoader(data, batch_size=4))
    assert loader.device is None  # device_placement=False: batches stay where the dataset put them
    assert loader.rng_types == ["torch", "generator"] and loader.split_batches
    assert [b[0].shape[0] for b in loader] == [4, 4]  # one process: split_batches keeps whole batches
    with pytest.raises(TypeError):
        Accelerator(cpu=True, no_such_option=1)


def test_process_facts_print_and_coordination() -> None:
    acc = Accelerator(cpu=True)
    assert acc.is_main_process and acc.is_local_main_process and acc.process_index == 0
    out = io.StringIO()
    acc.print("hello", 3, file=out)
    acc.print("x", "y", sep="-", end="!", file=out)
    assert out.getvalue() == "hello 3\nx-y!"
    acc.wait_for_everyone()  # one process: returns at once
    with acc.main_process_first():
        pass
    acc.set_breakpoint()  # the troubleshooting guide's older names
    assert acc.check_breakpoint() is True and acc.check_breakpoint() is False


def test_autocast_block_under_the_accelerators_precision() -> None:
    acc = Accelerator(cpu=True, mixed_precision="bf16")
    a, b = torch.ones(2, 2), torch.ones(2, 2)
    with acc.autocast():
        assert (a @ b).dtype == torch.bfloat16
    assert (a @ b).dtype == torch.float32
    with Accelerator(cpu=True).autocast():
        assert (a @ b).dtype == torch.float32  # mixed_precision="no": a no-op block


def test_free_memory_drops_the_prepared_objects() -> None:
    acc = Accelerator(cpu=True)
    model = nn.Linear(2, 1)
    model, optimizer = acc.prepare(model, torch.optim.SGD(model.parameters(), lr=0.1))
    model, optimizer = acc.free_memory(model, optimizer)
    assert model is None and optimizer is None
    assert acc._models == [] and acc._optimizers == [] and acc.free_memory() == []


def test_save_save_model_and_load_state_with_a_user_type(tmp_path: Path) -> None:
    acc = Accelerator(cpu=True)
    torch.manual_seed(0)
    model = nn.Linear(3, 2)
    model, optimizer = acc.prepare(model, torch.optim.Adam(model.parameters(), lr=0.1))
    acc.save(acc.unwrap_model(model).state_dict(), tmp_path / "weights.pt")
    assert torch.equal(torch.load(tmp_path / "weights.pt", weights_only=True)["weight"], model.weight)
    acc.save_model(model, tmp_path / "exported")
    assert (tmp_path / "exported" / "model.safetensors").is_file()

    meta = _UserMeta("run-7")
    holder = _Holder(meta)
    acc.register_for_checkpointing(holder)
    acc.backward(model(torch.ones(4, 3)).sum())
    optimizer.step()
    acc.save_state(tmp_path / "ckpt")
    saved = model.weight.detach().clone()
    with torch.no_grad():
        model.weight.zero_()
    holder.value = None
    previous = torch.serialization.get_safe_globals()
    torch.serialization.add_safe_globals([_UserMeta])  # as the documents recommend on torch >= 2.6
    try:
        acc.load_state(tmp_path / "ckpt")
    finally:
        torch.serialization.clear_safe_globals()
        torch.serialization.add_safe_globals(previous)
    assert torch.equal(model.weight, saved) and holder.value == meta


class _UserMeta:
    def __init__(self, name: str) -> None:
        self.name = name

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _UserMeta) and other.name == self.name


class _Holder:
    def __init__(self, value: object) -> None:
        self.value = value

    def state_dict(self) -> dict:
        return {"value": self.value}

    def load_state_dict(self, state: dict) -> None:
        self.value = state["value"]


def test_get_logger_as_the_documents_show(caplog: pytest.LogCaptureFixture) -> None:
    logger = get_logger(__name__, log_level="DEBUG")
    with caplog.at_level(logging.DEBUG, logger=__name__):
        logger.debug("plain")
        logger.info("everyone", main_process_only=False)
        logger.warning("in turn", in_order=True)
    assert [r.getMessage() for r in caplog.records] == ["plain", "[RANK 0] everyone", "[RANK 0] in turn"]


def test_debug_mode_from_each_documented_source(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("ACCELERATE_DEBUG_MODE", "1")
    assert Accelerator(cpu=True).state.debug is True
    monkeypatch.delenv("ACCELERATE_DEBUG_MODE")
    config = tmp_path / "config.yaml"
    config.write_text("debug: true\nnum_processes: 1\n")
    assert load_config(config).debug is True  # what `accelify launch --config_file` passes on
    launch_file = tmp_path / "launch.yaml"
    launch_file.write_text("debug: true\n")  # what `accelify launch --debug` hands its workers
    monkeypatch.setenv(LAUNCH_CONFIG_VAR, str(launch_file))
    assert Accelerator(cpu=True).state.debug is True
    monkeypatch.delenv(LAUNCH_CONFIG_VAR)
    assert Accelerator(cpu=True, debug=False).state.debug is False


@pytest.mark.parametrize("variable", ["ACCELERATE_CONFIG_FILE", "ACCELIFY_CONFIG_FILE"])
def test_write_basic_config_then_name_it_for_ci(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, variable: str) -> None:
    monkeypatch.delenv("ACCELERATE_CONFIG_FILE", raising=False)
    monkeypatch.delenv("ACCELIFY_CONFIG_FILE", raising=False)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    written = write_basic_config(mixed_precision="fp16")  # the card's call: default location
    assert written == tmp_path / "xdg" / "accelify" / "config.yaml" and load_config(written).mixed_precision == "fp16"
    ci_file = tmp_path / "ci.yaml"
    ci_file.write_text(written.read_text())
    monkeypatch.setenv(variable, str(ci_file))
    assert find_config_file() == ci_file
