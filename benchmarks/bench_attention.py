"""Multi-head self-attention block, forward + backward, against plain numpy and PyTorch CPU.

The block: q, k, v and output projections with bias, causal mask, gradients
for the input and every weight, float32. Each (framework, shape) runs in its
own subprocess pinned to `threads` cores, with the same thread count, so the
peak RSS reported is that case's alone. `tinygrad_attn_default` sets nothing
(no `set_num_threads`, no thread variables): what a program that only imports
the library gets on those cores. Times are medians over --reps repetitions after warm-up.

    python benchmarks/bench_attention.py --threads 1 2 4 8 16
    python benchmarks/bench_attention.py --shapes 32,32,64,4 --frameworks tinygrad_attn,torch_sdpa
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

SHAPES = [(32, 32, 64, 4), (8, 256, 256, 8), (4, 1024, 512, 8), (1, 4096, 512, 8)]
FRAMEWORKS = ["tinygrad_attn", "tinygrad_attn_default", "numpy", "torch_eager", "torch_sdpa"]


def make_inputs(b, t, e, seed=0):
    import numpy as np

    rng = np.random.default_rng(seed)
    bound = 1 / np.sqrt(e)
    x = rng.normal(size=(b, t, e)).astype(np.float32)
    weights = {n: rng.uniform(-bound, bound, (e, e)).astype(np.float32) for n in ("wq", "wk", "wv", "wo")}
    biases = {n: rng.uniform(-bound, bound, e).astype(np.float32) for n in ("bq", "bk", "bv", "bo")}
    grad_out = rng.normal(size=(b, t, e)).astype(np.float32)
    return x, weights, biases, grad_out


def step_tinygrad_attn(b, t, e, h, threads):
    import numpy as np

    import tinygrad_attn as ta

    if threads is not None:  # what the command line does: `threads` threads, BLAS on one, the allocator setting
        ta.runtime.configure(threads)  # (tinygrad_attn_default: nothing at all, as a program that only imports)

    x_np, weights, biases, grad_out = make_inputs(b, t, e)
    mha = ta.nn.MultiHeadAttention(e, h)
    mha.load_state_dict({
        "q_proj.weight": weights["wq"], "k_proj.weight": weights["wk"], "v_proj.weight": weights["wv"],
        "out_proj.weight": weights["wo"], "q_proj.bias": biases["bq"], "k_proj.bias": biases["bk"],
        "v_proj.bias": biases["bv"], "out_proj.bias": biases["bo"],
    })
    x = ta.Tensor(x_np, requires_grad=True)
    g = np.asarray(grad_out)

    def step():
        x.grad = None
        mha.zero_grad()
        out, _ = mha(x, is_causal=True, need_weights=False)
        out.backward(g)

    return step


def step_numpy(b, t, e, h):
    """Hand-written forward and backward in plain numpy, materialising the (T x T) matrices."""
    import numpy as np

    x, w, bias, grad_out = make_inputs(b, t, e)
    d = e // h
    keep = np.tril(np.ones((t, t), dtype=bool))

    def split(a):
        return a.reshape(b, t, h, d).transpose(0, 2, 1, 3)  # (B, H, T, d)

    def merge(a):
        return a.transpose(0, 2, 1, 3).reshape(b, t, e)

    def step():
        q, k, v = (split(x @ w[n].T + bias[c]) for n, c in (("wq", "bq"), ("wk", "bk"), ("wv", "bv")))
        s = (q @ k.transpose(0, 1, 3, 2)) / np.float32(np.sqrt(d))
        s = np.where(keep, s, -np.inf)
        p = np.exp(s - s.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        o = merge(p @ v)
        # out = o @ wo^T + bo; backward
        grads = {"wo": grad_out.reshape(-1, e).T @ o.reshape(-1, e), "bo": grad_out.sum((0, 1))}
        do = split(grad_out @ w["wo"])
        dp = do @ v.transpose(0, 1, 3, 2)
        dv = p.transpose(0, 1, 3, 2) @ do
        ds = p * (dp - (dp * p).sum(-1, keepdims=True)) / np.float32(np.sqrt(d))
        dq, dk = ds @ k, ds.transpose(0, 1, 3, 2) @ q
        dx = np.zeros_like(x)
        for n, c, dz in (("wq", "bq", dq), ("wk", "bk", dk), ("wv", "bv", dv)):
            dz = merge(dz)
            grads[n] = dz.reshape(-1, e).T @ x.reshape(-1, e)
            grads[c] = dz.sum((0, 1))
            dx += dz @ w[n]
        return dx, grads

    return step


def step_torch(b, t, e, h, use_sdpa):
    import math

    import torch

    x_np, w, bias, grad_out = make_inputs(b, t, e)
    x = torch.tensor(x_np, requires_grad=True)
    params = {n: torch.tensor(v, requires_grad=True) for n, v in (w | bias).items()}
    g = torch.tensor(grad_out)
    d = e // h
    causal = torch.ones(t, t, dtype=torch.bool).tril()

    def split(a):
        return a.view(b, t, h, d).transpose(1, 2)

    def step():
        x.grad = None
        for p in params.values():
            p.grad = None
        q = split(x @ params["wq"].T + params["bq"])
        k = split(x @ params["wk"].T + params["bk"])
        v = split(x @ params["wv"].T + params["bv"])
        if use_sdpa:
            o = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:
            s = (q @ k.transpose(-2, -1)) / math.sqrt(d)
            o = torch.softmax(s.masked_fill(~causal, float("-inf")), dim=-1) @ v
        out = o.transpose(1, 2).reshape(b, t, e) @ params["wo"].T + params["bo"]
        out.backward(g)

    return step


def default_reps(shape):
    """Repetitions per case and round: about 1e9 multiply-adds' worth, at least 5, at most 200, so that a
    burst of the shared host's load moves the median of even the smallest case little."""
    b, t, e, _ = shape
    return max(5, min(200, int(1e9 / (b * t * t * e + b * t * e * e))))


