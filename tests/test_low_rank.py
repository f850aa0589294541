"""Low rank and sparse directions: closed-form checks on constructed matrices."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.low_rank import (gaussian_support_fraction, jaccard, low_rank, mass_support, participation_ratio,
                               position_subsets, singular_mass, sparse_directions)
from analyses.toolkit.sinusoids import sinusoidal_table

LOW_RANK = {"fractions": (0.5, 0.9, 0.99), "split": 10, "mass_ks": (1, 3, 5), "sinusoid_base": 10000.0}


def test_rank_k_matrix_has_all_its_mass_in_k_components():
    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 3)) @ rng.standard_normal((3, 16))  # rank 3, centred rank <= 3
    result = low_rank({"W_pos": X}, None, **LOW_RANK)
    assert result.numbers["learned_mass_top3"].value == pytest.approx(1.0, abs=1e-12)
    assert result.numbers["learned_mass_top1"].value < 0.99
    assert result.numbers["learned_numerical_rank"].value == 3
    assert result.numbers["all_k99"].value <= 3
    assert result.tables["singular_mass"].column("learned")[1] == pytest.approx(1.0, abs=1e-12)


def test_singular_mass_closed_form():
    s = np.array([1.0, 3.0, 2.0])  # order does not matter: 9 / 14, then 13 / 14
    assert singular_mass(s, 1) == pytest.approx(9 / 14)
    assert singular_mass(s, 2) == pytest.approx(13 / 14)
    assert singular_mass(s, 3) == pytest.approx(1.0)


def test_learned_equals_sinusoidal_when_the_table_is_sinusoidal():
    S = sinusoidal_table(40, 12)
    numbers = low_rank({"W_pos": S}, None, **LOW_RANK).numbers
    for key in ("effective_rank", "mass_top3", "numerical_rank"):
        assert numbers[f"learned_{key}"].value == pytest.approx(numbers[f"sinusoidal_{key}"].value, rel=1e-12)
    assert numbers["all_k90"].value == numbers["sinusoidal_k90"].value


@pytest.mark.parametrize("m", [1, 7, 40])
def test_flat_vector_on_m_indices(m):
    v = np.zeros(100)
    idx = np.random.default_rng(m).choice(100, m, replace=False)
    v[idx] = np.random.default_rng(m + 1).choice([-1.0, 1.0], m)
    assert participation_ratio(v) == pytest.approx(m, rel=1e-12)
    assert sorted(mass_support(v, 1.0)) == sorted(idx)
    assert len(mass_support(v, 0.9)) == int(np.ceil(0.9 * m - 1e-9))


def test_mass_support_picks_the_largest_entries():
    v = np.array([0.1, -3.0, 0.2, 1.0])  # squares 0.01, 9, 0.04, 1 of 10.05
    assert mass_support(v, 0.85).tolist() == [1]
    assert mass_support(v, 0.95).tolist() == [1, 3]


def test_gaussian_support_fraction_matches_sampling():
    x2 = np.sort(np.random.default_rng(0).standard_normal(400_000) ** 2)[::-1]
    sampled = (np.searchsorted(np.cumsum(x2), 0.9 * x2.sum()) + 1) / len(x2)
    assert gaussian_support_fraction(0.9) == pytest.approx(sampled, abs=3e-3)
    assert gaussian_support_fraction(0.5) < gaussian_support_fraction(0.9)


def test_jaccard():
    assert jaccard(np.array([1, 2, 3]), np.array([3, 4])) == pytest.approx(1 / 4)
    assert jaccard(np.array([5]), np.array([5])) == 1.0


def test_sparse_directions_on_axis_aligned_singular_vectors():
    rng = np.random.default_rng(3)
    D, dims = 30, [4, 17, 25]
    U, _ = np.linalg.qr(rng.standard_normal((50, 3)))
    P = np.zeros((50, D))
    P[:, dims] = U * np.array([5.0, 3.0, 2.0])  # right singular vectors e_4, e_17, e_25
    result = sparse_directions({"W_pos": P}, None, n_vectors=3, mass=0.9, sinusoid_base=10000.0)
    n = result.numbers
    assert n["support_max"].value == 1 and n["pr_max"].value == pytest.approx(1.0)
    assert n["union_all"].value == 3 and n["jaccard_max"].value == 0.0
    assert n["union_all_energy"].value == pytest.approx(1.0)
    assert result.tables["sparsity"].column("largest index") == dims


def test_position_subsets_partition():
    s = position_subsets(20, 5)
    assert s["early"].tolist() == list(range(5)) and s["late"].tolist() == list(range(5, 20))
    assert s["no_first"][0] == 1 and len(s["all"]) == 20
    assert s["early_no_first"].tolist() == [1, 2, 3, 4]
    with pytest.raises(ValueError):
        position_subsets(20, 19)


def test_low_rank_spectrum_statistics_on_a_planted_spectrum():
    """P = U diag(σ) Vᵀ with σ = (4, 2, 1, 1): masses σ²/Σσ² = 16/22 …, effective rank from p = σ/Σσ = (½, ¼, ⅛, ⅛)."""
    rng = np.random.default_rng(3)
    U, _ = np.linalg.qr(rng.standard_normal((40, 4)))
    V, _ = np.linalg.qr(rng.standard_normal((12, 4)))
    P = U @ np.diag([4.0, 2.0, 1.0, 1.0]) @ V.T
    numbers = low_rank({"W_pos": P}, None, **LOW_RANK).numbers
    assert numbers["learned_mass_top1"].value == pytest.approx(16 / 22, rel=1e-12)
    assert numbers["learned_mass_top3"].value == pytest.approx(21 / 22, rel=1e-12)
    assert numbers["learned_effective_rank"].value == pytest.approx(2 ** 1.75, rel=1e-12)  # exp(7/4 · ln 2)
    assert numbers["learned_numerical_rank"].value == 4
    assert numbers["learned_sigma1_over_sigma4"].value == pytest.approx(4.0, rel=1e-12)

