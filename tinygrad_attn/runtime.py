"""Process settings applied when tinygrad_attn is imported, each measured to matter on a CPU.

1. OpenMP waits passively. numba's OpenMP thread pool spins while it waits for
   work by default, and so does OpenBLAS; when BLAS calls and parallel kernels
   alternate, as they do in attention, the two fight for the cores (measured:
   a 30x slowdown on 2 cores). This must be set before numba starts its pool.
2. glibc's allocator keeps freed memory for reuse. By default an array above
   128 KiB is mapped fresh from the OS and returned when freed, so every
   activation of every step pays page faults on new pages (measured: a toy
   training step 28.5 -> 20 ms, a fifth of its time). `mallopt` raises the
   mmap and trim thresholds; nothing changes outside glibc.

Settings the user made (OMP_WAIT_POLICY, MALLOC_*_ environment variables)
are left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def _keep_freed_memory() -> bool:
    if any(name.startswith("MALLOC_") for name in os.environ):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    ok = mallopt(_M_MMAP_THRESHOLD, 64 << 20)  # arrays under 64 MiB come from the reusable heap
    ok &= mallopt(_M_TRIM_THRESHOLD, 256 << 20)  # give memory back only when 256 MiB are free at the top
    ok &= mallopt(_M_TOP_PAD, 16 << 20)
    return bool(ok)


os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
KEPT_FREED_MEMORY = _keep_freed_memory()
