"""Numba kernels for the hot loops, each beside the plain-numpy reference it is tested against.

Every kernel is a module-level `@njit(cache=True, nogil=True)` function, so
the compiled code is cached on disk and reused by the next process, and
several threads can run it at once. Most also take error_model="numpy": a
division by zero gives inf or NaN as numpy's does (every such division here is
guarded), and the kernel compiles without Python's exception paths. All parallel work is one mechanism
(parallel.py): a compiled `prange` over independent items (row ranges of a row
kernel, blocks of a large product, attention's (group, query block) and
(group, key range) items), with no Python inside. Products inside compiled
code call numpy's own BLAS through blas.py's `matmul_into`.
Their large outputs live in memory reused once no array refers to it
(buffers.py).

Editing a kernel: numba's cache checks only the file a kernel is defined in, and a kernel holds its own
copy of the compiled kernels it calls. After changing tiles.py, say, flash.py's cached kernels still run
the old tile code: delete the cache files (`tinygrad_attn/kernels/__pycache__/*.nbi` and `*.nbc`, or
NUMBA_CACHE_DIR) before trusting a run. An installed release is compiled afresh (every file is new).
"""

# Reassociation and contraction let LLVM vectorise reductions.
# The full fastmath set would also assume no NaN and no infinity, but -inf is how a masked score is
# written here, and a NaN must reach the output so that it is seen.
SAFE_FASTMATH = {"reassoc", "contract", "arcp", "nsz"}
