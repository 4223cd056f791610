"""Where tinygrad_attn's parallel work runs: numba's `prange`, on n threads (`set_num_threads`).

One mechanism for every parallel op. A compiled kernel takes the items of its
work (rows of a row kernel, blocks of a large product, attention's
(group, query block) and (group, key range) items) as a range or a list, and
runs them one after another on one thread; its `prange` driver cuts them into
parts, one part per loop index, on numba's threads. No Python runs inside: the
drivers are compiled, and the products inside call BLAS from compiled code
(blas.py). Small work runs the serial kernel on the calling thread, where a
launch would cost more than it saves.

Fast by default: n is the number of CPUs this process may run on until
`set_num_threads` says otherwise. Nothing process-wide changes unless
`set_num_threads` is called. Oversubscription is avoided without it: every
product made here (attention's tiles, a large product's blocks) stays under the
size from which OpenBLAS starts threads of its own (blas.ONE_THREAD_PRODUCT), so
BLAS's threads never compete with numba's. `set_num_threads(n)` also sets BLAS
to one thread, as `torch.set_num_threads` sets its BLAS's.

Thread safety: numba's thread count is a per-calling-thread setting, and with
the OpenMP or TBB layers each calling Python thread gets its own team. Where
numba has only its "workqueue" layer (which several callers must not share),
every kernel runs on its calling thread.
"""

from __future__ import annotations

import ctypes
import functools
import math
import os
import threading
import warnings
from collections.abc import Callable

import numba
import numpy as np
from numba import njit, prange

from . import buffers
from .blas import (
    ONE_THREAD_PRODUCT,
    blas_operand,
    blas_threads,
    kernel_gemm,
    matmul_blocks,
    matmul_blocks_parallel,
    matmul_pair_parallel,
    product_blocks,
    product_parts,
    set_blas_threads,
    small_kernel_blocks,
    small_kernels,
)
from .vector import part_rows

MIN_ROWS_WORK = 1 << 15  # below this many element visits (or multiply-adds) a kernel runs on the calling thread
MIN_ATTENTION_WORK = 1 << 18  # attention's multiply-adds from which its items pay for a launch
MIN_PRODUCT_WORK = 1 << 22  # a matrix product's blocks go to several threads from this many multiply-adds
ROW_PARTS_PER_THREAD = 4  # a row kernel's rows are cut into this many parts per thread, for balance
DEPTH_SPLIT_SIDE = 128  # a product whose output sides are both under this many per thread splits its inner dimension
DEPTH_SPLIT_OUTPUT = 1 << 16  # ... when its output has at most this many entries (each thread adds a partial one)
FEW_BLOCKS = 4  # a product of up to this many one-thread blocks' work is cut into rows by numpy's `@`


def _available_cpus() -> int:
    """The CPUs this process may run on (its affinity), read at each call."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_num_threads: int | None = None  # None: the CPUs this process may run on, read when asked


def get_num_threads() -> int:
    """How many threads tinygrad_attn's parallel work runs on: set_num_threads's n, else the CPUs this
    process may run on."""
    return _available_cpus() if _num_threads is None else _num_threads


def set_num_threads(n: int) -> None:
    """Run tinygrad_attn's parallel work on n threads, like `torch.set_num_threads`.

    A process setting, made only when called: tinygrad_attn's parallel work gets n threads and numpy's
    OpenBLAS one thread, so that the work cut up here is the only parallel work and the cores are never
    oversubscribed. An n above the CPUs this process may run on is cut to them: threads beyond the cores
    only take turns on them.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads: n must be an int, got {n!r}")
    if n < 1:
        raise ValueError(f"set_num_threads: n must be at least 1, got {n}")
    global _num_threads
    _num_threads = min(int(n), _available_cpus())
    set_blas_threads(1)


def threads_for(work: float, min_work: float | None = None) -> int:
    """How many of numba's threads a kernel carrying `work` runs on: 1 unless a launch pays (from min_work,
    MIN_ROWS_WORK by default) and is safe."""
    if work < (MIN_ROWS_WORK if min_work is None else min_work):
        return 1
    n = _available_cpus() if _num_threads is None else _num_threads
    return n if n > 1 and (_PRANGE_OK or _numba_ready()) else 1


