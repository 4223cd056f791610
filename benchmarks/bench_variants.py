"""Attention variants, forward + backward, float32: ours against the best PyTorch CPU path for each.

    grouped-query causal (H=8, kv heads 2)     ours: SDPA enable_gqa          torch: SDPA enable_gqa
    sliding window 256 (T = 2048, 4096)        ours: flex_attention + block   torch: SDPA with the explicit mask
    ALiBi (causal)                             ours: flex score_mod           torch: SDPA with the explicit bias
    tanh soft-capping (causal)                 ours: flex score_mod           torch: eager ops (SDPA cannot)
    document masking (4 documents, causal)     ours: flex + block mask        torch: SDPA with the explicit mask

PyTorch has no faster CPU path with a backward for these (its flex_attention has no CPU backward). Also:
the sliding window's time and memory against T (and against full causal attention at the same T), the
first compile of a new score_mod, and with --compiled-flex the forward against PyTorch's compiled
flex_attention (each variant compiles for tens of seconds there). Both libraries run in this process with
the same thread count (--threads, set in each); rounds alternate between them and the medians are shown.

    python benchmarks/bench_variants.py --threads 1
    python benchmarks/bench_variants.py --threads 2 --compiled-flex
"""

from __future__ import annotations

import argparse
import statistics
import time
import tracemalloc

import numpy as np
from machine import print_machine  # benchmarks/machine.py: the machine, beside every table

H, KV_HEADS, D = 8, 2, 64


def _inputs(t, kv_heads=H, seed=0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(1, H, t, D)).astype(np.float32)
    k, v = (rng.normal(size=(1, kv_heads, t, D)).astype(np.float32) for _ in range(2))
    return q, k, v, rng.normal(size=(1, H, t, D)).astype(np.float32)


def _masks(t):
    i, j = np.arange(t)[:, None], np.arange(t)[None, :]
    doc = np.arange(t) // (t // 4)
    return {"causal": j <= i, "window": (j <= i) & (i - j < 256), "document": (j <= i) & (doc[:, None] == doc[None])}


def ours(case, t):
    import tinygrad_attn as ta
    from tinygrad_attn.nn.attention import flex_attention as flex

    q_np, k_np, v_np, g = _inputs(t, KV_HEADS if case == "gqa" else H)
    doc = ta.tensor(np.arange(t) // (t // 4))
    slopes = ta.tensor((2.0 ** -np.arange(1, H + 1)).astype(np.float32))
    masks = {"causal": lambda b, h, qi, ki: qi >= ki,
             "window": lambda b, h, qi, ki: (qi >= ki) & (qi - ki < 256),
             "document": lambda b, h, qi, ki: (qi >= ki) & (doc[qi] == doc[ki])}
    mods = {"alibi": lambda s, b, h, qi, ki: s + slopes[h] * (ki - qi),
            "softcap": lambda s, b, h, qi, ki: 20.0 * ta.tanh(s / 20.0)}
    mask_name = {"window": "window", "document": "document", "alibi": "causal", "softcap": "causal"}.get(case)
    block = flex.create_block_mask(masks[mask_name], None, None, t, t) if mask_name else None
    grad = ta.tensor(g)
    leaves = [ta.tensor(a, requires_grad=True) for a in (q_np, k_np, v_np)]  # made once, as PyTorch's below

    def step(forward_only=False):
        for t in leaves:
            t.grad = None
        q, k, v = leaves if not forward_only else (t.detach() for t in leaves)
        if case in ("gqa", "causal"):
            out = ta.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=case == "gqa")
        else:
            out = flex.flex_attention(q, k, v, score_mod=mods.get(case), block_mask=block)
        if not forward_only:
            out.backward(grad)
    return step


def theirs(case, t):
    import torch
    import torch.nn.functional as TF

    q_np, k_np, v_np, g = _inputs(t, KV_HEADS if case == "gqa" else H)
    masks = _masks(t)
    grad = torch.tensor(g)
    slopes = torch.tensor((2.0 ** -np.arange(1, H + 1)).astype(np.float32))
    distance = torch.arange(t)[None, :] - torch.arange(t)[:, None]  # key - query
    alibi = (slopes[:, None, None] * distance).masked_fill(~torch.tensor(masks["causal"]), float("-inf"))
    explicit = {"window": torch.tensor(masks["window"]), "document": torch.tensor(masks["document"]),
                "alibi": alibi[None]}

    leaves = [torch.tensor(a, requires_grad=True) for a in (q_np, k_np, v_np)]  # made once, as ours above

    def step(forward_only=False):
        for t in leaves:
            t.grad = None
        q, k, v = leaves if not forward_only else (t.detach() for t in leaves)
        if case in ("gqa", "causal"):
            out = TF.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=case == "gqa")
        elif case == "softcap":  # no SDPA form: the eager ops
            s = 20.0 * torch.tanh((q @ k.transpose(-2, -1)) / D ** 0.5 / 20.0)
            s = s.masked_fill(~torch.tensor(masks["causal"]), float("-inf"))
            out = torch.softmax(s, -1) @ v
        else:
            out = TF.scaled_dot_product_attention(q, k, v, attn_mask=explicit[case])
        if not forward_only:
            out.backward(grad)
    return step


