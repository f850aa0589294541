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


FAMILYWISE_ALPHA = 0.05
"""The report's one multiple-comparison rule: Holm's step-down procedure over the tests of one question (one table
of tests), at a familywise error rate of 5 %."""


def holm(p_values, alpha: float = FAMILYWISE_ALPHA) -> list[bool]:
    """Which hypotheses Holm's procedure rejects at familywise error `alpha`: sorted ascending, p_(i) is rejected
    while p_(i) ≤ alpha / (m − i) (i from 0), and none after the first that is not."""
    order = sorted(range(len(p_values)), key=lambda i: p_values[i])
    rejected = [False] * len(p_values)
    for rank, i in enumerate(order):
        if p_values[i] > alpha / (len(p_values) - rank):
            break
        rejected[i] = True
    return rejected


def draws_for(n_tests: int, alpha: float = FAMILYWISE_ALPHA) -> int:
    """The fewest null draws N whose floor 1/(1 + N) lets Holm reject all of `n_tests` tests: 1/(1 + N) ≤ alpha/m."""
    return math.ceil(round(n_tests / alpha, 9)) - 1  # round: 24 / 0.05 is 479.99… in binary


GAUSSIAN_CHECK = 0.01
"""Draws whose Shapiro–Wilk p is at least this are treated as Gaussian (`gaussian_p`)."""


def gaussian_p(null, observed: float, check: float = GAUSSIAN_CHECK) -> float | None:
    """One-sided p of `observed` above a Gaussian fitted to the null draws (mean, sd with ddof 1), the upper tail
    1 − Φ(z); None where the draws do not look Gaussian (Shapiro–Wilk p below `check`) or are constant,
    so that the empirical p, with its floor, is all there is. Where it is given it extends the empirical p beyond
    the floor that the number of draws sets, under an assumption that the draws were checked against."""
    import numpy as np
    from scipy.stats import norm, shapiro

    null = np.asarray(null, dtype=np.float64)
    spread = null.std(ddof=1)
    if spread == 0 or shapiro(null).pvalue < check:
        return None
    return float(norm.sf((observed - null.mean()) / spread))