def run_parts(parallel_kernel: Callable, serial_kernel: Callable, count: int, work: float, *args):
    """serial_kernel(*args, 0, count) on the calling thread, or parallel_kernel(*args, parts), its `prange`
    driver over `parts` parts of the count items, on numba's threads. Every small op passes through here:
    threads_for and the rest are written out, as one call each costs a small op's time."""
    if work < MIN_ROWS_WORK or count <= 1:
        return serial_kernel(*args, 0, count)
    n = _available_cpus() if _num_threads is None else _num_threads
    if n <= 1 or not (_PRANGE_OK or _numba_ready()):
        return serial_kernel(*args, 0, count)
    parts = count if count < ROW_PARTS_PER_THREAD * n else ROW_PARTS_PER_THREAD * n
    if getattr(_seen, "count", None) == n:  # numba's count on this thread is n already: _on_numba_threads's first case
        return parallel_kernel(*args, parts)
    return _on_numba_threads(n, parallel_kernel, *args, parts)


def zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """buffers.zeros, filled on numba's threads when large: each thread's share of the fill then sits in its own
    core's cache (a kernel's parts that follow write about the same shares), and a fill of memory out of cache
    runs at two cores' speed."""
    n = threads_for(math.prod(shape))
    if n <= 1 or np.dtype(dtype) not in (np.float32, np.float64):
        return buffers.zeros(shape, dtype)
    a = buffers.empty(shape, dtype)
    _on_numba_threads(n, _zero_parallel, a.reshape(-1), n)
    return a


@njit(cache=True, nogil=True, parallel=True)
def _zero_parallel(flat, parts):
    for p in prange(parts):
        start, stop = part_rows(flat.size, p, parts)
        for i in range(start, stop):
            flat[i] = 0


def run_rows(parallel_kernel: Callable, rows_kernel: Callable, work: float, *args):
    """run_parts over the rows of args[0]."""
    return run_parts(parallel_kernel, rows_kernel, args[0].shape[0], work, *args)


def row_parts(rows: int, work: float) -> int:
    """How many parts a row kernel's `prange` driver cuts its rows into (1: the calling thread runs it)."""
    n = threads_for(work)
    return max(1, min(rows, ROW_PARTS_PER_THREAD * n)) if n > 1 else 1


def run_plan(parallel_kernel: Callable, serial_kernel: Callable, plan: tuple, *args):
    """Work cut up by a plan (bounds, items) from layout.py: serial_kernel(*args, 0, items) on the calling
    thread when the plan has one part, else parallel_kernel(*args, bounds, items) on len(bounds) - 1 of
    numba's threads, part p running serial_kernel(*args, p, items[bounds[p]:bounds[p + 1]]). Both through
    their versions compiled for arrays of any layout."""
    bounds, items = plan
    if len(bounds) <= 2:
        return any_layout(serial_kernel)(*args, 0, items)
    return _on_numba_threads(len(bounds) - 1, any_layout(parallel_kernel), *args, bounds, items)


_any_layout_lock = threading.Lock()


def any_layout(kernel: Callable) -> Callable:
    """kernel as a function that runs its version compiled for arrays of any layout and writability.

    numba compiles a kernel once per combination of argument types, and an array's type says whether it is
    C-contiguous, strided or read-only: attention's nine arrays would otherwise compile a version for
    each combination a program happens to pass (each a compile of its own). Here every combination runs the one
    version typed for strided arrays ('A' layout), which reads every array where it lies.
    """
    if not hasattr(kernel, "overloads"):  # NUMBA_DISABLE_JIT: the plain Python function
        return kernel
    return functools.partial(_call_any_layout, kernel)


_entries: dict[tuple, Callable] = {}  # (kernel, each argument's kind) -> the compiled entry point


def _kind(a):
    """What numba's type of an argument depends on: an array's dtype and dims, a number's type, a tuple's
    items' kinds; anything else (a compiled function) itself."""
    kind = type(a)
    if kind is np.ndarray or isinstance(a, np.ndarray):
        return a.dtype.char, a.ndim
    if kind is tuple:
        return tuple([_kind(x) for x in a])
    if kind is int or kind is float or kind is bool or isinstance(a, np.generic):
        return kind
    return id(a)


def _any_layout_type(t):
    from numba import types

    if isinstance(t, types.Array):
        return t.copy(layout="A", readonly=False)
    if isinstance(t, types.BaseTuple):
        return types.Tuple(tuple(map(_any_layout_type, t.types)))
    return t


def _call_any_layout(kernel, *args):
    key = (kernel, *[_kind(a) for a in args])
    entry = _entries.get(key)
    if entry is None:  # numba's typeof is slow (docs/performance.md): once per kind of arguments
        from numba import typeof

        signature = tuple(_any_layout_type(t) for t in map(typeof, args))
        with _any_layout_lock:
            kernel.compile(signature)
            entry = _entries[key] = kernel.overloads[signature].entry_point
    return entry(*args)


