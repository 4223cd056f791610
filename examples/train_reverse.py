"""The training API in a few lines: learn to reverse 8 digits with a small decoder-only transformer."""

import numpy as np

import tinygrad_attn as ta
from tinygrad_attn.tasks import get_task

ta.manual_seed(0)
task = get_task("reverse")  # prompt "3 1 4 1 5 9 2 6 |", answer "6 2 9 5 1 4 1 3"
model = task.build_model()  # CausalLM: 2 layers, d_model 64, 4 heads
optimizer = ta.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
schedule = ta.optim.warmup_cosine(3e-3, warmup_steps=50, total_steps=1500)

for step in range(1500):
    batch = task.batch(np.random.default_rng(step), 64)  # inputs, targets, loss_mask
    optimizer.lr = schedule(step)
    optimizer.zero_grad()
    loss, _ = task.loss(model, batch)  # cross-entropy on the answer positions
    loss.backward()
    ta.optim.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    if step % 25 == 24:
        accuracy = task.evaluate(model)  # exact match on a fixed held-out set
        print(f"step {step + 1}: loss {loss.item():.3f}, held-out exact match {accuracy:.3f}")
        if accuracy >= 0.99:
            break

answer, _ = task.answer(model, "3 1 4 1 5 9 2 6")
print("reverse of 3 1 4 1 5 9 2 6 ->", answer)
