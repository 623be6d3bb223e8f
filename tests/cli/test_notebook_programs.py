"""Every command takes a notebook: ``accelify launch nb.ipynb`` runs its code cells as a program on N processes and
``accelify verify nb.ipynb`` verifies it (``accelify.notebook.runnable_program``)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Iterator

import pytest

from accelify.errors import SourceError
from accelify.verify import ForkServerLauncher, VerifyOptions, verify_script
from accelify.verify.runner import _free_port
from accelify.notebook import runnable_program

ACCELIFY = [sys.executable, "-c", "from accelify.cli import main; main()"]
MAGICS = Path(__file__).parent / "notebooks" / "magics_outputs"


def _notebook(*sources: str) -> str:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "# a title"}]
    cells += [{"cell_type": "code", "execution_count": None, "metadata": {}, "outputs": [], "source": s} for s in sources]
    return json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5})


def test_the_program_is_the_code_cells_in_order_with_ipython_lines_as_pass() -> None:
    text = _notebook("%matplotlib inline\nimport torch", "files = !ls\nif True:\n    !echo hi\n    x = 1", "%%bash\necho no",
                     "%%time\ny = 2")
    code, skipped = runnable_program(text, "nb.ipynb")
    assert skipped == ("cell_2: %matplotlib inline", "cell_3: files = !ls", "cell_3: !echo hi", "cell_5: %%time")
    namespace: dict[str, object] = {}
    exec(compile(code, "nb.ipynb", "exec"), namespace)  # it runs: the IPython lines are `pass`, %%bash left out
    assert namespace["x"] == 1 and namespace["y"] == 2
    assert "    pass  # IPython, not run as a program: !echo hi" in code and "echo no" not in code


@pytest.mark.parametrize("text, words", [("{not json", "not valid notebook JSON"),
                                          (_notebook("def (:"), "syntax error")])
def test_a_notebook_that_cannot_run_is_an_error_that_names_it(text: str, words: str) -> None:
    with pytest.raises(SourceError, match=words):
        runnable_program(text, "nb.ipynb")


@pytest.mark.multiprocess
def test_launch_and_verify_take_a_converted_notebook(tmp_path: Path, clean_env) -> None:  # type: ignore[no-untyped-def]
    """The converted golden notebook (IPython lines, %%bash, notebook_launcher(main, ...)) runs on 2 processes, the
    launch telling which IPython lines it skips; verify runs the original notebook against its conversion."""
    (tmp_path / "nb.ipynb").write_text((MAGICS / "input.ipynb").read_text())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "nb.ipynb").write_text((MAGICS / "expected.ipynb").read_text())
    env = clean_env({"CUDA_VISIBLE_DEVICES": ""})
    launch = subprocess.run([*ACCELIFY, "launch", "-n", "2", "--cpu", "out/nb.ipynb"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert launch.returncode == 0, launch.stderr
    assert "out/nb.ipynb:cell_2: %matplotlib inline (IPython: not run as a program)" in launch.stderr
    assert "2 processes" in launch.stderr
    assert len([line for line in launch.stdout.splitlines() if line.startswith("epoch")]) == 3  # printed once
    verify = subprocess.run([*ACCELIFY, "verify", "nb.ipynb", "--steps", "3"],
                            capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert "verified" in verify.stdout


def test_experiments_one_after_another_each_prepare_their_own_objects() -> None:
    from accelify.pipeline import convert_notebook_text

    setup = "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n" \
            "loader = DataLoader(TensorDataset(torch.randn(16, 2), torch.randn(16, 1)), batch_size=4)"
    experiment = "model = torch.nn.Linear(2, 1)\noptimizer = torch.optim.{}(model.parameters(), lr=0.05)\n" \
                 "for x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n" \
                 "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\nprint(loss.item())"
    result = convert_notebook_text(_notebook(setup, experiment.format("SGD"), experiment.format("Adam")), path="nb.ipynb")
    assert result.status == "converted", result.warnings
    cells = ["".join(c["source"]) for c in json.loads(result.new)["cells"]]
    assert "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)" in cells[2]
    assert "model = accelerator.prepare(model)\n" in cells[3] and "optimizer = accelerator.prepare(optimizer)\n" in cells[3]


NOTEBOOKS = Path(__file__).parent / "notebooks"


EPOCHS = ["epoch 0", "epoch 1", "epoch 2"]
RUNS = {  # the lines each case prints once per epoch (before " loss "), in order
    "autograd_demo": EPOCHS,
    "device_cuda": EPOCHS,
    "two_experiments": ["sgd epoch 0", "sgd epoch 1", "adam epoch 0", "adam epoch 1"],
    "four_experiments": [f"run{i} epoch {e}" for i in range(4) for e in range(2)],
    "training_returns_model": EPOCHS,  # ACC102: the training call is left as is, and runs as the program
}


@pytest.fixture(scope="module")
def forked() -> Iterator[ForkServerLauncher]:
    """One fork server (torch imported once) for the verifications of this module's notebook cases: what
    ``accelify verify nb.ipynb`` runs (``verify_script``), without a CLI process and three torch imports per case;
    the command itself takes a notebook in ``test_launch_and_verify_take_a_converted_notebook``."""
    launcher = ForkServerLauncher(servers=1)
    yield launcher
    launcher.close()


@pytest.mark.multiprocess
@pytest.mark.parametrize("case", sorted(RUNS))
def test_notebook_cases_run_on_two_processes_and_verify(case: str, tmp_path: Path, clean_env,  # type: ignore[no-untyped-def]
                                                        forked: ForkServerLauncher) -> None:
    """The README's notebook shapes, end to end: the golden conversion runs on 2 processes (its epoch lines printed
    once) and verify passes the original against the tool's conversion. Experiments one after another (two, four)
    each prepare their own model and optimizer where they are built."""
    (tmp_path / "nb.ipynb").write_text((NOTEBOOKS / case / "input.ipynb").read_text())
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "nb.ipynb").write_text((NOTEBOOKS / case / "expected.ipynb").read_text())
    env = clean_env({"CUDA_VISIBLE_DEVICES": ""})
    # What each process of `accelify launch -n 2 out/nb.ipynb` runs (`python -m accelify.launch.worker out/nb.ipynb`
    # with torchrun's environment), as 2 ranks forked from the module's fork server: the launcher's own part (its
    # CLI, torchrun's agent, the notebook's IPython lines named) is run for real once, in
    # test_launch_and_verify_take_a_converted_notebook; this saves 4 torch imports a case.
    logs, port = tmp_path / "ranks", _free_port()
    ranks = []
    for rank in range(2):
        (logs / str(rank)).mkdir(parents=True)
        ranks.append({"env": {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "LOCAL_WORLD_SIZE": "2",
                              "GROUP_RANK": "0", "ROLE_RANK": str(rank), "MASTER_ADDR": "127.0.0.1",
                              "MASTER_PORT": str(port)},
                      "stdout": logs / str(rank) / "stdout.log", "stderr": logs / str(rank) / "stderr.log"})
    with forked.borrow() as server:
        reply = server.run(target="accelify.launch.worker", module=True, args=["out/nb.ipynb"], cwd=tmp_path,
                           env=env, stdout=logs / "stdout.log", stderr=logs / "stderr.log", timeout=300, ranks=ranks)
    stdout = [(logs / str(rank) / "stdout.log").read_text() for rank in range(2)]
    stderr = "".join((logs / str(rank) / "stderr.log").read_text() for rank in range(2))
    assert reply["returncode"] == 0 and not reply["timed_out"], stderr
    epochs = [[line.split(" loss ")[0] for line in out.splitlines() if " epoch " in f" {line}"] for out in stdout]
    assert epochs == [RUNS[case], []], stdout  # printed once: by the main process alone
    report = verify_script(tmp_path / "nb.ipynb", options=VerifyOptions(steps=4), launcher=forked)
    assert report.passed, json.dumps(report.to_json(), indent=1)  # what `accelify verify` exits 0 on


def test_a_notebook_written_to_a_folder_takes_the_local_modules_its_cells_import(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from click.testing import CliRunner

    from accelify.cli import main

    (tmp_path / "res").mkdir()
    (tmp_path / "res" / "__init__.py").write_text("")
    (tmp_path / "res" / "plot_lib.py").write_text("def set_default():\n    return None\n")
    cells = ("import torch\nfrom res.plot_lib import set_default\nset_default()",
             "model = torch.nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
             "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    optimizer.step()")
    (tmp_path / "nb.ipynb").write_text(_notebook(*cells))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, ["convert", "nb.ipynb", "-o", "out/"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "res" / "plot_lib.py").read_text() == "def set_default():\n    return None\n"
    assert (tmp_path / "out" / "res" / "__init__.py").exists()


def test_a_timed_statement_is_part_of_the_program() -> None:
    """Set P's P8: the notebook trains only through ``%timeit -r 1 -n 1 train(dataloader=dataloader, ...)``. The
    statement was masked with the magic, so the conversion never saw the training called (only the optimizer was
    prepared) and a launch would not run it. The statement of ``%time``/``%timeit`` is the program's; the magic
    comes back in front of it in the converted cell."""
    text = _notebook("import torch\ndef train(n):\n    return n + 1", "%timeit -r 1 -n 1 y = train(1)", "%time z = train(y)",
                     "t = %timeit -o train(0)")
    code, skipped = runnable_program(text, "nb.ipynb")
    namespace: dict[str, object] = {}
    exec(compile(code, "nb.ipynb", "exec"), namespace)
    assert namespace["y"] == 2 and namespace["z"] == 3
    assert skipped == ("cell_5: t = %timeit -o train(0)",)


def test_a_timed_training_call_is_converted_and_keeps_its_magic() -> None:
    source = [
        "import torch\nfrom torch.utils.data import DataLoader, TensorDataset\n"
        "loader = DataLoader(TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), batch_size=4)",
        "def train(dataloader, model, epochs):\n"
        "    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for epoch in range(epochs):\n"
        "        for x, y in dataloader:\n"
        "            optimizer.zero_grad()\n"
        "            torch.nn.functional.mse_loss(model(x), y).backward()\n"
        "            optimizer.step()",
        "model = torch.nn.Linear(4, 1)\n%timeit -r 1 -n 1 train(dataloader = loader, model = model, epochs = 2)",
    ]
    from accelify.pipeline import convert_notebook_text

    new = convert_notebook_text(_notebook(*source), path="nb.ipynb").new
    cells = [c["source"] for c in json.loads(new)["cells"] if c["cell_type"] == "code"]
    joined = "".join(s if isinstance(s, str) else "".join(s) for s in cells)
    assert "    model, optimizer, dataloader = accelerator.prepare(model, optimizer, dataloader)\n" in joined
    assert "%timeit -r 1 -n 1 train(" in joined
