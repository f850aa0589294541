"""Empirical p-values from N null draws, printed as what N draws can show.

With N draws the one-sided p-value (1 + #{draws ≥ observed}) / (1 + N) cannot fall below 1/(1 + N): at that
floor it says "outside every draw", not how far. There it is printed as the bound, rounded up to one
significant digit, with the number of draws ("p < 0.02 (50 draws)"); above it, as its value.
"""

from __future__ import annotations

import math


def p_floor(n_draws: int) -> float:
    """The smallest p-value N draws can give, 1/(1 + N)."""
    return 1 / (1 + n_draws)


def at_floor(p: float, n_draws: int) -> bool:
    """Whether p is the floor (no draw reached the observation)."""
    return p <= p_floor(n_draws) * (1 + 1e-12)


def floor_bound(n_draws: int) -> str:
    """1/(1 + N) rounded up to one significant digit, as text: 0.02 for N = 50, 0.01 for N = 99."""
    floor = p_floor(n_draws)
    exponent = math.floor(math.log10(floor))
    digit = math.ceil(round(floor / 10 ** exponent, 9))  # round: 1/(1 + N) · 10^k is not exact in binary
    if digit == 10:
        digit, exponent = 1, exponent + 1
    return format(digit * 10.0 ** exponent, f".{max(0, -exponent)}f")


def p_value_cell(p: float, n_draws: int) -> float | str:
    """A table cell: "< bound" at the floor (the column states the draws), the value otherwise."""
    return f"< {floor_bound(n_draws)}" if at_floor(p, n_draws) else p


def p_value_text(p: float, n_draws: int) -> str:
    """A cited p-value: "p < 0.02 (50 draws)" at the floor, "p = 0.08" above it."""
    return f"p < {floor_bound(n_draws)} ({n_draws} draws)" if at_floor(p, n_draws) else f"p = {p:.2f}"
