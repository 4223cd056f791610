"""Loss modules with PyTorch's names: each holds its options and calls the function of the same name."""

from __future__ import annotations

from typing import Any

from .. import losses
from ..tensor import Tensor
from .module import Module


class _Loss(Module):
    def __init__(self, reduction: str = "mean"):
        self.reduction = losses._reduction(reduction, type(self).__name__, ("batchmean",))


class MSELoss(_Loss):
    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002  (PyTorch's names)
        return losses.mse_loss(input, target, self.reduction)


class L1Loss(_Loss):
    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return losses.l1_loss(input, target, self.reduction)


class NLLLoss(_Loss):
    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean"):
        super().__init__(reduction)
        self.weight, self.ignore_index = weight, ignore_index

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return losses.nll_loss(input, target, self.weight, self.ignore_index, self.reduction)


class CrossEntropyLoss(_Loss):
    def __init__(self, weight: Any = None, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0):
        super().__init__(reduction)
        self.weight, self.ignore_index, self.label_smoothing = weight, ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return losses.cross_entropy(input, target, self.weight, self.ignore_index, self.reduction,
                                    self.label_smoothing)


class BCEWithLogitsLoss(_Loss):
    def __init__(self, weight: Any = None, reduction: str = "mean", pos_weight: Any = None):
        super().__init__(reduction)
        self.weight, self.pos_weight = weight, pos_weight

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return losses.binary_cross_entropy_with_logits(input, target, self.weight, self.reduction, self.pos_weight)


class BCELoss(_Loss):
    def __init__(self, weight: Any = None, reduction: str = "mean"):
        super().__init__(reduction)
        self.weight = weight

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return losses.binary_cross_entropy(input, target, self.weight, self.reduction)


class KLDivLoss(_Loss):
    def __init__(self, reduction: str = "mean", log_target: bool = False):
        super().__init__(reduction)
        self.log_target = log_target

    def forward(self, input: Tensor, target: Any) -> Tensor:  # noqa: A002
        return losses.kl_div(input, target, self.reduction, self.log_target)


__all__ = ["BCELoss", "BCEWithLogitsLoss", "CrossEntropyLoss", "KLDivLoss", "L1Loss", "MSELoss", "NLLLoss"]
