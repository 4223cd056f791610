"""`torch.nn.functional` for tinygrad_attn: `import tinygrad_attn.nn.functional as F` as PyTorch programs do.

One namespace over the two modules that hold the code: tinygrad_attn.functional (softmax, layer norm, GELU,
dropout, attention, the fused cross-entropy) and tinygrad_attn.losses (the losses, pad, one_hot).
"""

from ..activations import (
    celu,
    cosine_similarity,
    elu,
    glu,
    hardsigmoid,
    hardswish,
    hardtanh,
    leaky_relu,
    logsigmoid,
    mish,
    normalize,
    relu6,
    selu,
    silu,
    softplus,
    softsign,
    tanhshrink,
)
from ..functional import (
    dropout,
    embedding,
    gelu,
    layer_norm,
    log_softmax,
    packed_self_attention,
    relu,
    rms_norm,
    scaled_dot_product_attention,
    softmax,
)
from ..fused import LinearFunction, fits_linear
from ..losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    cross_entropy,
    kl_div,
    l1_loss,
    mse_loss,
    nll_loss,
    one_hot,
    pad,
)


def sigmoid(input):  # noqa: A002  (PyTorch's name)
    return input.sigmoid()


def tanh(input):  # noqa: A002
    return input.tanh()


def linear(input, weight, bias=None):  # noqa: A002
    """x W^T + b, PyTorch's F.linear: nn.Linear's one fused node when the operands are a layer's, else
    the product and the sum (PyTorch's 1-D weights and broadcast biases)."""
    if fits_linear(input, weight, bias):
        return LinearFunction.apply(input, weight) if bias is None else LinearFunction.apply(input, weight, bias)
    out = input @ weight.transpose(-1, -2) if weight.ndim > 1 else input @ weight
    return out if bias is None else out + bias


__all__ = ["celu", "cosine_similarity", "elu", "glu",
           "hardsigmoid", "hardswish", "hardtanh", "leaky_relu", "logsigmoid", "mish", "normalize",
           "relu6", "selu", "silu", "softplus", "softsign", "tanhshrink", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "cross_entropy", "dropout", "embedding", "gelu", "kl_div", "l1_loss",
           "layer_norm", "linear", "log_softmax", "mse_loss", "nll_loss", "one_hot", "packed_self_attention", "pad",
           "relu", "rms_norm", "scaled_dot_product_attention", "sigmoid", "softmax", "tanh"]
