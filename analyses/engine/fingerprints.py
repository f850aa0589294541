"""Everything a cached result depends on, as one fingerprint: weights, code, parameters, libraries.

Libraries: the installed versions of every distribution that can change an output byte.
That is the dependency closure of the base set below (NumPy and SciPy compute; Matplotlib
draws, with Pillow for embedded images, fontTools for PDF font subsets, contourpy and
kiwisolver for contours and layout; Plotly writes the interactive views; safetensors reads
the weights; PyYAML writes the variables file), plus the closure of any distributions an
analysis declares (`Analysis.libraries`, e.g. torch for a forward pass), plus the Python
version. `requirements.lock` pins all of them, so every machine that installs the project
the documented way computes the same fingerprint.
"""

from __future__ import annotations

import functools
import hashlib
import json
import platform
import re
from importlib.metadata import PackageNotFoundError, distribution

BASE_LIBRARIES = ("numpy", "scipy", "matplotlib", "plotly", "safetensors", "PyYAML")
FORMAT_VERSION = 2
"""Bumped when the layout of a cache entry changes, so that every entry is rewritten."""


def _normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


@functools.cache
def dependency_closure(roots: tuple[str, ...]) -> dict[str, str]:
    """{distribution: version} for `roots` and everything they require (extras and unmet markers left out)."""
    from packaging.requirements import Requirement

    versions: dict[str, str] = {}
    stack = list(roots)
    while stack:
        name = _normalise(stack.pop())
        if name in versions:
            continue
        try:
            dist = distribution(name)
        except PackageNotFoundError:
            raise RuntimeError(f"the distribution {name!r} that the analyses depend on is not installed") from None
        versions[name] = dist.version
        for text in dist.requires or ():
            requirement = Requirement(text)
            if requirement.marker is None or requirement.marker.evaluate({"extra": ""}):
                stack.append(requirement.name)
    return dict(sorted(versions.items()))


def library_versions(extra: tuple[str, ...] = ()) -> dict[str, str]:
    """Versions of Python and of every distribution whose numerics or output bytes a result can depend on."""
    return {"python": platform.python_version(), **dependency_closure(tuple(sorted({*BASE_LIBRARIES, *extra})))}


def input_fingerprint(weights: dict[str, str] | None, code: str, params: dict, libraries: dict[str, str],
                      figures: tuple[str, ...] = (), data: dict[str, str] | None = None) -> dict:
    """Everything a result depends on, and its sha256 `key`: weights, code, parameters, libraries, which
    figures are drawn (those the book shows), and the data files beyond the weights that it reads (if any)."""
    inputs = {"weights": weights, "code": code, "params": json.loads(json.dumps(params, sort_keys=True)),
              "libraries": libraries, "figures": sorted(figures), "format": FORMAT_VERSION}
    if data:
        inputs["data"] = dict(sorted(data.items()))
    inputs["key"] = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    return inputs


def changed_libraries(old: dict | None, new: dict) -> list[str]:
    """'name old → new' for each library whose version differs (added and removed ones included)."""
    old = old or {}
    return [f"{name} {old.get(name, 'absent')} → {new.get(name, 'absent')}"
            for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name)]
