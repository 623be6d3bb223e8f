"""Data-loader sharding: examples from the spec (simulated ranks), 1-process identity, resume, errors,
and one 2-process launch (workers/data_sharding.py) for what needs a real process group."""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path

import pytest
import torch
from torch.utils.data import BatchSampler, DataLoader, Dataset, DistributedSampler, IterableDataset, Sampler

from accelify.runtime import DataLoaderShard, prepare_data_loader, skip_first_batches
from accelify.runtime.data_loader import active_data_loader
from accelify.runtime.errors import ConfigurationError, DistributedSetupError

WORKERS = Path(__file__).parent / "workers"


def shards(loader: DataLoader, n: int = 2, **kwargs) -> list[list[list[int]]]:
    """What each of ``n`` simulated processes gets from one pass."""
    out = []
    for rank in range(n):
        prepared = prepare_data_loader(loader, num_processes=n, process_index=rank, **kwargs)
        out.append([b.tolist() for b in prepared])
    return out


# -- the documented examples ------------------------------------------------------------------------
def test_examples_from_the_spec() -> None:
    assert shards(DataLoader(range(10), batch_size=2)) == [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]]
    assert shards(DataLoader(range(10), batch_size=3)) == [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9, 0, 1]]]
    assert shards(DataLoader(range(8), batch_size=4), split_batches=True) == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]


@pytest.mark.parametrize(
    ("loader", "kwargs", "expected", "length"),
    [
        (DataLoader(range(10), batch_size=3, drop_last=True), {}, [[[0, 1, 2]], [[3, 4, 5]]], 1),
        (DataLoader(range(10), batch_size=3), {"even_batches": False}, [[[0, 1, 2], [6, 7, 8]], [[3, 4, 5], [9]]], 2),
        (DataLoader(range(3), batch_size=2), {}, [[[0, 1]], [[2, 0]]], 1),
        (DataLoader(range(10), batch_size=4), {"split_batches": True}, [[[0, 1], [4, 5], [8, 9]], [[2, 3], [6, 7], [0, 1]]], 3),
        (DataLoader(range(10), batch_size=4, drop_last=True), {"split_batches": True}, [[[0, 1], [4, 5]], [[2, 3], [6, 7]]], 2),
    ],
)
def test_sharding_variants(loader: DataLoader, kwargs: dict, expected: list, length: int) -> None:
    assert shards(loader, **kwargs) == expected
    assert len(prepare_data_loader(loader, num_processes=2, process_index=1, **kwargs)) == length


def test_three_processes_wrap_around_and_remainder() -> None:
    got = shards(DataLoader(range(10), batch_size=3), n=3)
    assert got == [[[0, 1, 2], [9, 0, 1]], [[3, 4, 5], [2, 3, 4]], [[6, 7, 8], [5, 6, 7]]]
    prepared = prepare_data_loader(DataLoader(range(10), batch_size=3), num_processes=3, process_index=0)
    list(prepared)
    assert prepared.remainder == 8  # 18 samples handed out for 10 real ones


def test_custom_batch_sampler_is_sharded_batch_wise() -> None:
    class Buckets(Sampler[list[int]]):
        def __iter__(self):
            yield from ([0], [1, 2], [3, 4, 5], [6], [7, 8])

        def __len__(self) -> int:
            return 5

    loader = DataLoader(range(9), batch_sampler=Buckets())
    assert shards(loader) == [[[0], [3, 4, 5], [7, 8]], [[1, 2], [6], [0]]]
    assert shards(loader, even_batches=False) == [[[0], [3, 4, 5], [7, 8]], [[1, 2], [6]]]


