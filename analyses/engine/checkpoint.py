"""Safe, lazy reading of safetensors files, with clear errors for bad files.

A safetensors file is an 8-byte little-endian header length, a JSON header that
maps each tensor name to dtype, shape and byte offsets, then the raw data. The
format holds no code, so loading it cannot execute anything. Before handing the
file to the `safetensors` library we check the header ourselves, so that a
truncated or corrupted file fails with a message that names the file and the
problem instead of an error from deep inside a parser.
"""

from __future__ import annotations

import hashlib
import json
import struct
from pathlib import Path

import numpy as np

_DTYPE_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1, "BOOL": 1}
_MAX_HEADER = 100_000_000


class WeightsError(RuntimeError):
    """Weights that cannot be used: missing, unreachable, truncated, corrupted or mismatched."""


def read_header(path: Path) -> dict[str, dict]:
    """Return the validated tensor table {name: {dtype, shape, data_offsets}} of a safetensors file."""
    path = Path(path)
    if not path.is_file():
        raise WeightsError(f"weights file not found: {path}")
    size = path.stat().st_size
    with path.open("rb") as f:
        prefix = f.read(8)
        if len(prefix) < 8:
            raise WeightsError(f"{path} is truncated: {size} bytes, too short for a safetensors header")
        (n,) = struct.unpack("<Q", prefix)
        if n > min(size - 8, _MAX_HEADER):
            raise WeightsError(
                f"{path} is truncated or not a safetensors file: header claims {n} bytes, file has {size}")
        try:
            header = json.loads(f.read(n))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise WeightsError(f"{path} is corrupted: its safetensors header is not valid JSON ({exc})") from None
        except RecursionError:
            raise WeightsError(f"{path} is corrupted: its safetensors header is nested too deeply") from None
    if not isinstance(header, dict):
        raise WeightsError(f"{path} is corrupted: its safetensors header is not a table of tensors")
    header.pop("__metadata__", None)
    data_size = size - 8 - n
    for name, info in header.items():
        try:
            start, end = info["data_offsets"]
            expected = int(np.prod(info["shape"], dtype=np.int64)) * _DTYPE_BYTES[info["dtype"]]
        except (KeyError, TypeError, ValueError):
            raise WeightsError(f"{path} is corrupted: entry {name!r} of its header is malformed") from None
        if end - start != expected:
            raise WeightsError(
                f"{path} is corrupted: tensor {name!r} has {end - start} bytes for shape {info['shape']}")
        if end > data_size:
            raise WeightsError(
                f"{path} is truncated: tensor {name!r} ends at byte {end} of the data, "
                f"but the file holds only {data_size} data bytes"
            )
    return header


FLOATING = frozenset({"F64", "F32", "F16", "BF16"})
"""The safetensors dtypes a weight may have."""
MAX_MAGNITUDE = 1e4
"""The largest plausible |value| of a trained weight (GPT-2 small's largest is 17, MiniLM's 12): a value beyond
it is corruption, not a parameter, and would go straight into cited numbers."""


def plausible_or_raise(array: np.ndarray, what: str) -> np.ndarray:
    """`array` itself when its values are finite, at most MAX_MAGNITUDE in size and, for a matrix, not all
    zero; otherwise a WeightsError that says which check failed."""
    bad = array.size - int(np.count_nonzero(np.isfinite(array)))
    if bad:
        raise WeightsError(f"{what} holds {bad} non-finite values (NaN or inf) of {array.size}")
    if array.size and np.abs(array).max() > MAX_MAGNITUDE:
        raise WeightsError(f"{what} holds a value of {np.abs(array).max():.3g}, beyond the plausible "
                           f"{MAX_MAGNITUDE:g} for a weight: the file is corrupted")
    if array.ndim >= 2 and not np.any(array):
        raise WeightsError(f"{what} is all zeros: not a trained weight matrix")
    return array


def sha256_file(path: Path, chunk: int = 1 << 22) -> str:
    """Hex sha256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with Path(path).open("rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


class SafetensorsFile:
    """Lazy access to the tensors of one validated safetensors file, as float64-free numpy arrays."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.header = read_header(self.path)

    def names(self) -> set[str]:
        return set(self.header)

    def load(self, name: str) -> np.ndarray:
        from safetensors import safe_open

        if name not in self.header:
            raise KeyError(name)
        try:
            with safe_open(str(self.path), framework="np") as f:
                return f.get_tensor(name)
        except Exception as exc:  # the library's own error type differs between versions
            raise WeightsError(f"cannot read tensor {name!r} from {self.path}: {exc}") from None
