"""Checkpoints as plain .npz files: no pickle, written atomically.

`save(obj, path)` takes a dict whose values are arrays, Tensors, numbers,
strings or nested dicts (flattened to dotted keys: {"model": {"w": ...}} is
stored as "model.w"). It writes a temporary file in the same folder, then
renames it over `path` with os.replace, so a reader (or a crash) never sees
half a file. `load(path)` returns the flat dict of arrays, read with
allow_pickle=False, so a checkpoint cannot run code.
"""

from __future__ import annotations

import glob
import os
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from .engine import Tensor


def _flatten(obj: Mapping, prefix: str, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, name + ".", out)
            continue
        array = np.asarray(value._data if isinstance(value, Tensor) else value)
        if array.dtype.kind == "O":
            raise TypeError(f"save: {name!r} is an object array ({type(value).__name__}); only plain arrays are saved")
        if name in out:
            raise ValueError(f"save: the key {name!r} appears twice after flattening")
        out[name] = array
    return out


MAX_BYTES = 4 << 30
"""The largest checkpoint `load` reads by default, counted from the sizes its arrays declare (4 GiB)."""


def save(obj: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write `obj` (a possibly nested dict of arrays) to `path` as .npz, atomically.

    The temporary file is `.tmp-<name>-*.npz` beside the target; ones a killed writer left for the same
    target are removed by the next save.
    """
    if not isinstance(obj, Mapping):
        raise TypeError(f"save: expected a dict of arrays, got {type(obj).__name__}")
    flat = _flatten(obj, "", {})
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"save: cannot write {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"save: cannot write {path}: it is a folder")
    prefix = f".tmp-{os.path.basename(path)}-"
    for stale in glob.glob(os.path.join(glob.escape(folder), glob.escape(prefix) + "*.npz")):
        try:
            os.remove(stale)
        except OSError:
            pass
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=".npz")
    except PermissionError:
        raise PermissionError(f"save: cannot write {path}: the folder {folder} is not writable") from None
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **flat)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def _member_arrays(archive: zipfile.ZipFile, path: str, max_bytes: int) -> dict[str, tuple[str, np.dtype]]:
    """Check every member before reading any: an .npy array of a plain dtype, sizes within max_bytes."""
    members, total = {}, 0
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            raise ValueError(f"load: {path} holds {info.filename!r}, which is not an array")
        if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
            raise ValueError(f"load: {path}: {info.filename!r} uses an unsupported compression method "
                             f"({info.compress_type})")
        with archive.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version not in ((1, 0), (2, 0)):
                raise ValueError(f"load: {path}: {info.filename!r} has an unsupported .npy version {version}")
            read_header = np.lib.format.read_array_header_1_0 if version == (1, 0) else \
                np.lib.format.read_array_header_2_0
            shape, _, dtype = read_header(f, max_header_size=10_000)
        if dtype.hasobject or dtype.kind not in "biufcSU":
            raise ValueError(f"load: {path}: {info.filename!r} has dtype {dtype}, which is not a plain array")
        declared = int(np.prod(shape, dtype=object)) * dtype.itemsize
        total += declared
        if total > max_bytes or info.file_size > max_bytes:
            raise ValueError(f"load: {path}: {info.filename!r} declares {declared} bytes, beyond the limit of "
                             f"{max_bytes} (pass max_bytes= to read larger checkpoints)")
        if info.file_size < declared:
            raise ValueError(f"load: {path}: {info.filename!r} is shorter than the array it declares")
        members[info.filename[:-4]] = (info.filename, dtype)
    return members


def load(path: str | os.PathLike, max_bytes: int = MAX_BYTES) -> dict[str, np.ndarray]:
    """Read a checkpoint written by `save`: a flat dict, dotted key -> array.

    Every member is checked before anything is read: each must be an .npy array of a plain dtype
    (pickles are refused), and the sizes the arrays declare must add up to at most `max_bytes`.
    """
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"load: {path} is a folder, not a checkpoint")
    try:
        with zipfile.ZipFile(path) as archive:
            _member_arrays(archive, path, max_bytes)
        with np.load(path, allow_pickle=False) as archive:
            return {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise FileNotFoundError(f"load: no checkpoint at {path}") from None
    except zipfile.BadZipFile:
        raise ValueError(f"load: {path} is not a readable checkpoint (not an .npz archive; "
                         "`save` writes .npz files)") from None
    except (ValueError, OSError, EOFError, KeyError, NotImplementedError, MemoryError, zlib.error) as err:
        message = str(err)
        if message.startswith("load: "):
            raise ValueError(message) from None
        raise ValueError(f"load: {path} is not a readable checkpoint ({type(err).__name__}: {message[:200]})") from None