def test_end_of_dataloader_remainder_iterating_and_active_loader() -> None:
    prepared = prepare_data_loader(DataLoader(range(10), batch_size=2), num_processes=2, process_index=0)
    seen = []
    assert not prepared.iterating and active_data_loader() is None
    for _ in prepared:
        seen.append((prepared.end_of_dataloader, prepared.iterating, active_data_loader() is prepared))
    assert seen == [(False, True, True), (False, True, True), (True, True, True)]
    assert prepared.remainder == 2 and not prepared.iterating and active_data_loader() is None
    one = prepare_data_loader(DataLoader(range(10), batch_size=4), num_processes=1, process_index=0)
    list(one)
    assert one.remainder == 0 and one.end_of_dataloader


def test_an_epochs_iterator_has_the_loaders_length() -> None:
    """``it = iter(loader)`` then ``while i < len(it): batch = next(it)`` (set P's P4, a conditional GAN): a torch loader's
    iterator has a length; the prepared loader's was a generator (``TypeError: object of type 'generator' has no
    len()`` at the first step). Its iterator has the prepared loader's length, and walks the same batches."""
    prepared = prepare_data_loader(DataLoader(range(10), batch_size=2), num_processes=2, process_index=1)
    it = iter(prepared)
    assert len(it) == len(prepared) == 3
    taken = []
    i = 0
    while i < len(it):
        taken.append(next(it).tolist())
        i += 1
    assert taken == [[2, 3], [6, 7], [0, 1]]
    with pytest.raises(StopIteration):
        next(it)
    assert not prepared.iterating and prepared.end_of_dataloader


# -- one process: exactly the original -------------------------------------------------------------
def _passes(loader: DataLoader, epochs: int = 3) -> list[list[list[int]]]:
    return [[b.tolist() for b in loader] for _ in range(epochs)]


@pytest.mark.parametrize("workers", [0, pytest.param(2, marks=pytest.mark.multiprocess)])  # 2 worker processes
def test_one_process_shuffle_is_identical_and_consumes_rng_alike(workers: int) -> None:
    def build() -> DataLoader:
        return DataLoader(range(23), batch_size=4, shuffle=True, num_workers=workers)

    torch.manual_seed(1234)
    expected = _passes(build())
    expected_rng = torch.get_rng_state()
    torch.manual_seed(1234)
    prepared = prepare_data_loader(build(), num_processes=1, process_index=0)
    assert _passes(prepared) == expected
    assert torch.equal(torch.get_rng_state(), expected_rng)
    assert len(expected[0]) == len(prepared) == 6 and expected[0] != expected[1]


def test_one_process_with_generator_and_subset_sampler_is_identical() -> None:
    def build() -> list[DataLoader]:
        g = torch.Generator().manual_seed(7)
        subset = torch.utils.data.SubsetRandomSampler(list(range(0, 20, 2)))
        return [DataLoader(range(20), batch_size=3, shuffle=True, generator=g), DataLoader(range(20), batch_size=3, sampler=subset)]

    torch.manual_seed(5)
    expected = [_passes(dl) for dl in build()]
    rng = torch.get_rng_state()
    torch.manual_seed(5)
    assert [_passes(prepare_data_loader(dl, num_processes=1, process_index=0)) for dl in build()] == expected
    assert torch.equal(torch.get_rng_state(), rng)


def test_keeps_dataset_collate_fn_and_unbatched_loaders() -> None:
    data = list(range(7))
    loader = DataLoader(data, batch_size=2, collate_fn=lambda batch: [x * 10 for x in batch])
    prepared = prepare_data_loader(loader, num_processes=2, process_index=1)
    assert prepared.dataset is data and len(prepared.dataset) == 7
    assert list(prepared) == [[20, 30], [60, 0]] and prepared.batch_size == 2
    unbatched = prepare_data_loader(DataLoader(range(5), batch_size=None), num_processes=2, process_index=0)
    assert [int(x) for x in unbatched] == [0, 2, 4]
    assert isinstance(prepared, DataLoader) and isinstance(prepared, DataLoaderShard)
    init, gen = (lambda worker_id: None), torch.Generator()
    options = dict(num_workers=2, pin_memory=True, worker_init_fn=init, generator=gen, timeout=5.0, persistent_workers=True)
    carried = prepare_data_loader(DataLoader(data, batch_size=2, **options), num_processes=2, process_index=0)
    assert {k: getattr(carried, k) for k in options} == options
    assert prepare_data_loader(prepared) is prepared