def compiled_flex(case, t):
    import torch
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    q_np, k_np, v_np, _ = _inputs(t)
    slopes = torch.tensor((2.0 ** -np.arange(1, H + 1)).astype(np.float32))
    doc = torch.tensor(np.arange(t) // (t // 4))
    masks = {"causal": lambda b, h, qi, ki: qi >= ki, "window": lambda b, h, qi, ki: (qi >= ki) & (qi - ki < 256),
             "document": lambda b, h, qi, ki: (qi >= ki) & (doc[qi] == doc[ki])}
    mods = {"alibi": lambda s, b, h, qi, ki: s + slopes[h] * (ki - qi),
            "softcap": lambda s, b, h, qi, ki: 20.0 * torch.tanh(s / 20.0)}
    mask_name = {"window": "window", "document": "document", "alibi": "causal", "softcap": "causal"}[case]
    block = create_block_mask(masks[mask_name], None, None, t, t, device="cpu")
    fn = torch.compile(flex_attention)
    q, k, v = (torch.tensor(a) for a in (q_np, k_np, v_np))

    def step(forward_only=True):
        with torch.no_grad():
            fn(q, k, v, score_mod=mods.get(case), block_mask=block)
    return step


def median_times(steps: dict, rounds: int, forward_only=False) -> dict:
    for step in steps.values():
        step(forward_only)  # warm-up: compiles, caches
    times = {name: [] for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():  # interleaved: a noisy moment hits both
            start = time.perf_counter()
            step(forward_only)
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(ts) * 1e3 for name, ts in times.items()}


def peak_mb(step) -> float:
    step()
    tracemalloc.start()
    step()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak / 2**20


def first_compile_seconds() -> float:
    from tinygrad_attn.nn.attention.modifier_compiler import compile_modifiers

    offset = float(time.time() % 1.0)  # a source no earlier call compiled
    return compile_modifiers(lambda s, b, h, qi, ki: s + offset * (ki - qi), None, np.dtype(np.float32)).compile_seconds


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--compiled-flex", action="store_true", help="also the forward against torch.compile'd flex")
    args = parser.parse_args()
    import torch

    import tinygrad_attn as ta

    ta.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    print_machine()
    print(f"threads {args.threads} (ta.set_num_threads and torch.set_num_threads); H={H}, d={D}, float32, "
          f"fwd+bwd, medians of {args.rounds} interleaved rounds\n")
    cases = [("gqa", 1024), ("window", 2048), ("window", 4096), ("alibi", 1024), ("softcap", 1024),
             ("document", 2048)]
    print(f"{'variant':<10} {'T':>5} {'ours ms':>9} {'torch ms':>9} {'ours/torch':>10}")
    for case, t in cases:
        got = median_times({"ours": ours(case, t), "torch": theirs(case, t)}, args.rounds)
        print(f"{case:<10} {t:>5} {got['ours']:>9.1f} {got['torch']:>9.1f} {got['ours'] / got['torch']:>10.2f}")

    print("\nsliding window 256 against T, and against full causal attention at T = 4096 (ours)")
    window = {t: median_times({"w": ours("window", t)}, args.rounds)["w"] for t in (1024, 2048, 4096)}
    full = median_times({"c": ours("causal", 4096)}, args.rounds)["c"]
    memory = {t: peak_mb(ours("window", t)) for t in (1024, 2048, 4096)}
    for t in window:
        print(f"  T {t:>5}: {window[t]:8.1f} ms, peak traced memory {memory[t]:7.1f} MB")
    print(f"  full causal T 4096: {full:8.1f} ms; window is {full / window[4096]:.1f}x faster")
    print(f"\nfirst compile of a new score_mod: {first_compile_seconds():.2f} s (the same one again: 0)")

    if args.compiled_flex:
        print("\nforward only, against torch.compile(flex_attention) (its compile not timed)")
        for case, t in (("alibi", 1024), ("window", 2048), ("document", 2048)):
            got = median_times({"ours": ours(case, t), "flex": compiled_flex(case, t)}, args.rounds, True)
            print(f"{case:<10} {t:>5} {got['ours']:>9.1f} {got['flex']:>9.1f} {got['ours'] / got['flex']:>10.2f}")


if __name__ == "__main__":
    main()
