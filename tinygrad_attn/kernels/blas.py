"""numpy's own BLAS, called from compiled code: `matmul_into(a, b, out, alpha, beta, gemm)` is
out <- alpha a b + beta out on 2-D views, as BLAS's `?gemm` writes it.

The OpenBLAS that numpy's wheels ship is looked up the first time it is asked for (`gemm_for`,
`blas_threads`), never at import. Its `?gemm` is passed to compiled kernels as an argument (a ctypes
function, so the kernels are cached on disk like the others: its address is only known at run time).
Only the 64-bit-integer interface of numpy's wheels is used (`scipy_cblas_?gemm64_`, `cblas_?gemm64_`);
with another BLAS, `gemm` is None and the same kernels compile with a loop product instead. Without
numba (NUMBA_DISABLE_JIT=1), `matmul_into`'s plain definition runs: numpy's `@`.

OpenBLAS runs a product on one thread when m n k <= 2^18 (`ONE_THREAD_PRODUCT`), whatever its thread
count: the tiles of flash attention are sized under that, so that many threads may call it at once.

By default numpy's OpenBLAS runs larger products on all its threads, which would run beside numba's and
spin after their work; its thread count is the process's, which the library never changes unasked. So
the library's own large products go to a private copy of the same OpenBLAS (`private_openblas`: the file
copied once into the temporary directory and loaded on its own, with its own thread count, set to one),
where numba's threads can each run a whole part of a product with OpenBLAS's fastest kernels
(`kernel_gemm`). numpy's OpenBLAS and its thread count stay as they were.

On its AVX-512 cores OpenBLAS multiplies products of at most 10^6 multiply-adds without packing them
first; for narrow products and a weight's gradient, blocks that size run faster than the whole product
(`small_kernel_blocks`, used only where `small_kernels()` finds such a core).
"""

from __future__ import annotations

import ctypes
import functools
import glob
import os
import shutil
import tempfile
import threading

import numpy as np
from llvmlite import ir
from numba import njit, prange, types
from numba.core import cgutils
from numba.extending import lower_builtin, type_callable

from . import views
from .vector import maximum, minimum, never_inline, part_rows

ROW_MAJOR, NO_TRANS, TRANS = 101, 111, 112  # CBLAS enum values
ONE_THREAD_PRODUCT = 1 << 18  # OpenBLAS's threshold (65536 x GEMM_MULTITHREAD_THRESHOLD 4) for threaded gemm
_GEMM_NAMES = {np.dtype(np.float32): ("scipy_cblas_sgemm64_", "cblas_sgemm64_"),
               np.dtype(np.float64): ("scipy_cblas_dgemm64_", "cblas_dgemm64_")}
_GET_THREADS = ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads")
_SET_THREADS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads")


@functools.cache
def openblas() -> ctypes.CDLL | None:
    """The OpenBLAS that numpy loaded, if any (wheels ship it beside numpy), looked up once."""
    folders = [os.path.join(os.path.dirname(np.__file__), os.pardir, "numpy.libs"), os.path.dirname(np.__file__)]
    for folder in folders:
        for path in sorted(glob.glob(os.path.join(folder, "*openblas*"))):
            try:
                return ctypes.CDLL(path)
            except OSError:
                continue
    return None


def _function(names: tuple[str, ...], argtypes: list, restype, library=None):
    library = openblas() if library is None else library
    for name in names:
        function = getattr(library, name, None) if library is not None else None
        if function is not None:
            function.argtypes, function.restype = argtypes, restype
            return function
    return None


def _GEMM_ARGS(dtype: np.dtype) -> list:  # noqa: N802
    real = ctypes.c_float if np.dtype(dtype) == np.float32 else ctypes.c_double
    i64 = ctypes.c_int64  # the pointers too: numba passes them as addresses, the same in the 64-bit ABI
    return [ctypes.c_int, ctypes.c_int, ctypes.c_int, i64, i64, i64, real, i64, i64, i64, i64, real, i64, i64]