def test_batches_are_moved_to_the_device() -> None:
    Pair = namedtuple("Pair", "x y")

    class Rows(Dataset):
        def __len__(self) -> int:
            return 4

        def __getitem__(self, i: int):
            return {"x": torch.full((2,), float(i)), "pair": Pair(torch.tensor(i), "label")}

    batch = next(iter(prepare_data_loader(DataLoader(Rows(), batch_size=2), device="meta", num_processes=1, process_index=0)))
    assert batch["x"].device.type == "meta" and batch["pair"].x.device.type == "meta"
    assert isinstance(batch["pair"], Pair) and batch["pair"].y == ("label", "label")
    kept = next(iter(prepare_data_loader(DataLoader(Rows(), batch_size=2), device="meta", put_on_device=False, num_processes=1, process_index=0)))
    assert kept["x"].device.type == "cpu"


# -- iterable datasets -------------------------------------------------------------------------------
class Stream(IterableDataset):
    def __init__(self, n: int, sized: bool = True) -> None:
        self.n, self.sized, self.epochs = n, sized, []

    def __iter__(self):
        return iter(range(self.n))

    def __len__(self) -> int:
        if not self.sized:
            raise TypeError("unsized")
        return self.n

    def set_epoch(self, epoch: int) -> None:
        self.epochs.append(epoch)


def test_iterable_datasets_are_sharded() -> None:
    assert shards(DataLoader(Stream(8), batch_size=2)) == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    assert shards(DataLoader(Stream(7), batch_size=2)) == [[[0, 1], [4, 5]], [[2, 3], [6, 0]]]
    assert shards(DataLoader(Stream(8), batch_size=4), split_batches=True) == [[[0, 1], [4, 5]], [[2, 3], [6, 7]]]
    assert shards(DataLoader(Stream(7), batch_size=2, drop_last=True)) == [[[0, 1]], [[2, 3]]]
    stream = Stream(7)
    prepared = prepare_data_loader(DataLoader(stream, batch_size=2), num_processes=2, process_index=0)
    assert len(prepared) == 2 and len(prepared.dataset) == 7
    list(prepared)
    list(prepared)
    assert prepared.remainder == 1 and stream.epochs == [0, 1]
    assert [b.tolist() for b in skip_first_batches(prepared, 1)] == [[4, 5]] and prepared.epoch == 3
    one = prepare_data_loader(DataLoader(Stream(5), batch_size=2), num_processes=1, process_index=0)
    assert [b.tolist() for b in one] == [[0, 1], [2, 3], [4]]


# -- epochs, skipping, resuming ---------------------------------------------------------------------
def test_set_epoch_passes_through_and_epochs_advance() -> None:
    class EpochSampler(Sampler[int]):
        def __init__(self) -> None:
            self.epochs: list[int] = []

        def __iter__(self):
            return iter(range(6))

        def __len__(self) -> int:
            return 6

        def set_epoch(self, epoch: int) -> None:
            self.epochs.append(epoch)

    sampler = EpochSampler()
    prepared = prepare_data_loader(DataLoader(range(6), batch_size=2, sampler=sampler), num_processes=2, process_index=0)
    list(prepared)
    prepared.set_epoch(5)
    list(prepared)
    assert sampler.epochs == [0, 5, 5] and prepared.epoch == 6


def test_skip_first_batches_shares_the_epoch() -> None:
    prepared = prepare_data_loader(DataLoader(range(10), batch_size=2), num_processes=2, process_index=1)
    skipped = skip_first_batches(prepared, 1)
    assert len(skipped) == 2 and len(prepared) == 3
    assert [b.tolist() for b in skipped] == [[6, 7], [0, 1]] and skipped.end_of_dataloader
    assert prepared.epoch == 1
    plain = skip_first_batches(DataLoader(range(5), batch_size=2), 2)
    assert [b.tolist() for b in plain] == [[4]]
    with pytest.raises(ConfigurationError, match="num_batches"):
        skip_first_batches(prepared, -1)


