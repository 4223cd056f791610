"""A character-level language model on any UTF-8 text: the file given with --data, or, with no file,
a corpus built at run time from the docstrings of standard-library modules (every Python has them).

The vocabulary is the text's characters, saved with the run so that `generate` needs no file. The
first 90% of the text trains, the last 10% validates; a batch is random windows of `block_size`
characters (from the step's seeded generator, so --resume stays exact), each position predicting the
next character. The metric is the validation loss (lower is better; bits per character = loss / ln 2).
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from ..engine import no_grad
from ..nn import CausalLM, Module
from .base import EVAL_SEED, Batch, Defaults, Task

CORPUS_MODULES = ("string", "textwrap", "json", "functools", "itertools", "collections", "pathlib", "re",
                  "random", "statistics", "fractions", "decimal", "heapq", "bisect", "shutil", "argparse")


def default_corpus() -> str:
    """The docstrings of CORPUS_MODULES and of their public functions and classes, joined."""
    import importlib
    import inspect

    parts = []
    for name in CORPUS_MODULES:
        module = importlib.import_module(name)
        parts.append(inspect.getdoc(module) or "")
        for attr in sorted(vars(module)):
            value = getattr(module, attr)
            if not attr.startswith("_") and (inspect.isfunction(value) or inspect.isclass(value)):
                parts.append(inspect.getdoc(value) or "")
    return "\n\n".join(p for p in parts if p)


MAX_TEXT_BYTES = 1 << 30  # 1 GiB of text: 8 GiB of int64 ids


def read_text(path: str) -> str:
    """The file's text, or a clear error naming the file and the problem."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"--data: no file {path}")
    if os.path.isdir(path):
        raise ValueError(f"--data: {path} is a folder, not a text file")
    if not os.path.isfile(path):  # /dev/zero, a pipe: no end, or no size to check
        raise ValueError(f"--data: {path} is not a regular file")
    if os.path.getsize(path) > MAX_TEXT_BYTES:
        raise ValueError(f"--data: {path} holds {os.path.getsize(path) >> 20} MiB; the text task reads at most "
                         f"{MAX_TEXT_BYTES >> 20} MiB (its ids take 8 bytes per character)")
    raw = open(path, "rb").read()
    if not raw:
        raise ValueError(f"--data: {path} is empty")
    if b"\0" in raw:
        raise ValueError(f"--data: {path} looks binary (it holds NUL bytes); give a UTF-8 text file")
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as err:
        bad = raw[err.start : err.start + 1]
        raise ValueError(f"--data: {path} is not UTF-8 text (byte {err.start} is {bad!r})") from None


class TextTask(Task):
    name = "text"
    description = "a character-level language model on your text (--data FILE; default: stdlib docstrings)"
    defaults = Defaults(steps=1000, lr=3e-3, batch_size=32, warmup=50, eval_every=100, eval_size=64, target=0.0,
                        options={"block_size": 64})
    metric = "val_loss"
    higher_is_better = False

    def __init__(self, data: str | None = None, vocab: str | None = None, block_size: int | None = None):
        if block_size is None:
            block_size = self.defaults.options["block_size"]
        if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
            raise ValueError(f"--block-size must be an int >= 1, got {block_size!r}")
        self.block_size = int(block_size)
        if data == "":
            raise ValueError("--data: give a file (an empty path names none)")
        if vocab is not None and (not isinstance(vocab, str) or not vocab or len(set(vocab)) != len(vocab)):
            raise ValueError(f"the run's vocabulary must be a non-empty string of distinct characters, got "
                             f"{vocab!r:.80}")
        self.source = data or "stdlib docstrings"
        text = None
        if vocab is None or data is not None:
            text = read_text(data) if data else default_corpus()
        self.vocab = vocab if vocab is not None else "".join(sorted(set(text)))
        self.index = {c: i for i, c in enumerate(self.vocab)}
        self.vocab_size = len(self.vocab)
        self.train_ids = self.val_ids = None
        if text is not None:
            ids = self.encode(text, "--data")
            cut = int(len(ids) * 0.9)
            self.train_ids, self.val_ids = ids[:cut], ids[cut:]
            for part, name in ((self.train_ids, "training"), (self.val_ids, "validation")):
                if len(part) < self.block_size + 1:
                    raise ValueError(f"--data: {self.source} is too short: its {name} part ({len(part)} characters "
                                     f"of {len(ids)}) is shorter than one block of {self.block_size} + 1")

    def state(self) -> dict[str, Any]:
        """What rebuilds this task without the file: the vocabulary and the block size."""
        return {"vocab": self.vocab, "block_size": self.block_size}

    def encode(self, text: str, what: str = "--prompt") -> np.ndarray:
        unknown = sorted({c for c in text if c not in self.index})
        if unknown:
            raise ValueError(f"{what}: characters {''.join(unknown)!r} are not in the run's vocabulary "
                             f"({len(self.vocab)} characters)")
        return np.array([self.index[c] for c in text], dtype=np.int64)

    def token_name(self, token: int) -> str:
        char = self.vocab[token]
        return "\u2423" if char == " " else repr(char)[1:-1]  # a space as a visible mark, a newline as \\n

    def decode(self, ids: np.ndarray) -> str:
        return "".join(self.vocab[i] for i in ids)

    def _windows(self, ids: np.ndarray, rng: np.random.Generator, size: int) -> Batch:
        starts = rng.integers(0, len(ids) - self.block_size, size)
        x = np.stack([ids[s : s + self.block_size + 1] for s in starts])  # (B, block + 1)
        return Batch(x[:, :-1], x[:, 1:], np.ones((size, self.block_size), dtype=bool))

    def batch(self, rng: np.random.Generator, size: int) -> Batch:
        if self.train_ids is None:
            raise ValueError("text: this task was rebuilt from a run without its text; give --data to train")
        return self._windows(self.train_ids, rng, size)

    def eval_batch(self) -> Batch:
        return self._windows(self.val_ids, np.random.default_rng(EVAL_SEED), self.defaults.eval_size)

    def build_model(self) -> Module:
        d = self.defaults
        return CausalLM(self.vocab_size, self.block_size, d.d_model, d.nhead, d.num_layers, d.dim_feedforward,
                        d.dropout)

    @no_grad()
    def evaluate(self, model: Module) -> float:
        was_training = model.training
        model.eval()
        loss, _ = self.loss(model, self.eval_batch())
        model.train(was_training)
        return float(loss.item())

    @staticmethod
    def bits_per_character(loss: float) -> float:
        return loss / math.log(2)

    def sample_prompt(self) -> str:
        return self.decode(self.val_ids[: min(16, self.block_size)]) if self.val_ids is not None else self.vocab[:1]

    def parse_input(self, text: str) -> np.ndarray:
        if not text:
            raise ValueError("--prompt: give at least one character")
        return self.encode(text)

    @no_grad()
    def answer(self, model: Module, text: str) -> tuple[str, Batch]:
        """The next block_size // 4 characters, greedy, and the batch of prompt + answer (for pictures)."""
        prompt = self.parse_input(text)[-self.block_size :]
        out = model.generate(prompt[None, :], max(1, self.block_size // 4), top_k=1)[0]
        window = out[-self.block_size - 1 :]
        batch = Batch(window[None, :-1], window[None, 1:], np.ones((1, len(window) - 1), bool))
        return self.decode(out[len(prompt) :]), batch
