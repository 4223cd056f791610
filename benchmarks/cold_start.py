"""Cold start: numba's first-call compile time, and import + one MHA forward/backward with a warm cache; then
the main job's first run (`tinygrad-attn train --steps 5`, the default toy task) as a whole process.

Each measurement runs in a fresh process. The compile runs use an empty
NUMBA_CACHE_DIR; the warm runs reuse it, as every run after the first does.

    python benchmarks/cold_start.py
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

from machine import print_machine  # benchmarks/machine.py: the machine, beside every table

PROBE = """
import time
start = time.perf_counter()
import numpy as np
import tinygrad_attn as ta
imported = time.perf_counter()
mha = ta.nn.MultiHeadAttention(64, 4)
x = ta.Tensor(np.random.default_rng(0).normal(size=(2, 16, 64)).astype(np.float32), requires_grad=True)
out, _ = mha(x, is_causal=True, need_weights=False)
F = ta.functional
loss = F.cross_entropy(out.reshape(-1, 64), np.zeros(32, dtype=np.int64)) + F.gelu(F.layer_norm(out, 64)).sum()
loss.backward()
done = time.perf_counter()
print(__import__("json").dumps({"import": imported - start, "total": done - start}))
"""


def run(cache_dir: str) -> dict:
    env = dict(os.environ, NUMBA_CACHE_DIR=cache_dir)
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=env)
    if proc.returncode:
        raise SystemExit(proc.stderr)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def train_first_run() -> float:
    """Seconds for a whole `python -m tinygrad_attn train --steps 5` process with an empty numba cache: start-up,
    import, the kernels the default task compiles (a Linear's bias blocks, ReLU, embedding, Adam besides the
    probe's), five steps and the run folder's files."""
    with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as out:
        env = dict(os.environ, NUMBA_CACHE_DIR=cache)
        start = time.perf_counter()
        proc = subprocess.run([sys.executable, "-m", "tinygrad_attn", "train", "--steps", "5", "--out", out + "/run",
                               "--no-progress", "--no-plot"], capture_output=True, text=True, env=env)
        if proc.returncode:
            raise SystemExit(proc.stderr)
        return time.perf_counter() - start


def main() -> None:
    print_machine()
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):  # every run then compiles the package's sources again
        print("# PYTHONDONTWRITEBYTECODE is set: each run below compiles the package's .py files to bytecode "
              "(a usual install does so once)")
    with tempfile.TemporaryDirectory() as cache:
        cold = run(cache)
        warm = [run(cache) for _ in range(5)]
    print(f"first run, empty numba cache (compiles every kernel used): {cold['total']:.2f} s")
    print(f"warm cache, median of 5: import {statistics.median(w['import'] for w in warm):.2f} s, "
          f"import + MHA forward/backward + cross-entropy + layer norm + GELU "
          f"{statistics.median(w['total'] for w in warm):.2f} s")
    print(f"the main job's first run, empty numba cache (`tinygrad-attn train --steps 5`, whole process): "
          f"{train_first_run():.2f} s")


if __name__ == "__main__":
    main()