_seen = threading.local()  # .count: numba's thread count on this thread, as last read or set here


def _on_numba_threads(n: int, kernel: Callable, *args):
    """kernel(*args) with its `prange` on n of numba's threads (numba's count is per calling thread).

    numba's count is read once per thread and then remembered here (asking numba costs more than a small
    kernel). Were it changed behind our back, a kernel would run on that count: its parts, and so its
    result, are the same on any count."""
    wanted = min(n, numba.config.NUMBA_NUM_THREADS)
    previous = getattr(_seen, "count", None)
    if previous is None:
        previous = _seen.count = numba.get_num_threads()
    if previous == wanted:  # nothing to set or put back (each set has a cost)
        return kernel(*args)
    numba.set_num_threads(wanted)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(previous)


def row_split_matmul(a: np.ndarray, b: np.ndarray, bias: np.ndarray | None = None) -> np.ndarray:
    """a (N, K) @ b (K, M) (+ bias (M,) on every row), cut into blocks on numba's threads, so that BLAS's own
    threads never run beside them.

    With BLAS on one thread (after set_num_threads, or OPENBLAS_NUM_THREADS=1), one whole block per thread
    (blas.product_parts), or, on an OpenBLAS with small-matrix kernels, the blocks they run faster when the
    product is one of theirs (blas.small_kernel_blocks: narrow products, a weight's gradient). Otherwise (by
    default) blocks of at most ONE_THREAD_PRODUCT multiply-adds (blas.product_blocks), which OpenBLAS runs on
    its caller without starting its threads: two sets of threads on the same cores (BLAS's and numba's, each
    spinning a while after its work) made a training step much slower. A product too small to share is
    numpy's `@`, as is any product without a bias when BLAS is on one thread and so are we (unless
    small-matrix blocks are faster); one of up to FEW_BLOCKS blocks' work is cut into whole rows, each numpy's
    `@` (cheaper than a kernel call at small sizes, and one kernel fewer to compile on a first run). The
    compiled blocks start from the bias (written by each block's thread when blocks are whole rows, else by
    numpy into every row first); numpy's `@` adds it after."""
    if (a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0] or a.dtype != b.dtype or a.shape[0] < 2
            or 0 in a.shape + b.shape or (bias is not None and (bias.shape != b.shape[1:] or bias.dtype != a.dtype))):
        return _plus(a @ b, bias)  # numpy's own checks, messages and promotions for the rest
    m, k, n_cols = a.shape[0], a.shape[1], b.shape[1]
    out = buffers.empty((m, n_cols), a.dtype)
    work = float(m) * k * n_cols
    if work <= ONE_THREAD_PRODUCT:  # one block: BLAS runs it on this thread
        return _plus(np.matmul(a, b, out=out), bias)
    n = threads_for(work, MIN_PRODUCT_WORK)
    one_thread = n <= 1 and blas_threads() == 1  # we and BLAS on one thread each
    if one_thread and bias is None and not small_kernels():  # with a bias, the one block below adds onto it
        return np.matmul(a, b, out=out)
    if n <= 1 and not one_thread and work <= FEW_BLOCKS * ONE_THREAD_PRODUCT and k * n_cols <= ONE_THREAD_PRODUCT:
        step = ONE_THREAD_PRODUCT // (k * n_cols)  # whole rows: numpy's `@` per block, faster than a kernel call
        for r0 in range(0, m, step):
            np.matmul(a[r0:r0 + step], b, out=out[r0:r0 + step])
        return _plus(out, bias)
    gemm, blas_alone = kernel_gemm(a.dtype)
    a_operand, b_operand = blas_operand(a), blas_operand(b)
    if gemm is None or a_operand is None or b_operand is None:
        return _plus(np.matmul(a, b, out=out), bias)
    if (blas_alone and n > 1 and bias is None and max(m, n_cols) < DEPTH_SPLIT_SIDE * n and k >= 4 * max(m, n_cols)
            and m * n_cols <= DEPTH_SPLIT_OUTPUT):
        return _depth_split_matmul(a, b, out, n, gemm)
    small = small_kernel_blocks(m, k, n_cols, a_operand[0], b_operand[0]) if blas_alone else None
    if one_thread and bias is None and small is None:  # one whole block: numpy's `@`, as above
        return np.matmul(a, b, out=out)
    rows, cols, depth = (small if small is not None else product_parts(m, k, n_cols, n) if blas_alone else
                         product_blocks(m, k, n_cols, a_operand[0], b_operand[0]))
    beta, fill = 0.0, _NO_BIAS[a.dtype.char]
    if bias is not None and cols == n_cols:  # whole rows: each block's thread fills its rows, one vectorised loop
        fill = bias
    elif bias is not None:  # blocks of some columns: numpy fills every row first (vectorised), the products add on
        np.copyto(out, bias)
        beta = 1.0
    blocks = -(-m // rows) * -(-n_cols // cols)
    if n <= 1:
        any_layout(matmul_blocks)(a, b, out, beta, fill, rows, cols, depth, gemm, 0, blocks)
    else:
        _on_numba_threads(n, any_layout(matmul_blocks_parallel), a, b, out, beta, fill, rows, cols, depth, gemm,
                          min(blocks, ROW_PARTS_PER_THREAD * n))
    return out


_NO_BIAS = {np.dtype(t).char: np.empty(0, t) for t in (np.float32, np.float64)}  # matmul_blocks's "no bias"


def matmul_pair(a1: np.ndarray, b1: np.ndarray, a2: np.ndarray, b2: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(a1 @ b1, a2 @ b2), two independent products (a layer's dX = g W and dW = g^T X, of equal work): on two
    threads, each product runs on one of them (each at one thread's full speed, no thinner parts, one
    launch), whole or in the blocks of blas.small_kernel_blocks; otherwise each is row_split_matmul's."""
    n = threads_for(float(a1.shape[0]) * a1.shape[-1] * b1.shape[-1] + float(a2.shape[0]) * a2.shape[-1] * b2.shape[-1],
                    MIN_PRODUCT_WORK) if a1.ndim == b1.ndim == a2.ndim == b2.ndim == 2 else 1
    if n == 2 and a1.dtype == b1.dtype == a2.dtype == b2.dtype and a1.shape[1] == b1.shape[0] and \
            a2.shape[1] == b2.shape[0] and 0 not in a1.shape + b1.shape + a2.shape + b2.shape:
        gemm, alone = kernel_gemm(a1.dtype)
        flags = [blas_operand(x) for x in (a1, b1, a2, b2)]
        if gemm is not None and alone and None not in flags:
            out1 = buffers.empty((a1.shape[0], b1.shape[1]), a1.dtype)
            out2 = buffers.empty((a2.shape[0], b2.shape[1]), a2.dtype)
            whole1, whole2 = (a1.shape[0], b1.shape[1], a1.shape[1]), (a2.shape[0], b2.shape[1], a2.shape[1])
            cut1 = small_kernel_blocks(*a1.shape, b1.shape[1], flags[0][0], flags[1][0]) or whole1
            cut2 = small_kernel_blocks(*a2.shape, b2.shape[1], flags[2][0], flags[3][0]) or whole2
            _on_numba_threads(2, any_layout(matmul_pair_parallel), a1, b1, out1, cut1, a2, b2, out2, cut2,
                              _NO_BIAS[a1.dtype.char], gemm)
            return out1, out2
    return row_split_matmul(a1, b1), row_split_matmul(a2, b2)


def _depth_split_matmul(a: np.ndarray, b: np.ndarray, out: np.ndarray, n: int, gemm) -> np.ndarray:
    """a @ b with its inner dimension cut into n chunks, one per thread, their partial products added: for a
    small output over a long inner dimension (a weight's gradient, (E, N) @ (N, E)), where cutting the few
    rows would leave each thread a product too thin for BLAS's kernels."""
    m = a.shape[0]
    partial = buffers.empty((n * m, b.shape[1]), a.dtype)
    _on_numba_threads(n, any_layout(matmul_blocks_parallel), a, b, partial, 0.0, _NO_BIAS[a.dtype.char], m,
                      b.shape[1], a.shape[1], gemm, n)
    return np.sum(partial.reshape(n, m, b.shape[1]), axis=0, out=out)


def _plus(out: np.ndarray, bias: np.ndarray | None) -> np.ndarray:
    if bias is not None:
        out += bias
    return out


COLUMN_SUMS_BY_PRODUCT = 1 << 16  # elements from which the private copy's product sums columns


@functools.lru_cache(maxsize=16)
def _ones(n: int, dtype: str) -> np.ndarray:
    """n ones, read-only, kept per size: column_sums's left operand, made once rather than at every call."""
    ones = np.ones(n, dtype)
    ones.flags.writeable = False
    return ones


def column_sums(a: np.ndarray) -> np.ndarray:
    """a (N, M) summed over its rows, (M,): BLAS's product ones (1, N) @ a (faster than numpy's sum at these
    sizes: docs/performance.md) when a BLAS runs it on the calling thread (numpy's on one thread, or the
    private copy), else numpy's sum (a product that size would start BLAS's own threads beside numba's)."""
    if a.dtype not in (np.float32, np.float64) or a.ndim != 2:
        return a.sum(axis=0)
    if blas_threads() == 1:
        return _ones(a.shape[0], a.dtype.char) @ a
    if a.size < COLUMN_SUMS_BY_PRODUCT:  # numpy's sum: no kernel to compile on a first run for small ones
        return a.sum(axis=0)
    gemm, alone = kernel_gemm(a.dtype)
    if gemm is None or not alone or 0 in a.shape or blas_operand(a) is None:
        return a.sum(axis=0)
    out = np.empty((1, a.shape[1]), a.dtype)
    any_layout(matmul_blocks)(_ones(a.shape[0], a.dtype.char)[None], a, out, 0.0, _NO_BIAS[a.dtype.char], 1, a.shape[1],
                              a.shape[0], gemm, 0, 1)
    return out[0]


# --- starting numba's threads: once, safely, leaving the process as it was -------------------------

_PRANGE_OK: bool | None = None
_prange_lock = threading.Lock()
_OPENMP_LIBRARIES = ("libgomp.so.1", "libiomp5.so", "libomp.so", "libomp.so.5")


def _safe_numba_layer() -> bool:
    """Whether numba's prange would run on a layer that several Python threads may call at once (OpenMP or
    TBB; its own "workqueue" layer is not), found without starting it."""
    import importlib

    if numba.config.DISABLE_JIT or numba.config.THREADING_LAYER not in ("default", "safe", "threadsafe", "omp", "tbb"):
        return False
    for module in ("numba.np.ufunc.tbbpool", "numba.np.ufunc.omppool"):
        try:
            importlib.import_module(module)
            return True
        except ImportError:
            continue
    return False


def _numba_ready() -> bool:
    """Whether numba's threads may run parallel work (a threading layer that several Python threads may
    call at once), starting them on the first call."""
    global _PRANGE_OK
    if _PRANGE_OK is None:
        with _prange_lock:
            if _PRANGE_OK is None:
                safe = _safe_numba_layer()
                if safe:
                    try:
                        _start_numba_threads()
                    except (ValueError, RuntimeError, ImportError) as err:  # the layer asked for cannot load
                        warnings.warn(f"tinygrad_attn: numba's threading layer did not start "
                                      f"({str(err).splitlines()[0][:160]}); parallel work runs on the calling "
                                      "thread instead", RuntimeWarning, stacklevel=2)
                        safe = False
                _PRANGE_OK = safe
    return _PRANGE_OK


def _after_fork_in_child() -> None:
    """A forked child cannot use the threads its parent started (GNU OpenMP kills a child that tries): the
    child runs every kernel on its calling thread."""
    global _PRANGE_OK, _prange_lock
    _PRANGE_OK = False if _PRANGE_OK else None  # started in the parent: never again; else free to start
    _prange_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _start_numba_threads() -> None:
    """Start numba's threads (once per process), leaving OpenMP's nesting limit as it was.

    Starting numba's OpenMP layer raises the OpenMP runtime's max-active-levels to its maximum for the
    whole process, which turns on nested parallel regions. Any library sharing that runtime then nests:
    PyTorch imported afterwards runs its matrix products as new thread teams inside its own parallel
    loops, many times slower. Our kernels never nest, so the limit is put back as it was.
    """
    try:
        numba.threading_layer()
        return  # already started, by this process's own numba code: nothing of ours to undo
    except ValueError:
        pass
    runtime = _loaded_openmp()  # numba's OpenMP module, imported by _safe_numba_layer, loaded its runtime
    before = None if runtime is None else runtime.omp_get_max_active_levels()
    numba.get_num_threads()  # starts the threads
    if before is not None and numba.threading_layer() == "omp" and runtime.omp_get_max_active_levels() != before:
        runtime.omp_set_max_active_levels(before)


def _loaded_openmp() -> ctypes.CDLL | None:
    """The OpenMP runtime already loaded in this process, if any (never loads one)."""
    if not hasattr(os, "RTLD_NOLOAD"):  # no way to ask without loading (Windows)
        return None
    for name in _OPENMP_LIBRARIES:
        try:
            runtime = ctypes.CDLL(name, mode=os.RTLD_NOLOAD | os.RTLD_LAZY)
        except OSError:
            continue
        if all(hasattr(runtime, f) for f in ("omp_get_max_active_levels", "omp_set_max_active_levels")):
            runtime.omp_get_max_active_levels.restype = ctypes.c_int
            runtime.omp_set_max_active_levels.argtypes = [ctypes.c_int]
            return runtime
    return None
