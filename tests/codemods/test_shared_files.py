"""WriteOnceReadAll: start-up files are made on the main process; the others wait before reading them."""

from __future__ import annotations

from _convert import codes, converted

HEAD = (
    "import shutil\nimport pandas as pd\nimport torch\n"
    "model = torch.nn.Linear(2, 1)\noptimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
)
LOOP = "for x in torch.ones(4, 2):\n    model(x).sum().backward()\n    optimizer.step()\n"


def test_a_table_not_read_back_is_written_once_without_a_barrier() -> None:
    new = converted(HEAD + "df = pd.DataFrame({'a': [1]})\ndf.to_csv('a.csv')\n" + LOOP)
    assert "if accelerator.is_main_process:\n    df.to_csv('a.csv')\n" in new
    assert "wait_for_everyone" not in new


def test_a_table_read_back_gets_the_barrier_between() -> None:
    new = converted(HEAD + "df = pd.DataFrame({'a': [1]})\ndf.to_csv('a.csv')\ndf = pd.read_csv('a.csv')\n" + LOOP)
    assert "    df.to_csv('a.csv')\naccelerator.wait_for_everyone()\ndf = pd.read_csv('a.csv')\n" in new


def test_in_a_loop_or_another_branch_it_is_reported() -> None:
    for code in (
        "for name in ['a', 'b']:\n    shutil.unpack_archive(name + '.zip', 'data')\n",
        "import sys\nif len(sys.argv) > 1:\n    shutil.unpack_archive('a.zip', 'data')\n",
    ):
        assert "wait_for_everyone" not in converted(HEAD + code + LOOP)
        assert [c.split(":")[0] for c in codes(HEAD + code + LOOP)].count("ACC018") == 1


def test_under_a_rank_test_it_is_left() -> None:
    # (a rank test of a script that never sets up distribution is not known to be one: the call is reported)
    code = HEAD + "import torch.distributed as dist\nif dist.get_rank() == 0:\n    shutil.unpack_archive('a.zip', 'data')\n" + LOOP
    new = converted(code)
    assert "is_main_process" not in new and "wait_for_everyone" not in new
    assert [c.split(":")[0] for c in codes(code)] == ["ACC018"]
