"""A character-level language model in PyTorch's language-model idioms: nn.TransformerEncoder over
nn.TransformerEncoderLayer (sequence-first, post-norm: PyTorch's defaults), the causal mask from
nn.Transformer.generate_square_subsequent_mask, a sinusoidal table kept as a buffer, the text cut into one
column per stream and read in windows, log_softmax with nll_loss, SGD with clipping and a StepLR schedule.

Its PyTorch twin, examples/pytorch/char_transformer.py, differs from this file in the import lines only; the
tests run both from the same weights and compare the losses step by step.
"""
# ruff: noqa: I001  (the imports are the only lines the two twins do not share; kept in that order)

import math

import numpy as np

import torch
import torch.nn as nn
import torch.nn.functional as F
# --- end of imports ---

TEXT = ("the keys answer the queries, the values carry what is read. "
        "each head reads its own part of the vector and the output mixes them again. ")


class SinusoidalPositions(nn.Module):
    """Adds sin and cos of position x frequency to a (T, B, E) input, from a (L, 1, E) table kept as a buffer."""

    def __init__(self, width, max_len=64):
        super().__init__()
        steps = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)  # (L, 1)
        rates = torch.exp(torch.arange(0, width, 2).float() * (-math.log(10000.0) / width))  # (E / 2,)
        table = torch.zeros(max_len, width)
        table[:, 0::2] = torch.sin(steps * rates)  # even columns: sin, odd: cos
        table[:, 1::2] = torch.cos(steps * rates)
        self.register_buffer("table", table.unsqueeze(0).transpose(0, 1))  # (L, 1, E)

    def forward(self, x):
        return x + self.table[: x.size(0), :]


class CharModel(nn.Module):
    def __init__(self, vocab, width=32, heads=4, hidden=64, depth=2):
        super().__init__()
        self.width = width
        self.embed = nn.Embedding(vocab, width)
        self.positions = SinusoidalPositions(width)
        self.encoder = nn.TransformerEncoder(nn.TransformerEncoderLayer(width, heads, hidden, 0.0), depth)
        self.out = nn.Linear(width, vocab)
        nn.init.uniform_(self.embed.weight, -0.1, 0.1)
        nn.init.uniform_(self.out.weight, -0.1, 0.1)
        nn.init.zeros_(self.out.bias)

    def forward(self, tokens, causal):  # tokens (T, B) -> log-probabilities (T, B, vocab)
        x = self.positions(self.embed(tokens) * math.sqrt(self.width))
        return F.log_softmax(self.out(self.encoder(x, causal)), dim=-1)

    @torch.no_grad()
    def generate(self, prompt, count):  # prompt (T, 1); greedy
        for _ in range(count):
            causal = nn.Transformer.generate_square_subsequent_mask(prompt.size(0))
            following = self(prompt, causal)[-1].argmax(dim=-1, keepdim=True)  # (1, 1)
            prompt = torch.cat([prompt, following], dim=0)
        return prompt


def as_columns(tokens, streams):
    usable = tokens.size(0) // streams * streams
    return tokens[:usable].view(streams, -1).t().contiguous()  # (length / streams, streams)


def window(columns, start, length):
    length = min(length, len(columns) - 1 - start)
    return columns[start : start + length], columns[start + 1 : start + 1 + length].reshape(-1)


def train(model, columns, vocab, steps, length=16):
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    schedule = torch.optim.lr_scheduler.StepLR(optimizer, 50, gamma=0.95)
    losses, start = [], 0
    model.train()
    for _ in range(steps):
        if start >= columns.size(0) - 2:
            start = 0
        inputs, targets = window(columns, start, length)
        causal = nn.Transformer.generate_square_subsequent_mask(inputs.size(0))
        loss = F.nll_loss(model(inputs, causal).view(-1, vocab), targets)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 0.5)
        optimizer.step()
        schedule.step()
        losses.append(loss.item())
        start += length
    return losses


def encode(text):
    chars = sorted(set(TEXT))
    return torch.tensor(np.array([chars.index(c) for c in text]), dtype=torch.long), chars


def main(steps=30, weights=None):
    torch.manual_seed(0)
    tokens, chars = encode(TEXT * 4)
    model = CharModel(len(chars))
    if weights is not None:
        model.load_state_dict({name: torch.tensor(value) for name, value in weights.items()})
    losses = train(model, as_columns(tokens, 8), len(chars), steps)
    model.eval()
    prompt = torch.tensor([[chars.index(c)] for c in "the "], dtype=torch.long)  # (T, 1)
    return model, losses, model.generate(prompt, 8)[:, 0]


if __name__ == "__main__":
    model, losses, sample = main(steps=300)
    chars = sorted(set(TEXT))
    print(f"loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    print("greedy continuation of 'the ':", repr("".join(chars[i] for i in sample.tolist())))
