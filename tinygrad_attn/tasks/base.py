"""What every toy task provides: batches, a fixed evaluation set, a model and exact-match accuracy.

A batch is (inputs, targets, loss_mask). For decoder-only tasks the model
reads `prompt SEP answer` shifted by one: inputs = tokens[:-1],
targets = tokens[1:], and the loss mask selects the answer positions only.
Exact-match accuracy counts a sequence as right when every answer token is
the model's argmax; under teacher forcing this equals greedy decoding's exact
match, since any wrong token fails both.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from .. import functional as F
from ..engine import no_grad
from ..nn import CausalLM, Module
from ..tensor import Tensor

EVAL_SEED = 2024  # the held-out set is drawn from its own generator, never the training one


@dataclass(frozen=True)
class Defaults:
    """A task's settings, chosen so that training reaches `target` (see docs/tasks.md)."""

    steps: int
    lr: float
    batch_size: int = 64
    d_model: int = 64
    nhead: int = 4
    num_layers: int = 2
    dim_feedforward: int = 256
    dropout: float = 0.0
    warmup: int = 50
    eval_every: int = 50
    eval_size: int = 512
    target: float = 0.99
    options: dict[str, Any] = field(default_factory=dict)


@dataclass
class Batch:
    inputs: Any  # (B, T) int tokens, or (src, src_lengths, tgt_in) for sequence-to-sequence tasks
    targets: np.ndarray  # (B, T) int
    loss_mask: np.ndarray  # (B, T) bool


class Task:
    """Base class. Subclasses set name, description, defaults and implement `batch` and `build_model`."""

    name = ""
    description = ""
    defaults: Defaults
    metric = "accuracy"  # what `evaluate` returns (held-out exact match here) and `target` is about
    higher_is_better = True

    def reached(self, value: float, target: float) -> bool:
        return value >= target if self.higher_is_better else value <= target

    def state(self) -> dict[str, Any]:
        """What, besides the name, rebuilds this task (the text task's vocabulary); saved with a run."""
        return {}

    def with_model(self, **sizes: Any) -> Task:
        """Override the model's size (d_model, nhead, num_layers, dim_feedforward, dropout); returns self."""
        unknown = set(sizes) - {"d_model", "nhead", "num_layers", "dim_feedforward", "dropout"}
        if unknown:
            raise ValueError(f"{self.name}: unknown model settings {sorted(unknown)}")
        given = {k: v for k, v in sizes.items() if v is not None}
        for key, value in given.items():
            if key == "dropout" and not 0.0 <= value < 1.0:
                raise ValueError(f"--dropout must be in [0, 1), got {value}")
            if key != "dropout" and value < 1:
                raise ValueError(f"--{key.replace('_', '-').replace('nhead', 'heads')} must be at least 1, got {value}")
        merged = replace(self.defaults, **given)
        if merged.d_model % merged.nhead:
            raise ValueError(f"--d-model {merged.d_model} is not divisible by --heads {merged.nhead}")
        self.defaults = merged
        return self

    def batch(self, rng: np.random.Generator, size: int) -> Batch:
        raise NotImplementedError

    def token_name(self, token: int) -> str:
        return str(token)

    def labels(self, batch: Batch) -> dict[str, tuple[list[str], list[str]]]:
        """Tick labels of the first example's attention maps: kind -> (query rows, key columns). A decoder's
        row is labelled with the token it predicts (the next one), its columns with the tokens it reads."""
        names = [self.token_name(int(t)) for t in batch.inputs[0]]
        return {"self-attention": ([self.token_name(int(t)) for t in batch.targets[0]], names)}

    def attention_maps(self, model: Module, batch: Batch) -> dict[str, list[np.ndarray]]:
        """Every layer's attention weights for the first example of `batch`: kind -> [layer (H, Tq, Tk)]."""
        _, attention = self.logits(model, batch, return_attention=True)
        groups = attention if isinstance(attention, dict) else {"self-attention": attention}
        return {name: [w.detach().numpy()[0] for w in layers] for name, layers in groups.items()}

    def eval_batch(self) -> Batch:
        return self.batch(np.random.default_rng(EVAL_SEED), self.defaults.eval_size)

    def build_model(self) -> Module:
        raise NotImplementedError

    def logits(self, model: Module, batch: Batch, return_attention: bool = False) -> Any:
        return model(batch.inputs, return_attention=return_attention)

    def loss(self, model: Module, batch: Batch) -> tuple[Tensor, Tensor]:
        """Mean cross-entropy over the answer positions, and the logits (B, T, vocab)."""
        logits = self.logits(model, batch)
        targets = np.where(batch.loss_mask, batch.targets, -100)  # ignore everything but the answer
        return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1)), logits

    @staticmethod
    def exact_match(logits: np.ndarray, batch: Batch) -> float:
        right = (logits.argmax(-1) == batch.targets) | ~batch.loss_mask
        return float(right.all(axis=-1).mean())

    @no_grad()
    def evaluate(self, model: Module) -> float:
        was_training = model.training
        model.eval()
        batch = self.eval_batch()
        accuracy = self.exact_match(self.logits(model, batch)._data, batch)
        model.train(was_training)
        return accuracy

    def parse_input(self, text: str) -> np.ndarray:
        raise NotImplementedError

    def sample_prompt(self) -> str:
        """The first held-out example's prompt, as text (what `attend --input` takes)."""
        raise NotImplementedError

    @no_grad()
    def answer(self, model: Module, text: str) -> tuple[str, Batch]:
        """Greedy answer to one prompt given as text, and the batch that produced it (for attention maps)."""
        raise NotImplementedError