@pytest.mark.parametrize("how", ["seed", "generator", "subset"])
def test_state_dict_resume_replays_the_rest_of_the_epoch(how: str) -> None:
    def build() -> DataLoader:
        if how == "generator":
            return DataLoader(range(30), batch_size=4, shuffle=True, generator=torch.Generator().manual_seed(3))
        if how == "subset":
            return DataLoader(range(30), batch_size=4, sampler=torch.utils.data.SubsetRandomSampler(list(range(0, 30, 3))))
        return DataLoader(range(30), batch_size=4, shuffle=True)

    torch.manual_seed(0)
    loader = prepare_data_loader(build(), num_processes=1, process_index=0)
    first = [b.tolist() for b in loader]
    second = []
    for i, batch in enumerate(loader):
        second.append(batch.tolist())
        if i == 1:
            saved, rng = loader.state_dict(), torch.get_rng_state()
    third = [b.tolist() for b in loader]
    rng_end = torch.get_rng_state()
    assert saved["epoch"] == 1 and saved["batches_yielded"] == 2 and first != second

    torch.manual_seed(99)  # a fresh process: other RNG, new objects
    resumed = prepare_data_loader(build(), num_processes=1, process_index=0)
    torch.set_rng_state(rng)
    resumed.load_state_dict(saved)
    rest = [b.tolist() for b in skip_first_batches(resumed, saved["batches_yielded"])]
    assert rest == second[2:]
    assert [b.tolist() for b in resumed] == third
    if how != "generator":
        assert torch.equal(torch.get_rng_state(), rng_end)
    assert resumed.state_dict()["permutation"] is None and resumed.state_dict()["epoch"] == 3


def test_presharded_loader_is_not_sharded_again() -> None:
    sampler = DistributedSampler(range(9), num_replicas=2, rank=1, shuffle=False)
    prepared = prepare_data_loader(DataLoader(range(9), batch_size=2, sampler=sampler), num_processes=2, process_index=1)
    assert [b.tolist() for b in prepared] == [[1, 3], [5, 7], [0]]
    assert prepared.remainder == -1  # its duplicates are not at the tail of a gather: unknown


# -- errors -----------------------------------------------------------------------------------------
def test_errors_say_what_to_do(monkeypatch: pytest.MonkeyPatch) -> None:
    loader = DataLoader(range(10), batch_size=3)
    with pytest.raises(ConfigurationError, match="dispatch_batches"):
        prepare_data_loader(loader, dispatch_batches=True, num_processes=1, process_index=0)
    with pytest.raises(ConfigurationError, match="multiple of the number of processes"):
        prepare_data_loader(loader, split_batches=True, num_processes=2, process_index=0)
    with pytest.raises(ConfigurationError, match="rng_types"):
        prepare_data_loader(loader, rng_types=["tpu"], num_processes=1, process_index=0)
    with pytest.raises(ConfigurationError, match="process_index"):
        prepare_data_loader(loader, num_processes=2, process_index=2)
    with pytest.raises(TypeError, match="DataLoader"):
        prepare_data_loader([1, 2, 3])  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="epoch"):
        prepare_data_loader(loader, num_processes=1, process_index=0).load_state_dict({})
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(DistributedSetupError, match="WORLD_SIZE=2"):
        prepare_data_loader(loader)
    monkeypatch.delenv("WORLD_SIZE")
    monkeypatch.setenv("SLURM_STEP_NUM_TASKS", "2")  # inside `srun -n 2`: never a silent one-process loader either
    monkeypatch.setenv("SLURM_PROCID", "1")
    with pytest.raises(DistributedSetupError, match="SLURM_STEP_NUM_TASKS=2"):
        prepare_data_loader(loader)


