"""Numba kernels for the hot loops, each beside the plain-numpy reference it is tested against.

Every kernel is a module-level `@njit(cache=True)` function, so the compiled
code is cached on disk and reused by the next process. Matrix products are
left to numpy's BLAS. Set NUMBA_NUM_THREADS to choose the thread count of the
`prange` loops (default: all cores).

Threads: numba's OpenMP layer spins while it waits for work by default, and
so does OpenBLAS; when BLAS calls and parallel kernels alternate, as they do
in attention, the two fight for the cores (measured: a 30x slowdown on 2
cores). Unless the user chose otherwise, OpenMP is asked to wait passively.
This must happen before numba first starts its thread pool, hence here.
"""

import os

os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
