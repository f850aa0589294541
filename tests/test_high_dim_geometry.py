"""Closed-form and Monte Carlo checks of the high-dimensional geometry formulas.

Closed forms are compared with independent elementary formulas (uniform density in D = 3, annulus and
lens areas in d = 2, lens volume in d = 3) at a few ε, or with adaptive quadrature at its own error
estimate. Monte Carlo checks are seeded and must fall within 5 standard errors of the exact value
(a false alarm has probability below 6e-7 per check under the normal approximation).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate, special

from analyses.high_dim_geometry import (
    ball_overlap,
    cosine_density,
    cosine_sq_variance,
    cosine_tail,
    embedding_ball_overlap,
    near_orthogonality,
    overlap_fraction,
    random_cosines,
    shell_fraction,
    thin_shell,
    uniform_in_ball,
)

EPS = np.finfo(np.float64).eps
Z_MAX = 5


def quad(f, a, b):
    value, error = integrate.quad(f, a, b, epsabs=1e-13, epsrel=1e-12, limit=200)
    return value, error + 1e-12


# ---------------------------------------------------------------------------
# Near-orthogonality


@pytest.mark.parametrize("d", [3, 4, 12, 768])
def test_cosine_density_is_normalised_with_variance_one_over_d(d):
    total, e0 = quad(lambda t: cosine_density(t, d), -1, 1)
    second, e2 = quad(lambda t: t**2 * cosine_density(t, d), -1, 1)
    fourth, e4 = quad(lambda t: t**4 * cosine_density(t, d), -1, 1)
    assert total == pytest.approx(1, abs=e0)
    assert second == pytest.approx(1 / d, abs=e2)
    assert fourth - second**2 == pytest.approx(cosine_sq_variance(d), abs=e4 + 2 * e2)


def test_cosine_in_three_dimensions_is_uniform():
    """Archimedes: in R³ the cosine with a fixed axis is uniform on [−1, 1], so P(|t| ≥ a) = 1 − a."""
    np.testing.assert_allclose(cosine_density(np.linspace(-0.9, 0.9, 7), 3), 0.5, rtol=8 * EPS)
    for a in (0.0, 0.1, 0.5, 0.99):
        assert cosine_tail(a, 3) == pytest.approx(1 - a, abs=16 * EPS)


@pytest.mark.parametrize("d", [5, 48, 768])
def test_cosine_tail_matches_the_integrated_density(d):
    for a in (0.0, 0.05, 0.1, 0.3):
        value, error = quad(lambda t: cosine_density(t, d), a, 1)
        assert cosine_tail(a, d) == pytest.approx(2 * value, abs=2 * error)
    assert cosine_tail(1.0, d) == 0.0


def test_random_cosines_are_seeded():
    first = random_cosines(10, 100, np.random.default_rng(3))
    np.testing.assert_array_equal(first, random_cosines(10, 100, np.random.default_rng(3)))
    assert not np.array_equal(first, random_cosines(10, 100, np.random.default_rng(4)))
    assert np.all(np.abs(first) <= 1)
    with pytest.raises(ValueError, match="d >= 2"):
        random_cosines(1, 10, np.random.default_rng(0))


@pytest.mark.parametrize("d", [2, 30, 768])
def test_simulated_cosines_match_mean_variance_and_tail(d):
    n = 20000
    t = random_cosines(d, n, np.random.default_rng(11))
    assert abs(t.mean()) <= Z_MAX / np.sqrt(d * n)
    assert abs((t**2).mean() - 1 / d) <= Z_MAX * np.sqrt(cosine_sq_variance(d) / n)
    p = cosine_tail(0.1, d)
    assert abs((np.abs(t) >= 0.1).mean() - p) <= Z_MAX * np.sqrt(p * (1 - p) / n) + 1 / n


def test_near_orthogonality_analysis_within_bounds_and_deterministic():
    params = {"dims": (3, 64), "n_pairs": 5000, "tail_at": 0.1, "seed": 1}
    result = near_orthogonality(**params)
    assert result.numbers["max_abs_z"].value < Z_MAX
    assert result.numbers["std_d_max"].value == pytest.approx(1 / 8, abs=EPS)
    again = near_orthogonality(**params)
    assert result.tables["cosines"].rows == again.tables["cosines"].rows


# ---------------------------------------------------------------------------
# Thin shell


def test_shell_fraction_closed_forms():
    for eps in (0.0, 0.01, 0.3, 1.0):
        assert shell_fraction(1, eps) == pytest.approx(eps, abs=EPS)
        assert shell_fraction(2, eps) == pytest.approx(2 * eps - eps**2, abs=4 * EPS)  # annulus / disc
    d = np.array([1, 10, 100, 768])
    assert np.all(np.diff(shell_fraction(d, 0.01)) > 0)
    assert np.all(shell_fraction(d, 0.01) >= 1 - np.exp(-0.01 * d))  # (1 − ε)^d ≤ e^(−εd)
    with pytest.raises(ValueError, match=r"eps must be in \[0, 1\]"):
        shell_fraction(3, 1.5)


@pytest.mark.parametrize("d", [2, 3, 6])
def test_uniform_points_in_ball_are_inside_seeded_and_fill_the_shell_as_predicted(d):
    n = 50000
    x = uniform_in_ball(d, n, np.random.default_rng(5))
    np.testing.assert_array_equal(x, uniform_in_ball(d, n, np.random.default_rng(5)))
    radius = np.linalg.norm(x, axis=1)
    assert x.shape == (n, d) and radius.max() <= 1
    for eps in (0.05, 0.2):
        p = float(shell_fraction(d, eps))
        assert abs((radius >= 1 - eps).mean() - p) <= Z_MAX * np.sqrt(p * (1 - p) / n)


def test_thin_shell_analysis_within_bounds():
    result = thin_shell(dims=(1, 768), epsilons=(0.01, 0.1), mc_dims=(2, 4), n_samples=20000, seed=2)
    assert result.numbers["max_abs_z"].value < Z_MAX
    assert result.numbers["d_for_99_eps_min"].value == 459  # smallest d with 0.99^d ≤ 0.01
    assert result.numbers["d_for_half_eps_min"].value == 69  # smallest d with 0.99^d ≤ 0.5


# ---------------------------------------------------------------------------
# Overlap of two balls


def test_overlap_closed_forms_in_one_two_and_three_dimensions():
    for q in (0.0, 0.3, 1.0, 1.7, 2.0):
        assert overlap_fraction(1, q) == pytest.approx(1 - q / 2, abs=4 * EPS)
        lens_2d = (2 * np.arccos(q / 2) - (q / 2) * np.sqrt(4 - q**2)) / np.pi
        assert overlap_fraction(2, q) == pytest.approx(lens_2d, abs=16 * EPS)
        lens_3d = (4 + q) * (2 - q) ** 2 / 16
        assert overlap_fraction(3, q) == pytest.approx(lens_3d, abs=16 * EPS)


def test_overlap_edge_cases_and_monotonicity():
    d = np.arange(1, 200)
    assert np.all(overlap_fraction(d, 0.0) == 1)
    assert np.all(overlap_fraction(d, 2.0) == 0) and np.all(overlap_fraction(d, 3.5) == 0)
    for q in (0.1, 1.0, 1.9):
        assert np.all(np.diff(overlap_fraction(d, q)) < 0)
    assert np.all(np.diff(overlap_fraction(50, np.linspace(0, 2, 41))) < 0)
    with pytest.raises(ValueError, match="non-negative"):
        overlap_fraction(3, -0.1)
    with pytest.raises(ValueError, match="d >= 1"):
        overlap_fraction(0, 0.5)


@pytest.mark.parametrize("d", [4, 100, 768])
def test_overlap_obeys_the_exponential_bound(d):
    """I_z(a, ½) ≤ z^a / (a B(a, ½) √(1 − z)) with a = (d+1)/2, z = 1 − q²/4."""
    a = (d + 1) / 2
    for q in (0.1, 0.5, 1.0):
        z = 1 - q**2 / 4
        bound = np.exp(a * np.log(z) - np.log(a) - special.betaln(a, 0.5)) / np.sqrt(1 - z)
        assert overlap_fraction(d, q) <= bound * (1 + 1e-12)


@pytest.mark.parametrize("d", [4, 6])
def test_overlap_by_slice_integration(d):
    """The cap volume as an integral of (d−1)-ball slices, ∫_{c/2}^{r} (r² − t²)^((d−1)/2) dt, over the half ball."""
    for q in (0.4, 1.2):
        cap, e1 = quad(lambda t: (1 - t**2) ** ((d - 1) / 2), q / 2, 1)
        half, e2 = quad(lambda t: (1 - t**2) ** ((d - 1) / 2), 0, 1)
        assert overlap_fraction(d, q) == pytest.approx(cap / half, abs=4 * (e1 + e2))


@pytest.mark.parametrize("d", [2, 4])
def test_overlap_monte_carlo(d):
    n = 50000
    x = uniform_in_ball(d, n, np.random.default_rng(7))
    for q in (0.5, 1.5):
        p = float(overlap_fraction(d, q))
        hits = (((x - np.eye(d)[0] * q) ** 2).sum(axis=1) <= 1).mean()
        assert abs(hits - p) <= Z_MAX * np.sqrt(p * (1 - p) / n)


def test_ball_overlap_analysis_within_bounds():
    result = ball_overlap(dims=(1, 768), ratios=(0.5, 1.0), mc_dims=(2, 3), n_samples=20000, seed=3)
    assert result.numbers["max_abs_z"].value < Z_MAX
    assert result.numbers["overlap_d3_ratio_1"].value == pytest.approx(5 * 1 / 16, abs=16 * EPS)


def test_embedding_ball_overlap_on_a_constructed_vocabulary():
    """Tokens s·e_i (all pairwise distances s√2), positions r·e_j: every c/r is s√2/r; token·position cosines are 0 or 1."""
    d, s, r = 16, 0.5, 0.6
    E = s * np.eye(d)
    P = r * np.eye(d)[::-1][:8]
    from analyses.engine.sources import ModelShape

    shape = ModelShape("vocabulary", "gpt2", d, 8, 1, 1, len(E), 4 * d, "pre")
    tensors = {"W_E": E, "W_pos": P, "blocks.0.ln1.w": np.ones(d), "blocks.0.ln1.b": np.zeros(d)}
    result = embedding_ball_overlap(tensors, shape, n_pairs=200, n_neighbours=d, seed=0, n_curve_pairs=4,
                                    subspace_ks=(2,))
    numbers = {k: v.value for k, v in result.numbers.items()}
    ratio = s * np.sqrt(2) / r
    assert numbers["radius"] == pytest.approx(r, abs=EPS)
    for key in ("random", "nearest"):
        assert numbers[f"ratio_median_{key}"] == pytest.approx(ratio, abs=8 * EPS)
        assert numbers[f"touching_{key}"] == 1.0
        assert numbers[f"overlap_max_{key}"] == pytest.approx(float(overlap_fraction(d, ratio)), rel=1e-12)
        assert numbers[f"overlap_3d_touching_median_{key}"] == pytest.approx(float(overlap_fraction(3, ratio)),
                                                                             rel=1e-12)
    assert set(np.round(result.arrays["random_ratio"], 12)) == {round(ratio, 12)}


def test_curve_distance_step_and_subspace_overlap_closed_forms():
    from analyses.high_dim_geometry import curve_distance, median_step, subspace_overlap

    t = np.arange(5.0)
    A = np.column_stack([t, np.zeros(5)])
    B = np.column_stack([t + 0.5, np.full(5, 2.0)])  # parallel line: closest approach √(0.5² + 2²)
    assert curve_distance(A, B) == pytest.approx(np.hypot(0.5, 2.0))
    assert median_step(A) == pytest.approx(1.0)
    e = np.eye(6)
    assert subspace_overlap(e[:, :2], e[:, :2]) == pytest.approx(1.0)
    assert subspace_overlap(e[:, :2], e[:, 2:4]) == pytest.approx(0.0)
    tilted = np.column_stack([e[:, 0], (e[:, 1] + e[:, 2]) / np.sqrt(2)])
    assert subspace_overlap(e[:, :2], tilted) == pytest.approx((1 + 0.5) / 2)


def test_embedding_layer_norm_standardises_token_plus_position():
    from analyses.engine.sources import ModelShape
    from analyses.high_dim_geometry import embedding_layer_norm

    rng = np.random.default_rng(0)
    d = 12
    tensors = {"embed.ln.w": np.full(d, 2.0), "embed.ln.b": np.full(d, 1.0), "W_token_type": rng.standard_normal((2, d))}
    shape = ModelShape("bert-like", "bert", d, 8, 1, 1, 10, 4 * d, "post")
    X = rng.standard_normal((5, d))
    out = embedding_layer_norm(tensors, shape)(X)
    Z = X + tensors["W_token_type"][0]
    expected = (Z - Z.mean(1, keepdims=True)) / np.sqrt(Z.var(1, keepdims=True) + shape.ln_eps) * 2.0 + 1.0
    np.testing.assert_allclose(out, expected, atol=1e-12)


def test_two_tokens_whose_curves_cross_are_within_a_step():
    """Token b = token a shifted by exactly the difference of two positions: b at position 0 is a at position 3,
    so the curves meet (closest approach 0 steps) although the tokens differ."""
    from analyses.engine.sources import ModelShape

    rng = np.random.default_rng(4)
    d, n = 32, 40
    P = np.cumsum(0.3 * rng.standard_normal((n, d)), axis=0)
    E = rng.standard_normal((60, d))
    E[1] = E[0] + P[3] - P[0]
    shape = ModelShape("crossing", "gpt2", d, n, 1, 1, len(E), 4 * d, "pre")
    tensors = {"W_E": E, "W_pos": P, "blocks.0.ln1.w": np.ones(d), "blocks.0.ln1.b": np.zeros(d)}
    result = embedding_ball_overlap(tensors, shape, n_pairs=50, n_neighbours=60, seed=0, n_curve_pairs=60,
                                    subspace_ks=(3,))
    assert result.numbers["curve_ratio_min_nearest"].value == pytest.approx(0.0, abs=1e-6)
    assert result.numbers["curve_within_step_nearest"].value > 0
