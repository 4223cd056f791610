"""Where tinygrad_attn's parallel work runs: on numba's threads, n of them (`set_num_threads`).

Every parallel op cuts its work into independent items, each run single-threaded:
- row ranges of a row kernel, and row blocks of a large matrix product (each a
  call to numpy's BLAS, blas.py), in a numba `prange`: a launch costs microseconds;
- attention's (groups, query block) items, written in Python with numpy, through
  `parallel_for`: a `prange` whose every part calls back into Python (a ctypes
  callback, which takes the GIL; numpy and the `nogil` kernels inside let it go,
  so the parts really run at once). One set of threads does all the parallel
  work: a second set (a pool of Python threads) lost its cores to numba's
  threads, which spin for milliseconds after each launch before they sleep.
  Where numba has no threading layer that several Python threads may call at
  once, `parallel_for` falls back to a pool of Python threads.

Oversubscription: numpy's OpenBLAS has a thread pool of its own. When it has
more than one thread, the items run on the calling thread (BLAS parallelises
each product) rather than on the threads here: n threads each asking a
multi-threaded BLAS for work would put n x m threads on the cores.
`set_num_threads(n)` therefore sets BLAS to one thread and the threads here to n,
as `torch.set_num_threads` sets MKL's and OpenMP's; nothing here changes BLAS
otherwise. An op never does.

Thread safety: each calling Python thread gets its own team of numba's threads
(the fallback pool is shared, created under a lock, its queue bounding the
threads at n), and an item that itself calls `parallel_for` runs its items
inline, so no worker waits on another.
"""

from __future__ import annotations

import ctypes
import glob
import itertools
import os
import threading
import warnings
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import numpy as np
from numba import njit, prange

from .blas import blas_operand, find_gemm, matmul_rows_parallel

# Below this many multiply-adds an item list runs on the calling thread: running Python on other threads
# and waiting for it pays only for about a millisecond of work (docs/performance.md, Threads).
MIN_PARALLEL_WORK = 1 << 25
# A numba kernel's launch costs far less, so row kernels pay from this many element visits,
MIN_ROWS_WORK = 1 << 15
# and a matrix product's row blocks (each a BLAS call from numba's threads) from this many multiply-adds.
MIN_PRODUCT_WORK = 1 << 22
ROW_PARTS_PER_THREAD = 4  # a row kernel's rows are cut into this many parts per thread, for balance


def _available_cpus() -> int:
    """The CPUs this process may run on (its affinity), read at each call."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


_num_threads = _available_cpus()
_pools: dict[int, ThreadPoolExecutor] = {}
_pools_lock = threading.Lock()
_inside_worker = threading.local()


def _openblas_library() -> ctypes.CDLL | None:
    """The OpenBLAS that numpy loaded, if any (wheels ship it beside numpy)."""
    folders = [os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs"), os.path.dirname(np.__file__)]
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "*openblas*"))):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


_openblas = _openblas_library()  # looked up once; an op reads its thread count and calls its gemm (blas.py)
_gemms = {np.dtype(t): find_gemm(_openblas, t) for t in (np.float32, np.float64)}


def gemm_for(dtype: np.dtype):
    """numpy's BLAS `?gemm` for dtype as a ctypes function compiled kernels can call (blas.py), or None."""
    return _gemms.get(dtype)


def _blas_function(names: tuple[str, ...], argtypes: list, restype) -> Callable | None:
    for name in names:
        function = getattr(_openblas, name, None) if _openblas is not None else None
        if function is not None:
            function.argtypes, function.restype = argtypes, restype
            return function
    return None


_get_blas_threads = _blas_function(
    ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads"), [],
    ctypes.c_int,
)
_set_blas_threads = _blas_function(
    ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads"),
    [ctypes.c_int], None,
)


def blas_threads() -> int | None:
    """How many threads numpy's OpenBLAS uses (read only); None for another BLAS."""
    return None if _get_blas_threads is None else int(_get_blas_threads())


def get_num_threads() -> int:
    """How many threads tinygrad_attn's parallel work runs on (set_num_threads's n, at most the CPUs)."""
    return _num_threads


def set_num_threads(n: int) -> None:
    """Run tinygrad_attn's parallel work on n threads, like `torch.set_num_threads`.

    A process setting, made only when called: tinygrad_attn's parallel work gets n
    threads and numpy's OpenBLAS one thread, so that the work cut up here (each
    item with single-threaded BLAS) is the only parallel work and the cores are
    never oversubscribed. Large matrix products are then split by rows instead.
    An n above the CPUs this process may run on is cut to them: threads beyond the
    cores only take turns on them, and time would rise as threads are added.
    """
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise TypeError(f"set_num_threads: n must be an int, got {n!r}")
    if n < 1:
        raise ValueError(f"set_num_threads: n must be at least 1, got {n}")
    global _num_threads
    _num_threads = min(int(n), _available_cpus())
    if _set_blas_threads is not None:
        _set_blas_threads(1)


