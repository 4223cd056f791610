"""Checkpoints as plain .npz files: no pickle, written atomically.

`save(obj, path)` takes a dict whose values are arrays, Tensors, numbers,
strings or nested dicts (flattened to dotted keys: {"model": {"w": ...}} is
stored as "model.w"). It writes a temporary file in the same folder, then
renames it over `path` with os.replace, so a reader (or a crash) never sees
half a file. `load(path)` returns the flat dict of arrays, read with
allow_pickle=False, so a checkpoint cannot run code.

A path ending in `.safetensors` is written in that format instead (the one Hugging Face and PyTorch users
exchange weights in: an 8-byte header length, a JSON table of names, dtypes, shapes and byte offsets, then
the raw little-endian bytes), and `load` reads it back, checking the table before it reads any data.
"""

from __future__ import annotations

import glob
import json
import os
import tempfile
import zipfile
import zlib
from collections.abc import Mapping
from typing import Any

import numpy as np

from .tensor import Tensor


def _flatten(obj: Mapping, prefix: str, out: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    for key, value in obj.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            _flatten(value, name + ".", out)
            continue
        try:
            array = np.asarray(value._data if isinstance(value, Tensor) else value)
        except ValueError:  # a ragged list
            raise ValueError(f"save: {name!r} is not a rectangular array (rows of different lengths?); "
                             "save arrays, tensors, numbers or strings") from None
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
    suffix = ".safetensors" if path.endswith(".safetensors") else ".npz"
    for stale in glob.glob(os.path.join(glob.escape(folder), glob.escape(prefix) + "*" + suffix)):
        try:
            os.remove(stale)
        except OSError:
            pass
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=prefix, suffix=suffix)
    except PermissionError:
        raise PermissionError(f"save: cannot write {path}: the folder {folder} is not writable") from None
    except OSError as err:  # a read-only file system, a full disk
        raise OSError(err.errno, f"save: cannot write {path} ({err.strerror})") from None
    try:
        with os.fdopen(fd, "wb") as f:
            if path.endswith(".safetensors"):
                _write_safetensors(f, flat)
            else:
                np.savez(f, **flat)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        if os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(err, OSError) and err.errno is not None:  # a full or read-only disk: name the file
            raise OSError(err.errno, f"save: cannot write {path} ({err.strerror}); the previous file, if any, is "
                                     "unchanged") from None
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
        with open(path, "rb") as f:
            if f.read(2) != b"PK":  # not a zip archive: a .safetensors file, or nothing readable
                f.seek(0)
                return _read_safetensors(f, path, max_bytes)
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


# --- .safetensors --------------------------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {"F64": "<f8", "F32": "<f4", "F16": "<f2", "I64": "<i8", "I32": "<i4", "I16": "<i2",
                       "I8": "i1", "U8": "u1", "BOOL": "?"}
_SAFETENSORS_NAMES = {np.dtype(v): k for k, v in _SAFETENSORS_DTYPES.items()}


def _write_safetensors(f: Any, flat: dict[str, np.ndarray]) -> None:
    """The header (names in sorted order, offsets back to back), padded with spaces to 8 bytes, then the data."""
    table, offset = {}, 0
    arrays = {}
    for name in sorted(flat):
        array = np.asarray(flat[name])
        dtype = array.dtype.newbyteorder("<") if array.dtype.byteorder == ">" else array.dtype
        if dtype not in _SAFETENSORS_NAMES:
            raise TypeError(f"save: {name!r} has dtype {array.dtype}, which .safetensors cannot hold here "
                            f"(supported: {sorted(str(d) for d in _SAFETENSORS_NAMES)})")
        arrays[name] = np.ascontiguousarray(array, dtype=dtype)
        table[name] = {"dtype": _SAFETENSORS_NAMES[dtype], "shape": list(array.shape),
                       "data_offsets": [offset, offset + arrays[name].nbytes]}
        offset += arrays[name].nbytes
    header = json.dumps(table, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    f.write(len(header).to_bytes(8, "little"))
    f.write(header)
    for name in sorted(arrays):
        f.write(arrays[name].tobytes())


def _read_safetensors(f: Any, path: str, max_bytes: int) -> dict[str, np.ndarray]:
    """Check the whole table (dtypes, shapes, offsets that tile the data exactly, the file's size) before
    reading any array."""
    size = os.fstat(f.fileno()).st_size
    head = f.read(8)
    if len(head) < 8:
        raise ValueError(f"load: {path} is not a readable checkpoint (not an .npz archive nor a .safetensors file)")
    n = int.from_bytes(head, "little")
    if n > min(size - 8, 100 << 20):
        raise ValueError(f"load: {path} is not a readable checkpoint (not an .npz archive nor a .safetensors file)")
    try:
        table = json.loads(f.read(n))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise ValueError(f"load: {path} is not a readable checkpoint (its .safetensors header is not JSON)") from None
    if not isinstance(table, dict):
        raise ValueError(f"load: {path}: the .safetensors header is not a table of tensors")
    table.pop("__metadata__", None)
    entries, end = [], 0
    for name, entry in table.items():
        try:
            dtype = np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]])
            shape = tuple(int(d) for d in entry["shape"])
            begin, stop = (int(o) for o in entry["data_offsets"])
        except (KeyError, TypeError, ValueError):
            raise ValueError(f"load: {path}: the .safetensors entry {name!r} is malformed or of an unsupported "
                             f"dtype ({str(entry)[:80]})") from None
        if any(d < 0 for d in shape) or stop - begin != int(np.prod(shape, dtype=object)) * dtype.itemsize:
            raise ValueError(f"load: {path}: {name!r} declares shape {shape} but {stop - begin} bytes")
        entries.append((begin, stop, name, dtype, shape))
    entries.sort()
    for begin, stop, name, _, _ in entries:
        if begin != end:
            raise ValueError(f"load: {path}: the data of {name!r} does not follow the previous tensor's")
        end = stop
    if end > max_bytes:
        raise ValueError(f"load: {path} declares {end} bytes, beyond the limit of {max_bytes} (pass max_bytes= to "
                         "read larger checkpoints)")
    if 8 + n + end != size:
        raise ValueError(f"load: {path}: the file holds {size - 8 - n} bytes of data, its header declares {end}")
    data = f.read(end)
    return {name: np.frombuffer(data, dtype, offset=begin, count=int(np.prod(shape))).reshape(shape)
            .astype(dtype.newbyteorder("="), copy=True) for begin, _, name, dtype, shape in entries}
