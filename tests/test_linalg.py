"""Shared linear-algebra primitives against closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.linalg import toeplitz
from scipy.stats import ortho_group

from analyses.toolkit.linalg import (components_for, cosine_matrix, effective_rank, explained_variance_ratio,
                             mean_by_offset, top_right_singular_vectors, upper_triangle)


def test_cosine_matrix_is_scale_invariant_with_unit_diagonal():
    X = np.random.default_rng(0).standard_normal((6, 4))
    C = cosine_matrix(X * np.arange(1, 7)[:, None])
    np.testing.assert_allclose(np.diag(C), 1, rtol=1e-15)
    np.testing.assert_allclose(C, cosine_matrix(X), atol=1e-15)
    with pytest.raises(ValueError, match="zero row"):
        cosine_matrix(np.zeros((2, 3)))


def test_upper_triangle_keeps_exact_zeros():
    C = np.zeros((5, 5))
    assert upper_triangle(C).size == 10  # n(n-1)/2, although every value is 0
    C[0, 4], C[4, 0] = 0.5, 9.0
    assert upper_triangle(C).tolist().count(0.5) == 1 and 9.0 not in upper_triangle(C)
    with pytest.raises(ValueError):
        upper_triangle(np.zeros((2, 3)))


def test_mean_by_offset_recovers_a_toeplitz_profile():
    profile = np.cos(np.arange(8) / 2)
    means, stds, counts = mean_by_offset(toeplitz(profile))
    np.testing.assert_allclose(means, profile[1:], atol=1e-15)
    np.testing.assert_allclose(stds, 0, atol=1e-15)
    assert counts.tolist() == list(range(7, 0, -1))
    _, _, counts0 = mean_by_offset(toeplitz(profile), exclude=(0,))
    assert counts0.tolist() == list(range(6, 0, -1)) + [0]


def test_explained_variance_of_a_planted_rank_k_matrix():
    rng = np.random.default_rng(1)
    X = rng.standard_normal((300, 3)) @ rng.standard_normal((3, 20)) + 5.0  # offset removed by centring
    ratios = explained_variance_ratio(X)
    assert ratios[:3].sum() == pytest.approx(1, abs=1e-12)
    assert components_for(ratios, 0.999999) == 3
    assert components_for(np.array([0.5, 0.3, 0.2]), 0.8) == 2  # exactly reached counts


def test_effective_rank_closed_forms():
    d = 12
    Q = ortho_group.rvs(d, random_state=2)
    assert effective_rank(np.linalg.svd(Q, compute_uv=False)) == pytest.approx(d, rel=1e-12)
    V = Q[:, :4]
    assert effective_rank(np.linalg.svd(V @ V.T, compute_uv=False)) == pytest.approx(4, rel=1e-9)
    with pytest.raises(ValueError):
        effective_rank(np.zeros(3))


def test_top_right_singular_vectors_are_orthonormal_with_fixed_signs():
    X = np.random.default_rng(3).standard_normal((40, 10))
    V = top_right_singular_vectors(X, 4)
    np.testing.assert_allclose(V.T @ V, np.eye(4), atol=1e-12)
    assert np.all(V[np.abs(V).argmax(axis=0), range(4)] > 0)
    np.testing.assert_allclose(top_right_singular_vectors(-X, 4), V, atol=1e-12)


def test_effective_rank_of_an_unequal_spectrum_weights_singular_values_not_their_squares():
    """σ = (3, 1): p = (3/4, 1/4), so exp H = 4 / 3^(3/4) ≈ 1.7548 (σ² weights would give p = (9/10, 1/10))."""
    assert effective_rank(np.array([3.0, 1.0])) == pytest.approx(4 / 3**0.75, rel=1e-14)
    assert effective_rank(np.array([2.0, 1.0, 1.0, 0.0])) == pytest.approx(2 * 2**0.5, rel=1e-14)  # p = ½, ¼, ¼


def test_gram_singular_values_match_the_svd_for_matrices_and_stacks():
    from analyses.toolkit.linalg import gram_singular_values

    rng = np.random.default_rng(11)
    for shape in ((40, 7), (7, 40), (25, 25)):
        X = rng.standard_normal(shape)
        np.testing.assert_allclose(gram_singular_values(X), np.linalg.svd(X, compute_uv=False), rtol=1e-10)
    stack = rng.standard_normal((3, 30, 6))
    np.testing.assert_allclose(gram_singular_values(stack), np.linalg.svd(stack, compute_uv=False), rtol=1e-10)
