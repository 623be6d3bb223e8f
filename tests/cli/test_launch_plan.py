"""`accelify launch` parsing, precedence and errors, through click's CliRunner; nothing is started."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

import accelify.launch.plan as launch_plan
import accelify.launch.run as launcher
from accelify.cli import main
from accelify.errors import LaunchError
from accelify.launch.plan import LaunchOptions, resolve_plan


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """A clean environment: no accelify/accelerate variables, an empty user config folder."""
    for key in list(os.environ):
        if key.startswith(("ACCELIFY_", "ACCELERATE_")):
            monkeypatch.delenv(key)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    return tmp_path


@pytest.fixture
def gpus(monkeypatch: pytest.MonkeyPatch):
    def set_count(n: int) -> None:
        monkeypatch.setattr(launch_plan, "_visible_gpus", lambda: n)
    set_count(0)
    return set_count


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch, env: Path, gpus) -> list:
    """Replace the real start with one that records the plan."""
    plans: list = []

    def fake_execute(plan):
        plans.append(plan)
        return launcher.LaunchResult(exit_code=0)

    monkeypatch.setattr(launcher, "execute", fake_execute)
    monkeypatch.setattr(launcher, "check_script", lambda plan: None)  # the scripts named here need not exist
    return plans


def invoke(*args: str):
    return CliRunner().invoke(main, ["launch", *args], catch_exceptions=False)


def write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def test_cpu_two_processes_plan_and_banner(captured: list) -> None:
    result = invoke("--cpu", "-n", "2", "train.py", "--lr", "0.1", "--debug", "-n", "5")
    assert result.exit_code == 0, result.output
    plan = captured[0]
    assert (plan.nproc_per_machine, plan.num_machines, plan.device, plan.backend) == (2, 1, "cpu", "gloo")
    assert plan.script_args == ("--lr", "0.1", "--debug", "-n", "5")  # everything after the script is its own
    assert plan.settings.debug is None and plan.settings.cpu is True
    assert "accelify launch: 2 processes x 1 machine, cpu (gloo), mixed precision no" in result.stderr
    args = plan.torchrun_args()
    assert "--nproc-per-node=2" in args and "--standalone" in args
    assert args[-6:] == ["train.py", "--lr", "0.1", "--debug", "-n", "5"]


def test_huggingface_spellings_and_quiet(captured: list) -> None:
    result = invoke("--num_processes", "2", "--cpu", "--mixed_precision", "bf16", "--gradient_accumulation_steps",
                    "4", "--debug", "--quiet", "--main_process_port", "0", "s.py")
    assert result.exit_code == 0, result.output
    plan = captured[0]
    assert plan.settings.to_dict() == {"mixed_precision": "bf16", "gradient_accumulation_steps": 4, "debug": True,
                                       "cpu": True}
    assert plan.main_process_port is None  # 0: a free port is picked
    assert result.stderr == ""


def test_module_flag_and_fixed_port(captured: list) -> None:
    assert invoke("--cpu", "--main-process-port", "29611", "-m", "pkg.train", "--x").exit_code == 0
    args = captured[0].torchrun_args()
    assert "--master-port=29611" in args and "--rdzv-backend=static" in args
    assert args[-5:] == ["--module", "accelify.launch.worker", "-m", "pkg.train", "--x"]


def test_defaults_no_gpu_one_cpu_process(captured: list) -> None:
    result = invoke("s.py")
    assert result.exit_code == 0
    plan = captured[0]
    assert (plan.nproc_per_machine, plan.device, plan.sources["num_processes"]) == (1, "cpu", "default")
    assert "1 process x 1 machine, cpu (gloo, no GPU visible)" in result.stderr  # says why it is CPU


def test_defaults_one_process_per_gpu(captured: list, gpus) -> None:
    gpus(4)
    assert invoke("s.py").exit_code == 0
    plan = captured[0]
    assert (plan.nproc_per_machine, plan.device, plan.backend, plan.settings.cpu) == (4, "cuda", "nccl", None)
    assert invoke("--gpu-ids", "1,3", "s.py").exit_code == 0
    assert captured[1].nproc_per_machine == 2
    assert captured[1].worker_env("f") == {"ACCELIFY_LAUNCH_CONFIG": "f", "CUDA_VISIBLE_DEVICES": "1,3"}
    plan = resolve_plan(LaunchOptions(script="s.py", gpu_ids="1,3"), environ={"CUDA_VISIBLE_DEVICES": "4,5,6,7"})
    assert plan.worker_env("f")["CUDA_VISIBLE_DEVICES"] == "5,7"  # ids count among the visible GPUs
    assert invoke("--cpu", "-n", "2", "s.py").exit_code == 0
    assert (captured[2].device, captured[2].settings.cpu) == ("cpu", True)  # --cpu wins over GPUs


@pytest.mark.parametrize(
    ("args", "gpu_count", "needle"),
    [
        (["--multi_gpu", "--num_processes", "4"], 0, "no CUDA device is visible"),
        (["--multi-gpu", "-n", "4"], 2, "only 2 are visible"),
        (["--gpu-ids", "0,5"], 2, "GPU 5 does not exist"),
        (["--gpu-ids", "0"], 0, "no CUDA device is visible"),
        (["--cpu", "--multi-gpu"], 2, "contradict"),
        (["--cpu", "-n", "3", "--num-machines", "2", "--main-process-ip", "h"], 0, "multiple of num_machines=2"),
        (["--cpu", "--num-machines", "2"], 0, "need --main-process-ip"),
        (["--cpu", "--num-machines", "2", "--machine-rank", "2", "--main-process-ip", "h"], 0, "use 0 to 1"),
        (["--cpu", "--num-machines", "2", "--main-process-ip", "h", "--main-process-port", "0"], 0, "port=0"),
        (["--cpu", "--max-restarts", "-1"], 0, "--max-restarts=-1"),
    ],
)
def test_impossible_requests_fail_before_starting(captured: list, gpus, args, gpu_count, needle) -> None:
    gpus(gpu_count)
    result = invoke(*args, "s.py")
    assert result.exit_code == 2
    assert needle in result.stderr and result.stderr.startswith("error: ")
    assert captured == []


def test_config_file_is_used_and_command_line_wins(captured: list, env: Path) -> None:
    cfg = write(env / "hf.yaml", {
        "compute_environment": "LOCAL_MACHINE", "distributed_type": "MULTI_CPU", "num_processes": 2,
        "mixed_precision": "bf16", "use_cpu": True, "debug": True, "main_training_function": "main",
        "rdzv_backend": "static", "same_network": True, "downcast_bf16": "no", "tpu_env": [], "gpu_ids": None,
        "machine_rank": 0, "num_machines": 1, "enable_cpu_affinity": False, "main_process_ip": None,
        "main_process_port": None, "tpu_use_cluster": False, "tpu_use_sudo": False,
    })
    assert invoke("--config_file", str(cfg), "s.py").exit_code == 0
    plan = captured[0]
    assert (plan.nproc_per_machine, plan.device, plan.settings.mixed_precision, plan.settings.debug) == \
        (2, "cpu", "bf16", True)
    assert plan.sources["num_processes"] == f"config file {cfg}" and plan.config_path == str(cfg)
    assert invoke("--config-file", str(cfg), "-n", "1", "--mixed-precision", "no", "s.py").exit_code == 0
    assert (captured[1].nproc_per_machine, captured[1].settings.mixed_precision) == (1, "no")
    assert captured[1].sources["num_processes"] == "command line"


def test_precedence_command_line_config_environment_default(env: Path, gpus, monkeypatch) -> None:
    cfg = write(env / "c.yaml", {"mixed_precision": "bf16", "use_cpu": True})
    monkeypatch.setenv("ACCELIFY_MIXED_PRECISION", "no")
    monkeypatch.setenv("ACCELERATE_GRADIENT_ACCUMULATION_STEPS", "3")
    plan = resolve_plan(LaunchOptions(script="s.py", config_file=str(cfg)))
    assert plan.settings.mixed_precision == "bf16"  # config file > environment
    assert plan.settings.gradient_accumulation_steps == 3 and plan.sources["gradient_accumulation_steps"] == "environment"
    plan = resolve_plan(LaunchOptions(script="s.py", config_file=str(cfg), mixed_precision="no"))
    assert plan.settings.mixed_precision == "no"  # command line > config file
    plan = resolve_plan(LaunchOptions(script="s.py"))
    assert plan.settings.mixed_precision == "no" and plan.sources["mixed_precision"] == "environment"
    monkeypatch.delenv("ACCELIFY_MIXED_PRECISION")
    plan = resolve_plan(LaunchOptions(script="s.py"))
    assert plan.sources["mixed_precision"] == "default"


def test_config_file_found_through_environment_and_user_folder(captured: list, env: Path, monkeypatch) -> None:
    write(env / "hf.yaml", {"num_processes": 2, "use_cpu": True})
    monkeypatch.setenv("ACCELERATE_CONFIG_FILE", str(env / "hf.yaml"))
    assert invoke("s.py").exit_code == 0 and captured[-1].nproc_per_machine == 2
    monkeypatch.delenv("ACCELERATE_CONFIG_FILE")
    user = env / "xdg" / "accelify" / "config.yaml"
    user.parent.mkdir(parents=True)
    write(user, {"num_processes": 3, "use_cpu": True})
    assert invoke("s.py").exit_code == 0 and captured[-1].nproc_per_machine == 3
    monkeypatch.setenv("ACCELIFY_CONFIG_FILE", str(env / "missing.yaml"))
    result = invoke("s.py")
    assert result.exit_code == 2 and "ACCELIFY_CONFIG_FILE names" in result.stderr


def test_config_file_unknown_key_warns_and_bad_value_errors(captured: list, env: Path) -> None:
    cfg = write(env / "c.yaml", {"use_cpu": True, "num_procs": 2})
    result = invoke("--config-file", str(cfg), "s.py")
    assert result.exit_code == 0 and "unknown key 'num_procs'" in result.stderr
    cfg = write(env / "bad.yaml", {"mixed_precision": "fp32"})
    result = invoke("--config-file", str(cfg), "s.py")
    assert result.exit_code == 2
    assert "mixed_precision='fp32'" in result.stderr and "allowed: no, fp16, bf16" in result.stderr


def test_multi_machine_static_and_c10d_arguments(env: Path, gpus) -> None:
    common = dict(script="s.py", cpu=True, num_processes=4, num_machines=2, main_process_ip="10.0.0.1")
    plan = resolve_plan(LaunchOptions(**common, machine_rank=1))
    assert plan.nproc_per_machine == 2 and plan.main_process_port == 29500
    assert {"--nnodes=2", "--node-rank=1", "--master-addr=10.0.0.1", "--rdzv-backend=static"} <= set(
        plan.torchrun_args())
    assert "machine 1, 4 in total" in plan.banner()
    plan = resolve_plan(LaunchOptions(**common, rdzv_backend="c10d", main_process_port=1234))
    assert {"--rdzv-backend=c10d", "--rdzv-endpoint=10.0.0.1:1234", "--rdzv-conf=is_host=true"} <= set(
        plan.torchrun_args())


def test_launch_error_is_an_accelify_error(env: Path, gpus) -> None:
    with pytest.raises(LaunchError, match="no CUDA device is visible"):
        resolve_plan(LaunchOptions(script="s.py", multi_gpu=True))


def test_failure_summary_from_elastic_error() -> None:
    from torch.distributed.elastic.multiprocessing.errors import ChildFailedError, ProcessFailure

    failed = ProcessFailure(local_rank=1, pid=11, exitcode=7, error_file="/nonexistent")
    stopped = ProcessFailure(local_rank=0, pid=10, exitcode=-15, error_file="/nonexistent")
    object.__setattr__(stopped, "timestamp", failed.timestamp - 5)  # even if stopped "earlier"
    summary = launcher.failure_from_error(ChildFailedError("s.py", {0: stopped, 1: failed}))
    assert (summary.rank, summary.exit_code, summary.other_ranks) == (1, 7, ())
    assert "rank 1 failed first: it exited with code 7" in summary.describe()
    killed = ProcessFailure(local_rank=0, pid=10, exitcode=-9, error_file="/nonexistent")
    summary = launcher.failure_from_error(ChildFailedError("s.py", {0: killed}))
    assert "killed by SIGKILL" in summary.describe() and launcher._exit_code(summary.exit_code) == 137


def test_restarts_use_c10d_with_a_fresh_store(env: Path, gpus) -> None:
    plan = resolve_plan(LaunchOptions(script="s.py", cpu=True, num_processes=2, max_restarts=2, main_process_port=1234))
    assert plan.rdzv_backend == "c10d" and "--max-restarts=2" in plan.torchrun_args()
    assert "--rdzv-endpoint=127.0.0.1:1234" in plan.torchrun_args()
    assert plan.worker_env("f")["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] == "1"
    assert any("c10d rendezvous instead of static" in w for w in plan.warnings)
    assert "max restarts 2" in plan.banner()
    with pytest.raises(LaunchError, match="--max-restarts needs --rdzv-backend c10d"):
        resolve_plan(LaunchOptions(script="s.py", cpu=True, max_restarts=1, rdzv_backend="static",
                                   main_process_port=1234))
    plain = resolve_plan(LaunchOptions(script="s.py", cpu=True))
    assert "TORCH_DISABLE_SHARE_RDZV_TCP_STORE" not in plain.worker_env("f")


@pytest.mark.multiprocess
def test_launch_path_stays_light(tmp_path: Path) -> None:
    """`accelify launch` loads no rich/libcst; the worker bootstrap loads nothing before the script."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from click.testing import CliRunner\n"
        "import accelify.launch.run as L\n"
        "L.execute = lambda plan: L.LaunchResult(0)\n"
        "L.check_script = lambda plan: None\n"
        "from accelify.cli import main\n"
        "r = CliRunner().invoke(main, ['launch', '--cpu', '-n', '2', 's.py'])\n"
        "assert r.exit_code == 0, r.output\n"
        "print('HEAVY', sorted(m for m in ('rich', 'libcst') if m in sys.modules))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "HEAVY []" in out.stdout, out.stdout + out.stderr
    script = tmp_path / "probe.py"
    script.write_text("import sys\nprint('TORCH', 'torch' in sys.modules, __name__, sys.argv[1:], sys.path[0])\n")
    out = subprocess.run([sys.executable, "-m", "accelify.launch.worker", str(script), "a", "--b"],
                         capture_output=True, text=True, timeout=60)
    assert out.stdout.strip() == f"TORCH False __main__ ['a', '--b'] {tmp_path}", out.stderr
    script.write_text("def boom():\n    raise ValueError('boom')\nboom()\n")
    out = subprocess.run([sys.executable, "-m", "accelify.launch.worker", str(script)],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 1 and out.stderr.endswith("ValueError: boom\n"), out.stderr
    assert "launch/worker" not in out.stderr and "runpy" not in out.stderr  # as `python probe.py` shows it
    assert f'File "{script}", line 2, in boom' in out.stderr


def test_unknown_launcher_option_is_an_error_not_a_script(captured: list) -> None:
    result = invoke("--same_network", "train.py")
    assert result.exit_code == 2 and "No such option '--same_network'" in result.output and captured == []
    assert invoke("--cpu", "train.py", "--", "--same_network").exit_code == 0
    assert captured[0].script_args == ("--", "--same_network")


def test_missing_script_is_an_error_before_starting(env: Path, gpus, tmp_path: Path) -> None:
    result = invoke("--cpu", "-n", "2", str(tmp_path / "nope.py"))  # the real execute: it stops first
    assert result.exit_code == 2 and "nope.py: no such script" in result.stderr
    assert "accelify launch:" not in result.stderr  # no banner: nothing started


def test_a_gpu_config_without_gpus_names_the_file(captured: list, env: Path) -> None:
    cfg = write(env / "gpu.yaml", {"distributed_type": "MULTI_GPU", "num_processes": 2, "use_cpu": False})
    result = invoke("--config-file", str(cfg), "s.py")
    assert result.exit_code == 2 and captured == []
    assert f"use_cpu: false (config file {cfg}) asks for GPUs" in result.stderr and "--cpu" in result.stderr
