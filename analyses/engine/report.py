"""What the book shows: which cached figures its chapters embed, and which cached numbers they cite.

Drawing a figure costs more than most computations, so the pipeline draws only the figures the report
embeds (like a build system that makes only the targets something depends on). The demand is read from
the chapters that `_quarto.yml` lists and every file they include: a figure is shown when its cache path
`_cache/<scope>/<analysis>/<figure>` appears there. A text output of an analysis (`files=`, e.g. a
markdown fragment) that the book includes may embed any of that analysis's figures, so including it
shows them all. Without a book (a cache outside the report's repository, a test's temporary one) every
figure is drawn.

Likewise `_variables.yml` holds only the numbers the book cites (`{{< var KEY >}}`), not every number of the cache:
Quarto copies that file into every document's metadata, where each value is parsed and handed through every
filter of every page, so its size is paid once per page rendered (issue 35). Without a book, every number.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

FIGURE = re.compile(r"_cache/([\w-]+)/([\w-]+)/([\w-]+)(?![\w./-])")
INCLUDED_OUTPUT = re.compile(r"\{\{<\s*include\s+[^\s>]*_cache/([\w-]+)/([\w-]+)/([\w.-]+\.md)\s*>\}\}")
INCLUDE = re.compile(r"\{\{<\s*include\s+([^\s>]+)\s*>\}\}")
VARIABLE = re.compile(r"\{\{<\s*var\s+([\w.-]+)\s*>\}\}")


def chapters(root: Path) -> list[Path] | None:
    """The chapter files of the book at `root`, appendices included, or None when there is no book there."""
    try:
        config = yaml.safe_load((root / "_quarto.yml").read_text(encoding="utf-8"))
        listed = config["book"]["chapters"] + (config["book"].get("appendices") or [])
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return None
    return [root / entry for entry in listed if isinstance(entry, str) and (root / entry).is_file()]


def _text_with_includes(path: Path, seen: frozenset[Path] = frozenset()) -> str:
    text = path.read_text(encoding="utf-8")
    parts = [text]
    for target in INCLUDE.findall(text):
        included = (path.parent / target).resolve()
        if included.is_file() and included.suffix in {".qmd", ".md"} and included not in seen:
            parts.append(_text_with_includes(included, seen | {path.resolve()}))
    return "\n".join(parts)


def book_text(root: Path) -> str | None:
    """The text of every chapter of the book at `root`, the files they include in place; None when there is no
    book. What the book shows and cites is read from it."""
    files = chapters(root)
    return None if files is None else "\n".join(_text_with_includes(path) for path in files)


def figures_shown(root: Path, text: str | None = None) -> dict[str, frozenset[str]] | None:
    """{"scope/analysis": names} that the book at `root` (or its `text`, already read) embeds: figure names, and
    the file names of the analysis's text outputs that it includes; None when there is no book."""
    text = book_text(root) if text is None else text
    if text is None:
        return None
    shown: dict[str, set[str]] = {}
    for scope, analysis, name in [*FIGURE.findall(text), *INCLUDED_OUTPUT.findall(text)]:
        shown.setdefault(f"{scope}/{analysis}", set()).add(name)
    return {label: frozenset(names) for label, names in shown.items()}


def cited_keys(root: Path, text: str | None = None) -> frozenset[str] | None:
    """Every `_variables.yml` key that the book at `root` (or its `text`, already read) cites
    (`{{< var scope.analysis.key >}}`, in its chapters and the files they include); None when there is no book."""
    text = book_text(root) if text is None else text
    return None if text is None else frozenset(VARIABLE.findall(text))
