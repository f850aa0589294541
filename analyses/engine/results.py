"""What an analysis returns: numbers to cite, tables to embed, arrays to plot.

Each number keeps its raw value (written to JSON at full precision), the format in
which the report cites it (written to `_variables.yml`), so that the prose never
retypes a value (the Manubot pattern of raw plus formatted stats), and its declared
accuracy: how far apart two machines may compute it. Bitwise identity across
processors is not attainable (BLAS kernels sum in different orders), so the contract
is on the printed string: every value within its accuracy prints the same text.
"""

from __future__ import annotations

import csv
import io
import math
import re
from dataclasses import dataclass, field

import numpy as np


def format_value(value: float | int, fmt: str) -> str:
    """Format a value for the text. `fmt` is a Python format spec, or "sci" for 3.48e4-style notation.

    Negative numbers use an ASCII hyphen-minus so they survive HTML and LaTeX alike.
    """
    if fmt.startswith("sci"):
        digits = int(fmt[3:] or 2)
        mantissa, exponent = f"{value:.{digits}e}".split("e")
        text = f"{mantissa}e{int(exponent)}"
    else:
        text = format(value, fmt)
    # a value that rounds to zero prints without a sign: the sign of rounding noise is not determined
    return text[1:] if text.startswith("-") and not any(c in "123456789" for c in text.split("e")[0]) else text


@dataclass(frozen=True)
class Accuracy:
    """How exactly the computation determines a value: two machines give it within ±`tolerance(value)`
    = max(abs, rel·|value|) of each other, for the reason `basis` states."""

    rel: float = 0.0
    abs: float = 0.0
    basis: str = ""

    def tolerance(self, value: float) -> float:
        return max(self.abs, self.rel * abs(value))

    def agree(self, a: float, b: float) -> bool:
        """Whether two computations of the value agree at this accuracy."""
        if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
            return True
        return abs(a - b) <= self.tolerance(a) * (1 + 1e-9)

    def as_dict(self) -> dict:
        return {"rel": self.rel, "abs": self.abs, "basis": self.basis}


EXACT = Accuracy(basis="exact: a count, an index, a seed or a constant")
COUNT_SHARE = Accuracy(basis="exact: a count divided by a count, which IEEE division rounds the same everywhere")
FLOAT64 = Accuracy(rel=1e-9, basis="float64 arithmetic: BLAS kernels sum in different orders, which moves "
                                   "results by about 1e-13 relative; declared 1e-9, room for conditioning")
FITTED = Accuracy(rel=1e-7, basis="a parameter of a sinusoid fitted by least squares (stopped at a step of 1e-12 "
                                  "relative): inputs perturbed at n·u ≈ 1e-13 moved it by up to 5e-10 relative; "
                                  "declared 1e-7")


def printed_stably(value: float | int, fmt: str, accuracy: Accuracy) -> bool:
    """Whether every value within the accuracy prints as `value` does: rounding is monotone, so checking
    both ends of the interval decides it."""
    tolerance = accuracy.tolerance(value)
    if tolerance == 0:
        return True
    text = format_value(value, fmt)
    return format_value(value - tolerance, fmt) == text == format_value(value + tolerance, fmt)


_FIXED = re.compile(r"(,?)\.(\d+)([f%g])")


def stable_format(value: float | int, fmt: str, accuracy: Accuracy) -> str:
    """`fmt`, or the same fixed-point, percent or significant-digit format with as many fewer digits as it takes for
    the declared accuracy to fix every printed digit (no digit is printed that the computation does not fix)."""
    match = _FIXED.fullmatch(fmt)
    while match and int(match[2]) > (1 if match[3] == "g" else 0) and not printed_stably(value, fmt, accuracy):
        fmt = f"{match[1]}.{int(match[2]) - 1}{match[3]}"
        match = _FIXED.fullmatch(fmt)
    return fmt


