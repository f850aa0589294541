"""Closed forms of the shared subspace toolkit on planted inputs, and its random-subspace null against sampling."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats
from scipy.linalg import subspace_angles

from analyses.toolkit.subspaces import (captured, energy_fraction, prefix_energy_fractions, prefix_overlaps,
                                        principal_angles, random_basis, random_energy_moments,
                                        rotation_trace_moments, sampled_energy_fractions, trace_ratio)

D = 16


def test_orthogonal_identical_and_complementary_subspaces():
    Q = random_basis(D, D, np.random.default_rng(0))
    A, B = Q[:, :4], Q[:, 4:9]
    W = A @ np.random.default_rng(1).standard_normal((4, 7))  # every column of W lies in span A
    assert energy_fraction(W, B) == pytest.approx(0.0, abs=1e-24)
    assert energy_fraction(W, A) == pytest.approx(1.0, abs=1e-12)
    assert energy_fraction(W.T, A, side="output") == pytest.approx(1.0, abs=1e-12)
    X = np.random.default_rng(2).standard_normal((D, 5))
    assert energy_fraction(X, Q[:, :6]) + energy_fraction(X, Q[:, 6:]) == pytest.approx(1.0, abs=1e-12)
    np.testing.assert_allclose(np.degrees(principal_angles(A, B)), 90.0, atol=1e-10)
    same = A @ random_basis(4, 4, np.random.default_rng(3))  # another basis of the same subspace
    np.testing.assert_allclose(principal_angles(A, same), 0.0, atol=1e-12)


def test_principal_angles_of_a_planted_rotation_small_angles_included():
    e = np.eye(D)
    for theta in (1e-7, 1e-3, 0.3, 1.2, np.pi / 2):
        A = e[:, :2]
        B = np.stack([np.cos(theta) * e[:, 0] + np.sin(theta) * e[:, 2], e[:, 1]], axis=1)
        got = principal_angles(A, B)
        assert got[0] == pytest.approx(0.0, abs=1e-15)
        assert got[1] == pytest.approx(theta, rel=1e-9)


def test_principal_angles_agree_with_scipy_and_with_the_mean_squared_cosine():
    rng = np.random.default_rng(4)
    for ka, kb in ((3, 3), (5, 2), (2, 5)):
        A, B = random_basis(D, ka, rng), random_basis(D, kb, rng)
        theta = principal_angles(A, B)
        np.testing.assert_allclose(theta, np.sort(subspace_angles(A, B)), atol=1e-12)
        assert np.all(np.diff(theta) >= 0) and theta.size == min(ka, kb)
    A, B = random_basis(D, 4, rng), random_basis(D, 4, rng)
    assert energy_fraction(A, B) == pytest.approx(np.mean(np.cos(principal_angles(A, B)) ** 2), abs=1e-12)
    # the span, not the scaling of the columns, decides; dependent columns span nothing k-dimensional
    np.testing.assert_allclose(principal_angles(A * [1, 2, 3, 4], B), principal_angles(A, B), atol=1e-12)
    with pytest.raises(ValueError, match="linearly dependent"):
        principal_angles(np.stack([A[:, 0], A[:, 0]], axis=1), B)


def test_capture_of_a_full_basis_sums_to_the_dimension():
    rng = np.random.default_rng(5)
    B, V = random_basis(D, 3, rng), random_basis(D, D, rng)
    c = captured(V, B)
    assert c.sum() == pytest.approx(3.0, abs=1e-12) and np.all((c >= 0) & (c <= 1))
    np.testing.assert_allclose(captured(B, B), 1.0, atol=1e-12)


@pytest.mark.parametrize("side", ["input", "output"])
def test_random_subspace_mean_is_k_over_d_and_isotropic_matrices_have_no_spread(side):
    assert random_energy_moments(np.eye(D), 5, side) == pytest.approx((5 / D, 0.0), abs=1e-15)
    W = np.random.default_rng(6).standard_normal((D, 9) if side == "input" else (9, D))
    mean, sd = random_energy_moments(W, 5, side)
    assert mean == pytest.approx(5 / D) and sd > 0
    means, sds = random_energy_moments(W, np.array([0, 5, D]), side)
    np.testing.assert_allclose(means, [0, 5 / D, 1])
    np.testing.assert_allclose(sds[[0, 2]], 0, atol=1e-15)
    assert sds[1] == pytest.approx(sd)


def test_one_vector_has_the_beta_variance():
    k = 5
    sd = random_energy_moments(np.eye(D, 1), k)[1]
    assert sd**2 == pytest.approx(stats.beta(k / 2, (D - k) / 2).var(), rel=1e-12)
    assert sd**2 == pytest.approx(2 * k * (D - k) / (D**2 * (D + 2)), rel=1e-12)


@pytest.mark.parametrize("spectrum", [[1.0], [1.0, 1.0], [3.0, 1.0, 0.5], list(np.linspace(1, 0.1, 12))])
def test_closed_form_moments_match_direct_sampling(spectrum):
    """Direct sampling (random bases, ‖BᵀW‖²) against the closed form, for planted singular values."""
    rng = np.random.default_rng(7)
    k, n = 4, 20000
    U = random_basis(D, len(spectrum), rng)
    W = U * spectrum  # singular values exactly `spectrum`
    draws = np.array([energy_fraction(W, random_basis(D, k, rng)) for _ in range(n)])
    mean, sd = random_energy_moments(W, k)
    assert abs(draws.mean() - mean) < 4 * sd / np.sqrt(n)
    # the sample variance's standard error, from the sample's own fourth moment
    se_var = np.sqrt((np.mean((draws - draws.mean()) ** 4) - draws.var() ** 2) / n)
    assert abs(draws.var() - sd**2) < 4 * se_var


def test_fast_sampler_has_the_law_of_direct_sampling():
    rng = np.random.default_rng(8)
    W = random_basis(D, 3, rng) * [2.0, 1.0, 0.3]
    ks = (1, 4, 12)
    fast = sampled_energy_fractions(W, ks, 4000, np.random.default_rng(9))
    direct = np.array([[energy_fraction(W, B[:, :k]) for k in ks]
                       for B in (random_basis(D, max(ks), rng) for _ in range(4000))])
    for j, k in enumerate(ks):
        assert stats.ks_2samp(fast[:, j], direct[:, j]).pvalue > 1e-3, k
        mean, sd = random_energy_moments(W, k)
        assert abs(fast[:, j].mean() - mean) < 4 * sd / np.sqrt(len(fast))
    out = sampled_energy_fractions(W.T, ks, 3, np.random.default_rng(9), side="output")
    np.testing.assert_allclose(out, fast[:3], atol=1e-12)  # the same law and the same draws on the other side


def test_rotation_trace_moments_match_sampling_and_reduce_to_the_projector_case():
    rng = np.random.default_rng(10)
    X, Y = rng.standard_normal((D, 5)), rng.standard_normal((D, 3)) * [3, 1, 0.2]
    A, B = X @ X.T, Y @ Y.T
    mean, sd = rotation_trace_moments(A, B)
    assert mean == pytest.approx(np.trace(A) * np.trace(B) / D)
    draws = []
    for _ in range(20000):
        Q = random_basis(D, D, rng)
        draws.append(np.trace(A @ Q @ B @ Q.T))
    draws = np.array(draws)
    assert abs(draws.mean() - mean) < 4 * sd / np.sqrt(len(draws))
    se_var = np.sqrt((np.mean((draws - draws.mean()) ** 4) - draws.var() ** 2) / len(draws))
    assert abs(draws.var() - sd**2) < 4 * se_var
    k = 4
    projector = np.diag([1.0] * k + [0.0] * (D - k))
    m, s = rotation_trace_moments(X @ X.T, projector)
    assert (m / np.trace(X @ X.T), s / np.trace(X @ X.T)) == pytest.approx(random_energy_moments(X, k))
    assert rotation_trace_moments(np.eye(D), B)[1] == pytest.approx(0.0, abs=1e-12)


def test_trace_ratio_is_one_for_a_blind_map_and_d_over_m_for_a_map_onto_the_energy():
    """r = D tr(AB)/(tr A tr B): 1 when B ∝ I, D/m when B projects onto the m-dimensional span of A's energy
    with equal weight, 0 when it avoids it; over random rotations its mean is 1 with the stated sd."""
    rng = np.random.default_rng(12)
    Q = random_basis(D, D, rng)
    X = rng.standard_normal((50, 3)) @ Q[:, :3].T  # energy in a 3-dimensional span
    A = X.T @ X
    assert trace_ratio(A, 2.5 * np.eye(D)) == pytest.approx((1.0, 0.0), abs=1e-12)
    assert trace_ratio(A, 4.0 * Q[:, :3] @ Q[:, :3].T)[0] == pytest.approx(D / 3)
    assert trace_ratio(A, Q[:, 3:] @ Q[:, 3:].T)[0] == pytest.approx(0.0, abs=1e-12)
    W = rng.standard_normal((D, 6)) * [4, 2, 1, 1, 0.5, 0.1]
    r, sd = trace_ratio(A, W @ W.T)
    draws = np.array([trace_ratio(A, (R := random_basis(D, D, rng)) @ W @ W.T @ R.T)[0] for _ in range(4000)])
    assert abs(draws.mean() - 1) < 4 * sd / np.sqrt(len(draws))
    assert abs(draws.std() / sd - 1) < 0.08


def test_random_basis_is_orthonormal_and_uniform():
    rng = np.random.default_rng(11)
    B = random_basis(D, 5, rng)
    np.testing.assert_allclose(B.T @ B, np.eye(5), atol=1e-12)
    diag = np.array([np.diag((b := random_basis(D, 5, rng)) @ b.T) for _ in range(4000)])
    # every diagonal entry of the projector is Beta(k/2, (D − k)/2): mean k/D in every coordinate
    assert np.abs(diag.mean(axis=0) - 5 / D).max() < 5 * np.sqrt(stats.beta(2.5, 5.5).var() / 4000)
    assert stats.kstest(diag[:, 0], stats.beta(2.5, (D - 5) / 2).cdf).pvalue > 1e-3
    with pytest.raises(ValueError):
        random_basis(D, D + 1, rng)


def test_prefix_energy_fractions_equal_the_energy_of_each_prefix():
    rng = np.random.default_rng(21)
    W = rng.standard_normal((20, 7)) * np.linspace(4, 0.2, 7)
    basis = np.linalg.qr(rng.standard_normal((20, 9)))[0]
    ks = [1, 4, 9]
    np.testing.assert_allclose(prefix_energy_fractions(W, basis, ks),
                               [energy_fraction(W, basis[:, :k]) for k in ks], rtol=1e-12)
    X = rng.standard_normal((5, 20))  # rows live in R^20: the output side
    np.testing.assert_allclose(prefix_energy_fractions(X, basis, ks, "output"),
                               [energy_fraction(X, basis[:, :k], "output") for k in ks], rtol=1e-12)


def test_sampler_gives_the_whole_space_all_the_energy_and_refuses_impossible_dimensions():
    W = random_basis(D, 3, np.random.default_rng(4)) * [2.0, 1.0, 0.3]
    np.testing.assert_allclose(sampled_energy_fractions(W, (D,), 5, np.random.default_rng(1)), 1.0, atol=1e-12)
    with pytest.raises(ValueError):
        sampled_energy_fractions(W, (D + 1,), 5, np.random.default_rng(1))


def test_prefix_overlaps_are_the_mean_squared_cosines_of_each_prefix():
    rng = np.random.default_rng(22)
    A, B = random_basis(D, 6, rng), random_basis(D, 8, rng)
    np.testing.assert_allclose(prefix_overlaps(A, B), [energy_fraction(A[:, :k], B[:, :k]) for k in range(1, 7)],
                               rtol=1e-12)
    np.testing.assert_allclose(prefix_overlaps(A, A), 1.0, rtol=1e-12)