def _pool(n: int) -> ThreadPoolExecutor:
    with _pools_lock:
        if n not in _pools:
            _pools[n] = ThreadPoolExecutor(n, thread_name_prefix="tinygrad_attn", initializer=_mark_worker)
        return _pools[n]


def _mark_worker() -> None:
    _inside_worker.active = True


def _safe_numba_layer() -> bool:
    """Whether numba's prange would run on a layer that several Python threads may call at once (OpenMP or
    TBB; its own "workqueue" layer is not), found without starting it."""
    import importlib

    import numba

    if numba.config.DISABLE_JIT or numba.config.THREADING_LAYER not in ("default", "safe", "threadsafe", "omp", "tbb"):
        return False
    for module in ("numba.np.ufunc.tbbpool", "numba.np.ufunc.omppool"):
        try:
            importlib.import_module(module)
            return True
        except ImportError:
            continue
    return False


_PRANGE_OK: bool | None = None
_prange_lock = threading.Lock()
_OPENMP_LIBRARIES = ("libgomp.so.1", "libiomp5.so", "libomp.so", "libomp.so.5")


def _numba_threads(work: float, min_work: float | None = None) -> int:
    """How many of numba's threads a kernel carrying `work` runs on: 1 unless `prange` pays (from min_work,
    MIN_ROWS_WORK by default) and is safe."""
    n = threads_for(work, 1 << 30, MIN_ROWS_WORK if min_work is None else min_work)
    return n if n > 1 and _numba_ready() else 1


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
                                      f"({str(err).splitlines()[0][:160]}); parallel work runs on Python threads "
                                      "instead", RuntimeWarning, stacklevel=2)
                        safe = False
                _PRANGE_OK = safe
    return _PRANGE_OK


def _after_fork_in_child() -> None:
    """A forked child cannot use the threads its parent started (GNU OpenMP kills a child that tries, and
    the parent's Python threads do not exist in it): the child runs numba's kernels on its calling thread
    and starts a fresh pool of Python threads when parallel work pays."""
    global _PRANGE_OK, _pools_lock, _prange_lock
    _PRANGE_OK = False if _PRANGE_OK else None  # started in the parent: never again; else free to start
    _pools.clear()
    _pools_lock, _prange_lock = threading.Lock(), threading.Lock()
    _tasks.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _start_numba_threads() -> None:
    """Start numba's threads (once per process), leaving OpenMP's nesting limit as it was.

    Starting numba's OpenMP layer raises the OpenMP runtime's max-active-levels to its maximum for the
    whole process, which turns on nested parallel regions. Any library sharing that runtime then nests:
    PyTorch imported afterwards runs its matrix products as new thread teams inside its own parallel
    loops, many times slower. Row kernels never nest, so the limit is put back as it was.
    """
    import numba

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


def row_parts(rows: int, work: float) -> int:
    """How many parts a row kernel's `prange` driver cuts its rows into (1: the kernel runs on the calling
    thread)."""
    return _parts(rows, _numba_threads(work))


def _parts(rows: int, n: int) -> int:
    return max(1, min(rows, ROW_PARTS_PER_THREAD * n)) if n > 1 else 1


def run_rows(parallel_kernel: Callable, rows_kernel: Callable, work: float, *args):
    """Run a row kernel over the rows of args[0]: parallel_kernel(*args, parts), its `prange` driver, on
    numba's threads when that pays and is safe, else rows_kernel(*args, 0, rows) on the calling thread.

    n is `set_num_threads`'s count; numba's count is per calling thread, so setting it here changes
    nothing for other threads.
    """
    return run_parts(parallel_kernel, rows_kernel, args[0].shape[0], work, *args)


def run_parts(parallel_kernel: Callable, serial_kernel: Callable, count: int, work: float, *args):
    """run_rows over `count` items of any kind: serial_kernel(*args, 0, count) on the calling thread, or
    parallel_kernel(*args, parts) on numba's threads."""
    n = _numba_threads(work)
    if n <= 1 or count <= 1:
        return serial_kernel(*args, 0, count)
    return _on_numba_threads(n, parallel_kernel, *args, _parts(count, n))


def _on_numba_threads(n: int, kernel: Callable, *args):
    """kernel(*args) with its `prange` on n of numba's threads (numba's count is per calling thread)."""
    import numba

    previous, wanted = numba.get_num_threads(), min(n, numba.config.NUMBA_NUM_THREADS)
    if previous == wanted:  # nothing to set or put back (each set costs a few microseconds)
        return kernel(*args)
    numba.set_num_threads(wanted)
    try:
        return kernel(*args)
    finally:
        numba.set_num_threads(previous)


def threads_for(work: float, n_items: int, min_work: float | None = None) -> int:
    """How many threads `parallel_for` would use for n_items carrying `work` in all."""
    if work < (MIN_PARALLEL_WORK if min_work is None else min_work) or getattr(_inside_worker, "active", False):
        return 1
    if (blas_threads() or 1) > 1:  # BLAS parallelises each product: more threads would oversubscribe
        return 1
    return max(1, min(_num_threads, n_items))


