"""runtime/config.py: finding, validating and writing the user's config file (Accelerate's keys)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from accelify.runtime import write_basic_config
from accelify.runtime.config import (
    basic_config, default_config_path, find_config_file, load_config, make_config, parse_config, write_config,
)
from accelify.runtime.errors import ConfigurationError

# A file written by `accelerate config` 1.15 on a CPU machine, as it is.
HF_CPU_FILE = """\
compute_environment: LOCAL_MACHINE
debug: false
distributed_type: MULTI_CPU
downcast_bf16: 'no'
enable_cpu_affinity: false
ipex_config:
  ipex: false
machine_rank: 0
main_process_ip: null
main_process_port: null
main_training_function: main
mixed_precision: bf16
mpirun_config:
  mpirun_ccl: 1
num_machines: 1
num_processes: 4
rdzv_backend: static
same_network: true
tpu_env: []
tpu_use_cluster: false
tpu_use_sudo: false
use_cpu: true
"""


def test_accelerate_file_loads_as_it_is(tmp_path: Path) -> None:
    path = tmp_path / "default_config.yaml"
    path.write_text(HF_CPU_FILE)
    config = load_config(path)
    assert (config.num_processes, config.use_cpu, config.mixed_precision, config.rdzv_backend) == (4, True, "bf16", "static")
    assert config.warnings == () and config.path == str(path) and config.raw["tpu_env"] == []


def test_fsdp_and_multi_cpu_imply_their_flags() -> None:
    config = parse_config({"distributed_type": "FSDP", "fsdp_config": {"fsdp_sharding_strategy": "FULL_SHARD"}})
    assert config.use_fsdp is True and config.fsdp_config == {"fsdp_sharding_strategy": "FULL_SHARD"}
    assert parse_config({"distributed_type": "multi_cpu"}).use_cpu is True
    assert parse_config({"num_processes": -1}).num_processes is None  # Accelerate's "unset"


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"mixed_precision": "fp8"}, "mixed_precision='fp8' is not supported; allowed: no, fp16, bf16"),
        ({"distributed_type": "DEEPSPEED"}, "distributed_type='DEEPSPEED' is not supported; allowed: NO, MULTI_CPU"),
        ({"num_processes": 0}, "num_processes=0 is not valid; allowed: a whole number >= 1"),
        ({"num_processes": "two"}, "num_processes='two'"),
        ({"use_cpu": "maybe"}, "use_cpu='maybe' is not valid; allowed: true or false"),
        ({"gpu_ids": "0,x"}, "gpu_ids='0,x' is not valid"),
        ({"main_process_port": 70000}, "main_process_port=70000"),
        ({"rdzv_backend": "etcd"}, "rdzv_backend='etcd' is not supported; allowed: static, c10d"),
        ({"num_machines": 2, "machine_rank": 2}, "machine_rank=2 is not valid with num_machines=2"),
        ({"compute_environment": "AMAZON_SAGEMAKER"}, "compute_environment='AMAZON_SAGEMAKER' is not supported"),
        ({"fsdp_config": "yes"}, "fsdp_config must be a mapping"),
        (["num_processes"], "must be a YAML mapping"),
    ],
)
def test_invalid_values_name_key_value_and_allowed(data, needle) -> None:
    with pytest.raises(ConfigurationError, match="^cfg.yaml: ") as info:
        parse_config(data, "cfg.yaml")
    assert needle in str(info.value)


def test_unknown_keys_are_warned_by_name() -> None:
    config = parse_config({"num_processes": 2, "num_proceses": 3, "extra": 1}, "f.yaml")
    assert config.num_processes == 2
    assert [w.split("'")[1] for w in config.warnings] == ["num_proceses", "extra"]
    assert "did you mean 'num_processes'?" in config.warnings[0]


def test_lookup_order(tmp_path: Path) -> None:
    explicit, by_accelify, by_hf = (tmp_path / n for n in ("a.yaml", "b.yaml", "c.yaml"))
    for p in (explicit, by_accelify, by_hf):
        p.write_text("num_processes: 1\n")
    env = {"XDG_CONFIG_HOME": str(tmp_path / "xdg"), "ACCELIFY_CONFIG_FILE": str(by_accelify),
           "ACCELERATE_CONFIG_FILE": str(by_hf)}
    assert find_config_file(explicit, env) == explicit
    assert find_config_file(None, env) == by_accelify
    assert find_config_file(None, {**env, "ACCELIFY_CONFIG_FILE": ""}) == by_hf
    user = default_config_path({"XDG_CONFIG_HOME": str(tmp_path / "xdg")})
    assert user == tmp_path / "xdg" / "accelify" / "config.yaml"
    assert find_config_file(None, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}) is None
    user.parent.mkdir(parents=True)
    user.write_text("{}\n")
    assert find_config_file(None, {"XDG_CONFIG_HOME": str(tmp_path / "xdg")}) == user
    with pytest.raises(ConfigurationError, match="--config-file names .*missing.yaml, which does not exist"):
        find_config_file(tmp_path / "missing.yaml", env)


def test_bad_yaml_is_a_configuration_error(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("num_processes: [1\n")
    with pytest.raises(ConfigurationError, match="not valid YAML"):
        load_config(path)


def test_write_basic_config_never_overwrites(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "config.yaml"
    assert write_basic_config(mixed_precision="bf16", save_location=target) == target
    assert load_config(target).mixed_precision == "bf16"
    assert write_basic_config(mixed_precision="no", save_location=target) is False
    assert load_config(target).mixed_precision == "bf16"
    with pytest.raises(ConfigurationError, match="mixed_precision='fp32'"):
        write_basic_config(mixed_precision="fp32", save_location=tmp_path / "x.yaml")


def test_basic_and_made_configs_use_only_accelerate_keys(tmp_path: Path) -> None:
    from accelerate.commands.config.config_args import ClusterConfig

    for data in (basic_config("fp16", gpu_count=2), basic_config(gpu_count=0),
                 make_config(cpu=False, num_processes=4, num_machines=2, machine_rank=1, main_process_ip="h",
                             main_process_port=1, use_fsdp=True)):
        assert set(data) <= set(ClusterConfig.__dataclass_fields__), data
        path = write_config(data, tmp_path / "c.yaml")
        assert yaml.safe_load(path.read_text()) == data
        ClusterConfig.from_yaml_file(str(path))  # Hugging Face Accelerate reads it too
    assert basic_config("fp16", gpu_count=2)["distributed_type"] == "MULTI_GPU"
    with pytest.raises(ConfigurationError):
        write_config({"num_processes": 0}, tmp_path / "bad.yaml")
    assert not (tmp_path / "bad.yaml").exists()
