"""The results cache that the report embeds, with fingerprints that say when it is stale.

Layout (committed, so the report renders without weights), under the repository root::

    report/_cache/<scope>/<analysis>/
        manifest.json     input fingerprint, outputs with their sha256, status
        numbers.json      every cited number: raw value, formatted text, format, description, declared accuracy
        <table>.md/.csv   tables to embed, and at full precision for reviewers
        tables.json       the format and declared accuracy of each numeric column of each table
        arrays.json       a summary of each array that feeds a figure, with its declared accuracy
        <figure>.svg/.pdf figures for the web and for print
        status.md         empty, or one line saying the analysis was skipped and why
    report/_cache/provenance.md   one table of every cached result       (see `engine.index`)
    _variables.yml                the formatted numbers, for {{< var scope.analysis.key >}}
    report/_cache/.timings.json   wall time of each computation (not committed: it differs per run)

`scope` is a model's slug (``gpt2``, ``minilm``) or ``common`` for analyses that
need no weights. An entry is replaced as a whole: written to a temporary
directory, then exchanged with the old one in one atomic rename (two renames where the
system lacks `renameat2`), so a reader never finds the entry missing; temporaries that an
interrupted write left are removed on the next write, and a failed write removes its own.
Each manifest records the sha256 of its own content: an edited manifest is as untrusted as
an edited output. The write lock is a `flock` on the cache directory itself, so no lock file
is created, and nothing takes it unless it is about to write: a read-only checkout whose
cache is fresh can be checked and rendered.
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from analyses.engine.fingerprints import changed_libraries
from analyses.engine.results import Number, Result, format_value

COMMON = "common"
CACHE_DIR = Path("report") / "_cache"
VARIABLES = "_variables.yml"
TIMINGS = ".timings.json"
ROOT_MARKERS = ("_quarto.yml", "report")
SEAL = "manifest_sha256"
"""The manifest key holding the sha256 of the rest of the manifest."""
STATUSES = ("ok", "skipped")


class RootError(RuntimeError):
    """No report repository where the cache could live."""


class DamagedEntry(RuntimeError):
    """A cited cache entry, damaged or gone, that a run would drop from the cited files without recomputing it."""


def is_root(directory: Path) -> bool:
    """Whether `directory` is a report repository: it holds both `_quarto.yml` and `report/`."""
    return (directory / ROOT_MARKERS[0]).is_file() and (directory / ROOT_MARKERS[1]).is_dir()


def find_root(start: Path | str | None = None) -> Path:
    """The report repository containing `start` (default: the working directory): the nearest directory
    upwards that holds both `_quarto.yml` and `report/`. Never the installed package's location."""
    here = Path(start or Path.cwd()).resolve()
    for candidate in (here, *here.parents):
        if is_root(candidate):
            return candidate
    raise RootError(f"{here} is not inside the report's repository (no _quarto.yml with a report/ folder "
                    "beside it); run from the repository or pass --root DIR")


def checked_root(directory: Path) -> Path:
    """`directory` itself when it is a report repository (what --root names); never a new cache elsewhere."""
    try:
        found = is_root(Path(directory))
    except OSError as exc:  # a name too long for the system, …
        text = str(directory)
        raise RootError(f"--root {text if len(text) <= 80 else text[:60] + '…'} cannot be looked up: "
                        f"{exc.strerror or exc}") from None
    if not found:
        raise RootError(f"--root {directory} is not the report's repository (no _quarto.yml with a report/ "
                        "folder beside it)")
    return Path(directory)


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _seal(manifest: dict) -> str:
    """The sha256 of a manifest without its seal."""
    body = {k: v for k, v in manifest.items() if k != SEAL}
    return _sha(json.dumps(body, indent=2, sort_keys=True).encode())


