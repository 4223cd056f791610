"""The orders a DataLoader reads a dataset in: `torch.utils.data.sampler`."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from .dataset import _generator


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



__all__ = ["BatchSampler", "RandomSampler", "Sampler", "SequentialSampler"]
