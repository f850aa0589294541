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
import os
import posixpath
import re
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
    rows = array.reshape(-1, array.shape[-1]) if array.ndim >= 2 else array[:0]
    if len(rows) > 1 and (rows == rows[0]).all():
        raise WeightsError(f"{what} has every row the same: a degenerate table, not a trained weight matrix")
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


SUMS = "SHA256SUMS"
SUMS_LINE = re.compile(r"([0-9a-fA-F]{64}) [ *](.+)")
"""One line of a `sha256sum` output: the digest, a space, a space or `*` (binary mode), the file name."""
SUMS_TAG = re.compile(r"SHA256 \((.+)\) = ([0-9a-fA-F]{64})")
"""One line of a BSD-style (`sha256sum --tag`, `shasum`) output."""


def read_sums(path: Path) -> dict[str, str]:
    """{file: sha256} from a SHA256SUMS file, whose every non-blank line must be a `sha256sum` line (or its `--tag`
    form). A name is read relative to the file's directory however it is written (`./x`, `*x`, `a/../x`); one that
    points outside the directory, or is listed twice with different digests, is a WeightsError."""
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise WeightsError(f"{path} is not a text file of checksums") from None
    listed: dict[str, str] = {}
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        match, tagged = SUMS_LINE.fullmatch(line.strip()), SUMS_TAG.fullmatch(line.strip())
        if match is None and tagged is None:
            raise WeightsError(f"{path}, line {number}, is not '<sha256>  <file>': {line[:60]!r}")
        digest, name = (match[1], match[2]) if match else (tagged[2], tagged[1])
        name = posixpath.normpath(name)
        if name.startswith(("/", "../")) or name in ("..", "."):
            raise WeightsError(f"{path}, line {number}, names {name!r}, which is not a file of its directory")
        if listed.get(name, digest.lower()) != digest.lower():
            raise WeightsError(f"{path} lists {name} twice, with different digests")
        listed[name] = digest.lower()
    return listed


_CHECKED: dict[Path, tuple] = {}
"""Committed directories found intact in this process, by the stat of their every file (`check_committed`)."""


def _signature(directory: Path) -> tuple:
    return tuple(sorted((e.name, e.stat().st_size, e.stat().st_mtime_ns, e.stat().st_ctime_ns, e.inode())
                        for e in os.scandir(directory)))


def forget_checks() -> None:
    """Check every committed directory afresh on its next use (each command starts so)."""
    _CHECKED.clear()


def check_committed(name: str, directory: Path) -> None:
    """A committed model's directory against its SHA256SUMS, which must be there and list every other file, each
    with its digest: anything else is damage to the repository (a WeightsError naming the file and the `git
    checkout` that restores it), never a warning. Checked once per command while no file of it changes."""
    directory = Path(directory)
    sums = directory / SUMS
    restore = (f"so the committed model {name} is damaged: restore it with "
               f"`git checkout -- {directory.parent.name}/{name}`")
    if not directory.is_dir():
        raise WeightsError(f"{directory} is missing: restore it with `git checkout -- {directory.parent.name}/{name}`, "
                           f"or train it with `python -m analyses train --model {name}`")
    signature = _signature(directory)
    if _CHECKED.get(directory) == signature:
        return
    if not sums.is_file():
        raise WeightsError(f"{sums} is missing, {restore}")
    listed = read_sums(sums)
    present = sorted(p.name for p in directory.iterdir() if p.name != sums.name)
    for file in sorted(set(present) | set(listed)):
        path = directory / file
        why = ("is not listed in SHA256SUMS" if file not in listed else "is missing" if not path.is_file()
               else "does not match SHA256SUMS" if sha256_file(path) != listed[file] else None)
        if why:
            raise WeightsError(f"{path} {why}, {restore}")
    _CHECKED[directory] = signature
