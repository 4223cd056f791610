"""Numba kernels for the hot loops, each beside the plain-numpy reference it is tested against.

Every kernel is a module-level `@njit(cache=True)` function, so the compiled
code is cached on disk and reused by the next process. Matrix products are
left to numpy's BLAS. Set NUMBA_NUM_THREADS to choose the thread count of the
`prange` loops (default: all cores).
"""