@dataclass(frozen=True)
class Number:
    """A cited number: raw value, its display format (e.g. ".3f", "d", ".1%", "sci2") and its accuracy
    (default: exact for integers, float64 rounding for floats)."""

    value: float | int
    fmt: str = ".4g"
    description: str = ""
    accuracy: Accuracy | None = None

    def __post_init__(self):
        value = self.value.item() if isinstance(self.value, np.generic) else self.value
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise TypeError(f"Number needs an int or float, got {type(self.value).__name__}")
        if not math.isfinite(value):
            raise ValueError(f"a cited number must be finite, got {value} ({self.description or 'no description'})")
        object.__setattr__(self, "value", value)
        if self.accuracy is None:
            object.__setattr__(self, "accuracy", EXACT if isinstance(value, int) else FLOAT64)
        format_value(value, self.fmt)  # fail early on a bad format

    @classmethod
    def bound(cls, value: float, limit: float, description: str, basis: str) -> Number:
        """A rounding error cited as the bound it stays below, not as the noise itself: the text is `limit`,
        which an error analysis fixes (`basis`), and computing a value at or above it is an error."""
        if not value < limit:
            raise ValueError(f"{description}: {value:.3e} is not below its bound {limit:.1e} ({basis})")
        return cls(float(limit), "sci1", description, Accuracy(basis=f"a bound: {basis}"))

    @property
    def text(self) -> str:
        return format_value(self.value, self.fmt)

    @property
    def stable(self) -> bool:
        """Whether every value within the declared accuracy prints this text."""
        return printed_stably(self.value, self.fmt, self.accuracy)


@dataclass(frozen=True)
class Text:
    """A cited value that is not a number but still comes from the data, e.g. which heads fall in a class."""

    value: str
    description: str = ""

    @property
    def text(self) -> str:
        return self.value


def checked_sample(count: int, n_sample: int) -> set[int]:
    """The indices of `n_sample` items out of `count` (windows, null draws), evenly spaced from the first to the last:
    those that an analysis handed its cached rows (`cached_rows`, see `engine.verify.CACHED_ROWS`) computes again."""
    return set(np.linspace(0, count - 1, min(n_sample, count)).round().astype(int).tolist())


def period_or_undefined(period: float, fmt: str, description: str) -> Number | Text:
    """A helix period where it is defined; where it is not (NaN: the bulk holds less than one turn), the text
    "undefined", so that no table or sentence prints a period of an angle that has not come round once."""
    if math.isfinite(period):
        return Number(period, fmt, description)
    return Text("undefined", f"{description}: the bulk holds less than one turn")


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
    """A table with named columns; `formats` maps a column to its display format in the markdown and
    `accuracy` a column to its declared accuracy, one for the column or one per row (None: the default,
    exact for integers, float64 rounding for floats)."""

    columns: tuple[str, ...]
    rows: tuple[tuple, ...]
    formats: dict[str, str] = field(default_factory=dict)
    accuracy: dict[str, Accuracy | tuple[Accuracy | None, ...]] = field(default_factory=dict)

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

    def accuracy_of(self, column: str, row: int, value) -> Accuracy | None:
        """The accuracy of the numeric cell in `row` of `column` (None for text)."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        declared = self.accuracy.get(column)
        if isinstance(declared, tuple):
            declared = declared[row]
        return declared or (EXACT if isinstance(value, int) else FLOAT64)

    def format_of(self, column: str, row: int, value) -> str | None:
        """The format a cell prints with: its column's, with fewer decimals where its accuracy does not fix the
        last one (`stable_format`); None for text and for a column without a format."""
        accuracy = self.accuracy_of(column, row, value)
        fmt = self.formats.get(column)
        return stable_format(value, fmt, accuracy) if fmt and accuracy is not None else None

    def accuracy_json(self) -> dict[str, dict]:
        """The format and the declared accuracy of each numeric cell, by column and row, as cached beside the
        table (None for a text cell); the format is one per row where a cell prints with fewer decimals."""
        out = {}
        for c in self.columns:
            values = self.column(c)
            accuracies = [self.accuracy_of(c, i, v) for i, v in enumerate(values)]
            if not any(accuracies):
                continue
            formats = [self.format_of(c, i, v) or self.formats.get(c) for i, v in enumerate(values)]
            fmt = formats if len(set(formats)) > 1 else self.formats.get(c)
            out[c] = {"format": fmt, "accuracy": [a.as_dict() if a else None for a in accuracies]}
        return out

    def _cell(self, column: str, row: int, value) -> str:
        fmt = self.format_of(column, row, value)
        return format_value(value, fmt) if fmt else _print_safe(str(value))

    def to_markdown(self) -> str:
        """A pipe table for `{{< include >}}`: the caption and label live in the chapter."""
        numeric = [all(isinstance(v, (int, float)) for v in self.column(c)) and self.rows for c in self.columns]
        lines = ["| " + " | ".join(map(_print_safe, self.columns)) + " |",
                 "|" + "|".join("---:" if n else ":---" for n in numeric) + "|"]
        lines += ["| " + " | ".join(self._cell(c, i, v) for c, v in zip(self.columns, row)) + " |"
                  for i, row in enumerate(self.rows)]
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

    `numbers` and `tables` are cached and cited; `arrays` feed the figure functions and are
    cached as summaries (see `array_summary`), compared at `array_accuracy` (default: float64
    rounding relative to the array's largest magnitude).
    """

    numbers: dict[str, Number | Text] = field(default_factory=dict)
    tables: dict[str, Table] = field(default_factory=dict)
    arrays: dict[str, np.ndarray] = field(default_factory=dict)
    array_accuracy: dict[str, Accuracy] = field(default_factory=dict)

    def accuracy_of_array(self, name: str) -> Accuracy:
        """The declared accuracy of an array, or of an entry `name.key` of a dict of arrays (its dict's)."""
        return self.array_accuracy.get(name.split(".")[0], FLOAT64)

    def array_summaries(self) -> dict[str, dict]:
        """`array_summary` of every numeric array, dicts of arrays flattened to `name.key`."""
        flat = {f"{name}.{key}" if isinstance(array, dict) else name: value
                for name, array in self.arrays.items()
                for key, value in (array.items() if isinstance(array, dict) else [(None, array)])}
        return {name: summary for name, value in flat.items() if (summary := array_summary(value)) is not None}


