"""The registry of analyses: what each computes, from which tensors, with which parameters.

A topic module (e.g. `analyses/position_matrix.py`) defines pure compute
functions and separate figure functions, then calls `register(...)`. Every
module of the package is imported by `all_analyses()`, so adding a topic needs
no edit elsewhere.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType

import analyses
from analyses.results import Result
from analyses.sources import ModelShape

FigureFn = Callable[[Result, ModelShape | None], object]
"""Draws one figure from a result; returns a matplotlib Figure (see `analyses.plotting`)."""
FileFn = Callable[[Result, ModelShape | None], str]
"""Writes one extra text output (e.g. an interactive HTML view) from a result."""

_INFRASTRUCTURE = {"analyses.cli", "analyses.cache", "analyses.registry", "analyses.__main__", "analyses.bench"}
_ALWAYS_HASHED = ("analyses.sources", "analyses.checkpoint", "analyses.results")


@dataclass(frozen=True)
class Analysis:
    """One registered analysis.

    `scope` is "model" (runs once per model, on that model's tensors: called as
    compute(tensors, shape, **params)) or "common" (needs no weights: called as
    compute(**params), cached once). `needs` lists canonical tensor names; a
    `blocks.*.` pattern means every layer.
    """

    name: str
    title: str
    compute: Callable[..., Result]
    needs: tuple[str, ...] = ()
    params: Mapping[str, object] = field(default_factory=dict)
    figures: Mapping[str, FigureFn] = field(default_factory=dict)
    files: Mapping[str, FileFn] = field(default_factory=dict)
    scope: str = "model"

    def run(self, tensors: Mapping | None, shape: ModelShape | None) -> Result:
        if self.scope == "common":
            return self.compute(**self.params)
        return self.compute(tensors, shape, **self.params)

    def code_hash(self) -> str:
        """sha256 over the source of the module defining this analysis and every `analyses` module it uses."""
        digest = hashlib.sha256()
        for name in sorted(_modules_used(sys.modules[self.compute.__module__])):
            digest.update(name.encode() + b"\0" + _source(name).encode() + b"\0")
        return digest.hexdigest()


_REGISTRY: dict[str, Analysis] = {}


def register(name: str, title: str, compute: Callable[..., Result], **kwargs) -> Analysis:
    """Add an analysis to the registry (called at import time by topic modules)."""
    item = Analysis(name=name, title=title, compute=compute, **kwargs)
    if item.scope not in {"model", "common"}:
        raise ValueError(f"analysis {name}: scope must be 'model' or 'common', not {item.scope!r}")
    if name in _REGISTRY and _REGISTRY[name].compute.__module__ != compute.__module__:
        raise ValueError(f"two analyses are named {name!r}")
    missing = set(inspect.signature(compute).parameters) - set(item.params) - (
        {"tensors", "shape"} if item.scope == "model" else set())
    if missing:
        raise ValueError(f"analysis {name}: parameters without a default in params: {sorted(missing)}")
    _REGISTRY[name] = item
    return item


def all_analyses() -> dict[str, Analysis]:
    """Import every topic module of the package and return the analyses by name, in name order.

    Each module's source is read right after its import, so that an edit made while a
    run is under way cannot give old results the new code's hash.
    """
    for info in pkgutil.iter_modules(analyses.__path__, "analyses."):
        if info.name not in _INFRASTRUCTURE:
            importlib.import_module(info.name)
    for name in [n for n in sys.modules if n.startswith("analyses.") and n not in _INFRASTRUCTURE]:
        _source(name)
    return dict(sorted(_REGISTRY.items()))


@functools.cache
def _source(module: str) -> str:
    """The source of an imported module, read once per process."""
    return inspect.getsource(sys.modules[module])


def _modules_used(module: ModuleType) -> set[str]:
    """The `analyses` modules reachable from `module` through its globals (imports, functions, classes)."""
    seen: set[str] = set()
    stack = [module.__name__, *_ALWAYS_HASHED]
    while stack:
        name = stack.pop()
        if name in seen or name in _INFRASTRUCTURE or name == "analyses":
            continue
        seen.add(name)
        for value in vars(sys.modules[name]).values():
            used = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
            if isinstance(used, str) and used.startswith("analyses.") and used in sys.modules:
                stack.append(used)
    return seen