class PromptAnswerTask(Task):
    """Decoder-only task over digits: `prompt SEP answer`, the answer predicted token by token."""

    vocab_extra: tuple[str, ...] = ()  # names of tokens after the digits, besides SEP

    def __init__(self, digits: int = 10):
        self.digits = digits
        self.token_names = [str(d) for d in range(digits)] + list(self.vocab_extra) + ["|"]
        self.sep = len(self.token_names) - 1
        self.vocab_size = len(self.token_names)

    def examples(self, rng: np.random.Generator, size: int) -> tuple[np.ndarray, np.ndarray]:
        """(prompts (size, P), answers (size, A)) as token ids."""
        raise NotImplementedError

    def batch(self, rng: np.random.Generator, size: int) -> Batch:
        prompts, answers = self.examples(rng, size)
        sep = np.full((size, 1), self.sep)
        tokens = np.concatenate([prompts, sep, answers], axis=1)  # (B, P + 1 + A)
        mask = np.zeros(tokens.shape[1] - 1, dtype=bool)
        mask[prompts.shape[1] :] = True  # targets at these positions are the answer tokens
        return Batch(tokens[:, :-1], tokens[:, 1:], np.broadcast_to(mask, (size, mask.size)).copy())

    @property
    def seq_len(self) -> int:
        prompts, answers = self.examples(np.random.default_rng(0), 1)
        return prompts.shape[1] + answers.shape[1]

    def build_model(self) -> Module:
        d = self.defaults
        return CausalLM(self.vocab_size, self.seq_len, d.d_model, d.nhead, d.num_layers, d.dim_feedforward, d.dropout)

    def token_name(self, token: int) -> str:
        return self.token_names[token]

    def format(self, tokens: np.ndarray) -> str:
        return " ".join(self.token_names[t] for t in tokens)

    def sample_prompt(self) -> str:
        prompts, _ = self.examples(np.random.default_rng(EVAL_SEED), 1)
        return self.format(prompts[0])

    def parse_input(self, text: str) -> np.ndarray:
        names = {n: i for i, n in enumerate(self.token_names)}
        words = text.replace(",", " ").split()
        unknown = [w for w in words if w not in names]
        if unknown:
            raise ValueError(f"{self.name}: unknown tokens {unknown}; the tokens are {' '.join(self.token_names)}")
        prompt = np.array([names[w] for w in words], dtype=np.int64)
        expected = self.examples(np.random.default_rng(0), 1)[0].shape[1]
        if prompt.size != expected:
            raise ValueError(f"{self.name}: the prompt needs {expected} tokens, got {prompt.size}: {text!r}")
        return prompt

    @no_grad()
    def answer(self, model: Module, text: str) -> tuple[str, Batch]:
        model.eval()
        tokens = list(self.parse_input(text)) + [self.sep]
        answer_len = self.examples(np.random.default_rng(0), 1)[1].shape[1]
        for _ in range(answer_len):  # greedy decoding, one token at a time
            logits = model(np.array([tokens]))
            tokens.append(int(logits._data[0, -1].argmax()))
        full = np.array([tokens])
        answer_mask = np.arange(full.shape[1] - 1)[None, :] >= full.shape[1] - 1 - answer_len  # the answer's targets
        batch = Batch(full[:, :-1], full[:, 1:], answer_mask)
        return self.format(np.array(tokens[-answer_len:])), batch
