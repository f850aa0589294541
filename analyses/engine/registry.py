"""The registry of analyses: what each computes, from which tensors, with which parameters.

A topic is a module at the top of the `analyses` package (e.g. `analyses/position_matrix.py`), or a
subpackage there whose modules share the work (e.g. `analyses/position_content/`): it defines pure compute
functions and separate figure functions, then calls `register(...)`. `all_analyses()` imports every such
module, found by where it lives, so adding a topic touches only its module (and its chapter). The engine
(`analyses.engine`) and the shared helpers (`analyses.toolkit`) are subpackages and are never taken for topics.

Each analysis's code hash covers everything on the path from its compute function to the
bytes committed in the cache: its topic module, every `analyses` module that module uses
(found through its globals), and every engine module except the command line, the
benchmark and the recomputation check, which shape no output.
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
from analyses.engine.results import Result
from analyses.engine.shapes import ModelShape

FigureFn = Callable[[Result, ModelShape | None], object]
"""Draws one figure from a result; returns a matplotlib Figure (see `analyses.toolkit.plotting`)."""
FileFn = Callable[[Result, ModelShape | None], str]
"""Writes one extra text output (e.g. an interactive HTML view) from a result."""

ENGINE = "analyses.engine"
TOOLKIT = "analyses.toolkit"
FRONT_ENDS = frozenset({"analyses.engine.cli", "analyses.engine.bench", "analyses.engine.verify",
                        "analyses.engine.provenance", "analyses.engine.compare", "analyses.__main__"})
"""Modules that start runs, check or print, but shape no cached byte: left out of every code hash."""


class UnknownAnalysisError(KeyError):
    """A name that no registered analysis has."""


FAMILIES_READ = ("gpt2", "bert")
"""The model families whose blocks (LayerNorm before or after each sublayer, causal or not) and text (special
tokens, context) the analyses are written for."""


def unread_family(family: str) -> str:
    """The need, met by no source, of an analysis that cannot read a model of `family` (see `reads_family`)."""
    return f"a reading of {family} blocks"


@dataclass(frozen=True)
class Analysis:
    """One registered analysis.

    `scope` is "model" (runs once per model, on that model's tensors: called as
    compute(tensors, shape, **params)) or "common" (needs no weights: called as
    compute(**params), cached once). `needs` lists canonical tensor names (a `blocks.*.`
    pattern means every layer) and `tokenizer` when it tokenises text; `family_needs` adds
    what only one model family reads (e.g. BERT's embedding LayerNorm). `libraries` names
    installed distributions beyond the base set (see `engine.fingerprints`) whose versions
    can change its output, e.g. torch for an analysis that runs a model. `groups` names the sets it belongs
    to that a front end runs together (e.g. "first report", which the benchmark times); they shape no output.
    `data`, for an analysis that reads data files beyond the weights (a text corpus), returns {name: sha256}
    of those files and raises ValueError, in one line, when one is missing or not the expected file; the
    digests join its fingerprint.
    """

    name: str
    title: str
    compute: Callable[..., Result]
    needs: tuple[str, ...] = ()
    params: Mapping[str, object] = field(default_factory=dict)
    figures: Mapping[str, FigureFn] = field(default_factory=dict)
    files: Mapping[str, FileFn] = field(default_factory=dict)
    scope: str = "model"
    libraries: tuple[str, ...] = ()
    family_needs: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    groups: tuple[str, ...] = ()
    data: Callable[[], Mapping[str, str]] | None = None

    def needs_for(self, family: str) -> tuple[str, ...]:
        """What this analysis reads from a model of the given family ("gpt2" or "bert"); for another family
        whose blocks or text it does not know how to read, also `unread_family(family)`, which no source has."""
        extra = () if self.reads_family(family) else (unread_family(family),)
        return (*self.needs, *self.family_needs.get(family, ()), *extra)

    def reads_family(self, family: str) -> bool:
        """Whether this analysis can read a model of `family`: GPT-2 and BERT always; another (GPT-1's
        openai-gpt) only when the analysis reads no LayerNorm, declares no family-specific needs and tokenises
        no text, i.e. reads its tensors as weights, never through the blocks' order or a forward pass."""
        return family in FAMILIES_READ or not (self.family_needs or "tokenizer" in self.needs
                                               or any(".ln" in need for need in self.needs))

    def run(self, tensors: Mapping | None, shape: ModelShape | None) -> Result:
        if self.scope == "common":
            return self.compute(**self.params)
        return self.compute(tensors, shape, **self.params)

    @property
    def module(self) -> str:
        return self.compute.__module__

    def code_hash(self) -> str:
        """sha256 over the source of every module on the path from this analysis to its cached bytes."""
        digest = hashlib.sha256()
        for name in sorted(modules_hashed(self.module)):
            digest.update(name.encode() + b"\0" + _source(name).encode() + b"\0")
        return digest.hexdigest()


_REGISTRY: dict[str, Analysis] = {}


def register(name: str, title: str, compute: Callable[..., Result], **kwargs) -> Analysis:
    """Add an analysis to the registry (called at import time by topic modules)."""
    item = Analysis(name=name, title=title, compute=compute, **kwargs)
    if item.scope not in {"model", "common"}:
        raise ValueError(f"analysis {name}: scope must be 'model' or 'common', not {item.scope!r}")
    if name in _REGISTRY and _REGISTRY[name].module != item.module:
        raise ValueError(f"two analyses are named {name!r}")
    missing = set(inspect.signature(compute).parameters) - set(item.params) - (
        {"tensors", "shape"} if item.scope == "model" else set())
    if missing:
        raise ValueError(f"analysis {name}: parameters without a default in params: {sorted(missing)}")
    _REGISTRY[name] = item
    return item


def group(name: str) -> tuple[str, ...]:
    """The names of the analyses in the named group, in name order."""
    return tuple(a.name for a in all_analyses().values() if name in a.groups)


def topic_modules() -> list[str]:
    """The topic modules: every module at the top of the `analyses` package, and every module of a subpackage
    there other than the engine and the toolkit (none whose name starts with _)."""
    modules = []
    for info in pkgutil.iter_modules(analyses.__path__):
        name = f"analyses.{info.name}"
        if info.name.startswith("_") or name in (ENGINE, TOOLKIT):
            continue
        if not info.ispkg:
            modules.append(name)
            continue
        package = importlib.import_module(name)
        modules += [f"{name}.{sub.name}" for sub in pkgutil.iter_modules(package.__path__) if not sub.name.startswith("_")]
    return modules


def all_analyses() -> dict[str, Analysis]:
    """Import every topic module and return the analyses by name, in name order.

    Each hashed module's source is read right after the imports, so that an edit made while a
    run is under way cannot give old results the new code's hash.
    """
    for name in [*topic_modules(), *engine_modules()]:
        importlib.import_module(name)
    for name in [n for n in sys.modules if n.startswith("analyses.") and n not in FRONT_ENDS]:
        _source(name)
    return dict(sorted(_REGISTRY.items()))


@functools.cache
def _source(module: str) -> str:
    """The source of an imported module, read once per process."""
    return inspect.getsource(sys.modules[module])


@functools.cache
def engine_modules() -> frozenset[str]:
    """Every module of the engine package except the front ends, imported (so the set never depends on
    what a process happened to import before)."""
    package = importlib.import_module(ENGINE)
    names = frozenset(f"{ENGINE}.{info.name}" for info in pkgutil.iter_modules(package.__path__)) - FRONT_ENDS
    for name in sorted(names):
        importlib.import_module(name)
    return names


def modules_hashed(module: str) -> set[str]:
    """`module`, the `analyses` modules reachable from it through globals, and the output-shaping engine."""
    return modules_used(sys.modules[module]) | engine_modules()


def modules_used(module: ModuleType) -> set[str]:
    """The `analyses` modules reachable from `module` through its globals (imports, functions, classes)."""
    seen: set[str] = set()
    stack = [module.__name__]
    while stack:
        name = stack.pop()
        if name in seen or name in FRONT_ENDS or name == "analyses" or name not in sys.modules:
            continue
        seen.add(name)
        for value in vars(sys.modules[name]).values():
            used = value.__name__ if isinstance(value, ModuleType) else getattr(value, "__module__", None)
            if isinstance(used, str) and used.startswith("analyses.") and used in sys.modules:
                stack.append(used)
    return seen
