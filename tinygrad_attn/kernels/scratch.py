"""Scratch arrays inside compiled kernels, without numba's `np.empty` helpers.

`scratch(n_rows, n_cols, like)` is np.empty((n_rows, n_cols), like.dtype): a new C-contiguous 2-D array in
like's dtype, for a kernel's own tiles. numba compiles `np.empty` through an overload and an allocator
function of their own on a process's first use (a first run's attention forward: docs/performance.md); this is
lowered by hand to numba's runtime allocation (a MemoryError if it fails), as views.py's views are.
Without numba (NUMBA_DISABLE_JIT=1) it is np.empty itself. The sizes are the caller's, not checked: a
kernel asks for tiles it has sized.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.core import cgutils
from numba.core.imputils import impl_ret_new_ref
from numba.extending import lower_builtin, type_callable


def scratch(n_rows, n_cols, like):
    """np.empty((n_rows, n_cols), like.dtype)."""
    return np.empty((n_rows, n_cols), like.dtype)


@type_callable(scratch)
def _type_scratch(context):
    def typer(n_rows, n_cols, like):
        if isinstance(like, types.Array) and all(isinstance(n, types.Integer) for n in (n_rows, n_cols)):
            return types.Array(like.dtype, 2, "C")
        return None
    return typer


@lower_builtin(scratch, types.Integer, types.Integer, types.Array)
def _lower_scratch(context, builder, sig, args):
    from numba.np.arrayobj import populate_array  # numba's array code: imported once a kernel compiles

    array_type = sig.return_type
    n_rows, n_cols = (context.cast(builder, value, t, types.intp) for value, t in zip(args[:2], sig.args[:2]))
    itemsize = context.get_constant(types.intp, context.get_abi_sizeof(context.get_data_type(array_type.dtype)))
    row_bytes = builder.mul(n_cols, itemsize)
    meminfo = context.nrt.meminfo_alloc_aligned(builder, builder.mul(n_rows, row_bytes),
                                                context.get_preferred_array_alignment(array_type.dtype))
    data = builder.bitcast(context.nrt.meminfo_data(builder, meminfo),
                           context.get_data_type(array_type.dtype).as_pointer())
    array = context.make_array(array_type)(context, builder)
    populate_array(array, data=data, shape=cgutils.pack_array(builder, [n_rows, n_cols]),
                   strides=cgutils.pack_array(builder, [row_bytes, itemsize]), itemsize=itemsize, meminfo=meminfo)
    return impl_ret_new_ref(context, builder, array_type, array._getvalue())