def test_simulated_ranks_seeded_alike_share_one_permutation() -> None:
    parts = []
    for rank in range(2):
        torch.manual_seed(11)
        loader = prepare_data_loader(DataLoader(range(16), batch_size=2, shuffle=True), num_processes=2, process_index=rank)
        parts.append([i for b in loader for i in b.tolist()])
    assert sorted(parts[0] + parts[1]) == list(range(16))
    torch.manual_seed(11)
    original = [b.tolist() for b in DataLoader(range(16), batch_size=2, shuffle=True)]
    assert [b for pair in zip(original[0::2], original[1::2]) for b in pair[:1]] == [parts[0][i : i + 2] for i in range(0, 8, 2)]


def test_batch_sampler_loader_given_as_sampler() -> None:
    loader = DataLoader(torch.arange(10), sampler=BatchSampler(range(10), 3, False), batch_size=None)
    got = [b.tolist() for b in prepare_data_loader(loader, num_processes=2, process_index=1)]
    assert got == [[3, 4, 5], [9, 0, 1]]


# -- two real processes ------------------------------------------------------------------------------
@pytest.mark.multiprocess
def test_two_processes(run_distributed) -> None:
    proc = run_distributed(WORKERS / "data_sharding.py")
    assert proc.stdout.count("DATA-SHARDING-OK") == 2, proc.stdout + proc.stderr


def test_pin_memory_is_dropped_for_a_cpu_device_without_a_warning() -> None:
    """Pinning only speeds up copies to a GPU; on a CPU run torch would warn on every epoch."""
    import warnings

    loader = DataLoader(torch.arange(8), batch_size=4, pin_memory=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prepared = prepare_data_loader(loader, device=torch.device("cpu"), num_processes=1, process_index=0)
        assert [b.tolist() for b in prepared] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert prepared.pin_memory is False
    kept = prepare_data_loader(loader, num_processes=1, process_index=0, put_on_device=False)
    assert kept.pin_memory is True  # no device to judge by: the user's setting stays


def test_a_prepared_loader_keeps_the_scripts_sampler_for_its_length() -> None:
    from torch.utils.data import DataLoader, SubsetRandomSampler, TensorDataset

    from accelify.runtime.data_loader import prepare_data_loader

    loader = DataLoader(TensorDataset(torch.arange(100.0).view(-1, 1)), batch_size=10,
                        sampler=SubsetRandomSampler(list(range(20))))
    prepared = prepare_data_loader(loader, num_processes=1, process_index=0)
    assert len(prepared.sampler) == 20 and len(prepared) == 2
    assert sum(len(batch[0]) for batch in prepared) == 20


@pytest.mark.parametrize(("total", "n", "full_only", "drop_last"), [(11, 2, 8, 8), (11, 3, 8, 0), (12, 2, 12, 8), (12, 3, 12, 12)])
def test_a_loader_of_full_batches_only_keeps_exactly_them_where_drop_last_loses_rounds(
        total: int, n: int, full_only: int, drop_last: int) -> None:
    """What the conversion of a loop that skips the short last batch relies on (codemods/rules/full_batches.py): a
    sampler cut before the short batch hands out the full batches, the last round completed with duplicates that
    ``gather_for_metrics`` drops (``remainder``), so the N processes keep exactly the original's samples; with
    ``drop_last=True`` a prepared loader also drops the last round of full batches when it is incomplete."""
    cut = DataLoader(range(total), batch_size=4, sampler=range(total // 4 * 4))
    handed = [i for rank in shards(cut, n) for batch in rank for i in batch]
    prepared = prepare_data_loader(cut, num_processes=n, process_index=0)
    list(prepared)
    assert len(handed) - prepared.remainder == full_only and set(handed) == set(range(full_only))
    dropped = shards(DataLoader(range(total), batch_size=4, drop_last=True), n)
    assert sum(len(batch) for rank in dropped for batch in rank) == drop_last
