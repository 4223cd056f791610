"""`nn.utils.rnn.pad_sequence`, as in PyTorch: sequences of different lengths padded into one tensor."""

from __future__ import annotations

from typing import Any

from ...checks import check_tensor
from ...losses import pad
from ...tensor import Tensor, stack

__all__ = ["pad_sequence"]


def pad_sequence(sequences: Any, batch_first: bool = False, padding_value: float = 0.0,
                 padding_side: str = "right") -> Tensor:
    """Tensors (L_i, *) -> one (L, B, *) tensor (B, L, *) with batch_first), L the longest L_i, the rest filled
    with padding_value after each sequence (before it with padding_side="left"). Differentiable."""
    if isinstance(sequences, Tensor):
        sequences = list(sequences.unbind(0))
    if not isinstance(sequences, (list, tuple)) or not sequences:
        raise TypeError(f"pad_sequence: sequences must be a non-empty list of tensors, got {sequences!r:.60}")
    if padding_side not in ("right", "left"):
        raise ValueError(f'pad_sequence: padding_side must be "right" or "left", got {padding_side!r}')
    for i, s in enumerate(sequences):
        check_tensor(s, "pad_sequence", f"sequences[{i}]")
        if s.ndim == 0 or s.shape[1:] != sequences[0].shape[1:]:
            raise ValueError(f"pad_sequence: every sequence must be (L_i, *{sequences[0].shape[1:]}), "
                             f"sequences[{i}] has shape {s.shape}")
    longest = max(s.shape[0] for s in sequences)
    padded = []
    for s in sequences:
        extra = longest - s.shape[0]
        spec = (0, 0) * (s.ndim - 1) + ((0, extra) if padding_side == "right" else (extra, 0))
        padded.append(pad(s, spec, value=padding_value) if extra else s)
    return stack(padded, dim=0 if batch_first else 1)
