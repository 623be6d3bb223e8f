"""size_tests: a loop that tests its batch's size runs on N processes as a real launch (exact mode's shares of each
batch would make the test skip every batch)."""

from __future__ import annotations

from accelify.verify.size_tests import explain, size_tests
from accelify.verify.workspace import ScriptFiles

SCRIPT = """\
for x, y in loader:
    if len(y) != batch_size:
        break
for i, batch in enumerate(train):
    x, y = batch
    if x.size(0) < 4:
        continue
if len(items) != 3:
    pass
for row in rows:
    if len(other) != 2:
        continue
"""


def test_the_size_tests_of_a_loops_batch_are_found_and_nothing_else() -> None:
    found = size_tests(ScriptFiles("train.py", SCRIPT, (("helper.py", "for (x,) in data:\n    if x.shape[0] != n:\n        break\n"),)))
    assert found == ["train.py:2", "train.py:6", "helper.py:2"]
    assert "train.py:2 tests the size of its batch" in explain(found, 2) and "normal 2-process run" in explain(found, 2)


def test_a_loop_over_a_files_lines_a_range_or_a_dicts_items_tests_no_batch() -> None:
    """Set U's U13: ``for line in open(path): if len(line) == 1: continue`` (a data set reading its triplet list) was
    taken for a batch-size test, and verify skipped its exact checks for it."""
    script = (
        "for line in open(path):\n    if len(line) == 1:\n        continue\n"
        "for i, row in enumerate(f.readlines()):\n    if len(row) < 2:\n        break\n"
        "for key, value in d.items():\n    if len(value) != 3:\n        continue\n"
        "for i in range(3):\n    if len(i) == 2:\n        break\n"
        "for i, (x, y) in enumerate(loader):\n    if len(x) != bs:\n        break\n"
    )
    assert size_tests(ScriptFiles("train.py", script, ())) == ["train.py:14"]


def test_a_data_sets_own_methods_test_no_batch_size() -> None:
    """Set V's V4: ``PTBDataSet.get_centers_contexts`` skips sentences shorter than 2 (``for sentence in dataset: if
    len(sentence) < 2: continue``) while it builds its windows: verify named it a batch-size test."""
    script = (
        "class Windows(torch.utils.data.Dataset):\n"
        "    def build(self, dataset):\n        for sentence in dataset:\n            if len(sentence) < 2:\n                continue\n"
        "for x, y in loader:\n    if len(x) != bs:\n        break\n"
    )
    assert size_tests(ScriptFiles("train.py", script, ())) == ["train.py:7"]