def shares(n_items: int, n_threads: int) -> list[slice]:
    """range(n_items) cut into n_threads contiguous slices of nearly equal size."""
    bounds = [n_items * i // n_threads for i in range(n_threads + 1)]  # integers: no numpy call per op
    return [slice(a, b) for a, b in zip(bounds[:-1], bounds[1:]) if b > a]


def parallel_for(task: Callable[[slice], None], n_items: int, work: float) -> None:
    """Call task(items) on contiguous slices of range(n_items), one slice per thread when it pays.

    Items must be independent (each writes only its own outputs). Exceptions
    from any slice are raised here, after every slice has finished.
    """
    n = threads_for(work, n_items)
    if n <= 1:
        task(slice(0, n_items))
        return
    slices, errors = shares(n_items, n), []
    if _numba_ready():
        token = next(_tokens)
        _tasks[token] = (task, slices, errors)
        try:
            _on_numba_threads(n, run_on_numba_threads, len(slices), token, _PYTHON_SLICE)
        finally:
            del _tasks[token]
    else:
        first, *rest = slices
        futures = [_pool(n - 1).submit(task, s) for s in rest]  # the calling thread does the first share itself
        _run_slice(task, first, errors)
        for future in futures:
            try:
                future.result()
            except BaseException as err:  # noqa: BLE001  (re-raised below, once all slices are done)
                errors.append(err)
    if errors:
        raise errors[0]


def _run_slice(task: Callable[[slice], None], items: slice, errors: list) -> None:
    """task(items) as a worker: a parallel call inside it runs inline; an exception is kept for the caller."""
    inside = getattr(_inside_worker, "active", False)
    _inside_worker.active = True
    try:
        task(items)
    except BaseException as err:  # noqa: BLE001  (re-raised by parallel_for, once all slices are done)
        errors.append(err)
    finally:
        _inside_worker.active = inside


_tasks: dict[int, tuple] = {}  # what each running parallel_for gives numba's threads, by token
_tokens = itertools.count()


def _python_slice(token: int, p: int) -> None:
    task, slices, errors = _tasks[token]
    try:
        _run_slice(task, slices[p], errors)
    except BaseException as err:  # noqa: BLE001  (Ctrl-C landing between the lines above: raised by parallel_for,
        errors.append(err)  # never swallowed by ctypes as "Exception ignored on calling ctypes callback")


# Called from numba's threads; ctypes takes the GIL for it, and numpy and the nogil kernels inside let it go.
_PYTHON_SLICE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(_python_slice)


@njit(cache=True, nogil=True, parallel=True)
def run_on_numba_threads(parts, token, python_part):
    """python_part(token, p) for p in range(parts), in a `prange`. The callback is an argument, like gemm in
    blas.py, so this is cached like the other kernels."""
    for p in prange(parts):
        python_part(token, p)


def row_split_matmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """a (N, K) @ b (K, M), cut into row blocks when BLAS is single-threaded and the product large enough.

    The blocks run on numba's threads, each a call to numpy's BLAS (blas.py); where BLAS cannot describe
    the layout or cannot be called from numba (another BLAS), through `parallel_for`.
    """
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[0]:
        return a @ b  # numpy's own checks and messages for anything else
    n_rows, work = a.shape[0], float(a.shape[0]) * a.shape[1] * b.shape[1]
    n = _numba_threads(work, MIN_PRODUCT_WORK)
    gemm = gemm_for(a.dtype) if n > 1 and n_rows > 1 and a.dtype == b.dtype else None
    a_layout, b_layout = (blas_operand(a), blas_operand(b)) if gemm is not None else (None, None)
    if a_layout is not None and b_layout is not None:
        out = np.empty((n_rows, b.shape[1]), a.dtype)
        _on_numba_threads(n, matmul_rows_parallel, a, b, out, *a_layout, *b_layout, min(n, n_rows), gemm)
        return out
    n = threads_for(work, n_rows)
    if n <= 1:
        return a @ b
    out = np.empty((n_rows, b.shape[1]), np.result_type(a, b))

    def rows(s: slice) -> None:
        np.matmul(a[s], b, out=out[s])

    parallel_for(rows, n_rows, float("inf"))
    return out


def parallel_each(run: Callable, items: list, work: float) -> None:
    """run(item) for every item, each thread claiming the next unclaimed item whenever it is free.

    Give the items largest first (under the causal mask, late query blocks and early key ranges carry the
    most work): the last items to be claimed are then small ones, and the threads finish close together.
    """
    n = threads_for(work, len(items))
    if n <= 1:
        for item in items:
            run(item)
        return
    claims, lock, done = iter(items), threading.Lock(), object()

    def claim_until_done(_: slice) -> None:
        while True:
            with lock:
                item = next(claims, done)
            if item is done:
                return
            run(item)

    parallel_for(claim_until_done, n, float("inf"))
