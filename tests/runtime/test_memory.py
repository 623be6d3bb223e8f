"""find_executable_batch_size: halving on out-of-memory, custom reductions, errors; and the OOM classifier."""

from __future__ import annotations

import pytest
import torch

from accelify.runtime import find_executable_batch_size
from accelify.runtime import memory
from accelify.runtime.memory import halve_batch_size, is_out_of_memory


@pytest.fixture(autouse=True)
def collections(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts gc.collect calls (a full collection costs ~150 ms with torch loaded: keep the tests fast)."""
    calls: list[int] = []
    monkeypatch.setattr(memory.gc, "collect", lambda *a: calls.append(1) or 0)
    return calls


def _oom(message: str) -> RuntimeError:
    return RuntimeError(message)


@pytest.mark.parametrize(
    "exc",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 MiB"),
        _oom("CUDA out of memory. Tried to allocate 2.00 GiB (GPU 0; 15.78 GiB total capacity)"),
        _oom("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you tried to allocate 8 bytes"),
        _oom("cuDNN error: CUDNN_STATUS_NOT_SUPPORTED. This error may appear if you passed in a non-contiguous input."),
        _oom("XPU out of memory. Tried to allocate 1.00 GiB"),
        _oom("MPS backend out of memory (MPS allocated: 1.00 GB)"),
        MemoryError(),
    ],
)
def test_out_of_memory_errors_are_recognised(exc: BaseException) -> None:
    assert is_out_of_memory(exc)


@pytest.mark.parametrize("exc", [RuntimeError("shape mismatch"), ValueError("out of memory"), KeyError("x"), RuntimeError()])
def test_other_errors_are_not_out_of_memory(exc: BaseException) -> None:
    assert not is_out_of_memory(exc)


def test_halves_until_it_fits_exactly_as_the_guide_shows(collections: list[int]) -> None:
    tried: list[int] = []
    accelerator = object()

    @find_executable_batch_size(starting_batch_size=128)
    def inner_training_loop(batch_size: int) -> int:
        nonlocal accelerator  # the guide's pattern: the enclosing accelerator is reused
        tried.append(batch_size)
        if batch_size > 16:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 1.00 GiB")
        return batch_size

    assert inner_training_loop() == 16
    assert tried == [128, 64, 32, 16]
    assert len(collections) == 4  # memory freed before the first try and after each failed one


def test_real_cpu_allocator_failure_is_retried() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=64)
    def allocate(batch_size: int, scale: int) -> int:
        tried.append(batch_size)
        # far beyond any address space for batch_size >= 16: malloc fails at once, nothing is touched
        size = batch_size * 2**47 if batch_size >= 16 else scale
        return torch.empty(size, dtype=torch.uint8).numel()

    assert allocate(32) == 32
    assert tried == [64, 32, 16, 8]


def test_other_arguments_pass_through_and_other_errors_propagate() -> None:
    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size: int, model: str, *, lr: float) -> tuple[int, str, float]:
        if model == "bad":
            raise ValueError("not memory")
        return batch_size, model, lr

    assert train("m", lr=0.1) == (8, "m", 0.1)
    with pytest.raises(ValueError, match="not memory"):
        train("bad", lr=0.1)


def test_reaching_zero_is_a_clear_error() -> None:
    tried: list[int] = []

    @find_executable_batch_size(starting_batch_size=5)
    def never_fits(batch_size: int) -> None:
        tried.append(batch_size)
        raise RuntimeError("CUDA out of memory.")

    with pytest.raises(RuntimeError, match="No executable batch size found.*started at 5"):
        never_fits()
    assert tried == [5, 2, 1]


def test_passing_the_batch_size_is_a_type_error() -> None:
    @find_executable_batch_size(starting_batch_size=8)
    def train(batch_size: int, model: str) -> None:
        raise AssertionError("must not run")

    with pytest.raises(TypeError, match="without it"):
        train(8, "model")
    with pytest.raises(TypeError, match="without it"):
        train("model", batch_size=8)


@pytest.mark.parametrize("style", ["takes_batch_size", "hf_no_argument"])
def test_custom_reduction_functions(style: str) -> None:
    tried: list[int] = []
    state = {"bs": 100}

    def minus_ten(batch_size: int) -> int:
        return batch_size - 10

    def hf_style() -> int:  # Hugging Face's reduce_batch_size_fn takes no argument
        state["bs"] -= 30
        return state["bs"]

    reduce = minus_ten if style == "takes_batch_size" else hf_style

    @find_executable_batch_size(starting_batch_size=100, reduce_batch_size_fn=reduce)
    def train(batch_size: int) -> int:
        tried.append(batch_size)
        if batch_size > 50:
            raise torch.OutOfMemoryError("CUDA out of memory.")
        return batch_size

    expected = [100, 90, 80, 70, 60, 50] if style == "takes_batch_size" else [100, 70, 40]
    assert train() == expected[-1]
    assert tried == expected


def test_halve_batch_size_and_bad_start() -> None:
    assert [halve_batch_size(n) for n in (128, 7, 1)] == [64, 3, 0]
    with pytest.raises(ValueError, match="starting_batch_size"):
        find_executable_batch_size(lambda bs: bs, starting_batch_size=0)


def test_direct_call_without_decorator_arguments() -> None:
    def train(batch_size: int) -> int:
        return batch_size

    assert find_executable_batch_size(train, starting_batch_size=4)() == 4


def test_the_guide_pattern_with_a_real_accelerator() -> None:
    """The troubleshooting guide's loop: free_memory, re-prepare, and train at the batch size that fits."""
    from torch import nn
    from torch.utils.data import DataLoader, TensorDataset

    from accelify.runtime import Accelerator

    accelerator = Accelerator(cpu=True)
    dataset = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))
    sizes: list[int] = []

    @find_executable_batch_size(starting_batch_size=64)
    def inner_training_loop(batch_size: int) -> int:
        nonlocal accelerator
        accelerator.free_memory()
        model = nn.Linear(4, 1)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
        loader = DataLoader(dataset, batch_size=batch_size)
        model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
        sizes.append(batch_size)
        for x, y in loader:
            if x.shape[0] > 16:  # what a real device would do with a batch too large
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB")
            accelerator.backward(nn.functional.mse_loss(model(x), y))
            optimizer.step()
            optimizer.zero_grad()
        return len(accelerator._models)

    assert inner_training_loop() == 1  # free_memory dropped the models of the failed tries
    assert sizes == [64, 32, 16]
