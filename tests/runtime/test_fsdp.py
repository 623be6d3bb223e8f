"""FSDP2 plugin: configuration, wrap policies, and (2 Gloo CPU processes) training through Accelerator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from torch.distributed.fsdp import MixedPrecisionPolicy

from accelify.runtime import FullyShardedDataParallelPlugin
from accelify.runtime.errors import ConfigurationError
from accelify.runtime.fsdp import _mp_policy, _wrap_targets, is_fsdp_module, wrap_model


class Block(nn.Module):
    def __init__(self, width: int = 4) -> None:
        super().__init__()
        self.a = nn.Linear(width, width)
        self.b = nn.Linear(width, width)


def _model() -> nn.Module:
    return nn.Sequential(Block(), Block(), nn.Linear(4, 100))


def test_default_policy_follows_the_given_fields() -> None:
    assert FullyShardedDataParallelPlugin().auto_wrap_policy == "no_wrap"
    assert FullyShardedDataParallelPlugin(min_num_params=10).auto_wrap_policy == "size_based_wrap"
    plugin = FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap="Block, Other")
    assert plugin.auto_wrap_policy == "transformer_based_wrap"
    assert plugin.transformer_cls_names_to_wrap == ["Block", "Other"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"auto_wrap_policy": "everything"}, "auto_wrap_policy='everything' is not known"),
        ({"auto_wrap_policy": "size_based_wrap"}, "needs min_num_params"),
        ({"state_dict_type": "SHARDED_STATE_DICT"}, "accelify saves FULL_STATE_DICT"),
        ({"fsdp_version": 1}, "accelify shards with FSDP2"),
    ],
)
def test_invalid_settings_are_clear_errors(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        FullyShardedDataParallelPlugin(**kwargs)


def test_from_config_accepts_hugging_face_keys() -> None:
    plugin = FullyShardedDataParallelPlugin.from_config(
        {
            "fsdp_auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "fsdp_transformer_layer_cls_to_wrap": "Block",
            "fsdp_offload_params": "false",
            "fsdp_reshard_after_forward": "true",
            "fsdp_activation_checkpointing": True,
            "fsdp_state_dict_type": "FULL_STATE_DICT",
            "fsdp_sync_module_states": True,  # FSDP1-only: kept aside, not an error
        }
    )
    assert plugin.auto_wrap_policy == "transformer_based_wrap" and plugin.transformer_cls_names_to_wrap == ["Block"]
    assert (plugin.cpu_offload, plugin.reshard_after_forward, plugin.activation_checkpointing) == (False, True, True)
    assert plugin.extra == {"sync_module_states": True}
    assert FullyShardedDataParallelPlugin.from_config({"min_num_params": "50"}).min_num_params == 50
    assert FullyShardedDataParallelPlugin.from_config({"fsdp_sharding_strategy": "SHARD_GRAD_OP"}).reshard_after_forward is False
    assert FullyShardedDataParallelPlugin.from_config({"fsdp_version": "2"}).fsdp_version == 2
    with pytest.raises(ConfigurationError, match="FSDP2"):
        FullyShardedDataParallelPlugin.from_config({"fsdp_version": 1})
    with pytest.raises(ConfigurationError, match="HYBRID_SHARD.*is not supported"):
        FullyShardedDataParallelPlugin(sharding_strategy="HYBRID_SHARD")


def test_wrap_targets_by_policy() -> None:
    model = _model()
    by_class = _wrap_targets(model, FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["Block"]))
    assert by_class == [model[1], model[0]]  # innermost/last first, never the root
    by_size = _wrap_targets(model, FullyShardedDataParallelPlugin(min_num_params=30))
    assert by_size == [model[0], model[1], model[2]]  # each Block holds 40 parameters, the Linear 500
    big_only = _wrap_targets(model, FullyShardedDataParallelPlugin(min_num_params=100))
    assert big_only == [model[2]]
    custom = _wrap_targets(model, FullyShardedDataParallelPlugin(auto_wrap_policy=lambda m: isinstance(m, nn.Linear)))
    assert len(custom) == 5 and all(isinstance(m, nn.Linear) for m in custom)
    assert _wrap_targets(model, FullyShardedDataParallelPlugin()) == []
    with pytest.raises(ConfigurationError, match="no such module"):
        _wrap_targets(model, FullyShardedDataParallelPlugin(transformer_cls_names_to_wrap=["GPT2Block"]))
    with pytest.raises(ConfigurationError, match="needs transformer_cls_names_to_wrap"):
        _wrap_targets(model, FullyShardedDataParallelPlugin(auto_wrap_policy="transformer_based_wrap"))


def test_mixed_precision_policy_forms() -> None:
    assert _mp_policy(None) == MixedPrecisionPolicy()
    assert _mp_policy("bf16") == MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16)
    assert _mp_policy({"param_dtype": "fp16", "reduce_dtype": torch.float32}) == MixedPrecisionPolicy(
        param_dtype=torch.float16, reduce_dtype=torch.float32
    )
    with pytest.raises(ConfigurationError, match="dtype 'int3' is not known"):
        _mp_policy("int3")


def test_wrapping_needs_a_process_group() -> None:
    assert not is_fsdp_module(_model())
    with pytest.raises(ConfigurationError, match="FSDP needs a process group"):
        wrap_model(_model(), FullyShardedDataParallelPlugin(), torch.device("cpu"))


@pytest.mark.multiprocess
def test_fsdp_training_matches_an_unsharded_reference_on_two_processes(run_distributed: Any, tmp_path: Path) -> None:
    """One launch: prepare/backward/clip/get_state_dict/save_model/save_state/load_state, wrap policies."""
    proc = run_distributed(Path(__file__).parent / "workers" / "fsdp_train.py", str(tmp_path))
    assert proc.stdout.count("FSDP OK") == 2, proc.stdout + proc.stderr
