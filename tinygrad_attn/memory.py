"""Room before allocation: one clear MemoryError before an array the machine cannot hold.

A request of at least `CHECKED_BYTES` is compared with the memory the machine has available now (Linux's
MemAvailable, read from /proc/meminfo; elsewhere the free physical pages); smaller ones are never
checked, so the cost stays off the common path. The error names the operation, the shape, the bytes it
needs and what to change, instead of numpy's bare MemoryError or the kernel's out-of-memory killer.
"""

from __future__ import annotations

import math
import os

CHECKED_BYTES = 256 << 20  # requests under 256 MiB are not checked


def available_bytes() -> int | None:
    """The bytes the machine can give this process now, or None where that cannot be read: the machine's
    available memory, and no more than the address space left under this process's limit (`ulimit -v`)."""
    machine = None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    machine = int(line.split()[1]) * 1024
                    break
    except (OSError, ValueError, IndexError):
        pass
    if machine is None:
        try:
            machine = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError, AttributeError):
            pass
    room = _address_space_left()
    return room if machine is None else machine if room is None else min(machine, room)


def _address_space_left() -> int | None:
    """RLIMIT_AS minus the address space in use (Linux's /proc/self/statm), or None without a limit."""
    try:
        import resource

        limit = resource.getrlimit(resource.RLIMIT_AS)[0]
        if limit == resource.RLIM_INFINITY:
            return None
        with open("/proc/self/statm") as f:
            used = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        return max(limit - used, 0)
    except (ImportError, OSError, ValueError, IndexError, AttributeError):
        return None


def gib(nbytes: float) -> str:
    return f"{nbytes / (1 << 30):.1f} GiB" if nbytes >= 1 << 30 else f"{nbytes / (1 << 20):.0f} MiB"


def check_fits(op: str, what: str, shape: tuple[int, ...], itemsize: int, copies: int = 1, hint: str = "") -> None:
    """Raise MemoryError if `copies` arrays of `shape` and `itemsize` cannot fit in the available memory."""
    nbytes = math.prod(shape) * itemsize * copies
    if nbytes < CHECKED_BYTES:
        return
    available = available_bytes()
    if available is not None and nbytes > available:
        raise MemoryError(f"{op}: {what} of shape {tuple(shape)} need {gib(nbytes)}, more than the "
                          f"{gib(available)} this machine has available" + (f"; {hint}" if hint else ""))
