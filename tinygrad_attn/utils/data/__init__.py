"""`torch.utils.data` for tinygrad_attn: datasets, samplers, random_split and a DataLoader that batches them,
in PyTorch's modules (`dataset`, `sampler`, `dataloader`).

Everything runs in the calling process (num_workers=0); shuffling and splits draw from `ta.manual_seed`'s
generator, or from a `generator` (a numpy Generator, or a seed) passed in, so a seeded run is repeatable.
"""

from .dataloader import DataLoader, default_collate
from .dataset import ConcatDataset, Dataset, IterableDataset, Subset, TensorDataset, random_split
from .sampler import BatchSampler, RandomSampler, Sampler, SequentialSampler

__all__ = ["BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "IterableDataset", "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "TensorDataset", "default_collate", "random_split"]