def _well_formed(manifest) -> bool:
    """Whether a parsed manifest has the structure the engine writes (types of every field it reads)."""
    if not isinstance(manifest, dict) or manifest.get("status") not in STATUSES:
        return False
    inputs, outputs, shape = manifest.get("input"), manifest.get("outputs"), manifest.get("shape")
    return (isinstance(inputs, dict) and isinstance(inputs.get("code"), str)
            and isinstance(inputs.get("weights") or {}, dict) and isinstance(inputs.get("libraries") or {}, dict)
            and isinstance(outputs, dict)
            and all(isinstance(f, str) and "/" not in f and isinstance(d, str) for f, d in outputs.items())
            and (shape is None or isinstance(shape, dict))
            and (manifest["status"] == "ok" or isinstance(manifest.get("reason"), str)))


def _remove(path: Path) -> None:
    """Delete a file or a directory tree (whichever is there; nothing when nothing is)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)


_RENAME_EXCHANGE, _AT_FDCWD = 2, -100
_LIBC = ctypes.CDLL(None, use_errno=True)


def _exchange(a: Path, b: Path) -> bool:
    """Swap two existing paths in one atomic step (Linux `renameat2(RENAME_EXCHANGE)`); False where the
    system or file system cannot, so the caller falls back to two renames."""
    renameat2 = getattr(_LIBC, "renameat2", None)
    if renameat2 is None:
        return False
    if renameat2(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False
    raise OSError(err, os.strerror(err), str(b))


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old content or the new, never a partial one.

    The file gets the permissions of any newly created file (0666 less the umask), not mkstemp's 0600.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def miscited(path: Path) -> str | None:
    """Why a numbers.json cannot be cited as it stands (a sentence), or None: it must be an object of numbers, each
    with a text that is its value as its format prints it (a text alone: the value itself). A sealed entry is not
    thereby right: this is what resealing cannot make agree."""
    try:
        numbers = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        return "numbers.json is not readable JSON"
    if not isinstance(numbers, dict) or not all(isinstance(n, dict) and isinstance(n.get("text"), str)
                                                for n in numbers.values()):
        return "numbers.json is not an object of numbers, each with its text"
    for key, number in numbers.items():
        value, fmt = number.get("value"), number.get("format")
        try:
            printed = value if fmt is None else format_value(value, fmt) if isinstance(fmt, str) and isinstance(
                value, (int, float)) and not isinstance(value, bool) else None
        except (TypeError, ValueError):
            printed = None
        if printed != number["text"]:
            return f"numbers.json cites {key} as {number['text']!r}, which is not its value {value!r} as printed"
    return None


def writable(path: Path) -> None:
    """Refuse now, before any work, an output file that cannot be written where the user named it (an OSError naming
    it): a directory, a folder that does not exist, or one without write permission."""
    target = Path(os.path.realpath(path))
    if target.is_dir():
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    if not target.parent.is_dir():
        raise FileNotFoundError(errno.ENOENT, f"{os.strerror(errno.ENOENT)} (its folder)", str(path))
    where = target if target.exists() and not target.is_file() else target.parent
    if not os.access(where, os.W_OK):
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))


def write_output(path: Path, data: bytes) -> None:
    """Write an output file the user named, as named: a symlink's target, never the link; a FIFO or a device as a
    stream into it, never replaced by a file; a regular file (or a new one) whole or not at all (`atomic_write`).
    An OSError names `path`, never a temporary file."""
    try:
        writable(path)
        target = Path(os.path.realpath(path))
        if target.exists() and not target.is_file():
            with open(target, "wb") as stream:
                stream.write(data)
        else:
            atomic_write(target, data)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror or str(exc), str(path)) from None


@dataclass
class Outputs:
    """The files of one cache entry, as bytes, before they are written."""

    files: dict[str, bytes] = field(default_factory=dict)

    def add_text(self, name: str, text: str) -> None:
        self.files[name] = text.encode()

    def add_json(self, name: str, obj) -> None:
        self.add_text(name, json.dumps(obj, indent=2, sort_keys=True) + "\n")


def result_outputs(result: Result, figures: dict[str, dict[str, bytes]], files: dict[str, str]) -> Outputs:
    """Serialise a result: numbers.json, each table as .md and .csv, each figure in every format."""
    out = Outputs()
    out.add_json("numbers.json", {k: {"value": n.value, "text": n.text, "description": n.description}
                                  | ({"format": n.fmt, "accuracy": n.accuracy.as_dict()} if isinstance(n, Number) else {})
                                  for k, n in result.numbers.items()})
    for name, table in result.tables.items():
        out.add_text(f"{name}.md", table.to_markdown())
        out.add_text(f"{name}.csv", table.to_csv())
    if result.tables:
        out.add_json("tables.json", {name: table.accuracy_json() for name, table in result.tables.items()})
    arrays = {name: summary | {"accuracy": result.accuracy_of_array(name).as_dict()}
              for name, summary in result.array_summaries().items()}
    if arrays:
        out.add_json("arrays.json", arrays)
    for name, rendered in figures.items():
        for ext, data in rendered.items():
            out.files[f"{name}.{ext}"] = data
    for name, text in files.items():
        out.add_text(name, text)
    return out


class Cache:
    """Reads and writes cache entries under `root`, and the variables file the report cites."""

    def __init__(self, root: Path, variables: Path):
        self.root, self.variables = Path(root), Path(variables)

    @classmethod
    def at(cls, repository: Path) -> Cache:
        """The cache of a report repository: report/_cache and _variables.yml under it."""
        return cls(Path(repository) / CACHE_DIR, Path(repository) / VARIABLES)

    @property
    def provenance(self) -> Path:
        return self.root / "provenance.md"

    def entry(self, scope: str, name: str) -> Path:
        return self.root / scope / name

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cache's write lock (one writer at a time), removing what interrupted writes left first.

        The lock is a flock on the cache directory, so it leaves no file behind."""
        self.root.mkdir(parents=True, exist_ok=True)
        lock = os.open(self.root, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self.recover()
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
            os.close(lock)

    def _scopes(self) -> list[Path]:
        return sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")) \
            if self.root.is_dir() else []

    def leftovers(self) -> list[Path]:
        """What an interrupted write left behind: temporary or displaced entries, temporary copies of the
        cited files and of the timings, and anything that is not a directory where an entry should be."""
        entries = [p for scope in self._scopes() for pattern in (".new-*", ".old-*") for p in scope.glob(pattern)]
        strays = [p for scope in self._scopes() for p in scope.iterdir()
                  if not p.name.startswith(".") and not p.is_dir()]
        temporaries = [*self.variables.parent.glob(f".{self.variables.name}.*.tmp"),
                       *(self.root.glob(".*.tmp") if self.root.is_dir() else ())]
        return sorted(entries + strays + temporaries)

    def recover(self) -> None:
        """Undo what an interrupted write left: restore a displaced entry, delete everything else."""
        for path in self.leftovers():
            final = path.parent / path.name[len(".old-"):]
            if path.name.startswith(".old-") and path.is_dir() and not os.path.lexists(final):
                path.rename(final)
            else:
                _remove(path)

    def manifest(self, scope: str, name: str) -> dict | None:
        """The entry's manifest, or None when it is missing, unreadable or not of the structure written."""
        path = self.entry(scope, name) / "manifest.json"
        try:
            manifest = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None
        return manifest if _well_formed(manifest) else None

    def unverifiable(self, scope: str, name: str) -> str | None:
        """Why the entry's files cannot be trusted as written (a sentence), or None when each output
        matches the sha256 its manifest recorded."""
        manifest = self.manifest(scope, name)
        if manifest is None:
            return "not computed yet (no readable manifest)"
        if manifest.get(SEAL) != _seal(manifest):
            return "its manifest was modified after it was written"
        directory = self.entry(scope, name)
        for file, digest in manifest["outputs"].items():
            path = directory / file
            if not path.is_file():
                return f"output {file} is missing"
            if _sha(path.read_bytes()) != digest:
                return f"output {file} was modified after it was written"
        return miscited(directory / "numbers.json") if "numbers.json" in manifest["outputs"] else None

    def staleness(self, scope: str, name: str, inputs: dict, check_weights: bool = True) -> str | None:
        """Why the entry does not match `inputs` (a sentence), or None when it is fresh.

        With check_weights=False the weights are taken on trust (they may be unavailable).
        """
        manifest = self.manifest(scope, name)
        if manifest is None:
            return "not computed yet (no readable manifest)"
        old = manifest["input"]
        changed = [k for k in ("data", "code", "params", "figures", "format") if old.get(k) != inputs.get(k)]
        if check_weights and old.get("weights") != inputs.get("weights"):
            changed.insert(0, "weights")
        libraries = changed_libraries(old.get("libraries"), inputs.get("libraries", {}))
        if libraries:
            changed.append("libraries (" + ", ".join(libraries[:3]) + (", …" if len(libraries) > 3 else "") + ")")
        if changed:
            return "changed since it was computed: " + ", ".join(changed)
        return self.unverifiable(scope, name)

    def write(self, scope: str, name: str, manifest: dict, outputs: Outputs) -> bool:
        """Replace the entry with `outputs` and `manifest`; returns False when nothing changed.

        If the outputs and inputs equal what is cached, the entry is left untouched, so a forced
        rerun leaves no diff. On any failure (a full disk, an interrupt) the temporary directory is
        removed and the previous entry stays in place.
        """
        outputs.files.pop("manifest.json", None)
        manifest = {**manifest, "outputs": {f: _sha(d) for f, d in sorted(outputs.files.items())}}
        manifest[SEAL] = _seal(manifest)
        if self.manifest(scope, name) == manifest and self.unverifiable(scope, name) is None:
            return False
        final = self.entry(scope, name)
        if os.path.lexists(final.parent) and not final.parent.is_dir():
            _remove(final.parent)  # a stray file where the scope's directory belongs
        final.parent.mkdir(parents=True, exist_ok=True)
        new = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".new-{name}."))
        displaced = final.parent / f".old-{name}"
        swapped = False
        try:
            new.chmod(0o777 & ~_umask())
            for file, data in outputs.files.items():
                (new / file).write_bytes(data)
            (new / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n", encoding="utf-8")
            swapped = os.path.lexists(final) and _exchange(new, final)  # `new` now holds the old entry
            if not swapped:
                if os.path.lexists(final):
                    final.rename(displaced)
                new.rename(final)
        except BaseException:
            shutil.rmtree(new, ignore_errors=True)
            if os.path.lexists(displaced) and not os.path.lexists(final):
                displaced.rename(final)
            raise
        _remove(new if swapped else displaced)
        return True

    def entries(self) -> list[tuple[str, str]]:
        """(scope, analysis) of every entry directory on disk, in a stable order."""
        return [(scope.name, entry.name) for scope in self._scopes()
                for entry in sorted(scope.iterdir()) if entry.is_dir() and not entry.name.startswith(".")]

    def remove(self, scope: str, name: str) -> None:
        """Delete one entry (and its scope folder when that leaves it empty)."""
        shutil.rmtree(self.entry(scope, name))
        if not any(self.root.joinpath(scope).iterdir()):
            self.root.joinpath(scope).rmdir()

    def _timings(self) -> dict[str, dict]:
        try:
            timings = json.loads((self.root / TIMINGS).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return {}
        return {k: v for k, v in timings.items() if isinstance(v, dict)} if isinstance(timings, dict) else {}

    def timings(self) -> dict[str, float]:
        """{scope/analysis: wall seconds} of each job's last computation (0 where none, or no number, was recorded)."""
        return {k: float(wall) if isinstance(wall := v.get("wall"), (int, float)) and not isinstance(wall, bool)
                else 0.0 for k, v in self._timings().items()}

    def record_timings(self, measures: dict[str, dict[str, float]]) -> None:
        """Merge `{scope/analysis: {wall, cpu, peak_mb}}` into the uncommitted timings file, where it can be written:
        it only orders the next run's jobs, so a read-only cache that nothing else changed in is no error."""
        timings = self._timings() | {k: {m: round(v, 3) for m, v in d.items()} for k, d in measures.items()}
        try:
            atomic_write(self.root / TIMINGS, (json.dumps(dict(sorted(timings.items())), indent=2) + "\n").encode())
        except OSError as exc:
            if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
                raise
