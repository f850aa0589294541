"""The package's layout rules, read from the source with `ast` (nothing is imported):

* a topic (a module or subpackage at the top of `analyses`) imports no other topic: what two topics share
  lives in the toolkit;
* the toolkit imports nothing else of `analyses` (no engine module, no topic);
* the engine imports no topic, names no analysis or topic, and computes no science (no matrix decomposition).

Each failure names the file, the line and what it imports or names.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "analyses"
SHARED = ("engine", "toolkit")
DECOMPOSITIONS = {"svd", "eig", "eigh", "eigvals", "eigvalsh", "qr", "lstsq", "pinv", "cholesky"}


def room(module: str) -> str | None:
    """The top-level part of `analyses` a dotted module name lies in: a topic, "engine" or "toolkit"."""
    parts = module.split(".")
    if parts[0] != "analyses" or len(parts) < 2:
        return None
    return parts[1]


def rooms() -> dict[Path, str]:
    """Every source file of the package with its room (files at the top whose name starts with _ have none)."""
    out = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        top = path.relative_to(PACKAGE).parts[0].removesuffix(".py")
        if not top.startswith("_"):
            out[path] = top
    return out


def topics() -> set[str]:
    return set(rooms().values()) - set(SHARED)


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, source: str | None = None) -> list[tuple[int, str]]:
    """(line, module) for every import of an `analyses` module in the file (or in `source`, read as that file),
    at any depth (relative ones resolved)."""
    tree = ast.parse(path.read_text(encoding="utf-8") if source is None else source)
    package = module_name(path) if path.name == "__init__.py" else module_name(path).rpartition(".")[0]
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], *filter(None, [base])])
            # `from analyses import helix` imports the module analyses.helix
            out += [(node.lineno, f"{base}.{alias.name}" if base == "analyses" else base) for alias in node.names]
    return [(line, name) for line, name in out if name == "analyses" or name.startswith("analyses.")]


def offending_imports(allowed) -> list[str]:
    """'file:line imports module' for every import that `allowed(own_room, imported_room)` refuses (the package
    `analyses` itself, which only finds its topics, is no room)."""
    out = []
    for path, own in rooms().items():
        for line, name in imported(path):
            if name != "analyses" and not allowed(own, room(name)):
                out.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {name}")
    return out


def test_no_topic_imports_another_topic():
    bad = offending_imports(lambda own, other: own in SHARED or other in (own, *SHARED))
    assert not bad, "a topic imports another topic (move what they share to the toolkit):\n" + "\n".join(bad)


def test_the_toolkit_imports_nothing_but_the_toolkit():
    bad = offending_imports(lambda own, other: own != "toolkit" or other == "toolkit")
    assert not bad, "the toolkit imports the engine or a topic:\n" + "\n".join(bad)


def test_the_engine_imports_no_topic():
    bad = offending_imports(lambda own, other: own != "engine" or other in SHARED)
    assert not bad, "the engine imports a topic:\n" + "\n".join(bad)


def engine_files() -> list[Path]:
    return [path for path, own in rooms().items() if own == "engine"]


def test_the_engine_names_no_analysis_and_no_topic():
    from analyses.engine.registry import all_analyses

    names = set(all_analyses()) | topics()
    bad = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} names {node.value!r}"
           for path in engine_files() for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
           if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names]
    assert not bad, "the engine names an analysis or topic (let the registry or the topic say it):\n" + "\n".join(bad)


def test_the_engine_computes_no_science():
    bad = [f"{path.relative_to(PACKAGE.parent)}:{node.lineno} calls {ast.unparse(node.func)}"
           for path in engine_files() for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
           if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in DECOMPOSITIONS]
    assert not bad, "the engine decomposes matrices (science belongs in the toolkit):\n" + "\n".join(bad)


@pytest.mark.parametrize("source, expected", [
    ("from analyses.helix import EDGE\n", ["analyses.helix"]),
    ("from analyses import helix, toolkit\n", ["analyses.helix", "analyses.toolkit"]),
    ("def f():\n    import analyses.sinusoidal as s\n", ["analyses.sinusoidal"]),
    ("import numpy as np\nfrom analyses.toolkit.linalg import cosine_matrix\n", ["analyses.toolkit.linalg"]),
    ("from .toolkit import plotting\n", ["analyses.toolkit"]),
])
def test_imports_are_read_at_any_depth(source, expected):
    assert [name for _, name in imported(PACKAGE / "helix.py", source)] == expected


def test_the_engine_hands_analyses_what_their_inputs_protocol_names():
    from conftest import Given

    from analyses.engine.inputs import ModelInputs
    from analyses.engine.sources import Tensors

    members = {name for name in vars(ModelInputs) if not name.startswith("_") or name in
               ("__getitem__", "__contains__", "__iter__", "__len__")} - {"_is_protocol"}
    assert {"origin", "replicate_token_subspace", "tokenize", "decode"} <= members
    for kind in (Tensors, Given):
        assert not [m for m in members if not callable(getattr(kind, m, None))], kind.__name__
