"""Closed-form properties of the phase-randomised surrogates and random walks (analyses/toolkit/surrogates.py)."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.toolkit.surrogates import cross_spectrum, phase_randomise, power_spectrum, random_phases, random_walks


def smooth_matrix(n=64, d=5, seed=0):
    rng = np.random.default_rng(seed)
    return np.cumsum(rng.standard_normal((n, d)), axis=0) + rng.standard_normal(d)


@pytest.mark.parametrize("n", [64, 63])
@pytest.mark.parametrize("shared", [False, True])
def test_every_column_keeps_its_power_spectrum_and_mean_exactly(n, shared):
    X = smooth_matrix(n)
    S = phase_randomise(X, np.random.default_rng(1), shared=shared)
    assert S.shape == X.shape and S.dtype == X.dtype
    np.testing.assert_allclose(power_spectrum(S), power_spectrum(X), rtol=1e-10, atol=1e-8)
    np.testing.assert_allclose(S.mean(axis=0), X.mean(axis=0), atol=1e-12)
    np.testing.assert_allclose((S**2).sum(axis=0), (X**2).sum(axis=0), rtol=1e-12)  # Parseval
    assert not np.allclose(S, X)


def test_shared_phases_keep_the_cross_spectrum_and_the_column_gram_exactly():
    X = smooth_matrix()
    S = phase_randomise(X, np.random.default_rng(2), shared=True)
    np.testing.assert_allclose(cross_spectrum(S), cross_spectrum(X), atol=1e-8)
    np.testing.assert_allclose(S.T @ S, X.T @ X, atol=1e-9)
    centred = lambda M: np.linalg.svd(M - M.mean(axis=0), compute_uv=False)  # noqa: E731
    np.testing.assert_allclose(centred(S), centred(X), rtol=1e-10)  # PCA variance shares kept


def test_independent_phases_break_the_cross_spectrum():
    X = smooth_matrix()
    S = phase_randomise(X, np.random.default_rng(3), shared=False)
    off = (0, 1)
    phase_x = np.angle(cross_spectrum(X)[1:-1, off[0], off[1]])
    phase_s = np.angle(cross_spectrum(S)[1:-1, off[0], off[1]])
    assert np.abs(np.angle(np.exp(1j * (phase_x - phase_s)))).mean() > 0.5  # random relative phases, not kept
    assert not np.allclose(S.T @ S, X.T @ X, rtol=1e-3)


def test_a_circulant_gram_is_invariant_under_shared_phases():
    """Columns cos(ωn), sin(ωn) at a DFT frequency: XXᵀ = cos(ω(i − j)) is circulant, which a circulant U keeps."""
    n = 48
    w = 2 * np.pi * 3 / n
    t = np.arange(n)
    X = np.column_stack([np.cos(w * t), np.sin(w * t)])
    S = phase_randomise(X, np.random.default_rng(4), shared=True)
    np.testing.assert_allclose(S @ S.T, X @ X.T, atol=1e-12)


def test_phase_factors_are_unit_and_real_at_zero_and_nyquist():
    F = random_phases(10, 3, np.random.default_rng(5))
    assert F.shape == (6, 3)
    np.testing.assert_allclose(np.abs(F), 1.0)
    np.testing.assert_array_equal(F[0], 1.0)
    np.testing.assert_array_equal(F[-1], 1.0)
    assert random_phases(9, 1, np.random.default_rng(5)).shape == (5, 1)
    with pytest.raises(ValueError):
        random_phases(1, 1, np.random.default_rng(0))


def test_surrogates_are_deterministic_under_the_seed():
    X = smooth_matrix()
    a, b = (phase_randomise(X, np.random.default_rng(7), shared=False) for _ in range(2))
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, phase_randomise(X, np.random.default_rng(8), shared=False))


def test_random_walks_have_gaussian_steps():
    W = random_walks(2000, 50, np.random.default_rng(9))
    steps = np.diff(W, axis=0)
    assert W.shape == (2000, 50)
    assert steps.std() == pytest.approx(1.0, abs=0.01)
    assert np.var(W[-1]) == pytest.approx(2000, rel=0.5)  # variance grows like n: not stationary