SUMMARY_STATISTICS = ("mean", "rms", "min", "max", "weighted")
"""What `array_summary` keeps of a numeric array: enough that a change of its values (an offset, a scale, one
changed entry among many, a permutation) changes a statistic; `weighted` is Σ w_i x_i with fixed weights."""


def array_summary(array) -> dict | None:
    """Shape, NaN count and the statistics of a numeric array over its finite entries (None when the array
    holds text); statistics are taken in float64, whatever the array's dtype."""
    a = np.asarray(array)
    if a.dtype.kind not in "biuf":
        return None
    x = a.astype(np.float64).ravel()
    finite = x[np.isfinite(x)]
    summary = {"shape": list(a.shape), "nonfinite": int(x.size - finite.size)}
    if finite.size:
        # sums by math.fsum, correctly rounded: the summary adds no rounding of its own that differs by machine
        weights = (np.arange(finite.size) * 7919 % 1009) / 1009 - 0.5  # fixed, from integer arithmetic: exact
        summary |= {"mean": math.fsum(finite) / finite.size, "rms": math.sqrt(math.fsum(finite ** 2) / finite.size),
                    "min": float(finite.min()), "max": float(finite.max()),
                    "weighted": math.fsum(weights * finite) / finite.size, "scale": float(np.abs(finite).max())}
    return summary


def summaries_agree(cached: dict, fresh: dict, accuracy: Accuracy) -> bool:
    """Whether two array summaries agree: same shape and NaN count, each statistic within the accuracy
    taken relative to the array's largest magnitude."""
    if {k: cached.get(k) for k in ("shape", "nonfinite")} != {k: fresh.get(k) for k in ("shape", "nonfinite")}:
        return False
    scale = max(cached.get("scale", 0.0), fresh.get("scale", 0.0))
    tolerance = max(accuracy.abs, accuracy.rel * scale)
    return all(abs(cached[k] - fresh[k]) <= tolerance * (1 + 1e-9)
               for k in SUMMARY_STATISTICS if k in cached or k in fresh)