@functools.cache
def gemm_for(dtype: np.dtype):
    """numpy's BLAS `?gemm` for dtype as a ctypes function compiled kernels can call, or None."""
    return _function(_GEMM_NAMES.get(np.dtype(dtype), ()), _GEMM_ARGS(dtype), None)


@functools.cache
def _thread_functions():
    return _function(_GET_THREADS, [], ctypes.c_int), _function(_SET_THREADS, [ctypes.c_int], None)


_private_lock = threading.Lock()


@functools.cache
def private_openblas() -> ctypes.CDLL | None:
    """A copy of numpy's OpenBLAS loaded on its own (its own globals: thread count, buffers), set to one
    thread; None if there is none or it cannot be made. The file is copied once per user into the temporary
    directory (named by the original's size and time, written whole before it is renamed into place)."""
    library = openblas()
    source = getattr(library, "_name", None)
    if source is None:
        return None
    with _private_lock:
        try:
            info = os.stat(source)
            folder = os.path.join(tempfile.gettempdir(), f"tinygrad_attn-{os.getuid() if hasattr(os, 'getuid') else 0}")
            os.makedirs(folder, mode=0o700, exist_ok=True)
            path = os.path.join(folder, f"private-{info.st_size}-{int(info.st_mtime)}-{os.path.basename(source)}")
            if not os.path.exists(path) or os.path.getsize(path) != info.st_size:
                partial = f"{path}.{os.getpid()}.part"
                shutil.copyfile(source, partial)
                os.replace(partial, path)
            private = ctypes.CDLL(path, mode=getattr(os, "RTLD_LOCAL", 0))
        except OSError:
            return None
        for name in _SET_THREADS:
            setter = getattr(private, name, None)
            if setter is not None:
                setter.argtypes, setter.restype = [ctypes.c_int], None
                setter(1)
                return private
    return None


@functools.cache
def _private_gemm(dtype: np.dtype):
    return _function(_GEMM_NAMES.get(np.dtype(dtype), ()), _GEMM_ARGS(dtype), None, private_openblas())


def kernel_gemm(dtype: np.dtype) -> tuple[object, bool]:
    """(gemm, alone): the `?gemm` the library's products call, and whether it runs any product on its caller
    (numpy's when its OpenBLAS is on one thread, else the private copy's; numpy's `gemm_for` with alone False
    if no copy could be made: products are then cut into blocks of at most ONE_THREAD_PRODUCT)."""
    if blas_threads() == 1:
        return gemm_for(dtype), True
    private = _private_gemm(dtype)
    return (private, True) if private is not None else (gemm_for(dtype), False)


def blas_threads() -> int | None:
    """How many threads numpy's OpenBLAS uses (read only); None for another BLAS."""
    get = _thread_functions()[0]
    return None if get is None else int(get())


def set_blas_threads(n: int) -> bool:
    """Set numpy's OpenBLAS to n threads, for the whole process (only `set_num_threads` calls this)."""
    set_ = _thread_functions()[1]
    if set_ is not None:
        set_(n)
    return set_ is not None


@njit(cache=True, nogil=True, error_model="numpy")
def _operand(rows, cols, row_stride, col_stride, item):
    """(flag, leading dimension) of a view from its shape and strides (scalars: one compiled version serves
    every layout); flag 0 when BLAS cannot read the view where it lies."""
    never_inline()  # one call per view, rather than a copy in every product of the drivers
    if (cols <= 1 or col_stride == item) and (rows <= 1 or (row_stride % item == 0 and row_stride >= cols * item)):
        return NO_TRANS, row_stride // item if rows > 1 else maximum(cols, 1)
    if (rows <= 1 or row_stride == item) and (cols <= 1 or (col_stride % item == 0 and col_stride >= rows * item)):
        return TRANS, col_stride // item if cols > 1 else maximum(rows, 1)
    return 0, 0


def blas_operand(a: np.ndarray) -> tuple[int, int] | None:
    """(transpose flag, leading dimension) that describe a 2-D view to BLAS, or None if no flag can: a view
    with unit stride along rows is passed as it is, one with unit stride down columns as its transpose,
    flagged."""
    flag, ld = _operand(a.shape[0], a.shape[1], a.strides[0], a.strides[1], a.itemsize)
    return (flag, ld) if flag else None


