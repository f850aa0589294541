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
    assert draws_for(24) == 479 and 1 / (1 + draws_for(24)) <= 0.05 / 24 < 1 / draws_for(24)
