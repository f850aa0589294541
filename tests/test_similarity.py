"""Constructed and closed-form checks of the similarity analysis (analyses/similarity.py)."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.similarity import (
    first_local_extrema,
    lag1_autocorrelation,
    moving_average,
    ringing,
    similarity,
    top_pairs,
)
from analyses.engine.sources import ModelShape

SHAPE = ModelShape("constructed", "gpt2", 16, 128, 1, 1, 1, 4, "pre")
PARAMS = {"threshold": 0.5, "n_top": 5, "trajectory_ranks": (1, 2, 10), "smooth_window": 5,
          "max_ringing_period": 16.0, "slow_window": 9, "n_random_dims": 3, "n_extreme_dims": 2, "seed": 7,
          "tutorial_ranks": (0, 6, 4)}


def constructed_matrix() -> np.ndarray:
    """128 × 16 Gaussian, with dimension 11 = 2.5 × dimension 3 and dimension 9 = −dimension 5."""
    P = np.random.default_rng(0).standard_normal((128, 16))
    P[:, 11] = 2.5 * P[:, 3]
    P[:, 9] = -P[:, 5]
    return P


def test_duplicated_dimensions_are_the_top_pair_with_cosine_one():
    result = similarity({"W_pos": constructed_matrix()}, SHAPE, **PARAMS)
    assert (result.numbers["top_pair_a"].value, result.numbers["top_pair_b"].value) == (3, 11)
    assert result.numbers["top_pair_cos"].value == pytest.approx(1.0, abs=1e-12)
    assert (result.numbers["top_anti_a"].value, result.numbers["top_anti_b"].value) == (5, 9)
    assert result.numbers["top_anti_cos"].value == pytest.approx(-1.0, abs=1e-12)
    by_abs = result.tables["top_pairs_abs"].rows
    assert {by_abs[0][1:3], by_abs[1][1:3]} == {(3, 11), (5, 9)}  # both |cos| = 1, ahead of every random pair
    assert abs(by_abs[2][3]) < 0.5
    assert [row[0] for row in result.tables["trajectory_pairs"].rows] == [1, 2, 10]


def test_top_pairs_ranks_by_value_or_magnitude_and_keeps_index_order_on_ties():
    C = np.array([[1.0, 0.2, -0.9, 0.2],
                  [0.2, 1.0, 0.5, 0.0],
                  [-0.9, 0.5, 1.0, 0.0],
                  [0.2, 0.0, 0.0, 1.0]])
    assert top_pairs(C, 3, by_abs=False) == [(1, 2, 0.5), (0, 1, 0.2), (0, 3, 0.2)]
    assert top_pairs(C, 2, by_abs=True) == [(0, 2, -0.9), (1, 2, 0.5)]


def hadamard(n: int) -> np.ndarray:
    H = np.array([[1.0]])
    while H.shape[0] < n:
        H = np.block([[H, H], [H, -H]])
    return H


def test_pair_counts_are_n_choose_2_including_exact_zeros():
    """Four stacked copies of a 64 × 64 Hadamard matrix, rows with random signs (norms 8 and 16: exact).

    Rows from different Hadamard rows have cosine exactly 0, copies of one row ±1; columns are orthogonal.
    """
    copies, d = 4, 64
    P = np.random.default_rng(1).choice([-1.0, 1.0], size=copies * d)[:, None] * np.vstack([hadamard(d)] * copies)
    n = copies * d
    shape = ModelShape("hadamard", "gpt2", d, n, 1, 1, 1, 4, "pre")
    result = similarity({"W_pos": P}, shape, **PARAMS)
    C = result.arrays["u_pos"]
    assert result.numbers["positions_n_pairs"].value == C.size == n * (n - 1) // 2
    same_row = d * copies * (copies - 1) // 2
    assert np.count_nonzero(C == 0) == C.size - same_row and np.all(np.abs(C[C != 0]) == 1)
    assert result.numbers["positions_frac_abs_above"].value == same_row / C.size
    assert result.numbers["dimensions_n_pairs"].value == d * (d - 1) // 2
    assert np.count_nonzero(result.arrays["u_dim"]) == 0


def test_lag1_autocorrelation_closed_forms():
    n = 10
    alternating = np.array([(-1.0) ** t for t in range(n)])
    ramp = np.arange(n, dtype=np.float64)
    r = lag1_autocorrelation(np.column_stack([alternating, ramp]))
    assert r[0] == pytest.approx(-(n - 1) / n, abs=1e-14)  # Σ z_t z_t+1 = −(n−1), Σ z² = n
    assert r[1] == pytest.approx(1 - 3 / n, abs=1e-14)  # a straight line: r1 = 1 − 3/n
    with pytest.raises(ValueError):
        lag1_autocorrelation(np.ones((5, 2)))


def test_moving_average_and_its_window():
    x = np.arange(10, dtype=np.float64)
    np.testing.assert_allclose(moving_average(x, 3), x[1:-1], atol=1e-14)  # a line is its own centred average
    for bad in (0, 4, 11):
        with pytest.raises(ValueError):
            moving_average(x, bad)


def test_ringing_recovers_period_and_amplitude_of_an_added_sinusoid():
    k = np.arange(1, 401, dtype=np.float64)
    curve = np.exp(-k / 300) + 0.1 * np.sin(2 * np.pi * k / 6.0)
    period, amplitude, residual = ringing(curve, window=13, max_period=32)
    assert period == pytest.approx(6.0, abs=0.02)
    # a 13-point average of a period-6 sine leaves sin(13π/6)/(13 sin(π/6)) = 1/13 of it: residual = 12/13 of 0.1
    assert amplitude == pytest.approx(0.1 * (1 - 1 / 13) / np.sqrt(2), rel=0.01)
    assert len(residual) == len(curve) - 12


def test_first_local_extrema_of_a_slow_cosine():
    k = np.arange(1000)
    k_min, k_max = first_local_extrema(np.cos(2 * np.pi * k / 500), window=21)
    assert abs(k_min - 250) <= 1 and abs(k_max - 500) <= 1
    assert first_local_extrema(np.exp(-k / 100.0), window=21) == (-1, -1)


def test_similarity_is_deterministic_under_its_seed():
    P = constructed_matrix()
    a, b = (similarity({"W_pos": P}, SHAPE, **PARAMS) for _ in range(2))
    assert {k: n.value for k, n in a.numbers.items()} == {k: n.value for k, n in b.numbers.items()}
    assert a.tables == b.tables
    other = similarity({"W_pos": P}, SHAPE, **(PARAMS | {"seed": 8}))
    assert not np.array_equal(other.arrays["random_dims"], a.arrays["random_dims"])


def test_real_gpt2_top_pair_matches_the_checkpoint_readme(gpt2_weights):
    """README of the offline checkpoint: largest off-diagonal cosine between dimensions is 0.9919 at (356, 528)."""
    from analyses.engine.registry import all_analyses
    from analyses.engine.sources import open_source

    source = open_source("gpt2", gpt2_weights)
    result = all_analyses()["similarity"].run(source.tensors, source.shape)
    assert (result.numbers["top_pair_a"].value, result.numbers["top_pair_b"].value) == (356, 528)
    assert result.numbers["top_pair_cos"].value == pytest.approx(0.9919, abs=5e-5)


def test_offset_curve_leaves_out_an_outlying_first_position():
    """Rows n ≥ 1 on a circle with step θ: cos(p_i, p_{i+k}) = cos kθ exactly. Row 0 is orthogonal to all of
    them, so keeping it would pull the offset-1 mean down to (n − 2) cos θ / (n − 1)."""
    theta, n = 0.05, 128
    P = np.zeros((n, 16))
    angles = theta * np.arange(n)
    P[1:, 0], P[1:, 1] = np.cos(angles[1:]), np.sin(angles[1:])
    P[1:, 2:] = 1e-4 * np.random.default_rng(1).standard_normal((n - 1, 14))  # every column varies a little
    P[0, 2] = 50.0
    numbers = similarity({"W_pos": P}, SHAPE, **PARAMS).numbers
    assert numbers["offset_mean_1"].value == pytest.approx(np.cos(theta), abs=1e-5)
    assert numbers["offset_mean_10"].value == pytest.approx(np.cos(10 * theta), abs=1e-5)
    assert numbers["offset_first_negative"].value == int(np.ceil(np.pi / 2 / theta))
    assert numbers["offset_pos0_max_change"].value > 0.005


def test_tutorial_selection_is_every_kth_rank_of_the_signed_ranking():
    """np.linspace(0, 6, 4).astype(int) = 0, 2, 4, 6: the 1st, 3rd, 5th and 7th pairs by signed cosine."""
    result = similarity({"W_pos": constructed_matrix()}, SHAPE, **PARAMS)
    signed = result.tables["top_pairs_cos"].rows
    picked = result.tables["tutorial_ranks"].rows
    assert [r[0] for r in picked] == [1, 3, 5, 7]
    assert picked[0][1:] == signed[0][1:] and picked[1][1:] == signed[2][1:]
    assert all(picked[i][3] >= picked[i + 1][3] for i in range(3))
