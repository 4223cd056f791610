"""PyTorch's `torch.optim`: SGD, Adam, AdamW, gradient clipping, and `optim.lr_scheduler`."""

from . import lr_scheduler
from .lr_scheduler import CosineAnnealingLR, LambdaLR, LRScheduler
from .optimizers import SGD, Adam, AdamW, Optimizer, clip_grad_norm_, constant, flat_state, warmup_cosine

__all__ = ["SGD", "Adam", "AdamW", "CosineAnnealingLR", "LRScheduler", "LambdaLR", "Optimizer", "clip_grad_norm_",
           "constant", "flat_state", "lr_scheduler", "warmup_cosine"]
