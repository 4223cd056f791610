"""Training speed against PyTorch: the same model, weights, data, optimizer, schedule and seed.

For a decoder-only task, the model is built here, its initial weights copied
into the equivalent PyTorch modules (pre-norm encoder layers with a causal
mask), and both are trained on the same batches with AdamW, the same
warm-up + cosine schedule and gradient clipping. Reports the median time per
step and the wall time to the task's target exact-match accuracy, both
frameworks in this process with the same thread count.

    python benchmarks/train_vs_torch.py --task reverse --threads 1
    python benchmarks/train_vs_torch.py --task text --steps 300 --threads 1   # the default corpus
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from machine import print_machine  # benchmarks/machine.py: the machine, beside every table


def torch_model(task, ours):
    """The PyTorch twin of `ours` (a tinygrad_attn CausalLM), with the same weights."""
    import torch

    from tinygrad_attn.interop import mha_to_torch

    c = ours.config

    class TorchCausalLM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(c["vocab_size"], c["d_model"])
            self.position = torch.nn.Embedding(c["max_len"], c["d_model"])
            self.layers = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(c["d_model"], c["nhead"], c["dim_feedforward"], dropout=0.0,
                                                 batch_first=True, norm_first=True)
                for _ in range(c["num_layers"])
            )
            self.norm = torch.nn.LayerNorm(c["d_model"])
            self.head = torch.nn.Linear(c["d_model"], c["vocab_size"])

        def forward(self, tokens):
            t = tokens.shape[1]
            x = self.embed(tokens) + self.position.weight[:t]
            mask = torch.nn.Transformer.generate_square_subsequent_mask(t)
            for layer in self.layers:
                x = layer(x, src_mask=mask, is_causal=True)
            return self.head(self.norm(x))

    model = TorchCausalLM()
    sd = ours.state_dict()
    mapped = {"embed.weight": sd["embed.weight"], "position.weight": sd["position.embedding.weight"],
              "norm.weight": sd["norm.weight"], "norm.bias": sd["norm.bias"],
              "head.weight": sd["head.weight"], "head.bias": sd["head.bias"]}
    for i in range(c["num_layers"]):
        prefix = f"layers.{i}."
        attention = {k[len(prefix + "self_attn."):]: v for k, v in sd.items() if k.startswith(prefix + "self_attn.")}
        mapped.update({f"{prefix}self_attn.{k}": v for k, v in mha_to_torch(attention).items()})
        for ours_name, torch_name in (("ff.linear1", "linear1"), ("ff.linear2", "linear2"), ("norm1", "norm1"),
                                      ("norm2", "norm2")):
            for p in ("weight", "bias"):
                mapped[f"{prefix}{torch_name}.{p}"] = sd[f"{prefix}{ours_name}.{p}"]
    model.load_state_dict({k: torch.tensor(v.detach().numpy() if hasattr(v, "detach") else v)
                           for k, v in mapped.items()})
    return model


def run(framework, task, steps, seed, threads):
    import numpy as np

    import tinygrad_attn as ta
    from tinygrad_attn import optim

    ta.manual_seed(seed)
    ours = task.build_model()
    d = task.defaults
    schedule = optim.warmup_cosine(d.lr, d.warmup, d.steps, min_lr=d.lr * 0.05)
    eval_batch = task.eval_batch()
    step_times, start, reached = [], time.perf_counter(), None

    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
        model = torch_model(task, ours)
        opt = torch.optim.AdamW(model.parameters(), lr=d.lr, weight_decay=0.0)
        eval_tokens = torch.tensor(eval_batch.inputs)

        def step_fn(batch, lr):
            for group in opt.param_groups:
                group["lr"] = lr
            opt.zero_grad()
            logits = model(torch.tensor(batch.inputs))
            targets = torch.tensor(np.where(batch.loss_mask, batch.targets, -100))
            loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        def metric():
            with torch.no_grad():
                logits = model(eval_tokens)
                if task.metric == "val_loss":  # the text task: validation cross-entropy
                    return float(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                                   torch.tensor(eval_batch.targets).reshape(-1)))
                return task.exact_match(logits.numpy(), eval_batch)
    else:
        ta.runtime.configure(threads)
        model = ours
        opt = optim.AdamW(model.parameters(), lr=d.lr, weight_decay=0.0)

        def step_fn(batch, lr):
            opt.lr = lr
            opt.zero_grad()
            loss, _ = task.loss(model, batch)
            loss.backward()
            optim.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()

        def metric():
            return task.evaluate(model)

    for step in range(steps):
        batch = task.batch(np.random.default_rng([seed, step]), d.batch_size)
        t0 = time.perf_counter()
        step_fn(batch, schedule(step))
        step_times.append(time.perf_counter() - t0)
        if (step + 1) % d.eval_every == 0 and reached is None and task.reached(metric(), d.target):
            reached = (step + 1, time.perf_counter() - start)
            break
    return statistics.median(step_times) * 1000, reached, metric()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--task", default="reverse")
    parser.add_argument("--steps", type=int, help="at most this many steps (default: the task's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3, help="alternating runs of each framework")
    args = parser.parse_args()
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, str(args.threads))
    print_machine()

    from tinygrad_attn.tasks import get_task

    task = get_task(args.task)
    steps = args.steps or task.defaults.steps
    results = {"tinygrad_attn": [], "torch": []}
    for _ in range(args.rounds):
        for framework in results:
            results[framework].append(run(framework, task, steps, args.seed, args.threads))
    print(f"task {task.name}, threads {args.threads}, batch {task.defaults.batch_size}, "
          f"target {task.defaults.target}, median over {args.rounds} alternating rounds")
    print(f"  {'framework':<15}{'ms/step':>10}{'steps to target':>18}{'s to target':>14}{'final ' + task.metric:>18}")
    summary = {}
    for framework, runs in results.items():
        ms = statistics.median(r[0] for r in runs)
        reached = [r[1] for r in runs if r[1] is not None]
        steps_to = statistics.median(r[0] for r in reached) if reached else None
        secs = statistics.median(r[1] for r in reached) if reached else None
        summary[framework] = (ms, secs)
        final = statistics.median(r[2] for r in runs)
        print(f"  {framework:<15}{ms:>10.2f}{steps_to if steps_to else '-':>18}"
              f"{f'{secs:.1f}' if secs else 'not reached':>14}{final:>18.4f}")
    (ours_ms, ours_s), (torch_ms, torch_s) = summary["tinygrad_attn"], summary["torch"]
    print(f"  ratio tinygrad_attn / torch: {ours_ms / torch_ms:.2f} per step"
          + (f", {ours_s / torch_s:.2f} to target" if ours_s and torch_s else ""))


if __name__ == "__main__":
    main()
