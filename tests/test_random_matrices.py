"""Random-matrix baselines (analyses/toolkit/random_matrices.py) against sampling and exact identities."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import integrate

from analyses.toolkit import random_matrices as rm
from analyses.toolkit.linalg import effective_rank


@pytest.mark.parametrize("ratio", [1.0, 0.5, 1 / 12])
def test_marchenko_pastur_density_is_normalised_with_unit_second_moment(ratio):
    lo, hi = rm.mp_singular_edges(ratio)
    mass = integrate.quad(lambda x: rm.mp_singular_density(np.array([x]), ratio)[0], lo, hi, limit=200)[0]
    second = integrate.quad(lambda x: x * x * rm.mp_singular_density(np.array([x]), ratio)[0], lo, hi, limit=200)[0]
    assert mass == pytest.approx(1.0, abs=1e-6)
    assert second == pytest.approx(1.0, abs=1e-6)  # eigenvalues of (1/N)WWᵀ have mean s² = 1
    assert rm.mp_singular_density(np.array([lo / 2, hi * 1.01]), ratio).tolist() == [0.0, 0.0]
    np.testing.assert_allclose(rm.mp_singular_density(np.array([1.0]), 1.0), np.sqrt(3) / np.pi)  # quarter circle


def test_noise_eigenvalues_fill_the_marchenko_pastur_interval():
    """Pure noise: the eigenvalues of the sample covariance lie within σ²(1 ± √γ)², touching both edges."""
    rng = np.random.default_rng(0)
    n_samples, n_features, sigma = 4000, 1000, 0.7
    X = sigma * rng.standard_normal((n_samples, n_features))
    eig = np.linalg.eigvalsh(X.T @ X / n_samples)
    lo, hi = rm.mp_eigenvalue_edges(n_features / n_samples, sigma**2)
    assert lo == pytest.approx(sigma**2 * 0.25) and hi == pytest.approx(sigma**2 * 2.25)
    assert eig.min() == pytest.approx(lo, rel=0.05) and eig.max() == pytest.approx(hi, rel=0.03)
    assert rm.mp_eigenvalue_edges(4.0)[1] == pytest.approx(9.0)  # more features than samples: (1 + 2)²


def test_sorted_noise_spectrum_follows_the_classical_positions():
    rng = np.random.default_rng(1)
    for shape in ((600, 600), (900, 300)):
        s = np.linalg.svd(rng.standard_normal(shape), compute_uv=False) / np.sqrt(max(shape))
        q = rm.mp_singular_quantiles(rm.aspect_ratio(shape), min(shape))
        assert np.all(np.diff(q) <= 0)
        assert np.max(np.abs(s[5:-5] - q[5:-5])) < 0.03


def test_effective_rank_limit_matches_gaussian_draws():
    rng = np.random.default_rng(2)
    for shape in ((500, 500), (1200, 100)):
        p = min(shape)
        draws = [effective_rank(np.linalg.svd(rng.standard_normal(shape), compute_uv=False)) for _ in range(3)]
        assert np.mean(draws) / p == pytest.approx(rm.mp_effective_rank_fraction(rm.aspect_ratio(shape)), rel=2e-3)
    assert rm.mp_effective_rank_fraction(1e-4) == pytest.approx(1.0, abs=1e-3)  # tall noise: nearly flat spectrum


@pytest.mark.parametrize("shape", [(5, 5), (8, 3)])
def test_gaussian_log_volume_moments_are_exact(shape):
    rng = np.random.default_rng(3)
    G = rng.standard_normal((40000, *shape))
    s = np.linalg.svd(G, compute_uv=False)
    logs = np.log(s).sum(axis=1)
    mean, var = rm.gaussian_log_volume_moments(shape)
    assert logs.mean() == pytest.approx(mean, abs=4 * np.sqrt(var / len(logs)))
    assert logs.var() == pytest.approx(var, rel=0.05)
    scaled = logs + min(shape) * (np.log(2.5) - np.log(np.linalg.norm(G, axis=(1, 2))))
    assert scaled.mean() == pytest.approx(rm.gaussian_log_volume_mean(shape, 2.5), abs=0.03)


def test_edelman_law_of_the_condition_number():
    rng = np.random.default_rng(4)
    n = 80
    kappa = np.array([np.linalg.cond(rng.standard_normal((n, n))) for _ in range(1500)]) / n
    for x in (1.5, 3.0, 10.0, 40.0):
        p = float(rm.edelman_condition_cdf(np.array([x]))[0])
        assert np.mean(kappa <= x) == pytest.approx(p, abs=4 * np.sqrt(p * (1 - p) / len(kappa)) + 0.01)
    f = lambda x: (2 * x + 4) / x**3 * np.exp(-2 / x - 2 / x**2)  # noqa: E731  the limit density
    assert integrate.quad(lambda x: np.log(x) * f(x), 0, np.inf)[0] == pytest.approx(1.537, abs=1e-3)  # Edelman
    assert rm.condition_tail_probability(3.0 * 768, 768) == pytest.approx(1 - np.exp(-2 / 3 - 2 / 9))


def test_samplers_keep_what_they_promise():
    rng = np.random.default_rng(5)
    W = rng.standard_t(3, (30, 20))
    G = rm.gaussian_like(W, rng)
    assert G.shape == W.shape and np.linalg.norm(G) == pytest.approx(np.linalg.norm(W))
    S = rm.shuffled_entries(W, rng)
    np.testing.assert_array_equal(np.sort(S.ravel()), np.sort(W.ravel()))
    assert not np.array_equal(S, W)
    with pytest.raises(ValueError):
        rm.mp_singular_edges(1.5)
