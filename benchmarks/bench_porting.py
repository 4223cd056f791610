"""What a ported PyTorch program costs here against PyTorch itself, in the same process and thread count.

1. The engine's fixed cost per op: a chain of small elementwise ops on a (4, 4) tensor, forward and
   backward, microseconds per op (the cost that dominates a tiny model).
2. ms per training step of the ported programs in examples/ (gpt_trainer.py, transformer_copy.py,
   llama_style.py, char_transformer.py: a GPT with masked softmax, an encoder-decoder Transformer, a tiny
   Llama, a character model on nn.TransformerEncoder) against their PyTorch twins in examples/pytorch/,
   from the same weights (the model is built outside the timing).

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
from machine import print_machine  # benchmarks/machine.py: the machine, beside every table

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
PROGRAMS = ("gpt_trainer.py", "transformer_copy.py", "llama_style.py", "char_transformer.py")


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
    """Seconds per training step of the example's own `train` loop, from the given weights."""
    model, _, _ = module.main(steps=0, weights=weights)
    if hasattr(module, "SequenceDataset"):  # gpt_trainer: batches come from a Dataset
        dataset = module.SequenceDataset(module.np.arange(4000) % 11, block_size=8)
        run = lambda: module.train(model, dataset, steps)  # noqa: E731
    elif hasattr(module, "as_columns"):  # char_transformer: (T, B) columns of its text
        data, chars = module.encode(module.TEXT * 4)
        run = lambda: module.train(model, module.as_columns(data, 8), len(chars), steps)  # noqa: E731
    elif hasattr(module, "TEXT"):  # llama_style: windows of its text
        data, _ = module.encode(module.TEXT)
        run = lambda: module.train(model, data, steps)  # noqa: E731
    else:  # transformer_copy: batches come from its generator
        run = lambda: module.train(model, steps)  # noqa: E731
    start = time.perf_counter()
    run()
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
    print_machine()
    programs = {}
    for name in PROGRAMS:
        ours = _load(EXAMPLES / name, f"ours_{name[:-3]}")
        twin = _load(EXAMPLES / "pytorch" / name, f"twin_{name[:-3]}")
        model, _, _ = ours.main(steps=0)
        programs[name] = (ours, twin, {k: np.array(v) for k, v in model.state_dict().items()})
    for lib in (ta, torch):  # warm up (numba compiles, caches fill)
        op_chain(lib, 200)
    for ours, twin, weights in programs.values():
        train_steps(ours, weights, 3)
        train_steps(twin, weights, 3)

    times: dict[str, list[float]] = {"ops ours": [], "ops torch": []}
    for name in PROGRAMS:
        times[f"{name} ours"], times[f"{name} torch"] = [], []
    for _ in range(args.rounds):  # interleaved: each round measures everything once
        times["ops ours"].append(op_chain(ta, args.ops) / args.ops * 1e6)
        times["ops torch"].append(op_chain(torch, args.ops) / args.ops * 1e6)
        for name, (ours, twin, weights) in programs.items():
            times[f"{name} ours"].append(train_steps(ours, weights, args.steps) * 1e3)
            times[f"{name} torch"].append(train_steps(twin, weights, args.steps) * 1e3)
    med = {k: statistics.median(v) for k, v in times.items()}
    print(f"threads {args.threads}, rounds {args.rounds} (medians)")
    print("| measure | tinygrad_attn | PyTorch | ratio |")
    print("|---|---|---|---|")
    print(f"| us per small op, forward + backward | {med['ops ours']:.1f} | {med['ops torch']:.1f} | "
          f"{med['ops ours'] / med['ops torch']:.2f} |")
    for name in PROGRAMS:
        a, b = med[f"{name} ours"], med[f"{name} torch"]
        print(f"| ms per step, examples/{name} | {a:.2f} | {b:.2f} | {a / b:.2f} |")


if __name__ == "__main__":
    main()
