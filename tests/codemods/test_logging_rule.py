"""MainProcessLogging: logging's handlers are set up on the main process only; what it cannot guard is reported."""

from __future__ import annotations

import pytest
from _convert import codes, converted

HEAD = (
    "import logging\nimport logging.handlers\nimport sys\nimport torch\n"
    "model = torch.nn.Linear(2, 1)\nopt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "logger = logging.getLogger('train')\n"
)
LOOP = "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    opt.step()\n    logger.info('step')\n"


def test_two_handlers_one_guard() -> None:
    new = converted(
        HEAD
        + "fh = logging.FileHandler('train.log', mode='w')\nfh.setLevel(logging.INFO)\nlogger.addHandler(fh)\n"
        + "sh = logging.StreamHandler(sys.stdout)\nlogger.addHandler(sh)\n" + LOOP
    )
    assert new.count("if accelerator.is_main_process:") == 1
    assert (
        "if accelerator.is_main_process:\n    fh = logging.FileHandler('train.log', mode='w')\n    fh.setLevel(logging.INFO)\n"
        "    logger.addHandler(fh)\n    sh = logging.StreamHandler(sys.stdout)\n    logger.addHandler(sh)\n"
    ) in new


@pytest.mark.parametrize(
    "setup",
    [
        "logging.basicConfig(level=logging.INFO, handlers=[logging.FileHandler('a.log'), logging.StreamHandler()])\n",
        "logger.addHandler(logging.handlers.RotatingFileHandler('a.log', maxBytes=100))\n",
        "import logging.config\nlogging.config.dictConfig({'version': 1})\n",
    ],
)
def test_one_statement_set_ups_are_guarded(setup: str) -> None:
    new = converted(HEAD + setup + LOOP)
    last = setup.splitlines()[-1]
    assert f"if accelerator.is_main_process:\n    {last}\n" in new


@pytest.mark.parametrize(
    "code, expected",
    [
        # the handler is used after the set-up too: it would not exist on the other processes
        ("fh = logging.FileHandler('a.log')\nlogger.addHandler(fh)\n" + LOOP + "fh.flush()\n", ["ACC031:9"]),
        # the handler made apart from where it is added (something else between): its file opens on every process
        ("fh = logging.FileHandler('a.log')\nsteps = 4\nlogger.addHandler(fh)\n" + LOOP, ["ACC031:10"]),
        # dressed apart from the set-up
        ("fh = logging.FileHandler('a.log')\nlogger.addHandler(fh)\nsteps = 4\nfh.setLevel(logging.INFO)\n" + LOOP,
         ["ACC031:9"]),
    ],
)
def test_left_and_reported(code: str, expected: list[str]) -> None:
    assert "is_main_process" not in converted(HEAD + code)
    assert codes(HEAD + code) == expected


HELPER = (
    "import logging\nimport torch\n\ndef setup():\n    logging.basicConfig(filename='a.log')\n\n"
    "def main():\n    setup()\n    model = torch.nn.Linear(2, 1)\n    opt = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    for x in torch.ones(4, 2):\n        model(x).sum().backward()\n        opt.step()\n"
)


def test_a_helper_main_calls_gets_the_accelerator() -> None:
    new = converted(HELPER)
    assert "def setup(accelerator):\n    if accelerator.is_main_process:\n        logging.basicConfig(" in new
    assert "    setup(accelerator)\n" in new and codes(HELPER) == []


def test_a_helper_also_called_where_there_is_no_accelerator_is_reported() -> None:
    code = HELPER + "\nsetup()\nmain()\n"
    assert "is_main_process" not in converted(code)
    assert codes(code) == ["ACC031:5"]


@pytest.mark.parametrize(
    "code",
    [
        LOOP,  # records, no set-up
        "fmt = logging.Formatter('%(message)s')\n" + LOOP,  # a formatter alone sets nothing up
        "logger.setLevel(logging.INFO)\n" + LOOP,  # a level, no handler
        "if torch.distributed.get_rank() == 0:\n    logging.basicConfig(filename='a.log')\n" + LOOP,  # already one process
    ],
)
def test_near_misses(code: str) -> None:
    # (a set-up that depends on the rank, ``level=INFO if args.local_rank in [-1, 0] else WARN`` in a script that
    # launches itself, stays: corpus/finetune_local_rank)
    assert "is_main_process:\n    logging" not in converted(HEAD + code)
    assert "ACC031" not in " ".join(codes(HEAD + code))


def test_the_other_processes_keep_warnings_only_where_the_level_is_lowered_outside_the_set_up() -> None:
    """``logger.setLevel(logging.INFO)`` before ``if not logger.handlers:`` (the cs230 template's ``set_logger``):
    with the handlers on the main process only, the other process's first ``logging.info(...)`` called
    ``basicConfig()`` and printed every line again, as ``INFO:root:`` with its own values (field test J4)."""
    new = converted(
        "import logging\nimport torch\n\n\ndef set_logger(path):\n    logger = logging.getLogger()\n"
        "    logger.setLevel(logging.INFO)\n    if not logger.handlers:\n"
        "        logger.addHandler(logging.FileHandler(path))\n\n\ndef main():\n    set_logger('train.log')\n"
        "    model = torch.nn.Linear(2, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x in torch.ones(4, 2):\n        model(x).sum().backward()\n        optimizer.step()\n"
        "        logging.info('step')\n"
    )
    assert "        if accelerator.is_main_process:\n            logger.addHandler(logging.FileHandler(path))\n" \
           "        else:\n            logger.addHandler(logging.lastResort)\n" in new, new
