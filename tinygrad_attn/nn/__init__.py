"""Layers with PyTorch's conventions: Module, Linear, LayerNorm, Embedding, MultiHeadAttention, Transformer blocks."""

from . import functional, init, utils
from .attention import KVCache, MultiHeadAttention, MultiheadAttention
from .layers import (
    GELU,
    Dropout,
    Embedding,
    LayerNorm,
    LearnedPositionalEncoding,
    Linear,
    PositionalEncoding,
    ReLU,
    sinusoidal_table,
)
from .loss import BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss
from .module import Module, ModuleDict, ModuleList, Parameter, Sequential
from .transformer import (
    CausalLM,
    FeedForward,
    Seq2SeqTransformer,
    TransformerDecoderLayer,
    TransformerEncoderLayer,
)

__all__ = [
    "BCELoss",
    "BCEWithLogitsLoss",
    "CrossEntropyLoss",
    "KLDivLoss",
    "L1Loss",
    "MSELoss",
    "NLLLoss",
    "functional",
    "GELU",
    "CausalLM",
    "Dropout",
    "Embedding",
    "FeedForward",
    "LayerNorm",
    "LearnedPositionalEncoding",
    "Linear",
    "Module",
    "KVCache",
    "ModuleDict",
    "ModuleList",
    "init",
    "utils",
    "MultiHeadAttention",
    "MultiheadAttention",
    "Parameter",
    "PositionalEncoding",
    "ReLU",
    "Seq2SeqTransformer",
    "Sequential",
    "TransformerDecoderLayer",
    "TransformerEncoderLayer",
    "sinusoidal_table",
]
