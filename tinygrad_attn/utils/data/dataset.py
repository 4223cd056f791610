"""Datasets (map-style and iterable), their combinations and random_split: `torch.utils.data.dataset`."""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from ... import rng
from ...engine import _short
from ...tensor import Tensor


class Dataset:
    """A map-style dataset: `__getitem__(i)` and `__len__()`."""

    def __getitem__(self, index: int) -> Any:
        raise NotImplementedError

    def __add__(self, other: Dataset) -> ConcatDataset:
        return ConcatDataset([self, other])


class IterableDataset:
    """A dataset that is iterated over (`__iter__`), with no indices; DataLoader batches what it yields."""

    def __iter__(self) -> Iterator[Any]:
        raise NotImplementedError


class TensorDataset(Dataset):
    """Item i is (t[i] for t in tensors); every tensor has the same first dim."""

    def __init__(self, *tensors: Tensor):
        if not tensors or any(not isinstance(t, Tensor) or t.ndim == 0 for t in tensors):
            raise TypeError("TensorDataset: expected one or more tensors with at least one dim")
        if len({t.shape[0] for t in tensors}) != 1:
            raise ValueError(f"TensorDataset: tensors have different first dims {[t.shape[0] for t in tensors]}")
        self.tensors = tensors

    def __getitem__(self, index: int) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


class ConcatDataset(Dataset):
    def __init__(self, datasets: Sequence[Dataset]):
        self.datasets = list(datasets)
        self.ends = np.cumsum([len(d) for d in self.datasets])

    def __len__(self) -> int:
        return int(self.ends[-1]) if len(self.ends) else 0

    def __getitem__(self, index: int) -> Any:
        index = _checked_index(index, len(self), "ConcatDataset")
        which = int(np.searchsorted(self.ends, index, side="right"))
        start = int(self.ends[which - 1]) if which else 0
        return self.datasets[which][index - start]


class Subset(Dataset):
    def __init__(self, dataset: Dataset, indices: Sequence[int]):
        self.dataset, self.indices = dataset, list(indices)

    def __getitem__(self, index: int) -> Any:
        i = self.indices[_checked_index(index, len(self.indices), "Subset")]
        if hasattr(self.dataset, "__len__"):
            _checked_index(i, len(self.dataset), f"Subset: indices[{index}]")
        return self.dataset[i]

    def __len__(self) -> int:
        return len(self.indices)


def _checked_index(index: Any, length: int, op: str) -> int:
    if isinstance(index, bool) or not isinstance(index, (int, np.integer)):
        raise TypeError(f"{op}: index must be an int, got {_short(index)}")
    if not -length <= index < length:
        raise IndexError(f"{op}: index {index} is out of range for {length} items")
    return int(index) % length


def _generator(generator: Any) -> np.random.Generator:
    """The generator to draw from: the given numpy Generator, a new one from a seed, or the framework's."""
    if generator is None or isinstance(generator, (np.random.Generator, rng.Generator)):
        return rng.generator(generator)
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    raise TypeError(f"generator must be a Generator (torch.Generator), a numpy Generator, a seed or None, got "
                    f"{_short(generator)}")


def random_split(dataset: Any, lengths: Sequence[float], generator: Any = None) -> list[Subset]:
    """Split into non-overlapping Subsets of the given lengths (or fractions summing to 1, as PyTorch)."""
    n = len(dataset)
    if all(isinstance(x, float) for x in lengths) and math.isclose(sum(lengths), 1.0) and sum(lengths) <= 1:
        counts = [int(math.floor(n * f)) for f in lengths]
        for i in range(n - sum(counts)):  # the remainder, one each, round-robin as PyTorch
            counts[i % len(counts)] += 1
        lengths = counts
    if any(isinstance(x, bool) or not isinstance(x, (int, np.integer)) or x < 0 for x in lengths) or sum(
            lengths) != n:
        raise ValueError(f"random_split: lengths {list(lengths)} must be non-negative ints summing to the "
                         f"dataset's length {n}, or fractions summing to 1")
    order = _generator(generator).permutation(n).tolist()
    starts = np.cumsum([0] + list(lengths))
    return [Subset(dataset, order[int(a):int(b)]) for a, b in zip(starts[:-1], starts[1:])]



__all__ = ["ConcatDataset", "Dataset", "IterableDataset", "Subset", "TensorDataset", "random_split"]
