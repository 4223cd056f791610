"""What a ported PyTorch program costs here against PyTorch itself, in the same process and thread count.

1. The engine's fixed cost per op: a chain of small elementwise ops on a (4, 4) tensor, forward and
   backward, microseconds per op (the cost that dominates a tiny model).
2. ms per training step of examples/gpt_trainer.py against its PyTorch twin examples/pytorch/gpt_trainer.py,
   from the same weights.

Medians over interleaved rounds (the machine is shared and noisy).

    python benchmarks/bench_porting.py --threads 1 --rounds 7
"""

from __future__ import annotations

import argparse
import importlib.util
import pathlib
import statistics
import time

import numpy as np

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"


def _load(path: pathlib.Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def op_chain(lib, n_ops: int) -> float:
    """Seconds for n_ops elementwise ops forward and their backward, on a (4, 4) tensor."""
    x = lib.tensor(np.ones((4, 4), np.float32), requires_grad=True)
    start = time.perf_counter()
    y = x
    for i in range(n_ops // 2):
        y = y * 1.0001 + 0.001 * i
    y.sum().backward()
    return time.perf_counter() - start


def train_steps(module, weights, steps: int) -> float:
    """Seconds per training step of the example's own loop (batches of 16, AdamW, clipping, warm-up)."""
    start = time.perf_counter()
    module.main(steps=steps, weights=weights)
    return (time.perf_counter() - start) / steps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--ops", type=int, default=2000)
    parser.add_argument("--steps", type=int, default=40)
    args = parser.parse_args()

    import torch

    import tinygrad_attn as ta

    ta.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    ours = _load(EXAMPLES / "gpt_trainer.py", "ours_gpt_trainer")
    twin = _load(EXAMPLES / "pytorch" / "gpt_trainer.py", "twin_gpt_trainer")
    model, _, _ = ours.main(steps=0)
    weights = {k: np.array(v) for k, v in model.state_dict().items()}
    for lib in (ta, torch):  # warm up (numba compiles, caches fill)
        op_chain(lib, 200)
    train_steps(ours, weights, 3)
    train_steps(twin, weights, 3)

    times: dict[str, list[float]] = {k: [] for k in ("ops ours", "ops torch", "step ours", "step torch")}
    for _ in range(args.rounds):  # interleaved: each round measures all four
        times["ops ours"].append(op_chain(ta, args.ops) / args.ops * 1e6)
        times["ops torch"].append(op_chain(torch, args.ops) / args.ops * 1e6)
        times["step ours"].append(train_steps(ours, weights, args.steps) * 1e3)
        times["step torch"].append(train_steps(twin, weights, args.steps) * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"threads {args.threads}, rounds {args.rounds} (medians)")
    print("| measure | tinygrad_attn | PyTorch | ratio |")
    print("|---|---|---|---|")
    print(f"| us per small op, forward + backward | {med['ops ours']:.1f} | {med['ops torch']:.1f} | "
          f"{med['ops ours'] / med['ops torch']:.2f} |")
    print(f"| ms per step, examples/gpt_trainer.py | {med['step ours']:.2f} | {med['step torch']:.2f} | "
          f"{med['step ours'] / med['step torch']:.2f} |")


if __name__ == "__main__":
    main()
