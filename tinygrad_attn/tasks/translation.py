"""A tiny French -> English translation task for the encoder-decoder model and its cross-attention.

The 40 sentence pairs ship in tasks/data/fr_en.tsv. Words are tokens
("j'aime" -> "j'", "aime"). With this few pairs the task is memorisation: the
evaluation set is every pair, and accuracy is the share translated exactly.
"""

from __future__ import annotations

import re
from importlib import resources

import numpy as np

from ..engine import no_grad
from ..nn import Module, Seq2SeqTransformer
from .base import Batch, Defaults, Task

PAD, BOS, EOS = "<pad>", "<s>", "</s>"


def tokenize(sentence: str) -> list[str]:
    """Lower-case words; an elided article or pronoun keeps its apostrophe: "J'aime l'IA" -> j' aime l' ia."""
    if not isinstance(sentence, str):
        raise TypeError(f"tokenize: sentence must be a str, got {type(sentence).__name__}")
    return re.findall(r"\w+'|\w+|[^\w\s]", sentence.lower())


def load_pairs() -> list[tuple[list[str], list[str]]]:
    text = resources.files("tinygrad_attn.tasks").joinpath("data/fr_en.tsv").read_text(encoding="utf-8")
    return [(tokenize(fr), tokenize(en)) for fr, en in (line.split("\t") for line in text.splitlines() if line)]


class Translation(Task):
    name = "translate"
    description = "translate 40 short French sentences to English (encoder-decoder, memorisation)"
    defaults = Defaults(steps=600, lr=2e-3, batch_size=32, warmup=30, eval_every=25)  # 0.99 of 40: all of them

    def __init__(self):
        self.pairs = load_pairs()
        self.src_words = [PAD] + sorted({w for fr, _ in self.pairs for w in fr})
        self.tgt_words = [PAD, BOS, EOS] + sorted({w for _, en in self.pairs for w in en})
        self.src_index = {w: i for i, w in enumerate(self.src_words)}
        self.tgt_index = {w: i for i, w in enumerate(self.tgt_words)}
        self.max_src = max(len(fr) for fr, _ in self.pairs)
        self.max_tgt = max(len(en) for _, en in self.pairs) + 1  # room for BOS / EOS

    def _encode(self, indices: np.ndarray) -> Batch:
        size = len(indices)
        src = np.zeros((size, self.max_src), dtype=np.int64)
        tgt = np.zeros((size, self.max_tgt + 1), dtype=np.int64)  # BOS words EOS, padded
        lengths = np.zeros(size, dtype=np.int64)
        for row, i in enumerate(indices):
            fr, en = self.pairs[i]
            src[row, : len(fr)] = [self.src_index[w] for w in fr]
            lengths[row] = len(fr)
            words = [BOS] + en + [EOS]
            tgt[row, : len(words)] = [self.tgt_index[w] for w in words]
        tgt_in, tgt_out = tgt[:, :-1], tgt[:, 1:]
        return Batch((src, lengths, tgt_in), tgt_out, tgt_out != 0)

    def batch(self, rng, size):
        return self._encode(rng.integers(0, len(self.pairs), size))

    def eval_batch(self):
        return self._encode(np.arange(len(self.pairs)))

    def build_model(self) -> Module:
        d = self.defaults
        return Seq2SeqTransformer(len(self.src_words), len(self.tgt_words), max(self.max_src, self.max_tgt),
                                  d.d_model, d.nhead, d.num_layers, d.num_layers, d.dim_feedforward, d.dropout)

    def logits(self, model, batch, return_attention=False):
        src, lengths, tgt_in = batch.inputs
        return model(src, tgt_in, lengths, return_attention=return_attention)

    def sample_prompt(self):
        return " ".join(self.pairs[0][0])

    def parse_input(self, text):
        words = tokenize(text)
        unknown = [w for w in words if w not in self.src_index]
        if unknown or not words:
            raise ValueError(f"translate: unknown words {unknown}; known: {' '.join(self.src_words[1:])}")
        if len(words) > self.max_src:
            raise ValueError(f"translate: at most {self.max_src} words, got {len(words)}")
        return np.array([self.src_index[w] for w in words], dtype=np.int64)

    def labels(self, batch):
        src, lengths, tgt_in = batch.inputs
        source = [self.src_words[t] for t in src[0]]
        reads = [self.tgt_words[t] for t in tgt_in[0]]
        writes = [self.tgt_words[t] for t in batch.targets[0]]
        return {"encoder": (source, source), "decoder_self": (writes, reads), "cross": (writes, source)}

    @no_grad()
    def answer(self, model, text):
        model.eval()
        src = self.parse_input(text)[None, :]
        lengths = np.array([src.shape[1]])
        memory = model.encode(src, lengths)
        out = [self.tgt_index[BOS]]
        for _ in range(self.max_tgt):  # greedy decoding until EOS
            logits = model.decode(np.array([out]), memory, lengths)
            out.append(int(logits._data[0, -1].argmax()))
            if out[-1] == self.tgt_index[EOS]:
                break
        words = [self.tgt_words[t] for t in out[1:] if t != self.tgt_index[EOS]]
        tgt = np.array([out])
        return " ".join(words), Batch((src, lengths, tgt[:, :-1]), tgt[:, 1:], np.ones((1, tgt.shape[1] - 1), bool))
