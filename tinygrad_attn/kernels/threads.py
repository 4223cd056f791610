"""Run independent (batch x head) groups of the attention core on several threads.

The attention tiles are small matrix products (d is 16 to 64), which OpenBLAS
runs on one core, interleaved with numpy's single-threaded SIMD exp. So the
core is parallelised one level up: the groups are split among a pool of
`numba.get_num_threads()` threads (NUMBA_NUM_THREADS), each running its share
with single-threaded BLAS and `nogil` numba kernels. numpy, BLAS and those
kernels release the GIL, so the threads really run at once.

While the attention core runs, OpenBLAS is held to one thread
(`openblas_set_num_threads_local`, OpenBLAS >= 0.3.27) and given its thread
count back afterwards, so the big projections around it keep every BLAS
thread. OpenBLAS's idle workers also spin for a while after each call; on 2
cores that took a core from the pool (flash attention inside a block 95 ->
70 ms forward, 150 -> 124 ms backward once stopped), so the pool first stops
them (`blas_thread_shutdown_`, which OpenBLAS itself calls before a fork; its
next multi-threaded call starts them again). This assumes no other thread of
the process is inside a BLAS call at that moment. When that call is not available (another BLAS, an older OpenBLAS)
the groups run on the calling thread: several threads each asking a
multi-threaded BLAS for work only fight over the cores.
"""

from __future__ import annotations

import ctypes
import glob
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numba
import numpy as np

# Score elements (groups x Tq x Tk) from which the thread pool pays; starting it costs ~0.25 ms.
# Measured with 2 threads, on the calling thread vs on the pool: (G, T, d) = (128, 32, 16) forward
# 0.40 vs 0.68 ms; (64, 256, 32) forward 10.5 vs 8.5 ms, backward 16.7 vs 12.7 ms; (32, 1024, 64)
# forward + backward 201 vs 153 ms; (8, 4096, 64) 745 vs 546 ms.
MIN_PARALLEL_WORK = 1 << 20


def _openblas_library() -> ctypes.CDLL | None:
    """The OpenBLAS that numpy loaded (found once, at import), if any."""
    folders = [os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs"), os.path.dirname(np.__file__)]
    for folder in folders:
        for path in glob.glob(os.path.join(folder, "*openblas*")):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def _function(names: tuple[str, ...], argtypes: list, restype=None) -> Callable | None:
    """The first of `names` that the OpenBLAS library exports, typed, or None."""
    for name in names:
        function = getattr(_openblas, name, None) if _openblas is not None else None
        if function is not None:
            function.argtypes, function.restype = argtypes, restype
            return function
    return None


_openblas = _openblas_library()
_set_local_blas_threads = _function(("openblas_set_num_threads_local",), [ctypes.c_int], ctypes.c_int)
_stop_blas_threads = _function(("blas_thread_shutdown_",), [])
_set_blas_threads = _function(
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads"),
    [ctypes.c_int],
)


def set_num_threads(n: int) -> None:
    """Use n threads: numba's parallel loops, the attention thread pool, and OpenBLAS when it can be told."""
    if not 1 <= n <= numba.config.NUMBA_NUM_THREADS:
        raise ValueError(
            f"threads must be between 1 and {numba.config.NUMBA_NUM_THREADS} (NUMBA_NUM_THREADS), got {n}"
        )
    numba.set_num_threads(n)
    if _set_blas_threads is not None:
        _set_blas_threads(n)
_pool: ThreadPoolExecutor | None = None


def _get_pool(n_threads: int) -> ThreadPoolExecutor:
    global _pool
    if _pool is None or _pool._max_workers != n_threads:
        _pool = ThreadPoolExecutor(n_threads, thread_name_prefix="tinygrad_attn")
    return _pool


def run_over_groups(task: Callable[[slice], None], n_groups: int, work: int) -> None:
    """Call task(groups) on contiguous shares of range(n_groups), in parallel when it pays.

    The workers run with BLAS held to one thread, restored after:
    `openblas_set_num_threads_local` is per thread in OpenBLAS's OpenMP builds
    but sets the count for every thread in the pthreads build numpy ships
    (measured), and the calling thread only waits while the workers run.
    """
    n_threads = 1 if work < MIN_PARALLEL_WORK else min(numba.get_num_threads(), n_groups)  # the call costs ~0.1 ms
    if n_threads <= 1 or _set_local_blas_threads is None:
        task(slice(0, n_groups))  # on this thread, BLAS keeps its threads
        return
    previous = _set_local_blas_threads(1)
    if _stop_blas_threads is not None:
        _stop_blas_threads()  # idle OpenBLAS workers spin for a while after each call, taking a core from ours
    try:
        bounds = np.linspace(0, n_groups, n_threads + 1).astype(int)
        shares = [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]
        for future in [_get_pool(n_threads).submit(task, share) for share in shares]:
            future.result()  # re-raises a worker's exception here
    finally:
        _set_local_blas_threads(previous)
