"""Empirical p-values from N null draws, printed as what N draws can show, and the report's one rule for many tests.

With N draws a Monte Carlo p-value, one-sided (1 + #{draws ≥ observed}) / (1 + N) or two-sided (`two_sided_p`),
cannot fall below 1/(1 + N): at that floor it says "outside every draw", not how far. There it is printed as the bound, rounded up to one
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


def two_sided_p(null, observed: float) -> float:
    """Two-sided Monte Carlo p-value of `observed` among N null draws, for a statistic whose direction was not fixed
    before the data were seen: (1 + #{k : |s_k − c| ≥ |s − c|}) / (1 + N), c the median of the N + 1 values (the
    draws and the observation together).

    Under the null the observation and the draws are exchangeable, and c is a symmetric function of all of them, so
    the rank of the observation's distance |s − c| among the N + 1 distances is uniform: the p-value is exact (ties
    counted against the observation), and its floor is 1/(1 + N), the same as a one-sided test's, so `draws_for`
    gives the draws for either (doubling the smaller one-sided p would double the floor). The side is the sign of
    s − c. For a skewed null the test is not equal-tailed: a departure on the short side must lie farther from c
    than the long side's draws."""
    import numpy as np

    null = np.asarray(null, dtype=np.float64)
    centre = np.median(np.append(null, observed))
    return float((1 + np.count_nonzero(np.abs(null - centre) >= abs(observed - centre))) / (1 + null.size))
