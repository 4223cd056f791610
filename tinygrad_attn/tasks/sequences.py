"""Digit and symbol tasks for a decoder-only model, each a `prompt | answer` sequence.

    copy      3 1 4 1 5 9 2 6 | 3 1 4 1 5 9 2 6
    reverse   3 1 4 1 5 9 2 6 | 6 2 9 5 1 4 1 3
    sort      3 1 4 1 5 9 2 6 | 1 1 2 3 4 5 6 9
    add       1 2 3 + 4 5 6 | 9 7 5 0        (123 + 456 = 579, answer least significant digit first)
    recall    a 3 b 7 c 1 b | 7              (key-value pairs, then a key: its value)
    induction 7 2 e 9 1 c 4 0 9 | 1          (find the earlier occurrence of the last token, copy its successor)
"""

from __future__ import annotations

import numpy as np

from .base import Defaults, PromptAnswerTask


def distinct_tokens(rng: np.random.Generator, size: int, choices: int, n: int) -> np.ndarray:
    """(size, n): each row n different tokens out of range(choices), in random order."""
    return np.argsort(rng.random((size, choices)), axis=1)[:, :n]


class Copy(PromptAnswerTask):
    name = "copy"
    description = "repeat a sequence of 8 digits"
    defaults = Defaults(steps=1500, lr=3e-3, options={"length": 8})

    def examples(self, rng, size):
        x = rng.integers(0, self.digits, (size, self.defaults.options["length"]))
        return x, self.transform(x)

    def transform(self, x: np.ndarray) -> np.ndarray:
        return x


class Reverse(Copy):
    name = "reverse"
    description = "reverse a sequence of 8 digits"
    defaults = Defaults(steps=1500, lr=3e-3, options={"length": 8})

    def transform(self, x):
        return x[:, ::-1]


class Sort(Copy):
    name = "sort"
    description = "sort a sequence of 8 digits"
    defaults = Defaults(steps=2500, lr=3e-3, options={"length": 8})

    def transform(self, x):
        return np.sort(x, axis=1)


class Addition(PromptAnswerTask):
    name = "add"
    description = "add two 3-digit numbers; the sum is written least significant digit first"
    vocab_extra = ("+",)
    defaults = Defaults(steps=4000, lr=3e-3, num_layers=2, options={"digits": 3})

    def examples(self, rng, size):
        n = self.defaults.options["digits"]
        a, b = rng.integers(0, 10**n, size), rng.integers(0, 10**n, size)
        places = 10 ** np.arange(n)[::-1]  # most significant first in the prompt
        digits_a, digits_b = (a[:, None] // places) % 10, (b[:, None] // places) % 10
        plus = np.full((size, 1), self.token_names.index("+"))
        total = a + b
        answer = (total[:, None] // 10 ** np.arange(n + 1)) % 10  # least significant first
        return np.concatenate([digits_a, plus, digits_b], axis=1), answer


class Recall(PromptAnswerTask):
    """Associative recall: `n_pairs` key-value pairs (keys are letters, values digits), then a key."""

    name = "recall"
    description = "associative recall: 2 key-value pairs, then a key; answer its value"
    vocab_extra = tuple("abcdefgh")
    defaults = Defaults(steps=8000, lr=3e-3, eval_every=100, options={"pairs": 2})

    def examples(self, rng, size):
        n = self.defaults.options["pairs"]
        keys = distinct_tokens(rng, size, len(self.vocab_extra), n) + self.digits  # letters come after the digits
        values = rng.integers(0, self.digits, (size, n))
        asked = rng.integers(0, n, size)
        pairs = np.stack([keys, values], axis=2).reshape(size, 2 * n)  # k1 v1 k2 v2 ...
        rows = np.arange(size)
        return np.concatenate([pairs, keys[rows, asked][:, None]], axis=1), values[rows, asked][:, None]


class Induction(PromptAnswerTask):
    """Induction head probe: distinct tokens, then one of them again; answer the token that followed it."""

    name = "induction"
    description = "10 distinct symbols, then one of them again: answer the symbol that followed it"
    vocab_extra = tuple("abcdef")
    defaults = Defaults(steps=8000, lr=1e-3, eval_every=100, options={"length": 10})

    def examples(self, rng, size):
        n = self.defaults.options["length"]
        body = distinct_tokens(rng, size, self.vocab_size - 1, n)  # n distinct symbols, any token but SEP
        position = rng.integers(0, n - 1, size)
        rows = np.arange(size)
        return (np.concatenate([body, body[rows, position][:, None]], axis=1),
                body[rows, position + 1][:, None])
