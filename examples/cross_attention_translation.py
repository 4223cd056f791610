"""Cross-attention on "J'aime l'IA" -> "I love AI": train the tiny translation task, then look inside.

The decoder's queries (English so far) attend over the encoder's keys and values (the French words).
    python examples/cross_attention_translation.py [steps]
"""

import sys

import numpy as np

import tinygrad_attn as ta
from tinygrad_attn.runs import TrainConfig, load_run
from tinygrad_attn.tasks import get_task
from tinygrad_attn.train import train

steps = int(sys.argv[1]) if len(sys.argv) > 1 else 400
metrics = train(TrainConfig(task="translate", steps=steps, out="runs/translate-example", progress=False))
print(f"trained {metrics['steps']} steps in {metrics['seconds']:.1f} s, exact match {metrics['accuracy']:.2f}")

task, model, _ = load_run("runs/translate-example")
for sentence in ["J'aime l'IA", "le chat dort", "nous aimons les livres"]:
    english, batch = task.answer(model, sentence)
    print(f"{sentence!r:26} -> {english!r}")

english, batch = task.answer(model, "J'aime l'IA")
src, lengths, tgt_in = batch.inputs
_, attention = model(src, tgt_in, lengths, return_attention=True)
cross = attention["cross"][-1].detach().numpy()[0].mean(0)  # last decoder layer, averaged over heads: (Tt, Ts)
queries = [task.tgt_words[t] for t in batch.targets[0]]  # row i reads token i and writes token i + 1
keys = [task.src_words[i] for i in src[0]]
print("cross-attention (rows: the English word being written, columns: French words):")
print(" " * 8 + "".join(f"{k:>8}" for k in keys))
for name, row in zip(queries, cross):
    print(f"{name:>8}" + "".join(f"{p:8.2f}" for p in row))
assert np.allclose(cross.sum(-1), 1, atol=1e-5)
ta.save({"cross_attention": cross}, "runs/translate-example/cross_attention.npz")
_ = get_task  # the task registry, for readers who want to look further
