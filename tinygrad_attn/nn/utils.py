"""`nn.utils`, as in PyTorch: gradient clipping."""

from ..optim import clip_grad_norm_

__all__ = ["clip_grad_norm_"]
