"""What an analysis returns: numbers to cite, tables to embed, arrays to plot.

Each number keeps its raw value (written to JSON at full precision) and the
format in which the report cites it (written to `_variables.yml`), so that the
prose never retypes a value: the Manubot pattern of raw plus formatted stats.
"""

from __future__ import annotations

import csv
import io
import math
from dataclasses import dataclass, field

import numpy as np


def format_value(value: float | int, fmt: str) -> str:
    """Format a value for the text. `fmt` is a Python format spec, or "sci" for 3.48e4-style notation.

    Negative numbers use an ASCII hyphen-minus so they survive HTML and LaTeX alike.
    """
    if fmt.startswith("sci"):
        digits = int(fmt[3:] or 2)
        mantissa, exponent = f"{value:.{digits}e}".split("e")
        return f"{mantissa}e{int(exponent)}"
    return format(value, fmt)


@dataclass(frozen=True)
class Number:
    """A cited number: raw value plus its display format (e.g. ".3f", "d", ".1%", "sci2")."""

    value: float | int
    fmt: str = ".4g"
    description: str = ""

    def __post_init__(self):
        value = self.value.item() if isinstance(self.value, np.generic) else self.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"Number needs an int or float, got {type(self.value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"a cited number must be finite, got {value} ({self.description or 'no description'})")
        object.__setattr__(self, "value", value)
        format_value(value, self.fmt)  # fail early on a bad format

    @property
    def text(self) -> str:
        return format_value(self.value, self.fmt)


@dataclass(frozen=True)
class Text:
    """A cited value that is not a number but still comes from the data, e.g. which heads fall in a class."""

    value: str
    description: str = ""

    @property
    def text(self) -> str:
        return self.value


def spoken_list(items) -> str:
    """Items as an English list: "3", "3 and 4", "3, 4 and 7"; "none" when empty."""
    items = [str(i) for i in items]
    if not items:
        return "none"
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


# Symbols that the PDF's default text font (Latin Modern) lacks, written as inline TeX math,
# which both the HTML (MathML) and the PDF render. √ is left as text: pandoc has no MathML for \surd,
# and the PDF's text font has the glyph.
_MATH_SYMBOLS = {"γ": r"\gamma", "σ": r"\sigma", "ε": r"\varepsilon", "φ": r"\varphi", "ω": r"\omega",
                 "Σ": r"\Sigma", "‖": r"\|", "≥": r"\geq", "≤": r"\leq", "ᵀ": r"^\top",
                 "→": r"\to"}


def _print_safe(text: str) -> str:
    """Replace each symbol missing from the PDF text font by the same symbol in inline math."""
    return "".join(f"${_MATH_SYMBOLS[c]}$" if c in _MATH_SYMBOLS else c for c in text)


@dataclass(frozen=True)
class Table:
    """A table with named columns; `formats` maps a column to its display format in the markdown."""

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    formats: dict[str, str] = field(default_factory=dict)

    def __post_init__(self):
        object.__setattr__(self, "columns", tuple(self.columns))
        rows = tuple(tuple(v.item() if isinstance(v, np.generic) else v for v in row) for row in self.rows)
        object.__setattr__(self, "rows", rows)
        for row in rows:
            if len(row) != len(self.columns):
                raise ValueError(f"row {row} has {len(row)} cells for {len(self.columns)} columns")

    def column(self, name: str) -> list:
        i = self.columns.index(name)
        return [row[i] for row in self.rows]

    def _cell(self, column: str, value) -> str:
        if isinstance(value, (int, float)) and not isinstance(value, bool) and column in self.formats:
            return format_value(value, self.formats[column])
        return _print_safe(str(value))

    def to_markdown(self) -> str:
        """A pipe table for `{{< include >}}`: the caption and label live in the chapter."""
        numeric = [all(isinstance(v, (int, float)) for v in self.column(c)) and self.rows for c in self.columns]
        lines = ["| " + " | ".join(map(_print_safe, self.columns)) + " |",
                 "|" + "|".join("---:" if n else ":---" for n in numeric) + "|"]
        lines += ["| " + " | ".join(self._cell(c, v) for c, v in zip(self.columns, row)) + " |"
                  for row in self.rows]
        return "\n".join(lines) + "\n"

    def to_csv(self) -> str:
        """Full-precision CSV for reviewers (floats as repr)."""
        out = io.StringIO()
        writer = csv.writer(out, lineterminator="\n")
        writer.writerow(self.columns)
        writer.writerows([repr(v) if isinstance(v, float) else v for v in row] for row in self.rows)
        return out.getvalue()


@dataclass
class Result:
    """The output of one analysis on one model.

    `numbers` and `tables` are cached and cited; `arrays` feed the figure functions
    and are not cached (the figures are).
    """

    numbers: dict[str, Number | Text] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
