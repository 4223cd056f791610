"""The DataLoader and its collate function: `torch.utils.data.dataloader`."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np

from ...tensor import Tensor
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler


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
    """Batches of a dataset, as torch.utils.data.DataLoader, made in this process.

    batch_size=None yields the samples unbatched. num_workers > 0 (with prefetch_factor, persistent_workers,
    timeout) gives a map-style dataset's batches here too: the same batches in the same order as PyTorch's
    workers give. An IterableDataset with workers, or a worker_init_fn, is refused: what those give in
    PyTorch depends on each worker's copy of the dataset."""

    def __init__(self, dataset: Any, batch_size: int | None = 1, shuffle: bool = False, sampler: Any = None,
                 batch_sampler: Any = None, num_workers: int = 0, collate_fn: Any = None, pin_memory: bool = False,
                 drop_last: bool = False, timeout: float = 0, worker_init_fn: Any = None, generator: Any = None, *,
                 prefetch_factor: int | None = None, persistent_workers: bool = False, **unsupported: Any):
        if unsupported:
            raise TypeError(f"DataLoader: unsupported arguments {sorted(unsupported)}")
        if isinstance(num_workers, bool) or not isinstance(num_workers, int) or num_workers < 0:
            raise ValueError(f"DataLoader: num_workers must be a non-negative int, got {num_workers!r}")
        if num_workers and (worker_init_fn is not None or isinstance(dataset, IterableDataset)):
            raise ValueError(f"DataLoader: num_workers={num_workers} with "
                             f"{'a worker_init_fn' if worker_init_fn is not None else 'an IterableDataset'} is not "
                             "supported here (there are no worker processes); use num_workers=0")
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



__all__ = ["DataLoader", "default_collate"]
