"""Row kernels, forward + backward, against PyTorch CPU: GELU, ReLU, layer norm, softmax, cross-entropy.

float32, each case timed in its own subprocess pinned to `threads` cores, median of --rounds
interleaved rounds (each the median of --reps steps). A step sets the gradients to None, then
runs forward and backward, so accumulating into .grad is not timed in either framework.
tinygrad_attn runs after `ta.runtime.configure(threads)`, as the command line does.

    python benchmarks/bench_rows.py --threads 1 2
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

from machine import print_machine  # benchmarks/machine.py: the machine, beside every table

SHAPES = [(12, 64, 512), (64, 17, 64)]
OPS = ["gelu", "relu", "layer_norm", "softmax", "cross_entropy"]


def make_step(framework, op, shape, threads):
    import numpy as np

    rng = np.random.default_rng(0)
    x_np = rng.normal(size=shape).astype(np.float32)
    g_np = rng.normal(size=shape).astype(np.float32)
    target = rng.integers(0, shape[-1], shape[:-1])
    w_np, b_np = rng.normal(size=shape[-1:]).astype(np.float32), rng.normal(size=shape[-1:]).astype(np.float32)
    if framework == "torch":
        import torch

        torch.set_num_threads(threads)
        x = torch.tensor(x_np, requires_grad=True)
        g, w, b = torch.tensor(g_np), torch.tensor(w_np, requires_grad=True), torch.tensor(b_np, requires_grad=True)
        t = torch.tensor(target)
        F = torch.nn.functional
        forward = {
            "gelu": lambda: F.gelu(x), "relu": lambda: F.relu(x),
            "layer_norm": lambda: F.layer_norm(x, shape[-1:], w, b),
            "softmax": lambda: F.softmax(x, -1),
            "cross_entropy": lambda: F.cross_entropy(x.reshape(-1, shape[-1]), t.reshape(-1)),
        }[op]
    else:
        import tinygrad_attn as ta
        from tinygrad_attn import functional as F

        ta.runtime.configure(threads)
        x = ta.Tensor(x_np, requires_grad=True)
        g, w, b = g_np, ta.Tensor(w_np, requires_grad=True), ta.Tensor(b_np, requires_grad=True)
        forward = {
            "gelu": lambda: F.gelu(x), "relu": lambda: F.relu(x),
            "layer_norm": lambda: F.layer_norm(x, shape[-1:], w, b),
            "softmax": lambda: F.softmax(x, -1),
            "cross_entropy": lambda: F.cross_entropy(x.reshape(-1, shape[-1]), target.reshape(-1)),
        }[op]

    def step():  # gradients set to None first, as a training step does: no accumulation timed
        x.grad = w.grad = b.grad = None
        out = forward()
        out.backward() if op == "cross_entropy" else out.backward(g)

    return step


def run_case(framework, op, shape, threads, reps):
    step = make_step(framework, op, shape, threads)
    for _ in range(max(3, reps // 10)):
        step()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--reps", type=int, default=200)
    parser.add_argument("--case", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.case:
        framework, op, shape, threads = json.loads(args.case)
        print(run_case(framework, op, tuple(shape), threads, args.reps))
        return
    print_machine()
    for threads in args.threads:
        print(f"\nthreads={threads}  float32  forward+backward  median ms over {args.rounds} interleaved rounds")
        print(f"  {'op':<15}{'shape':<16}{'ours':>8}{'torch':>8}{'ratio':>8}")
        for shape in SHAPES:
            for op in OPS:
                times = {"tinygrad_attn": [], "torch": []}
                for _ in range(args.rounds):
                    for framework in times:
                        env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
                        command = [sys.executable, __file__, "--reps", str(args.reps), "--case",
                                   json.dumps([framework, op, shape, threads])]
                        if threads <= len(os.sched_getaffinity(0)):
                            command = ["taskset", "-c", f"0-{threads - 1}", *command]
                        out = subprocess.run(command, capture_output=True, text=True, env=env, check=True)
                        times[framework].append(float(out.stdout.strip().splitlines()[-1]))
                ours, torch_ms = (statistics.median(times[f]) for f in ("tinygrad_attn", "torch"))
                ratio = statistics.median(a / b for a, b in zip(times["tinygrad_attn"], times["torch"]))
                print(f"  {op:<15}{str(shape):<16}{ours:>8.3f}{torch_ms:>8.3f}{ratio:>8.2f}")


if __name__ == "__main__":
    main()