def matmul_into(a, b, out, alpha, beta, gemm):
    """out (m, n) <- alpha a (m, k) @ b (k, n) + beta out, on views (out is not read when beta is 0)."""
    product = alpha * (a @ b)
    out[...] = product if beta == 0 else product + beta * out


@njit(cache=True, nogil=True, fastmath={"contract", "reassoc"})
def _matmul_loops(a, b, out, alpha, beta):
    """matmul_into as loops: for another BLAS, and views BLAS cannot describe."""
    m, k, n = a.shape[0], a.shape[1], b.shape[1]
    for i in range(m):
        for j in range(n):
            out[i, j] = 0 if beta == 0 else beta * out[i, j]
        for p in range(k):
            x = alpha * a[i, p]
            for j in range(n):
                out[i, j] += x * b[p, j]


def _gemm_views(a, ta, lda, b, tb, ldb, out, to, ldo, m, n, k, alpha, beta, gemm):
    """BLAS's gemm on three views, each given as (address, transpose flag, leading dimension): _operand's."""
    never_inline()
    if m == 0 or n == 0:
        return
    if ta == 0 or tb == 0 or to != NO_TRANS:  # never from flash.py, whose callers lay every operand out for BLAS
        raise ValueError("matmul_into: an operand BLAS cannot read in place")
    gemm(ROW_MAJOR, ta, tb, m, n, k, alpha, a, lda, b, ldb, beta, out, ldo)  # with k = 0: out <- beta out


# Compiled, matmul_into is lowered by hand rather than through @overload: an overload compiles a version for
# each combination of the three views' layouts (six in flash attention, each compiled on a first run),
# where this describes each view by its address, flag and leading dimension (_operand of its shape and
# strides, compiled once) to one version per dtype of _gemm_views.
@type_callable(matmul_into)
def _type_matmul_into(context):
    def typer(a, b, out, alpha, beta, gemm):
        if all(isinstance(x, types.Array) and x.ndim == 2 for x in (a, b, out)):
            return types.none
        return None
    return typer


