"""Closed-form checks of the sinusoidal table and its identities (norm, shift-rotation, offset-only similarity).

Tolerances are derived from float64 rounding (ε = 2.2e-16): the angle n·ω is formed with relative error
≤ ε, i.e. absolute error ≤ ε·n·ω ≤ ε·n (ω ≤ 1), and sin/cos add about one ulp, so one coordinate of
PE(n) is accurate to about ε·(n + 1); a norm over D coordinates to √D times that.
"""

from __future__ import annotations

import numpy as np
import pytest

from analyses.engine.results import Number
from analyses.toolkit.linalg import cosine_matrix, mean_by_offset
from analyses.sinusoidal import (
    offset_dot,
    rounding_bounds,
    shift_matrix,
    sinusoidal_components,
    sinusoidal_identities,
    sinusoidal_vs_learned,
)
from analyses.toolkit.sinusoids import encode, frequencies, sinusoidal_table

EPS = np.finfo(np.float64).eps


def coordinate_tolerance(largest_position: float) -> float:
    """Worst-case error of one coordinate of PE(n) for n ≤ largest_position, with a safety factor of 4."""
    return 4 * EPS * (largest_position + 1)


def test_table_matches_the_definition_entry_by_entry():
    n_positions, d = 50, 16
    S = sinusoidal_table(n_positions, d)
    for n in (0, 1, 7, 49):
        for i in range(d // 2):
            angle = n / 10000 ** (2 * i / d)
            assert S[n, 2 * i] == pytest.approx(np.sin(angle), abs=coordinate_tolerance(n))
            assert S[n, 2 * i + 1] == pytest.approx(np.cos(angle), abs=coordinate_tolerance(n))
    assert S.shape == (n_positions, d) and S.dtype == np.float64


def test_d2_is_the_unit_circle_at_unit_frequency():
    S = sinusoidal_table(10, 2)
    n = np.arange(10)
    np.testing.assert_allclose(S, np.stack([np.sin(n), np.cos(n)], axis=1), rtol=0, atol=coordinate_tolerance(9))
    np.testing.assert_array_equal(frequencies(2), [1.0])


def test_base_sets_the_slowest_frequency():
    omega = frequencies(8, base=100.0)
    np.testing.assert_allclose(omega, 100.0 ** (-np.array([0, 2, 4, 6]) / 8), rtol=4 * EPS)
    assert omega[0] == 1.0 and np.all(np.diff(omega) < 0)


@pytest.mark.parametrize("bad", [1, 3, 767, 0])
def test_odd_or_too_small_dimension_is_rejected_with_a_clear_error(bad):
    for call in (lambda: sinusoidal_table(4, bad), lambda: shift_matrix(1, bad), lambda: encode([0], bad),
                 lambda: offset_dot([1], bad)):
        with pytest.raises(ValueError, match="even dimension D >= 2"):
            call()


def test_other_invalid_arguments_are_rejected():
    with pytest.raises(ValueError, match="at least one position"):
        sinusoidal_table(0, 4)
    with pytest.raises(ValueError, match="base must be positive"):
        frequencies(4, base=0)


def test_first_rows_are_a_prefix_of_longer_tables():
    np.testing.assert_array_equal(sinusoidal_table(100, 64)[:10], sinusoidal_table(10, 64))


@pytest.mark.parametrize("d", [2, 4, 64, 768])
def test_every_row_has_norm_sqrt_d_over_2(d):
    """‖PE(n)‖² = Σ_i (sin² + cos²) = D/2: each of the D/2 terms is 1 up to a few ε, so the sum is D/2 ± 2Dε."""
    S = sinusoidal_table(1024, d)
    np.testing.assert_allclose((S**2).sum(axis=1), d / 2, rtol=0, atol=2 * d * EPS)
    np.testing.assert_allclose(np.linalg.norm(S, axis=1), np.sqrt(d / 2), rtol=0, atol=2 * d * EPS)


def test_shift_matrix_is_block_diagonal_rotations():
    d, k = 8, 3.0
    M = shift_matrix(k, d)
    omega = frequencies(d)
    for i, w in enumerate(omega):
        block = M[2 * i:2 * i + 2, 2 * i:2 * i + 2]
        np.testing.assert_array_equal(block, [[np.cos(k * w), np.sin(k * w)], [-np.sin(k * w), np.cos(k * w)]])
    off_block = M.copy()
    for i in range(d // 2):
        off_block[2 * i:2 * i + 2, 2 * i:2 * i + 2] = 0
    assert not off_block.any()
    np.testing.assert_allclose(M.T @ M, np.eye(d), rtol=0, atol=4 * EPS)
    assert np.linalg.det(M) == pytest.approx(1.0, abs=d * EPS)


def test_shift_by_zero_is_the_identity():
    np.testing.assert_array_equal(shift_matrix(0, 16), np.eye(16))


@pytest.mark.parametrize("d", [2, 64, 768])
@pytest.mark.parametrize("k", [0, 1, 2, 37, 511, 512, 5120])
def test_shift_is_one_rotation_for_every_position(d, k):
    """PE(n+k) = M_k PE(n) for all n of a 512-row table, also for k beyond the table (PE(n+k) evaluated directly)."""
    n_positions = 512
    n = np.arange(n_positions)
    S = sinusoidal_table(n_positions, d)
    error = np.linalg.norm(encode(n + k, d) - S @ shift_matrix(k, d).T, axis=1)
    assert error.max() <= np.sqrt(d) * coordinate_tolerance(n_positions - 1 + k)


def test_shift_matrices_compose_and_invert():
    d = 32
    np.testing.assert_allclose(shift_matrix(5, d) @ shift_matrix(7, d), shift_matrix(12, d), rtol=0, atol=8 * EPS * 13)
    np.testing.assert_allclose(shift_matrix(-5, d), shift_matrix(5, d).T, rtol=0, atol=0)


def test_a_wrong_offset_does_not_pass():
    """The shift check is sensitive: M_{k+1} does not map PE(n) to PE(n+k)."""
    S = sinusoidal_table(64, 16)
    error = np.linalg.norm(encode(np.arange(64) + 3, 16) - S @ shift_matrix(4, 16).T, axis=1)
    assert error.min() > 0.1


@pytest.mark.parametrize("d", [2, 16, 768])
def test_dot_product_depends_on_the_offset_only(d):
    """PE(m)·PE(n) = Σ_i cos((n − m) ω_i) for every pair: D/2 terms, each accurate to ε(N+1) · few."""
    n_positions = 256
    S = sinusoidal_table(n_positions, d)
    n = np.arange(n_positions)
    closed = offset_dot(n, d)
    tolerance = d * coordinate_tolerance(n_positions)
    np.testing.assert_allclose(S @ S.T, closed[np.abs(n[:, None] - n[None, :])], rtol=0, atol=tolerance)
    _, stds, counts = mean_by_offset(cosine_matrix(S))
    assert np.all(stds <= 2 * tolerance / d) and counts[0] == n_positions - 1


def test_offset_dot_edge_cases():
    np.testing.assert_allclose(offset_dot(np.arange(5), 2), np.cos(np.arange(5)), rtol=0, atol=4 * EPS)
    assert offset_dot([0], 768)[0] == 384.0
    np.testing.assert_allclose(offset_dot([-3, 3], 64)[0], offset_dot([3], 64)[0], rtol=0, atol=0)


def test_identities_are_cited_as_the_rounding_bounds_they_stay_below():
    offsets = (0, 1, 127, 128, 1000)
    result = sinusoidal_identities(n_positions=128, d_model=32, base=10000.0, offsets=offsets, example_columns=(0, 31))
    numbers = {k: v.value for k, v in result.numbers.items()}
    bounds = rounding_bounds(128, 32, offsets)
    assert numbers["norm"] == np.sqrt(16) and numbers["norm_sq"] == 16
    assert numbers["norm_max_error"] == bounds["norm"] == 32 * EPS * 4
    assert numbers["shift_max_error"] == bounds["shift_1000"] == np.sqrt(32) * coordinate_tolerance(127 + 1000)
    assert numbers["orthogonality_max_error"] == 4 * EPS
    assert numbers["dot_max_error"] == bounds["dot"] and numbers["offset_spread_max"] == bounds["dot"] / 16
    assert numbers["cos_offset_1"] == pytest.approx(offset_dot([1], 32)[0] / 16, abs=16 * EPS)
    shift = result.tables["shift"]
    assert shift.column("offset k") == list(offsets)
    assert set(shift.column("every n within the bound")) == set(shift.column("M_kᵀM_k − I within 4ε")) == {"yes"}


def test_the_bounds_are_far_below_a_real_violation():
    """A bound that allowed a wrong identity would certify it: every bound of GPT-2's shape is below 1e-8, while
    the wrong offset of `test_a_wrong_offset_does_not_pass` errs by more than 0.1."""
    assert max(rounding_bounds(1024, 768, (100000,)).values()) < 1e-8


def test_a_value_at_its_bound_is_refused():
    with pytest.raises(ValueError, match="not below its bound"):
        Number.bound(2e-12, 1e-12, "an error", "a test")
    assert Number.bound(0.5e-12, 1e-12, "an error", "a test").text == "1.0e-12"


def test_components_of_a_single_frequency_pair():
    """D = 2: sin n and cos n over many periods each carry about half the variance, so 90% needs both."""
    result = sinusoidal_components(d_model=2, n_positions=(1000,), bases=(10000.0,), fraction=0.9)
    assert result.tables["components"].rows == ((1000, 10000.0, 2, 2),)
    assert result.numbers["centred_n1000_base10000"].value == 2


def test_components_grow_with_the_number_of_positions():
    result = sinusoidal_components(d_model=64, n_positions=(32, 256), bases=(10000.0,), fraction=0.9)
    small, large = result.tables["components"].column("components (centred)")
    assert 1 <= small < large <= 64


def test_comparison_with_a_learned_table_that_is_the_sinusoidal_table():
    S = sinusoidal_table(64, 16)
    result = sinusoidal_vs_learned({"W_pos": S}, None, base=10000.0, fraction=0.9)
    numbers = {k: v.value for k, v in result.numbers.items()}
    for key in ("components", "cos_offset_1", "first_negative_offset", "cos_min"):
        assert numbers[f"{key}_learned"] == numbers[f"{key}_sinusoidal"]
    assert numbers["spread_offset_1_learned"] <= 16 * EPS * 64


def test_comparison_with_a_rank_one_learned_table():
    """Rows c_n v with c_n > 0: every cosine is 1 and one component holds all the variance."""
    P = np.outer(np.arange(1, 65), np.linspace(-1, 1, 16))
    result = sinusoidal_vs_learned({"W_pos": P}, None, base=10000.0, fraction=0.9)
    assert result.numbers["components_learned"].value == 1
    assert result.numbers["cos_offset_1_learned"].value == pytest.approx(1.0, abs=4 * EPS)
    assert result.numbers["first_negative_offset_learned"].value == 0


def test_neighbour_cosine_of_the_two_dimensional_table_is_cos_one():
    """D = 2: PE(n) = (sin n, cos n), so neighbouring rows are 1 radian apart whatever the base."""
    result = sinusoidal_identities(n_positions=50, d_model=2, base=10000.0, offsets=(1,), example_columns=(0,))
    assert result.numbers["cos_offset_1"].value == pytest.approx(np.cos(1.0), abs=1e-14)
    assert result.numbers["first_negative_offset"].value == 2  # cos 2 < 0 < cos 1


def test_comparison_reads_the_learned_neighbour_cosine_of_a_planted_circle():
    """Rows n ≥ 1 at angle nθ on a circle (row 0 an orthogonal outlier, left out): neighbour cosine cos θ."""
    theta = 0.1
    P = np.zeros((64, 16))
    P[1:, 0], P[1:, 1] = np.cos(theta * np.arange(1, 64)), np.sin(theta * np.arange(1, 64))
    P[0, 5] = 10.0
    numbers = sinusoidal_vs_learned({"W_pos": P}, None, base=10000.0, fraction=0.9).numbers
    assert numbers["cos_offset_1_learned"].value == pytest.approx(np.cos(theta), abs=1e-12)
    assert numbers["first_negative_offset_learned"].value == int(np.ceil(np.pi / 2 / theta))
    assert numbers["cos_min_learned"].value == pytest.approx(-1.0, abs=1e-2)
    assert numbers["spread_offset_1_learned"].value == pytest.approx(0.0, abs=1e-12)


def test_column_periods():
    """Columns 2i and 2i + 1 share ω_i = L^(−2i/D): period 2π for the first pair, 2π L^(1 − 2/D) for the last."""
    from analyses.sinusoidal import column_period

    assert column_period(0, 768) == pytest.approx(2 * np.pi) == column_period(1, 768)
    assert column_period(767, 768) == pytest.approx(2 * np.pi * 10000 ** (766 / 768))
    assert column_period(200, 768) == pytest.approx(2 * np.pi * 10000 ** (200 / 768))
    S = sinusoidal_table(2000, 16, base=100.0)
    for c in (0, 5, 15):  # the table repeats after one period, to rounding
        T = column_period(c, 16, base=100.0)
        phase = np.arange(2000) * 2 * np.pi / T
        expected = np.sin(phase) if c % 2 == 0 else np.cos(phase)
        np.testing.assert_allclose(S[:, c], expected, atol=1e-9)
    result = sinusoidal_identities(n_positions=64, d_model=16, base=100.0, offsets=(1,), example_columns=(0, 15))
    assert result.numbers["fastest_period"].value == pytest.approx(2 * np.pi)
    assert result.numbers["fastest_period"].value > result.numbers["nyquist_period"].value  # resolved, not aliased
    assert result.tables["column_periods"].column("pair i") == [0, 7]
