"""Checkpoints as plain .npz files: no pickle, written atomically.

`save(obj, path)` takes a dict whose values are arrays, Tensors, numbers,
strings or nested dicts (flattened to dotted keys: {"model": {"w": ...}} is
stored as "model.w"). It writes a temporary file in the same folder, then
renames it over `path` with os.replace, so a reader (or a crash) never sees
half a file. `load(path)` returns the flat dict of arrays, read with
allow_pickle=False, so a checkpoint cannot run code.
"""

from __future__ import annotations

import os
import tempfile
import zipfile
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
        array = np.asarray(value.data if isinstance(value, Tensor) else value)
        if array.dtype.kind == "O":
            raise TypeError(f"save: {name!r} is an object array ({type(value).__name__}); only plain arrays are saved")
        if name in out:
            raise ValueError(f"save: the key {name!r} appears twice after flattening")
        out[name] = array
    return out


def save(obj: Mapping[str, Any], path: str | os.PathLike) -> None:
    """Write `obj` (a possibly nested dict of arrays) to `path` as .npz, atomically."""
    if not isinstance(obj, Mapping):
        raise TypeError(f"save: expected a dict of arrays, got {type(obj).__name__}")
    flat = _flatten(obj, "", {})
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=".npz")
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


def load(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a checkpoint written by `save`: a flat dict, dotted key -> array."""
    path = os.fspath(path)
    try:
        with np.load(path, allow_pickle=False) as archive:
            if not isinstance(archive, np.lib.npyio.NpzFile):
                raise ValueError("it holds a single array, not a dict of arrays")
            return {name: archive[name] for name in archive.files}
    except FileNotFoundError:
        raise FileNotFoundError(f"load: no checkpoint at {path}") from None
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as err:
        raise ValueError(f"load: {path} is not a readable checkpoint ({err})") from None
