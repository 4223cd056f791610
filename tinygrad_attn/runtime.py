"""Process settings that make training faster, applied only when asked (the command line asks).

Importing tinygrad_attn changes nothing in the process. A program that wants
what the `tinygrad-attn` command gets calls `configure(threads)`:

1. `set_num_threads(threads)`: tinygrad_attn's parallel work runs on `threads` threads
   and numpy's OpenBLAS on one, so the two never oversubscribe the cores (see
   kernels/parallel.py).
2. `keep_freed_memory()`: glibc's allocator maps an array above 128 KiB fresh
   from the OS and returns it when freed, so every activation of every step
   pays page faults on new pages. Raising the mmap and trim thresholds with
   `mallopt` keeps freed memory for reuse. Left alone when the user set any
   MALLOC_* variable, and a no-op outside glibc.

docs/performance.md gives what each one gains, measured.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os

from .kernels import buffers
from .kernels.parallel import set_num_threads

_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed memory under 64 MiB per array for reuse; True if it was changed."""
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


def configure(threads: int | None = None, allocator: bool = True) -> dict:
    """Apply the settings above (threads only when given); returns what was done."""
    done = {"threads": None, "allocator": False}
    if threads is not None:
        set_num_threads(threads)
        done["threads"] = threads
    if allocator:
        done["allocator"] = keep_freed_memory()
    return done


def empty_cache() -> None:
    """Give back the memory the library keeps for reuse (kernels/buffers.py) that no array uses now, like
    `torch.cuda.empty_cache` for PyTorch's caching allocator."""
    buffers.release()
