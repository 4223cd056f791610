"""Memory for the large arrays the kernels make, reused once nothing refers to it.

glibc gives a freed array's pages back to the OS (above 128 KiB, or when the heap's free top passes
its trim threshold), so the next step's arrays of the same sizes fault every page in again
(docs/performance.md gives the count and the cost measured), where each fault also stops the other
thread's work. `ta.runtime.configure` can ask
glibc to keep memory, but that is a setting for the whole process. Here the library keeps only the
memory of its own arrays, as PyTorch's caching allocators do:

    out = buffers.empty((m, n), np.float32)   # a view of a pooled buffer, or of a new one
    q = buffers.contiguous(q)                 # q itself, or a copy of it in such a buffer

Each array at least MIN_BYTES large is a view of a byte buffer held in a pool. A buffer is handed out
again only when the pool's reference is the last one: every view of it (the array, its reshapes and
slices, a Tensor's data) refers to it, so an array still in use anywhere is never reused. The pool
keeps at most LIMIT_BYTES of buffers; `release()` (`ta.runtime.empty_cache()`) frees the unused ones.
"""

from __future__ import annotations

import math
import os
import sys
import threading

import numpy as np

MIN_BYTES = 1 << 16  # smaller arrays come from glibc's heap bins, which keep them
LIMIT_BYTES = 256 << 20  # the most the pool holds, in use or not

_pool: dict[int, list[np.ndarray]] = {}  # size in bytes -> buffers of that size
_held = 0  # bytes in _pool
_lock = threading.Lock()


_getrefcount = sys.getrefcount


def _references(buffers: list, i: int) -> int:
    return _getrefcount(buffers[i])


_UNUSED = _references([np.empty(1, np.uint8)], 0)  # a buffer only the pool refers to, as counted here


def _base_references(a: np.ndarray) -> int:
    base = a.base
    return sys.getrefcount(base)


def _one_view_references() -> int:
    pool = [np.empty(8, np.uint8)]
    return _base_references(np.ndarray((2,), np.float32, pool[0]))  # the pool's list, the view


_ONE_VIEW = _one_view_references()  # a buffer the pool and one array refer to, as _base_references counts


def only_view(a: np.ndarray) -> bool:
    """Whether a is a view of a pooled buffer that no other array views: its memory is seen through a alone."""
    base = a.base
    if _getrefcount(base) != _ONE_VIEW or type(base) is not np.ndarray:  # counted as _base_references counts
        return False
    for b in _pool.get(base.size, ()):  # a pooled buffer (the pool holds byte buffers only)
        if b is base:
            return True
    return False


def empty(shape: tuple[int, ...], dtype) -> np.ndarray:
    """np.empty(shape, dtype), C-contiguous, in reused memory when it is large."""
    if not isinstance(dtype, np.dtype):  # np.float32 and the like (a dtype's own type is a subclass)
        dtype = np.dtype(dtype)
    size = math.prod(shape) * dtype.itemsize
    if size < MIN_BYTES or dtype.hasobject:
        return np.empty(shape, dtype)
    return np.ndarray(shape, dtype, _buffer(size))  # a view of the buffer (its base), as view().reshape() gives


def zeros(shape: tuple[int, ...], dtype) -> np.ndarray:
    """np.zeros(shape, dtype), C-contiguous, in reused memory when it is large."""
    a = empty(shape, dtype)
    a.fill(0)
    return a


def contiguous(a: np.ndarray) -> np.ndarray:
    """a itself when C-contiguous, else a C-contiguous copy, in reused memory when it is large."""
    if a.flags.c_contiguous:
        return a
    out = empty(a.shape, a.dtype)
    np.copyto(out, a)
    return out


def _buffer(size: int) -> np.ndarray:
    global _held
    with _lock:
        buffers = _pool.get(size)
        if buffers is None:
            buffers = _pool[size] = []
        for i in range(len(buffers)):
            if _getrefcount(buffers[i]) == _UNUSED:  # counted as _references counts
                return buffers[i]
        if _held + size > LIMIT_BYTES:
            _drop_unused()
        if _held + size > LIMIT_BYTES:
            return np.empty(size, np.uint8)  # past the limit: numpy's own memory, not kept
        buffer = np.empty(size, np.uint8)
        buffers.append(buffer)
        _held += size
        return buffer


def _drop_unused() -> None:
    """Free the buffers nothing refers to (the caller holds _lock)."""
    global _held
    for size, buffers in list(_pool.items()):
        kept = [buffers[i] for i in range(len(buffers)) if _references(buffers, i) != _UNUSED]
        _held -= size * (len(buffers) - len(kept))
        if kept:
            _pool[size] = kept
        else:
            del _pool[size]


def release() -> None:
    """Give the memory of every unused buffer back (arrays still in use keep theirs)."""
    with _lock:
        _drop_unused()


def held_bytes() -> int:
    """Bytes the pool holds, in use or not."""
    return _held


def _after_fork_in_child() -> None:
    global _lock
    _lock = threading.Lock()  # a fork while another thread held it would leave it locked


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
