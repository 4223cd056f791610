"""Numba kernels for the hot loops, each beside the plain-numpy reference it is tested against.

Every kernel is a module-level `@njit(cache=True, nogil=True)` function, so
the compiled code is cached on disk and reused by the next process, and
several threads can run it at once. Matrix products are left to numpy's
BLAS. All parallel work runs on numba's threads (parallel.py): row kernels and
the row blocks of a large product (each a call to numpy's BLAS, blas.py) as
`prange` loops, attention on groups that fit one tile as a `prange` over the
groups (small.py), its larger items through a `prange` that calls back into
Python; it is shared out only after `set_num_threads` (with numpy's BLAS on one
thread), and on a pool of Python threads where numba has no threading layer
that several callers may share.
"""

# Reassociation and contraction let LLVM vectorise reductions.
# The full fastmath set would also assume no NaN and no infinity, but -inf is how a masked score is
# written here, and a NaN must reach the output so that it is seen.
SAFE_FASTMATH = {"reassoc", "contract", "arcp", "nsz"}
