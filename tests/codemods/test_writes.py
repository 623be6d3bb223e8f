"""MainProcessWrites: other file writes are guarded by accelerator.is_main_process."""

from __future__ import annotations

import pytest
from _convert import assert_converts, converted

HEAD = "import json\nimport torch\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"


def test_writes_are_guarded() -> None:
    assert_converts(
        HEAD
        + "# metrics\nwith open('m.json', 'w') as f:  # all of them\n    json.dump({}, f)\n"
        + "for step in range(2):\n    plt.savefig(f'{step}.png')\n",
        HEAD.replace("import torch\n", "import torch\nfrom accelify.runtime import Accelerator\naccelerator = Accelerator(cpu=True)\n")
        + "model, opt = accelerator.prepare(model, opt)\n"
        + "# metrics\nif accelerator.is_main_process:\n    with open('m.json', 'w') as f:  # all of them\n        json.dump({}, f)\n"
        + "for step in range(2):\n    if accelerator.is_main_process:\n        plt.savefig(f'{step}.png')\n"
        + "accelerator.end_training()\n",
    )


@pytest.mark.parametrize(
    "code",
    [
        "with open('m.json') as f:\n    data = json.load(f)\n",  # a read
        "with open('m.json', mode='r') as f:\n    data = json.load(f)\n",
        "text = json.dumps({})\n",  # not a file write
        "ok = json.dump({}, f) or True\n",  # part of a bigger expression
    ],
)
def test_not_writes(code: str) -> None:
    assert "is_main_process" not in converted(HEAD + code)


