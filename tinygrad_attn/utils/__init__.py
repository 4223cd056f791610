"""PyTorch's `torch.utils`: `data` (Dataset, DataLoader, samplers, random_split)."""

from . import data

__all__ = ["data"]
