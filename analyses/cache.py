"""The results cache that the report embeds, with fingerprints that say when it is stale.

Layout (committed, so the report renders without weights)::

    report/_cache/<scope>/<analysis>/
        manifest.json     inputs fingerprint, outputs with sha256, status, wall time
        numbers.json      every cited number: raw value, formatted text, description
        <table>.md/.csv   tables to embed, and at full precision for reviewers
        <figure>.svg/.pdf figures for the web and for print
        status.md         a provenance line, or the reason the analysis was skipped
    report/_cache/provenance.md   one table of every cached result
    _variables.yml                the formatted numbers, for {{< var scope.analysis.key >}}

`scope` is a model's slug (``gpt2``, ``minilm``) or ``common`` for analyses that
need no weights. An entry is replaced as a whole: written to a temporary
directory, then swapped in by two renames, and an interrupted swap is rolled back
on the next open, so a reader always sees either the old or the new entry.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path

import yaml

from analyses.results import Result

FORMAT_VERSION = 1
REPO = Path(__file__).resolve().parents[1]
DEFAULT_ROOT = REPO / "report" / "_cache"
DEFAULT_VARIABLES = REPO / "_variables.yml"
LIBRARIES = ("numpy", "scipy", "matplotlib", "plotly")
COMMON = "common"


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose numerics or output bytes the cache depends on."""
    return {name: version(name) for name in LIBRARIES}


def input_fingerprint(weights: dict[str, str] | None, code: str, params: dict) -> dict:
    """Everything a result depends on, and its sha256 `key`: weights, code, parameters, libraries."""
    inputs = {"weights": weights, "code": code, "params": json.loads(json.dumps(params, sort_keys=True)),
              "libraries": library_versions(), "format": FORMAT_VERSION}
    inputs["key"] = _sha(json.dumps(inputs, sort_keys=True).encode())
    return inputs


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def atomic_write(path: Path, data: bytes) -> None:
    """Write a file so that readers see the old content or the new, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


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
                                  for k, n in result.numbers.items()})
    for name, table in result.tables.items():
        out.add_text(f"{name}.md", table.to_markdown())
        out.add_text(f"{name}.csv", table.to_csv())
    for name, rendered in figures.items():
        for ext, data in rendered.items():
            out.files[f"{name}.{ext}"] = data
    for name, text in files.items():
        out.add_text(name, text)
    return out


class Cache:
    """Reads and writes cache entries under `root`, and the variables file the report cites."""

    def __init__(self, root: Path = DEFAULT_ROOT, variables: Path = DEFAULT_VARIABLES):
        self.root, self.variables = Path(root), Path(variables)

    def entry(self, scope: str, name: str) -> Path:
        return self.root / scope / name

    @contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the cache's write lock (one writer at a time), rolling back any interrupted swap first."""
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / ".lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                self.recover()
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def recover(self) -> None:
        """Undo what an interrupted write left: restore a displaced entry, drop temporary ones."""
        for scope in (p for p in self.root.iterdir() if p.is_dir()):
            for tmp in scope.glob(".new-*"):
                shutil.rmtree(tmp)
            for old in scope.glob(".old-*"):
                final = scope / old.name[len(".old-"):]
                if final.exists():
                    shutil.rmtree(old)
                else:
                    old.rename(final)

    def manifest(self, scope: str, name: str) -> dict | None:
        """The entry's manifest, or None when it is missing or unreadable."""
        path = self.entry(scope, name) / "manifest.json"
        try:
            return json.loads(path.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            return None

    def staleness(self, scope: str, name: str, inputs: dict, check_weights: bool = True) -> str | None:
        """Why the entry does not match `inputs` (a sentence), or None when it is fresh.

        With check_weights=False the weights are taken on trust (they may be unavailable).
        """
        manifest = self.manifest(scope, name)
        if manifest is None:
            return "not computed yet (no readable manifest)"
        old = manifest.get("input", {})
        changed = [k for k in ("code", "params", "libraries", "format") if old.get(k) != inputs.get(k)]
        if check_weights and old.get("weights") != inputs.get("weights"):
            changed.insert(0, "weights")
        if changed:
            return "changed since it was computed: " + ", ".join(changed)
        directory = self.entry(scope, name)
        for file, digest in manifest.get("outputs", {}).items():
            path = directory / file
            if not path.is_file():
                return f"output {file} is missing"
            if _sha(path.read_bytes()) != digest:
                return f"output {file} was modified after it was written"
        return None

    def write(self, scope: str, name: str, manifest: dict, outputs: Outputs) -> bool:
        """Replace the entry with `outputs` and `manifest`; returns False when nothing changed.

        If the outputs and inputs equal what is cached, the entry (wall time included)
        is left untouched, so a forced rerun leaves no diff.
        """
        outputs.files.pop("manifest.json", None)
        manifest = {**manifest, "outputs": {f: _sha(d) for f, d in sorted(outputs.files.items())}}
        old = self.manifest(scope, name)
        if old and {k: old.get(k) for k in ("input", "outputs", "status", "reason")} == {
                k: manifest.get(k) for k in ("input", "outputs", "status", "reason")} \
                and self.staleness(scope, name, manifest["input"]) is None:
            return False
        final = self.entry(scope, name)
        final.parent.mkdir(parents=True, exist_ok=True)
        new = Path(tempfile.mkdtemp(dir=final.parent, prefix=f".new-{name}."))
        new.chmod(0o755)
        for file, data in outputs.files.items():
            (new / file).write_bytes(data)
        (new / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
        displaced = final.parent / f".old-{name}"
        if final.exists():
            final.rename(displaced)
        new.rename(final)
        if displaced.exists():
            shutil.rmtree(displaced)
        return True

    def manifests(self) -> Iterator[tuple[str, str, dict]]:
        """(scope, analysis, manifest) for every readable entry, in a stable order."""
        for path in sorted(self.root.glob("*/*/manifest.json")):
            manifest = json.loads(path.read_text())
            yield path.parent.parent.name, path.parent.name, manifest

    def write_index(self) -> None:
        """Regenerate _variables.yml and provenance.md from the entries on disk."""
        variables: dict = {}
        rows = ["| scope | analysis | status | weights sha256 | code sha256 | wall time (s) |",
                "|:---|:---|:---|:---|:---|---:|"]
        for scope, name, manifest in self.manifests():
            node = variables.setdefault(scope, {})
            if manifest.get("shape"):
                model = node.setdefault("model", {k: str(v) for k, v in manifest["shape"].items()})
                model["sha256"] = manifest["input"]["weights"]["model.safetensors"][:12]
            entry = node.setdefault(name, {"status": manifest["status"]})
            if manifest["status"] == "skipped":
                entry["reason"] = manifest["reason"]
            numbers = self.entry(scope, name) / "numbers.json"
            if numbers.is_file():
                entry.update({k: v["text"] for k, v in json.loads(numbers.read_text()).items()})
            weights = (manifest["input"].get("weights") or {}).get("model.safetensors", "")
            rows.append(f"| {scope} | {name} | {manifest['status']} | `{weights[:12] or '-'}` | "
                        f"`{manifest['input']['code'][:12]}` | {manifest.get('wall_time_s', 0):.2f} |")
        header = "# Generated by `python -m analyses run` from report/_cache: do not edit by hand.\n"
        atomic_write(self.variables, (header + yaml.safe_dump(variables, sort_keys=True, allow_unicode=True,
                                                              width=1000)).encode())
        atomic_write(self.root / "provenance.md", ("\n".join(rows) + "\n").encode())