def test_writes_before_the_accelerator_exist_are_left() -> None:
    code = (
        "import json\nimport torch\ndef main():\n    with open('cfg.json', 'w') as f:\n        json.dump({}, f)\n"
        "    args = parser.parse_args()\n    device = torch.device('cuda' if args.gpu else 'cpu')\n"
        "    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    )
    assert "is_main_process" not in converted(code)


def test_image_writers_run_on_the_main_process() -> None:
    """DCGAN's ``vutils.save_image(fake, path)``: every process wrote the same PNG."""
    from _convert import converted

    out = converted(
        "import torch\nimport torchvision.utils as vutils\nmodel = torch.nn.Linear(2, 4)\n"
        "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in torch.ones(4, 2):\n    out = model(x)\n"
        "    out.sum().backward()\n    opt.step()\n    vutils.save_image(out.view(1, 1, 2, 2), 'fake.png')\n"
    )
    assert "    if accelerator.is_main_process:\n        vutils.save_image(" in out


def test_an_experiment_tracker_started_on_every_process_is_reported() -> None:
    """``wandb.init`` on N processes makes N runs of one training on the tracker: reported (ACC024), not guarded
    (its later ``log`` calls would then fail on the other processes)."""
    from accelify.pipeline import convert_source

    code = (
        "import torch\nimport wandb\nrun = wandb.init(project='p')\nmodel = torch.nn.Linear(2, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in torch.ones(4, 2):\n"
        "    loss = model(x).sum()\n    loss.backward()\n    optimizer.step()\n    run.log({'loss': loss.item()})\n"
    )
    result = convert_source(code)
    assert [(w.code, w.line) for w in result.warnings] == [("ACC024", 3)]
    assert "run = wandb.init(project='p')\n" in result.new


def test_a_logger_class_of_the_program_is_opened_and_written_on_the_main_process() -> None:
    """``logger = Logger("./logs")`` (pytorch-beginner's CNN), a local class whose ``__init__`` makes a summary writer:
    N processes wrote N logs. Now made on the main process only (``None`` elsewhere), and each statement that calls
    one of its methods runs there; nothing is left to report."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    logger = ("from torch.utils.tensorboard import SummaryWriter\n\n\nclass Logger:\n    def __init__(self, log_dir):\n"
              "        self.writer = SummaryWriter(log_dir)\n\n    def scalar(self, tag, value, step):\n"
              "        self.writer.add_scalar(tag, value, step)\n")
    code = (
        "import torch\nfrom logger import Logger\nlogger = Logger('./logs')\nmodel = torch.nn.Linear(2, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfor step, x in enumerate(torch.ones(4, 2)):\n"
        "    loss = model(x).sum()\n    loss.backward()\n    optimizer.step()\n    logger.scalar('loss', loss.item(), step)\n"
    )
    result = convert_source(code, modules=[ModuleText("logger", "logger.py", logger)])
    assert result.warnings == ()
    assert "logger = Logger('./logs') if accelerator.is_main_process else None\n" in result.new
    assert "    if accelerator.is_main_process:\n        logger.scalar('loss', loss.item(), step)\n" in result.new
    again = convert_source(result.new, modules=[ModuleText("logger", "logger.py", logger)])
    assert again.status == "unchanged" and again.warnings == ()


WRITER_HEAD = (
    "import torch\nimport torch.nn.functional as F\nfrom torch.utils.data import DataLoader, TensorDataset\n"
    "from torch.utils.tensorboard import SummaryWriter\n"
    "loader = DataLoader(TensorDataset(torch.randn(8, 2), torch.randn(8, 1)), batch_size=4)\n"
    "model = torch.nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)


def test_a_summary_writer_is_opened_and_written_on_the_main_process() -> None:
    """Every use a statement calling a method of the writer, in the script and in a helper that reads the global:
    each runs on the main process (a nested ``if`` keeps its test; ``add_graph``, already put on the main process by
    the tracing rule, is guarded once, and with the ``close`` after it under one guard)."""
    assert_converts(
        WRITER_HEAD + "writer = SummaryWriter('runs')\n\n\ndef log(step, value):\n    writer.add_scalar('loss', value, step)\n\n\n"
        "for epoch in range(2):\n    for x, y in loader:\n        loss = F.mse_loss(model(x), y)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n        if epoch > 0:\n            writer.add_scalar('batch', loss.item(), epoch)\n"
        "    log(epoch, loss.item())\nwriter.add_graph(model, torch.randn(1, 2))\nwriter.close()\n",
        WRITER_HEAD.replace("SummaryWriter\n", "SummaryWriter\nfrom accelify.runtime import Accelerator\n", 1).replace(
            "loader = ", "accelerator = Accelerator(cpu=True)\nloader = ")
        + "model, optimizer, loader = accelerator.prepare(model, optimizer, loader)\n"
        "writer = SummaryWriter('runs') if accelerator.is_main_process else None\n\n\n"
        "def log(step, value):\n    if accelerator.is_main_process:\n        writer.add_scalar('loss', value, step)\n\n\n"
        "for epoch in range(2):\n    for x, y in loader:\n        loss = F.mse_loss(model(x), y)\n        optimizer.zero_grad()\n"
        "        accelerator.backward(loss)\n        optimizer.step()\n        if epoch > 0:\n            if accelerator.is_main_process:\n"
        "                writer.add_scalar('batch', loss.item(), epoch)\n    log(epoch, loss.item())\n"
        "if accelerator.is_main_process:\n    writer.add_graph(accelerator.unwrap_model(model), torch.randn(1, 2))\n"
        "    writer.close()\naccelerator.end_training()\n",
    )


def test_a_writer_kept_in_an_attribute_of_a_trainer_is_written_on_the_main_process() -> None:
    """``self.writer = SummaryWriter(...)`` in a trainer's ``__init__``, written in its methods through ``self.writer``."""
    out = converted(
        """
        import torch
        from torch.utils.tensorboard import SummaryWriter

        class Trainer:
            def __init__(self):
                self.model = torch.nn.Linear(2, 1)
                self.optimizer = torch.optim.SGD(self.model.parameters(), lr=0.1)
                self.writer = SummaryWriter("runs")

            def train(self):
                for step, x in enumerate(torch.ones(4, 2)):
                    loss = self.model(x).sum()
                    loss.backward()
                    self.optimizer.step()
                    self.writer.add_scalar("loss", loss.item(), step)

        Trainer().train()
        """
    )
    assert 'self.writer = SummaryWriter("runs") if self.accelerator.is_main_process else None\n' in out
    assert '            if self.accelerator.is_main_process:\n                self.writer.add_scalar("loss"' in out


EVALUATE = (
    "def evaluate():\n    total = 0.0\n    with torch.no_grad():\n        for x, y in loader:\n"
    "            total += F.mse_loss(model(x), y, reduction='sum').item()\n    return total / len(loader.dataset)\n"
)


@pytest.mark.parametrize(
    "uses, why",
    [
        ("writer.add_scalar('eval', evaluate(), epoch)\n", "calls `evaluate` in its arguments"),
        ("train_log(writer, loss.item())\n", "used other than by calling one of its methods"),
        ("print(writer.log_dir)\n", "used other than by calling one of its methods"),
        ("writer.add_scalar('l', loss.item(), epoch)  # accelify: skip\n", "marked `# accelify: skip`"),
    ],
)
def test_a_writer_whose_uses_cannot_all_run_on_the_main_process_is_reported_with_the_reason(uses: str, why: str) -> None:
    """An evaluation that gathers, in the arguments (under the gate the other processes would wait for it forever),
    the writer passed on or read as a value (``None`` on the other processes), a use left alone: reported (ACC024),
    with the reason, and the writer left on every process."""
    from accelify.pipeline import convert_source

    code = (
        WRITER_HEAD + "def train_log(w, v):\n    w.add_scalar('loss', v)\n\n\n" + EVALUATE
        + "writer = SummaryWriter('runs')\nfor epoch in range(2):\n    for x, y in loader:\n"
        "        loss = F.mse_loss(model(x), y)\n        optimizer.zero_grad()\n        loss.backward()\n        optimizer.step()\n"
        + "    " + uses
    )
    result = convert_source(code)
    reported = [w for w in result.warnings if w.code == "ACC024"]
    assert len(reported) == 1 and why in reported[0].message, reported
    assert "writer = SummaryWriter('runs')\n" in result.new


@pytest.mark.parametrize(
    "save",
    [
        "anim = animation.ArtistAnimation(fig, ims)\nanim.save('train.gif', writer='imagemagick')\n",
        "anim = FuncAnimation(fig, draw)\nanim.save('train.gif')\n",
        "Image.fromarray(grid).save('grid.png')\n",
    ],
)
def test_an_animation_or_image_saved_after_training_is_written_once(save: str) -> None:
    """Natsu6767/DCGAN-PyTorch's ``anim.save('celeba.gif')``: every process wrote the same GIF."""
    out = converted(
        "import torch\nimport matplotlib.animation as animation\nfrom matplotlib.animation import FuncAnimation\n"
        "from PIL import Image\nmodel = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    opt.step()\n" + save
    )
    last = save.strip().splitlines()[-1]
    assert f"if accelerator.is_main_process:\n    {last}" in out


def test_a_save_of_other_objects_is_guarded_where_it_is_handed_a_path() -> None:
    """``tokenizer.save('tok.json')``: a library call named like a write handed a file name writes that file from
    every process (field set J2: ``analysis/named_writes.py``); a ``save()`` handed no path is left."""
    train = HEAD + "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    opt.step()\ntokenizer = make_tokenizer()\n"
    assert "if accelerator.is_main_process:\n    tokenizer.save('tok.json')\n" in converted(train + "tokenizer.save('tok.json')\n")
    assert "is_main_process" not in converted(train + "tokenizer.save(tokenizer)\n")


@pytest.mark.parametrize(
    "name, one_log",
    [
        ('run_name = f"cartpole__{int(time.time())}"\nwriter = SummaryWriter(f"runs/{run_name}")\n', True),
        ('writer = SummaryWriter(f"runs/{datetime.datetime.now():%H%M%S}")\n', True),
        ('writer = SummaryWriter(f"runs/{time.time()}-{accelerator.process_index}")\n', False),
    ],
)
def test_a_log_named_by_the_clock_is_one_runs_log_opened_on_the_main_process(name: str, one_log: bool) -> None:
    """cleanrl's ``SummaryWriter(f"runs/{run_name}")`` with a timestamped ``run_name``: the clock made the name look
    like each process's own, so N writers of one training went unreported; now it is made on the main process. A
    name with the process's rank is a log of each process's own: left, and not reported."""
    from accelify.pipeline import convert_source

    code = (
        "import time\nimport datetime\nimport torch\nfrom torch.utils.tensorboard import SummaryWriter\n"
        "from accelify.runtime import Accelerator\naccelerator = Accelerator()\n" + name
        + "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "model, opt = accelerator.prepare(model, opt)\n"
    ) if "accelerator.process_index" in name else (
        "import time\nimport datetime\nimport torch\nfrom torch.utils.tensorboard import SummaryWriter\n" + name
        + "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    opt.step()\n    writer.add_scalar('l', 1.0)\n"
    )
    result = convert_source(code)
    assert not any(w.code == "ACC024" for w in result.warnings)
    assert ("if accelerator.is_main_process else None" in result.new) is one_log


TRACKED = (
    "import torch\nimport wandb\nwandb.init(project='p', sync_tensorboard=True)\nmodel = torch.nn.Linear(2, 1)\n"
    "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\nfor x in torch.ones(4, 2):\n"
    "    loss = model(x).sum()\n    loss.backward()\n    optimizer.step()\n    {use}\n"
)


@pytest.mark.parametrize(
    "use, converts",
    [
        ("wandb.log({'loss': loss.item()})", True),  # cleanrl's dqn.py starts it alone (sync_tensorboard=True)
        ("print(wandb.config.lr)", False),  # read as a value: the other processes would have no run to read
        ("wandb.log({'loss': loss.item()})  # accelify: skip", False),
    ],
)
def test_an_experiment_tracker_started_alone_runs_on_the_main_process(use: str, converts: bool) -> None:
    """``wandb.init(...)`` as a statement of its own, every other use of the package a call of its own: the run is
    started, and logged to, on the main process only (one run of the training); else it is reported (ACC024)."""
    from accelify.pipeline import convert_source

    result = convert_source(TRACKED.format(use=use))
    assert ("if accelerator.is_main_process:\n    wandb.init(project='p', sync_tensorboard=True)\n" in result.new) is converts
    assert ("    if accelerator.is_main_process:\n        wandb.log(" in result.new) is converts
    assert [w.code for w in result.warnings if w.code == "ACC024"] == ([] if converts else ["ACC024"])
    if converts:
        assert convert_source(result.new).warnings == ()


def test_a_writer_made_under_a_flag_and_tested_before_each_use_is_made_on_the_main_process_only() -> None:
    """``writer = SummaryWriter(d) if args.tb else None`` and ``if writer is not None: writer.add_scalar(...)``: one
    more condition where it is made; the uses behind the test are left as they are. A tested branch that reaches the
    other processes (an evaluation that gathers) keeps the writer on every process, reported."""
    from accelify.pipeline import convert_source

    code = (
        WRITER_HEAD + EVALUATE + "writer = SummaryWriter('runs') if len(loader) > 1 else None\nfor epoch in range(2):\n"
        "    for x, y in loader:\n        loss = F.mse_loss(model(x), y)\n        optimizer.zero_grad()\n"
        "        loss.backward()\n        optimizer.step()\n    if writer is not None:\n        {use}\nif writer:\n    writer.close()\n"
    )
    result = convert_source(code.format(use="writer.add_scalar('loss', loss.item(), epoch)"))
    assert result.warnings == ()
    assert "writer = SummaryWriter('runs') if len(loader) > 1 and accelerator.is_main_process else None\n" in result.new
    assert "    if writer is not None:\n        writer.add_scalar('loss', loss.item(), epoch)\n" in result.new
    assert convert_source(result.new).warnings == ()
    gathers = convert_source(code.format(use="writer.add_scalar('eval', evaluate(), epoch)"))
    assert [w.code for w in gathers.warnings] == ["ACC024"] and "runs `evaluate`" in gathers.warnings[0].message


LOGGER_MODULE = (
    "import torch\nfrom torch.utils.tensorboard import SummaryWriter\n\n\nclass Logger:\n    def __init__(self, name):\n"
    "        self.writer = SummaryWriter(comment=name)\n\n    def log(self, loss, step):\n"
    "        self.writer.add_scalar('loss', loss, step)\n\n    def save_models(self, model, epoch):\n{save}"
)
LOGGED = (
    "import torch\nfrom logger import Logger\nmodel = torch.nn.Linear(2, 1)\n"
    "opt = torch.optim.SGD(model.parameters(), lr=0.1)\nlogger = Logger('run')\n"
    "for epoch in range(2):\n    for i, x in enumerate(torch.ones(4, 2)):\n        opt.zero_grad()\n"
    "        loss = model(x).sum()\n        loss.backward()\n        opt.step()\n        logger.log(loss.item(), i)\n"
    "        logger.save_models(model, epoch)\n"
)


def test_a_logger_that_saves_the_model_gets_no_barrier_in_the_method_it_calls_on_the_main_process() -> None:
    """diegoalejogm/gans (set I, W1): `logger.save_models(G, D, epoch)` after every batch, the logger made on the main
    process only and each of its calls run there; the save rule had put `wait_for_everyone()` inside `save_models`:
    process 0 waited there, process 1 at its next backward. The barrier goes before the call, outside the guard; the
    method saves the unwrapped model."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    module = ModuleText("logger", "logger.py", LOGGER_MODULE.format(save="        torch.save(model.state_dict(), f'm_{epoch}.pt')\n"))
    result = convert_source(LOGGED, modules=[module])
    assert result.warnings == ()
    assert "logger = Logger('run', accelerator) if accelerator.is_main_process else None\n" in result.new
    assert ("        accelerator.wait_for_everyone()\n        if accelerator.is_main_process:\n"
            "            logger.save_models(model, epoch)\n") in result.new, result.new
    text = next(c.new for c in result.companions if c.path == "logger.py")
    assert "wait_for_everyone" not in text
    assert "        self.accelerator.save(self.accelerator.unwrap_model(model).state_dict(), f'm_{epoch}.pt')\n" in text


def test_a_logger_whose_method_reaches_a_collective_stays_on_every_process_and_is_reported() -> None:
    """A logger method that runs the prepared model (`G(noise)`: DDP may synchronise buffers in the forward) cannot
    run on the main process alone: the logger stays on every process, reported (ACC024) with that reason."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    module = ModuleText("logger", "logger.py", LOGGER_MODULE.format(
        save="        self.writer.add_histogram('out', model(torch.ones(1, 2)), epoch)\n"))
    result = convert_source(LOGGED, modules=[module])
    assert [(w.code, w.line) for w in result.warnings] == [("ACC024", 5)]
    assert "runs a call that every process must reach" in result.warnings[0].message
    assert "logger = Logger('run')\n" in result.new
    assert "        logger.save_models(model, epoch)\n" in result.new and "is_main_process:\n        logger" not in result.new


