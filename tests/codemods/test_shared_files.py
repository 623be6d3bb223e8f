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


DOWNLOAD = (
    "import os\nimport tarfile\nimport urllib.request\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
    "def download_bsd300(dest='dataset'):\n"
    "    output_image_dir = os.path.join(dest, 'BSDS300/images')\n"
    "    if not os.path.exists(output_image_dir):\n"
    "        os.makedirs(dest, exist_ok=True)\n"
    "        data = urllib.request.urlopen('http://example.com/BSDS300-images.tgz')\n"  # line 12
    "        file_path = os.path.join(dest, 'BSDS300-images.tgz')\n"
    "        with open(file_path, 'wb') as f:\n"
    "            f.write(data.read())\n"
    "        with tarfile.open(file_path) as tar:\n"
    "            for item in tar:\n"
    "                tar.extract(item, dest)\n"  # line 18
    "        os.remove(file_path)\n"
    "    return output_image_dir\n\n\n"
    "def get_training_set():\n    root_dir = download_bsd300()\n"
    "    return TensorDataset(torch.ones(16, 2), torch.ones(16, 1))\n\n\n"
)
TRAIN = (
    "def main():\n    train_set = get_training_set()\n    loader = DataLoader(train_set, batch_size=4)\n"
    "    model = torch.nn.Linear(2, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
    "    for x, y in loader:\n        optimizer.zero_grad()\n"
    "        torch.nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n\n\nmain()\n"
)


def test_a_download_two_calls_deep_runs_on_the_main_process_first_at_its_call() -> None:
    # pytorch/examples super_resolution: main() -> get_training_set() -> download_bsd300(), which every process
    # ran: they fetched, wrote, extracted and deleted the same files at once. Its call in main() now runs on the main
    # process first (the others then find the folder and skip the download); the helpers are left as they are
    code = DOWNLOAD + TRAIN
    assert codes(code) == []
    new = converted(code)
    assert new.startswith(DOWNLOAD.replace("from torch.utils.data import DataLoader, TensorDataset\n",
                                           "from torch.utils.data import DataLoader, TensorDataset\n"
                                           "from accelify.runtime import Accelerator\n"))
    assert "    with accelerator.main_process_first():\n        train_set = get_training_set()\n" in new


def test_a_download_two_calls_deep_called_before_the_accelerator_is_reported_where_it_fetches_and_extracts() -> None:
    code = DOWNLOAD + "TRAIN_SET = get_training_set()\n\n\n" + TRAIN.replace("train_set = get_training_set()", "train_set = TRAIN_SET")
    assert codes(code) == ["ACC018:12", "ACC018:18"]


def test_a_fetch_nothing_is_written_from_or_an_extract_of_no_archive_is_left() -> None:
    code = (
        "import requests\nimport pandas as pd\nimport torch\nfrom torch.utils.data import DataLoader, TensorDataset\n\n\n"
        "def labels():\n    names = requests.get('http://example.com/labels.json').json()\n"
        "    return pd.Series(names).str.extract(r'(\\d+)')\n\n\n"
        "def get_training_set():\n    table = labels()\n"
        "    return TensorDataset(torch.ones(16, 2), torch.ones(16, 1))\n\n\n" + TRAIN
    )
    assert not any(c.startswith("ACC018") for c in codes(code))


def test_a_download_helper_put_first_leaves_the_evaluation_sums_global() -> None:
    """super_resolution again: deciding where the helper's call goes must not read the evaluation's gathers before
    the evaluation rule proposes them (a sum over the gathered test loop was then taken for one process's share)."""
    code = DOWNLOAD + (
        "def main():\n    train_set = get_training_set()\n    loader = DataLoader(train_set, batch_size=4)\n"
        "    model = torch.nn.Linear(2, 1)\n    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "    for x, y in loader:\n        optimizer.zero_grad()\n"
        "        torch.nn.functional.mse_loss(model(x), y).backward()\n        optimizer.step()\n"
        "    total = 0.0\n    with torch.no_grad():\n        for x, y in loader:\n            prediction = model(x)\n"
        "            total += (prediction - y).abs().sum().item()\n"
        "    print(total / len(loader.dataset))\n\n\nmain()\n"
    )
    assert codes(code) == []
    new = converted(code)
    assert "    with accelerator.main_process_first():\n        train_set = get_training_set()\n" in new
    assert ".reduce(" not in new  # summed over gathered values already: reducing it again would count it N times


def test_a_download_in_a_data_sets_classmethod_runs_main_process_first_at_its_call() -> None:
    """Field A16 (Shawn1993/cnn-text-classification-pytorch): ``SSTDataset.splits(...)``, a classmethod of the data
    module, calls ``cls.download_if_needed(root)``, which fetches with ``urlretrieve``; the entry calls it in the
    branch of ``if args.dataset == "SST":``. The classmethod's ``cls.`` calls and ``module.Class.method(...)`` were
    not followed, and a test of the command line's options was taken for one the processes may decide apart, so the
    download raced (ACC018). The call statement runs under ``main_process_first``."""
    from accelify.pipeline import convert_source
    from accelify.program import ModuleText

    data = (
        "import os\nimport urllib.request\nimport torch\nfrom torch.utils.data import TensorDataset\n\n\n"
        "class SSTDataset:\n"
        "    url = 'https://example.org/sst/'\n\n"
        "    @classmethod\n"
        "    def download_if_needed(cls, root):\n"
        "        path = os.path.join(root, 'train.txt')\n"
        "        if not os.path.isfile(path):\n"
        "            urllib.request.urlretrieve(cls.url + 'train.txt', path)\n"
        "        return path\n\n"
        "    @classmethod\n"
        "    def splits(cls, root='.'):\n"
        "        path = cls.download_if_needed(root)\n"
        "        return TensorDataset(torch.randn(16, 4), torch.randn(16, 1)), path\n"
    )
    script = (
        "import argparse\nimport torch\nfrom torch.utils.data import DataLoader\nimport mydatasets\n\n"
        "parser = argparse.ArgumentParser()\nparser.add_argument('-dataset', default='SST')\nargs = parser.parse_args()\n"
        "if args.dataset == 'SST':\n    train_set, path = mydatasets.SSTDataset.splits(root='data')\n"
        "loader = DataLoader(train_set, batch_size=4)\nmodel = torch.nn.Linear(4, 1)\n"
        "optimizer = torch.optim.SGD(model.parameters(), lr=0.1)\n"
        "for x, y in loader:\n    loss = torch.nn.functional.mse_loss(model(x), y)\n"
        "    optimizer.zero_grad()\n    loss.backward()\n    optimizer.step()\n"
    )
    result = convert_source(script, modules=[ModuleText("mydatasets", "mydatasets.py", data)])
    found = [f"{w.path}:{w.code}" for r in (result, *result.companions) for w in r.warnings]
    assert found == [], found
    assert ("if args.dataset == 'SST':\n    with accelerator.main_process_first():\n"
            "        train_set, path = mydatasets.SSTDataset.splits(root='data')\n") in result.new, result.new
