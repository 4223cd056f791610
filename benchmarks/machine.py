"""What machine a benchmark ran on, printed beside its table so that figures from different machines are never
compared: the CPU model and its widest vectors, the cores this process may use, numpy's BLAS and the kernel
set it picked, numba's threading layer and thread count, and PyTorch's threads and backends when installed.

    python benchmarks/machine.py        # the same lines on their own
"""

from __future__ import annotations

import ctypes
import os
import platform


def _cpu() -> tuple[str, str]:
    """(model name, widest vector set) from /proc/cpuinfo (Linux); platform's words elsewhere."""
    model, flags = platform.processor() or platform.machine(), set()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == "model name" and model in ("", platform.processor(), platform.machine()):
                    model = value.strip()
                elif key.strip() in ("flags", "Features") and not flags:
                    flags = set(value.split())
    except OSError:
        pass
    width = ("AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "AVX" if "avx" in flags
             else "NEON/SVE" if {"asimd", "sve"} & flags else "unknown")
    if "amx_tile" in flags:
        width += " + AMX"
    return model, width


def _blas() -> str:
    """numpy's BLAS library and, for OpenBLAS, the kernel set it chose for this CPU and its thread count."""
    import numpy as np

    try:
        from tinygrad_attn.kernels.blas import blas_threads, openblas
    except ImportError:
        return "unknown"
    library = openblas()
    if library is None:
        info = np.show_config(mode="dicts") if hasattr(np, "show_config") else {}
        name = info.get("Build Dependencies", {}).get("blas", {}).get("name", "unknown") if info else "unknown"
        return f"{name} (not OpenBLAS)"
    core, config = "unknown", ""
    for symbol in ("openblas_get_corename", "openblas_get_corename64_", "scipy_openblas_get_corename64_"):
        function = getattr(library, symbol, None)
        if function is not None:
            function.restype = ctypes.c_char_p
            core = function().decode()
            break
    for symbol in ("openblas_get_config", "openblas_get_config64_", "scipy_openblas_get_config64_"):
        function = getattr(library, symbol, None)
        if function is not None:
            function.restype = ctypes.c_char_p
            config = function().decode().split()[1] if len(function().decode().split()) > 1 else ""
            break
    return f"OpenBLAS {config} ({core} kernels, {blas_threads()} threads)"


def _numba() -> str:
    import numba

    try:
        layer = numba.threading_layer()
    except ValueError:  # no parallel kernel has run yet: the layer numba would pick
        layer = f"not chosen yet ({numba.config.THREADING_LAYER})"
    return f"numba {numba.__version__}, threading layer {layer}, {numba.get_num_threads()} threads"


def _torch() -> str:
    try:
        import torch
    except ImportError:
        return "not installed"
    backends = [name for name, on in (("MKL", torch.backends.mkl.is_available()),
                                      ("oneDNN", torch.backends.mkldnn.is_available())) if on]
    return (f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads, "
            f"{'/'.join(backends) or 'no MKL/oneDNN'}")


def describe() -> list[str]:
    """The lines that say which machine this is."""
    import numpy as np

    model, width = _cpu()
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [f"cpu: {model} ({width}), {usable} of {os.cpu_count()} CPUs usable",
            f"numpy {np.__version__}: {_blas()}",
            _numba(),
            _torch()]


def print_machine() -> None:
    for line in describe():
        print(f"# {line}")


if __name__ == "__main__":
    print_machine()