@lower_builtin(matmul_into, types.Array, types.Array, types.Array, types.Number, types.Number, types.Any)
def _lower_matmul_into(context, builder, sig, args):
    gemm_type, real = sig.args[5], sig.args[2].dtype
    if isinstance(gemm_type, types.NoneType):
        return context.compile_internal(builder, lambda a, b, out, alpha, beta, gemm: _matmul_loops(
            a, b, out, alpha, beta), sig, args)
    item, views, shapes = context.get_constant(types.int64, real.bitwidth // 8), [], []
    describe = types.UniTuple(types.int64, 2)(*[types.int64] * 5)  # _operand: (flag, leading dimension)
    for array_type, value in zip(sig.args[:3], args[:3]):
        array = context.make_array(array_type)(context, builder, value=value)
        shape = cgutils.unpack_tuple(builder, array.shape, 2)
        described = context.compile_internal(builder, _operand.py_func, describe,
                                             [*shape, *cgutils.unpack_tuple(builder, array.strides, 2), item])
        views += [builder.ptrtoint(array.data, ir.IntType(64)), *cgutils.unpack_tuple(builder, described, 2)]
        shapes.append(shape)
    (m, k), (_, n) = shapes[0], shapes[1]
    scalars = [context.cast(builder, v, t, real) for v, t in zip(args[3:5], sig.args[3:5])]
    return context.compile_internal(builder, _gemm_views, types.none(*[types.int64] * 12, real, real, gemm_type),
                                    views + [m, n, k] + scalars + [args[5]])


def product_blocks(m: int, k: int, n: int, a_flag: int, b_flag: int) -> tuple[int, int, int]:
    """(rows, columns, depth) of the blocks an (m, k) @ (k, n) product is cut into so that OpenBLAS runs each on
    its caller whatever its own thread count: rows x columns x depth at most ONE_THREAD_PRODUCT.

    BLAS copies each block's operands into its own layout, fastest along the way they lie in memory: the
    depth is long when the operands run along k (a as it is, a_flag NO_TRANS; b transposed, b_flag TRANS),
    short otherwise. docs/performance.md gives these blocks' speed against a whole product's, and against
    cubes of 64 everywhere."""
    side = max(1, round(ONE_THREAD_PRODUCT ** (1 / 3)))  # 64
    along_k = (a_flag == NO_TRANS) + (b_flag == TRANS)
    longest = side * (1, 2, 8)[along_k]
    depth = -(-k // -(-k // longest)) if k > longest else max(k, 1)  # k in equal chunks of at most `longest`
    area = max(1, ONE_THREAD_PRODUCT // depth)
    cols = max(1, min(n, area // side if b_flag == TRANS else side))
    return max(1, min(m, area // cols)), cols, depth


SMALL_KERNEL_WORK = 1_000_000  # OpenBLAS's AVX-512 cores multiply without packing up to this many multiply-adds
SMALL_KERNEL_SIDES = (192, 64 * 192)  # ... which beat its packed product when k <= 192 and k n <= 64 x 192
SMALL_KERNEL_ROWS = 128 * 96  # entries of a in one block (rows x depth)
SMALL_KERNEL_DEPTH = (128, 96, 64)  # a's rows: k whole up to 128, else in chunks of at most 96; a transposed a: 64
_SMALL_KERNEL_CORES = ("skylakex", "cooperlake", "sapphirerapids")


@functools.cache
def small_kernels() -> bool:
    """Whether numpy's OpenBLAS runs on a core with its small-matrix kernels (the AVX-512 ones)."""
    library = openblas()
    for name in ("scipy_openblas_get_corename64_", "scipy_openblas_get_corename", "openblas_get_corename"):
        get = getattr(library, name, None) if library is not None else None
        if get is not None:
            get.argtypes, get.restype = [], ctypes.c_char_p
            return (get() or b"").decode(errors="replace").lower() in _SMALL_KERNEL_CORES
    return False


def small_kernel_blocks(m: int, k: int, n: int, a_flag: int, b_flag: int) -> tuple[int, int, int] | None:
    """(rows, columns, depth) of blocks OpenBLAS multiplies with its small-matrix kernels, where those beat its
    whole product (docs/performance.md), else None: blocks of rows for a narrow inner dimension (both operands
    as they lie; past 128, the inner dimension in equal chunks of at most 96), depth chunks of 64 for a
    transposed a over a long one (a weight's gradient, g^T x)."""
    if not small_kernels() or m * k * n <= SMALL_KERNEL_WORK:
        return None
    if a_flag == b_flag == NO_TRANS and k <= SMALL_KERNEL_SIDES[0] and k * n <= SMALL_KERNEL_SIDES[1]:
        whole, chunk, _ = SMALL_KERNEL_DEPTH
        depth = k if k <= whole else -(-k // -(-k // chunk))  # equal chunks of at most `chunk`
        rows = min(SMALL_KERNEL_WORK // (depth * n), SMALL_KERNEL_ROWS // depth)
        rows = rows // 16 * 16 if rows >= 16 else rows
        return (rows, n, depth) if rows >= 1 else None
    if a_flag == TRANS and k >= 4 * SMALL_KERNEL_DEPTH[2] and m * n <= SMALL_KERNEL_SIDES[1]:
        return m, n, SMALL_KERNEL_DEPTH[2]
    return None


def product_parts(m: int, k: int, n: int, parts: int) -> tuple[int, int, int]:
    """(rows, columns, depth) of `parts` whole blocks of an (m, k) @ (k, n) product, cut along its longer
    side: for a BLAS on one thread, where blocks need no size limit."""
    if m >= n:
        return -(-m // parts), max(n, 1), max(k, 1)
    return max(m, 1), -(-n // parts), max(k, 1)


@njit(cache=True, nogil=True, error_model="numpy")
def matmul_blocks(a, b, out, beta, bias, rows, cols, depth, gemm, start, stop):
    """out = a @ b + beta out on the blocks [start, stop) of (rows, cols) each, numbered row-major; each block
    adds up its products over chunks of `depth` of the inner dimension, the first onto beta times what out
    holds (0: out is not read; 1: a Linear's bias, which the caller filled every row with). A non-empty `bias`
    (cols of out,) is written into each block first, by the thread that multiplies it, and the products add
    onto it."""
    n_cols, k = -(-b.shape[1] // cols), a.shape[1]
    for block in range(start, stop):
        i, j = divmod(block, n_cols)
        r0, c0 = i * rows, j * cols
        r1, c1 = minimum(r0 + rows, out.shape[0]), minimum(c0 + cols, out.shape[1])
        if bias.size:
            fill_rows(out, bias, r0, r1, c0, c1)
        a_rows, out_block = views.rows(a, r0, r1), views.columns(views.rows(out, r0, r1), c0, c1)  # no clamping
        for p0 in range(0, k, depth):
            p1 = minimum(p0 + depth, k)
            matmul_into(views.columns(a_rows, p0, p1), views.columns(views.rows(b, p0, p1), c0, c1), out_block, 1.0,
                        1.0 if p0 > 0 or bias.size else beta, gemm)


@njit(cache=True, nogil=True, error_model="numpy")
def fill_rows(out, bias, r0, r1, c0, c1):
    """out[r0:r1, c0:c1] = bias[c0:c1] on every row. Whole rows of a C-contiguous out are one C-contiguous
    block, typed so (views.contiguous) with a contiguous bias, which LLVM vectorises; any other block is
    written through its strides."""
    item = out.itemsize
    if (c0 == 0 and c1 == out.shape[1] and out.strides[1] == item and out.strides[0] == c1 * item
            and bias.strides[0] == item):
        block, row = views.contiguous(views.rows(out, r0, r1)), views.contiguous(bias)
        for i in range(r1 - r0):
            for j in range(c1):
                block[i, j] = row[j]
        return
    for i in range(r0, r1):
        for j in range(c0, c1):
            out[i, j] = bias[j]


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def matmul_blocks_parallel(a, b, out, beta, bias, rows, cols, depth, gemm, parts):
    """matmul_blocks over all the blocks, cut into `parts` parts of consecutive blocks. Given an out of `parts`
    times a's rows instead, part p multiplies the p-th of `parts` chunks of the inner dimension into out's
    p-th band of a's rows: partial products (a split of the depth), which the caller adds up."""
    m = a.shape[0]
    if out.shape[0] != m:
        for p in prange(parts):
            k0, k1 = part_rows(a.shape[1], p, parts)
            matmul_into(a[:, k0:k1], b[k0:k1], out[p * m:p * m + m], 1.0, 0.0, gemm)
        return
    blocks = -(-m // rows) * -(-b.shape[1] // cols)
    for p in prange(parts):
        start, stop = part_rows(blocks, p, parts)
        matmul_blocks(a, b, out, beta, bias, rows, cols, depth, gemm, start, stop)


@njit(cache=True, nogil=True, error_model="numpy", parallel=True)
def matmul_pair_parallel(a1, b1, out1, cut1, a2, b2, out2, cut2, no_bias, gemm):
    """out1 = a1 @ b1 on one thread and out2 = a2 @ b2 on another, at once: two independent products (a
    layer's dX and dW) each whole, where cutting each in two would leave every part a thinner product. Each
    runs as matmul_blocks in blocks of cut = (rows, columns, depth): the whole product, or small_kernel_blocks's."""
    for p in prange(2):
        if p == 0:
            rows, cols, depth = cut1
            matmul_blocks(a1, b1, out1, 0.0, no_bias, rows, cols, depth, gemm, 0,
                          -(-a1.shape[0] // rows) * -(-b1.shape[1] // cols))
        else:
            rows, cols, depth = cut2
            matmul_blocks(a2, b2, out2, 0.0, no_bias, rows, cols, depth, gemm, 0,
                          -(-a2.shape[0] // rows) * -(-b2.shape[1] // cols))
