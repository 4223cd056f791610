"""`nn.utils`, as in PyTorch: gradient clipping, and `rnn.pad_sequence`."""

from ...optim import clip_grad_norm_
from . import rnn

__all__ = ["clip_grad_norm_", "rnn"]