def test_a_trainer_that_makes_a_summary_writer_trains_on_every_process() -> None:
    """sthalles/SimCLR (set I, W12): a trainer class whose `__init__` makes a `SummaryWriter` was taken for a logger:
    `simclr = SimCLR(...) if accelerator.is_main_process else None` and its `train()` under the guard, so only process
    0 trained (a hang in its first backward). A class that trains is no logger: only its writer goes to the main
    process."""
    new = converted(
        "import torch\nfrom torch.utils.tensorboard import SummaryWriter\n\n\nclass Trainer:\n"
        "    def __init__(self, model, optimizer):\n        self.model = model\n        self.optimizer = optimizer\n"
        "        self.writer = SummaryWriter()\n\n    def train(self, data):\n        for step, x in enumerate(data):\n"
        "            loss = self.model(x).sum()\n            self.optimizer.zero_grad()\n            loss.backward()\n"
        "            self.optimizer.step()\n            self.writer.add_scalar('loss', loss.item(), step)\n\n\n"
        "def main():\n    model = torch.nn.Linear(2, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    trainer = Trainer(model, optimizer)\n    trainer.train(torch.ones(4, 2))\n"
    )
    assert "    trainer = Trainer(model, optimizer, accelerator)\n    trainer.train(torch.ones(4, 2))\n" in new, new
    assert "        self.writer = SummaryWriter() if self.accelerator.is_main_process else None\n" in new
    assert ("            if self.accelerator.is_main_process:\n"
            "                self.writer.add_scalar('loss', loss.item(), step)\n") in new


def test_a_trainer_whose_training_is_inherited_is_no_logger() -> None:
    """`class Trainer(BaseTrainer)` makes the writer in its `__init__` and inherits `train()` (backward, step) from
    its base: it trains, so neither the trainer nor its `train()` call goes to the main process."""
    new = converted(
        "import torch\nfrom torch.utils.tensorboard import SummaryWriter\n\n\nclass BaseTrainer:\n"
        "    def train(self, data):\n        for step, x in enumerate(data):\n            loss = self.model(x).sum()\n"
        "            self.optimizer.zero_grad()\n            loss.backward()\n            self.optimizer.step()\n\n\n"
        "class Trainer(BaseTrainer):\n    def __init__(self, model, optimizer):\n        self.model = model\n"
        "        self.optimizer = optimizer\n        self.writer = SummaryWriter()\n\n\n"
        "def main():\n    model = torch.nn.Linear(2, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    trainer = Trainer(model, optimizer)\n    trainer.train(torch.ones(4, 2))\n"
    )
    assert "is_main_process else None" not in new.split("def main")[1], new
    assert "    trainer.train(torch.ones(4, 2), accelerator)\n" in new and "    if accelerator.is_main_process:\n        trainer" not in new
