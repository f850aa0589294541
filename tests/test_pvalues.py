"""Empirical p-values printed as what N draws can show (analyses/toolkit/pvalues.py)."""

from __future__ import annotations

import pytest

from analyses.toolkit.pvalues import at_floor, floor_bound, p_floor, p_value_cell, p_value_text


@pytest.mark.parametrize("n_draws, bound", [(50, "0.02"), (40, "0.03"), (99, "0.01"), (100, "0.01"),
                                            (199, "0.005"), (999, "0.001"), (9, "0.1"), (4, "0.2")])
def test_floor_bound_is_one_over_n_plus_one_rounded_up(n_draws, bound):
    assert p_floor(n_draws) == 1 / (n_draws + 1)
    assert float(bound) >= p_floor(n_draws) and floor_bound(n_draws) == bound


def test_p_value_text_names_the_draws_at_the_floor_and_the_value_above_it():
    assert at_floor(1 / 51, 50) and not at_floor(2 / 51, 50)
    assert p_value_text(1 / 51, 50) == "p < 0.02 (50 draws)"
    assert p_value_text(4 / 51, 50) == "p = 0.08" and p_value_text(1.0, 50) == "p = 1.00"
    assert p_value_cell(1 / 51, 50) == "< 0.02" and p_value_cell(2 / 51, 50) == pytest.approx(2 / 51)


def test_holm_rejects_step_down_and_stops_at_the_first_failure():
    from analyses.toolkit.pvalues import draws_for, holm

    # m = 4: thresholds 0.0125, 0.0167, 0.025, 0.05 for the sorted p-values
    assert holm([0.01, 0.04, 0.03, 0.005]) == [True, False, False, True]  # 0.03 > 0.025 stops the rest
    assert holm([0.01, 0.016, 0.024, 0.049]) == [True, True, True, True]
    assert holm([0.06, 0.001]) == [False, True] and holm([0.02, 0.001]) == [True, True]
    for m, n in [(24, 479), (9, 179), (5, 99)]:  # 9 and 5: the similarity nulls' families
        assert draws_for(m) == n and 1 / (1 + draws_for(m)) <= 0.05 / m < 1 / draws_for(m)


def test_two_sided_p_folds_around_the_pooled_median():
    """(1 + #{|s_k − c| ≥ |s − c|}) / (1 + N), c the median of the draws and the observation together."""
    from analyses.toolkit.pvalues import two_sided_p

    null = [1.0, 2.0, 3.0, 4.0]
    assert two_sided_p(null, 10.0) == pytest.approx(1 / 5)  # c = 3: distances 2, 1, 0, 1 against 7
    assert two_sided_p(null, -10.0) == pytest.approx(1 / 5)  # below every draw: the same floor, not doubled
    assert two_sided_p(null, 2.5) == pytest.approx(1.0)  # at the centre
    assert two_sided_p(null, 4.0) == pytest.approx(4 / 5)  # c = 3: ties count against the observation
    assert two_sided_p([0.0] * 9, 0.5) == pytest.approx(1 / 10) and two_sided_p([0.0] * 9, 0.0) == 1.0


@pytest.mark.parametrize("draw", ["normal", "exponential"])
def test_two_sided_p_is_exact_under_the_null_and_reaches_its_floor_from_either_side(draw):
    """With the observation exchangeable with its N draws, P(p ≤ k/(N + 1)) = k/(N + 1), for a skewed null too.
    Far enough out, either side reaches the floor 1/(N + 1); for a symmetric null both sides reach it equally often
    (a skewed one is not equal-tailed: the short side must go farther from the median than the long side's draws)."""
    import numpy as np

    from analyses.toolkit.pvalues import two_sided_p

    rng = np.random.default_rng(0)
    n_draws, trials = 19, 20000
    values = getattr(rng, draw)(size=(trials, n_draws + 1))
    p = np.array([two_sided_p(row[1:], row[0]) for row in values])
    for k in (1, 2, 5):
        assert abs(np.mean(p <= k / (n_draws + 1)) - k / (n_draws + 1)) < 4 * np.sqrt(k / 20 / trials)
    assert two_sided_p(values[0, 1:], -100.0) == two_sided_p(values[0, 1:], 100.0) == 1 / (n_draws + 1)
    if draw == "normal":
        below = values[:, 0] < np.median(values, axis=1)
        assert 0.4 < np.mean(below[p <= 1 / (n_draws + 1)]) < 0.6
