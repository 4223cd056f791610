"""`torch.utils.data` for tinygrad_attn: datasets, samplers, random_split and a DataLoader that batches them.

Everything runs in the calling process (num_workers=0); shuffling and splits draw from `ta.manual_seed`'s
generator, or from a `generator` (a numpy Generator, or a seed) passed in, so a seeded run is repeatable.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import numpy as np

from .. import rng
from ..engine import _short
from ..tensor import Tensor


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
    if generator is None:
        return rng.generator()
    if isinstance(generator, np.random.Generator):
        return generator
    if isinstance(generator, (int, np.integer)) and not isinstance(generator, bool):
        return np.random.default_rng(int(generator))
    raise TypeError(f"generator must be a numpy Generator, a seed or None, got {_short(generator)}")


class Sampler:
    def __iter__(self) -> Iterator[int]:
        raise NotImplementedError


def _length(data_source: Any, sampler: str) -> int:
    """len(data_source), or one clear error for a map-style dataset without __len__."""
    if not hasattr(data_source, "__len__"):
        raise TypeError(f"{sampler}: the dataset ({type(data_source).__name__}) has no __len__; give it one, "
                        "or make it an IterableDataset, or pass a sampler")
    return len(data_source)


class SequentialSampler(Sampler):
    def __init__(self, data_source: Any):
        self.data_source = data_source

    def __iter__(self) -> Iterator[int]:
        return iter(range(_length(self.data_source, "SequentialSampler")))

    def __len__(self) -> int:
        return _length(self.data_source, "SequentialSampler")


class RandomSampler(Sampler):
    """A new permutation of the indices at each pass (or num_samples draws with replacement)."""

    def __init__(self, data_source: Any, replacement: bool = False, num_samples: int | None = None,
                 generator: Any = None):
        self.data_source, self.replacement, self.generator = data_source, bool(replacement), generator
        self._num_samples = num_samples
        if num_samples is not None and (isinstance(num_samples, bool) or not isinstance(num_samples, int)
                                        or num_samples <= 0):
            raise ValueError(f"RandomSampler: num_samples must be a positive int, got {num_samples!r}")

    @property
    def num_samples(self) -> int:
        return _length(self.data_source, "RandomSampler") if self._num_samples is None else self._num_samples

    def __iter__(self) -> Iterator[int]:
        g, n = _generator(self.generator), _length(self.data_source, "RandomSampler")
        if self.replacement:  # drawn lazily, 32 at a time as PyTorch does: num_samples may be huge
            return (int(i) for start in range(0, self.num_samples, 32)
                    for i in g.integers(0, n, min(32, self.num_samples - start)))
        rounds = [g.permutation(n) for _ in range(math.ceil(self.num_samples / n))] if n else []
        return iter(np.concatenate(rounds)[: self.num_samples].tolist() if rounds else [])

    def __len__(self) -> int:
        return self.num_samples


class BatchSampler(Sampler):
    def __init__(self, sampler: Any, batch_size: int, drop_last: bool):
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got batch_size={batch_size!r}")
        if not isinstance(drop_last, bool):
            raise ValueError(f"drop_last should be a boolean value, but got drop_last={drop_last!r}")
        self.sampler, self.batch_size, self.drop_last = sampler, batch_size, drop_last

    def __iter__(self) -> Iterator[list[int]]:
        batch: list[int] = []
        for index in self.sampler:
            batch.append(index)
            if len(batch) == self.batch_size:
                yield batch
                batch = []
        if batch and not self.drop_last:
            yield batch

    def __len__(self) -> int:
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else math.ceil(n / self.batch_size)


def default_collate(batch: list[Any]) -> Any:
    """Stack a list of samples as PyTorch does: tensors and arrays stacked on a new first dim, numbers into a
    tensor (floats float32... as ta.tensor infers), tuples/lists and dicts collated field by field, strings
    kept as a list."""
    first = batch[0]
    if isinstance(first, Tensor):
        shapes = {x.shape for x in batch}
        if len(shapes) > 1:
            raise RuntimeError(f"default_collate: samples of different shapes {sorted(shapes)[:3]} cannot be "
                               "stacked; pass a collate_fn that pads them")
        return Tensor(np.stack([x.numpy() for x in batch]))
    if isinstance(first, np.ndarray):
        return default_collate([Tensor(x) for x in batch])
    if isinstance(first, (bool, np.bool_)):
        return Tensor(np.asarray(batch, dtype=np.bool_))
    if isinstance(first, np.integer):  # numpy scalars keep their dtype, as PyTorch keeps it
        return Tensor(np.asarray(batch, dtype=first.dtype))
    if isinstance(first, int):
        return Tensor(np.asarray(batch, dtype=np.int64))
    if isinstance(first, (float, np.floating)):
        return Tensor(np.asarray(batch, dtype=np.float64 if isinstance(first, float) else first.dtype))
    if isinstance(first, str):
        return list(batch)
    if isinstance(first, Mapping):
        return {key: default_collate([sample[key] for sample in batch]) for key in first}
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a named tuple
        return type(first)(*(default_collate(list(field)) for field in zip(*batch)))
    if isinstance(first, (tuple, list)):
        if len({len(s) for s in batch}) > 1:
            raise RuntimeError("default_collate: each sample of the batch must have the same number of fields")
        return [default_collate(list(field)) for field in zip(*batch)]
    raise TypeError(f"default_collate: cannot batch samples of type {type(first).__name__}; pass a collate_fn")


class DataLoader:
    """Batches of a dataset, as torch.utils.data.DataLoader with num_workers=0 (in this process).

    batch_size=None yields the samples unbatched. Other num_workers values are refused with a clear error:
    worker processes are not supported (a dataset here is in memory, and batching it is cheap)."""

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool = False, sampler: Any = None,
                 batch_sampler: Any = None, num_workers: int = 0, collate_fn: Any = None, pin_memory: bool = False,
                 drop_last: bool = False, generator: Any = None, **unsupported: Any):
        if unsupported:
            raise TypeError(f"DataLoader: unsupported arguments {sorted(unsupported)}")
        if num_workers != 0:
            raise ValueError(f"DataLoader: num_workers={num_workers} is not supported here; use num_workers=0 "
                             "(batches are made in this process)")
        if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                       or batch_size <= 0):
            raise ValueError(f"DataLoader: batch_size must be a positive int or None, got {batch_size!r}")
        if shuffle and sampler is not None:
            raise ValueError("DataLoader: sampler option is mutually exclusive with shuffle")
        self.dataset, self.batch_size, self.drop_last = dataset, batch_size, bool(drop_last)
        self.collate_fn = collate_fn or (default_collate if batch_size is not None or batch_sampler else None)
        self.iterable = isinstance(dataset, IterableDataset)
        if self.iterable:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise ValueError("DataLoader: an IterableDataset takes no shuffle, sampler or batch_sampler")
            self.batch_sampler = None
            return
        if sampler is None:
            sampler = RandomSampler(dataset, generator=generator) if shuffle else SequentialSampler(dataset)
        self.sampler = sampler
        if batch_sampler is None and batch_size is not None:
            batch_sampler = BatchSampler(sampler, batch_size, self.drop_last)
        self.batch_sampler = batch_sampler

    def __iter__(self) -> Iterator[Any]:
        if self.iterable:
            yield from self._iterable_batches()
        elif self.batch_sampler is None:
            for index in self.sampler:
                yield self.dataset[index]
        else:
            for indices in self.batch_sampler:
                yield self.collate_fn([self.dataset[i] for i in indices])

    def _iterable_batches(self) -> Iterator[Any]:
        if self.batch_size is None:
            yield from self.dataset
            return
        batch: list[Any] = []
        for sample in self.dataset:
            batch.append(sample)
            if len(batch) == self.batch_size:
                yield self.collate_fn(batch)
                batch = []
        if batch and not self.drop_last:
            yield self.collate_fn(batch)

    def __len__(self) -> int:
        if self.iterable:
            raise TypeError("DataLoader: an IterableDataset has no length")
        return len(self.batch_sampler) if self.batch_sampler is not None else len(self.sampler)


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


__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset", "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "TensorDataset", "default_collate", "random_split"]
