"""Views of an array's rows or columns inside compiled kernels, without numba's slice clamping, and an array
typed C-contiguous without numba's copying code.

`rows(a, start, stop)` is a[start:stop] and `columns(a, start, stop)` is a[:, start:stop], for bounds the
caller knows are in range: 0 <= start <= stop <= that axis's length. numba compiles a slice for any
bounds (negative ones counted from the end, ones past the end clamped, any step), about 45 branches per
sliced axis, which LLVM then simplifies: a good part of flash attention's first compile. Compiled,
these move the data pointer and set one length; without numba (NUMBA_DISABLE_JIT=1) they are the
slices themselves. Bounds out of range are the caller's error and are not checked.

`contiguous(a)` is a itself, typed C-contiguous, for an array the caller knows is laid out so (LLVM then
vectorises loops over it): what np.ascontiguousarray returns for such an array, without compiling its
copy for the other ones (docs/performance.md). An array not laid out so is the caller's error.
"""

from __future__ import annotations

import numpy as np
from numba import types
from numba.core import cgutils
from numba.core.imputils import impl_ret_borrowed
from numba.extending import lower_builtin, type_callable


def rows(a, start, stop):
    """a[start:stop], for 0 <= start <= stop <= len(a): a view of rows start to stop - 1."""
    return a[start:stop]


def columns(a, start, stop):
    """a[:, start:stop], for 0 <= start <= stop <= a.shape[1]: a view of columns start to stop - 1."""
    return a[:, start:stop]


def contiguous(a):
    """a, typed C-contiguous, for an a the caller knows is (np.ascontiguousarray(a) is then a itself)."""
    return np.ascontiguousarray(a)


def _typer(axis):
    def typing(context):
        def typer(a, start, stop):
            bounds = all(isinstance(x, types.Integer) for x in (start, stop))
            if isinstance(a, types.Array) and a.ndim > axis and bounds:
                return a.copy(layout="C" if a.layout == "C" and axis == 0 else "A")  # the type numba gives the slice
            return None
        return typer
    return typing


def _lowering(axis):
    def lower(context, builder, sig, args):
        from numba.np.arrayobj import populate_array  # numba's array code: imported once a kernel compiles

        array_type, view_type = sig.args[0], sig.return_type
        array = context.make_array(array_type)(context, builder, value=args[0])
        start, stop = (context.cast(builder, value, t, types.intp) for value, t in zip(args[1:], sig.args[1:]))
        shape = cgutils.unpack_tuple(builder, array.shape, array_type.ndim)
        strides = cgutils.unpack_tuple(builder, array.strides, array_type.ndim)
        data = cgutils.pointer_add(builder, array.data, builder.mul(start, strides[axis]))  # strides are in bytes
        shape[axis] = builder.sub(stop, start)
        view = context.make_array(view_type)(context, builder)
        populate_array(view, data=data, shape=shape, strides=strides, itemsize=array.itemsize,
                       meminfo=array.meminfo, parent=array.parent)
        return impl_ret_borrowed(context, builder, view_type, view._getvalue())  # the view keeps `a` alive
    return lower


for _view, _axis in ((rows, 0), (columns, 1)):
    type_callable(_view)(_typer(_axis))
    lower_builtin(_view, types.Array, types.Integer, types.Integer)(_lowering(_axis))


@type_callable(contiguous)
def _type_contiguous(context):
    def typer(a):
        return a.copy(layout="C") if isinstance(a, types.Array) else None
    return typer


@lower_builtin(contiguous, types.Array)
def _lower_contiguous(context, builder, sig, args):
    return impl_ret_borrowed(context, builder, sig.return_type, args[0])  # the same array, its type says C
