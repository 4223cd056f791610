"""Checkpoints as plain .npz files: no pickle, written atomically, read back as they were saved.

`save(obj, path)` takes what PyTorch programs save: dicts, lists and tuples, nested, of tensors, numpy
arrays and scalars, Python ints, floats, bools, strings and None (a nanoGPT checkpoint: {"model":
state_dict, "optimizer": ..., "model_args": {...}, "iter_num": 3}). Each tensor and array is one .npy
member of the archive; the structure around them is a JSON document (member `__structure__`), so `load`
returns the same structure with the same types: tensors as tensors (with their requires_grad), arrays as
arrays, 3 as the int 3. Anything else (an arbitrary object) is a clear error when saving, never a pickle.
The file is written to a temporary beside `path`, then renamed over it with os.replace, so a reader (or a
crash) never sees half a file. `load` checks every member (plain .npy arrays, declared sizes within a
limit) and the structure's document before building anything. Archives written before the structure
existed load as the flat dict of arrays they hold.

A path ending in `.safetensors` is written in that format instead (the one Hugging Face and PyTorch users
exchange weights in: an 8-byte header length, a JSON table of names, dtypes, shapes and byte offsets, then
the raw little-endian bytes), and `load` reads it back, checking the table before it reads any data. That
format holds a flat table of tensors: nested dicts are flattened to dotted names.
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

from .engine import check_device, device
from .tensor import Tensor

STRUCTURE = "__structure__"
MAX_DEPTH = 64  # nesting a checkpoint's structure may have (a deeper document is refused, never a RecursionError)
KINDS = "tensors, numpy arrays and scalars, ints, floats, bools, strings, None, and dicts, lists and tuples of them"


def _array(value: Any, where: str) -> np.ndarray:
    array = np.asarray(value)
    if array.dtype.kind not in "biufcSU":
        raise TypeError(f"save: {where} is an object array ({type(value).__name__}); only plain arrays are saved")
    return array


def _encode(value: Any, where: str, arrays: list[np.ndarray], depth: int = 0) -> Any:
    """value as a JSON document, its tensors and arrays appended to `arrays` (the document names their index)."""
    if depth > MAX_DEPTH:
        raise ValueError(f"save: {where} is nested more than {MAX_DEPTH} levels deep")
    if isinstance(value, Tensor):
        arrays.append(_array(value._data, where))
        return {"tensor": len(arrays) - 1, "requires_grad": bool(value.requires_grad)}
    if isinstance(value, (np.ndarray, np.generic)):
        arrays.append(_array(value, where))
        return {"array" if isinstance(value, np.ndarray) else "scalar": len(arrays) - 1}
    if value is None or isinstance(value, (bool, str)):
        return {"none": None} if value is None else {"bool": value} if isinstance(value, bool) else {"str": value}
    if isinstance(value, int):
        return {"int": str(value)}  # as text: any size, exactly
    if isinstance(value, float):
        return {"float": repr(value)}  # repr round-trips every float, inf and nan included
    if isinstance(value, Mapping):
        items = []
        for key, item in value.items():
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise TypeError(f"save: {where} has a key of type {type(key).__name__}; keys are strings or numbers")
            items.append([_encode(key, where, arrays, depth + 1),
                          _encode(item, f"{where}[{key!r}]", arrays, depth + 1)])
        return {"dict": items}
    if isinstance(value, (list, tuple)):
        kind = "list" if isinstance(value, list) else "tuple"
        return {kind: [_encode(item, f"{where}[{i}]", arrays, depth + 1) for i, item in enumerate(value)]}
    raise TypeError(f"save: {where} is a {type(value).__name__}; a checkpoint holds {KINDS} (nothing is pickled)")


def _decode(doc: Any, arrays: dict[str, np.ndarray], path: str, depth: int = 0) -> Any:
    """The structure a document describes, each array taken from `arrays` by its index; any other shape of
    document is a clear error."""
    def bad(what: str) -> ValueError:
        return ValueError(f"load: {path}: its structure is malformed ({what})")

    if depth > MAX_DEPTH:
        raise bad(f"nested more than {MAX_DEPTH} levels deep")
    if not isinstance(doc, dict) or len(doc) not in (1, 2):
        raise bad(f"an entry {str(doc)[:60]}")
    kind = next(iter(doc))
    value = doc[kind]
    if kind in ("tensor", "array", "scalar"):
        if isinstance(value, bool) or not isinstance(value, int) or str(value) not in arrays:
            raise bad(f"{kind} {str(value)[:20]} names no array of the archive")
        array = arrays[str(value)]
        if kind == "array":
            return array
        if kind == "scalar":
            return array[()]
        t = Tensor._result(array, None)
        if doc.get("requires_grad") is True and array.dtype.kind == "f":
            t.requires_grad = True
        return t
    if len(doc) != 1:
        raise bad(f"an entry {str(doc)[:60]}")
    if kind == "none" and value is None:
        return None
    if (kind == "bool" and isinstance(value, bool)) or (kind == "str" and isinstance(value, str)):
        return value
    if kind == "int" and isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    if kind == "float" and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            raise bad(f"float {value[:20]!r}") from None
    if kind in ("list", "tuple") and isinstance(value, list):
        items = [_decode(item, arrays, path, depth + 1) for item in value]
        return items if kind == "list" else tuple(items)
    if kind == "dict" and isinstance(value, list):
        out = {}
        for pair in value:
            if not isinstance(pair, list) or len(pair) != 2:
                raise bad("a dict entry that is not a key and a value")
            key = _decode(pair[0], arrays, path, depth + 1)
            if not isinstance(key, (str, int, float, bool)) and key is not None:
                raise bad(f"a key of type {type(key).__name__}")
            out[key] = _decode(pair[1], arrays, path, depth + 1)
        return out
    raise bad(f"an entry {str(doc)[:60]}")


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


def save(obj: Any, path: str | os.PathLike) -> None:
    """Write `obj` (dicts, lists and tuples of tensors, arrays, numbers, strings, bools and None) to `path` as
    .npz, atomically; `load` gives back the same structure and types. With a `.safetensors` path, a (possibly
    nested) dict of tensors and arrays, flattened to dotted names.

    The temporary file is `.tmp-<name>-*.npz` beside the target; ones a killed writer left for the same
    target are removed by the next save.
    """
    path = os.fspath(path)
    if path.endswith(".safetensors"):
        if not isinstance(obj, Mapping):
            raise TypeError(f"save: a .safetensors file holds a dict of tensors, got {type(obj).__name__}")
        flat = _flatten(obj, "", {})
    else:
        arrays: list[np.ndarray] = []
        structure = json.dumps(_encode(obj, "the object", arrays), separators=(",", ":"))
        flat = {str(i): a for i, a in enumerate(arrays)} | {STRUCTURE: np.asarray(structure)}
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


def load(path: str | os.PathLike, map_location: Any = None, weights_only: Any = None, mmap: Any = None,
         max_bytes: int = MAX_BYTES) -> Any:
    """Read a checkpoint written by `save`: the structure it was given, with the same types.

    Every member is checked before anything is read: each must be an .npy array of a plain dtype
    (pickles are refused), and the sizes the arrays declare must add up to at most `max_bytes`.
    `map_location` may be None, "cpu" or a CPU device (everything loads onto the CPU, the only device);
    `weights_only` and `mmap` are accepted as PyTorch takes them (nothing here ever runs code).
    """
    _check_location(map_location)
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes < 0:
        raise TypeError(f"load: max_bytes must be a non-negative int, got {max_bytes!r}")
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
            flat = {name: archive[name] for name in archive.files}
        if STRUCTURE not in flat:  # written before checkpoints kept their structure: the flat dict
            return flat
        document = flat.pop(STRUCTURE)
        if document.dtype.kind != "U" or document.ndim:
            raise ValueError(f"load: {path}: its structure is not a JSON document")
        try:
            doc = json.loads(str(document))
        except (json.JSONDecodeError, RecursionError):
            raise ValueError(f"load: {path}: its structure is not valid JSON (or is nested too deeply)") from None
        return _decode(doc, flat, path)
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


def _check_location(map_location: Any) -> None:
    """None, "cpu", a CPU device, or a dict mapping locations to "cpu": the one place anything can load to."""
    values = list(map_location.values()) if isinstance(map_location, Mapping) else [map_location]
    for value in values:
        if callable(value) and not isinstance(value, (str, device)):
            raise TypeError("load: map_location as a function is not supported here; everything loads onto the CPU "
                            "(pass 'cpu' or leave it out)")
        check_device(value, "load: map_location")


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
    def unique(pairs: list) -> dict:
        names = [k for k, _ in pairs]
        if len(set(names)) != len(names):
            twice = sorted({k for k in names if names.count(k) > 1})[:3]
            raise ValueError(f"load: {path}: the .safetensors header names {twice} more than once")
        return dict(pairs)

    try:
        table = json.loads(f.read(n), object_pairs_hook=unique)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise ValueError(f"load: {path} is not a readable checkpoint (its .safetensors header is not JSON)") from None
    if not isinstance(table, dict):
        raise ValueError(f"load: {path}: the .safetensors header is not a table of tensors")
    table.pop("__metadata__", None)
    entries, end = [], 0
    for name, entry in table.items():
        def whole(values: Any) -> bool:  # a JSON list of non-negative integers (not bools, floats or a string)
            return isinstance(values, list) and all(type(v) is int and v >= 0 for v in values)

        if (not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}
                or entry["dtype"] not in _SAFETENSORS_DTYPES or not whole(entry["shape"])
                or not whole(entry["data_offsets"]) or len(entry["data_offsets"]) != 2):
            raise ValueError(f"load: {path}: the .safetensors entry {name!r} is malformed or of an unsupported "
                             f"dtype ({str(entry)[:80]})")
        dtype = np.dtype(_SAFETENSORS_DTYPES[entry["dtype"]])
        shape = tuple(entry["shape"])
        begin, stop = entry["data_offsets"]
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
    for begin, stop, name, dtype, _ in entries:
        if dtype == np.bool_ and np.frombuffer(data[begin:stop], np.uint8).max(initial=0) > 1:
            raise ValueError(f"load: {path}: the BOOL tensor {name!r} holds bytes other than 0 and 1")
    return {name: np.frombuffer(data, dtype, offset=begin, count=int(np.prod(shape))).reshape(shape)
            .astype(dtype.newbyteorder("="), copy=True) for begin, _, name, dtype, shape in entries}