def run_case(framework, shape, threads, reps, warmup):
    """Time one case in this process; returns a dict with the median ms and peak RSS."""
    import resource

    b, t, e, h = shape
    if framework.startswith("torch"):
        import torch

        torch.set_num_threads(threads)
        step = step_torch(b, t, e, h, framework == "torch_sdpa")
    elif framework == "numpy":
        step = step_numpy(b, t, e, h)
    else:
        step = step_tinygrad_attn(b, t, e, h, None if framework.endswith("_default") else threads)
    for _ in range(warmup):
        step()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        step()
        times.append((time.perf_counter() - start) * 1000)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"framework": framework, "shape": shape, "ms": statistics.median(times), "peak_mb": peak_mb,
            "reps": reps}


def thread_env(threads):
    env = dict(os.environ)
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
        env[var] = str(threads)
    return env


def pinned(command, threads):
    """The command pinned to the first `threads` cores with taskset, where there is taskset and that many cores."""
    import shutil

    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if shutil.which("taskset") and threads <= cores:
        return ["taskset", "-c", f"0-{threads - 1}", *command]
    return command


def available(framework):
    if not framework.startswith("torch"):
        return True
    try:
        import importlib.util

        return importlib.util.find_spec("torch") is not None
    except ImportError:
        return False


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts, e.g. 1 2 4 8 16")
    parser.add_argument("--shapes", nargs="*", help="B,T,E,H ... (default: the four standard shapes)")
    parser.add_argument("--frameworks", default=",".join(FRAMEWORKS))
    parser.add_argument("--reps", type=int, default=0, help="repetitions (default: by size)")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per shape")
    parser.add_argument("--numpy-max-mb", type=float, default=1024,
                        help="skip the naive numpy case when one (B, H, T, T) float32 matrix exceeds this")
    parser.add_argument("--json", help="also write the results to this file")
    parser.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case and print JSON
    args = parser.parse_args()

    if args.case:
        framework, shape, reps = json.loads(args.case)
        print(json.dumps(run_case(framework, tuple(shape), args.threads[0], reps, warmup=max(2, reps // 10))))
        return
    print_machine()
    results = []
    for threads in args.threads:
        results += run_thread_count(args, threads)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


def run_thread_count(args, threads):

    shapes = [tuple(int(n) for n in s.split(",")) for s in args.shapes] if args.shapes else SHAPES
    frameworks = [f for f in args.frameworks.split(",") if available(f)]
    print(f"\nthreads={threads}  float32  causal  forward+backward  "
          f"(median ms over {args.rounds} interleaved rounds, ratio = median of per-round ratios)")
    results = []
    for shape in shapes:
        b, t, e, h = shape
        reps = args.reps or default_reps(shape)
        rounds: dict[str, list] = {f: [] for f in frameworks}
        for _ in range(args.rounds):  # interleaved, so a noisy moment hits every framework alike
            for framework in frameworks:
                if framework == "numpy" and b * t * t * h * 4 > args.numpy_max_mb * 2**20:
                    continue
                case = json.dumps([framework, shape, reps])
                command = pinned([sys.executable, __file__, "--threads", str(threads), "--case", case], threads)
                env = dict(os.environ) if framework.endswith("_default") else thread_env(threads)  # default: only
                proc = subprocess.run(command, capture_output=True, text=True, env=env)  # the pinned cores
                if proc.returncode != 0:
                    print(f"  {framework} {shape} failed: {proc.stderr.strip().splitlines()[-1:]}")
                    continue
                rounds[framework].append(json.loads(proc.stdout.strip().splitlines()[-1]))
        print(f"\n(B, T, E, H) = {shape}, {reps} reps per round")
        print(f"  {'framework':<15}{'ms':>10}{'vs best torch':>15}{'peak MB':>10}")
        torch_rounds = [min(rs) for rs in zip(*(
            [r["ms"] for r in rounds[f]] for f in ("torch_eager", "torch_sdpa") if rounds.get(f)))] or None
        for framework, runs in rounds.items():
            if not runs:
                continue
            ms = statistics.median(r["ms"] for r in runs)
            ratio = "-"
            if torch_rounds and len(torch_rounds) == len(runs):
                ratio = f"{statistics.median(r['ms'] / best for r, best in zip(runs, torch_rounds)):.2f}"
            peak = max(r["peak_mb"] for r in runs)
            print(f"  {framework:<15}{ms:>10.1f}{ratio:>15}{peak:>10.0f}")
            results.append({"framework": framework, "shape": shape, "threads": threads, "ms": ms,
                            "ratio_vs_best_torch": ratio, "peak_mb": peak, "rounds": [r["ms"] for r in runs]})
    return results


if __name__ == "__main__":
    main()
