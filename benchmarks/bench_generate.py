"""Generation speed: ms per generated token with the key/value cache, without it, and PyTorch's sampling
loop without a cache (nanoGPT's `generate`), the same model and weights, the same thread count; and with
the cache, the same model with grouped-query attention (a quarter of the kv heads) and with a sliding
window of 64 keys (whose cache keeps only a window's worth).

    python benchmarks/bench_generate.py --threads 1 2
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

from machine import print_machine  # benchmarks/machine.py: the machine, beside every table

sys.path.insert(0, os.path.dirname(__file__))


def build(max_len, d_model, heads, layers, **variant):
    import numpy as np

    import tinygrad_attn as ta

    ta.manual_seed(0)
    model = ta.nn.CausalLM(vocab_size=65, max_len=max_len, d_model=d_model, nhead=heads, num_layers=layers,
                           dim_feedforward=4 * d_model, **variant)
    prompt = np.random.default_rng(0).integers(0, 65, (1, 8))
    return model, prompt


def time_ours(model, prompt, n, use_cache):
    start = time.perf_counter()
    model.generate(prompt, n, top_k=1, use_cache=use_cache)
    return (time.perf_counter() - start) / n * 1e3


def time_torch(model, prompt, n, max_len):
    import torch
    from train_vs_torch import torch_model

    twin = torch_model(None, model).eval()
    tokens = torch.tensor(prompt)
    start = time.perf_counter()
    with torch.no_grad():
        for _ in range(n):
            logits = twin(tokens[:, -max_len:])[:, -1]
            tokens = torch.cat([tokens, logits.argmax(-1, keepdim=True)], dim=1)
    return (time.perf_counter() - start) / n * 1e3


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--tokens", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--size", default="256,128,4,4", help="max_len,d_model,heads,layers")
    args = parser.parse_args()
    print_machine()
    max_len, d_model, heads, layers = (int(x) for x in args.size.split(","))
    import tinygrad_attn as ta

    try:
        import torch
    except ImportError:
        torch = None
    for threads in args.threads:
        ta.runtime.configure(threads)
        if torch is not None:
            torch.set_num_threads(threads)
        model, prompt = build(max_len, d_model, heads, layers)
        grouped, _ = build(max_len, d_model, heads, layers, n_kv_heads=max(1, heads // 4))
        windowed, _ = build(max_len, d_model, heads, layers, window=64)
        for m in (model, grouped, windowed):
            time_ours(m, prompt, 5, True)  # warm-up: compile and caches
        rows = {"tinygrad_attn, KV cache": [], "tinygrad_attn, no cache": [], "torch, no cache": [],
                f"GQA ({max(1, heads // 4)} kv heads), cache": [], "window 64, cache": []}
        for _ in range(args.rounds):
            rows["tinygrad_attn, KV cache"].append(time_ours(model, prompt, args.tokens, True))
            rows[f"GQA ({max(1, heads // 4)} kv heads), cache"].append(time_ours(grouped, prompt, args.tokens, True))
            rows["window 64, cache"].append(time_ours(windowed, prompt, args.tokens, True))
            rows["tinygrad_attn, no cache"].append(time_ours(model, prompt, args.tokens, False))
            if torch is not None:
                rows["torch, no cache"].append(time_torch(model, prompt, args.tokens, max_len))
        print(f"\nthreads={threads}  CausalLM(max_len={max_len}, d_model={d_model}, heads={heads}, "
              f"layers={layers})  greedy, {args.tokens} tokens after an 8-token prompt, median of {args.rounds}")
        for name, times in rows.items():
            if times:
                print(f"  {name:<26}{statistics.median(times):8.2f} ms/token")


if __name__ == "__main__":
    main()
