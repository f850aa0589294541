"""Why a helix: Toeplitz and circulant shares and the components they imply, on matrices with known answers."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.toolkit.sinusoids import dominant_frequency
from analyses.toeplitz_gram import (gram_statistics, shared_phase_toeplitz_shares, toeplitz_gram,
                                    top_eigenpairs)
from analyses.toolkit.gram import circulant_share, diagonal_sums, toeplitz_part, toeplitz_share
from analyses.toolkit.surrogates import random_walks
from analyses.engine.sources import ModelShape

N = 120


def fourier_columns(frequencies, amplitudes, n=N, phase=0.0):
    """Columns A cos(2πfn/N + phase), A sin(2πfn/N + phase): X Xᵀ = Σ A² cos(2πf(i − j)/N)."""
    t = np.arange(n)
    cols = []
    for f, a in zip(frequencies, amplitudes):
        cols += [a * np.cos(2 * np.pi * f * t / n + phase), a * np.sin(2 * np.pi * f * t / n + phase)]
    return np.column_stack(cols)


def test_diagonal_sums_and_the_toeplitz_part_by_brute_force():
    X = np.random.default_rng(0).standard_normal((30, 7))
    G = X @ X.T
    np.testing.assert_allclose(diagonal_sums(X), [np.trace(G, k) for k in range(30)], atol=1e-10)
    T = toeplitz_part(X)
    for k in range(30):
        np.testing.assert_allclose(np.diagonal(T, k), np.diagonal(G, k).mean(), atol=1e-12)
    # an orthogonal projection: the energy splits exactly, and τ is the kept share
    assert np.sum(G**2) == pytest.approx(np.sum(T**2) + np.sum((G - T) ** 2), rel=1e-12)
    assert toeplitz_share(X) == pytest.approx(np.sum(T**2) / np.sum(G**2), rel=1e-12)


def test_circulant_share_is_the_fourier_diagonal_share():
    X = np.random.default_rng(1).standard_normal((24, 5))
    G = X @ X.T
    F = np.fft.fft(np.eye(24)) / np.sqrt(24)  # unitary DFT
    H = F @ G @ F.conj().T
    assert circulant_share(X) == pytest.approx(np.sum(np.abs(np.diag(H)) ** 2) / np.sum(np.abs(H) ** 2), rel=1e-12)
    assert circulant_share(X) <= toeplitz_share(X) + 1e-12  # circulant matrices are Toeplitz


def test_a_circulant_gram_is_exactly_toeplitz_with_fourier_eigenvectors():
    """Integer frequencies 2 and 5 with amplitudes 3 and 1: G is circulant, τ = κ = 1, and its top eigenvectors
    are the cosine–sine pair at 2 cycles (equal eigenvalues) followed by the pair at 5 cycles."""
    X = fourier_columns([2, 5], [3.0, 1.0])
    assert toeplitz_share(X) == pytest.approx(1.0, abs=1e-12)
    assert circulant_share(X) == pytest.approx(1.0, abs=1e-12)
    values, vectors = top_eigenpairs(X @ X.T, 4)
    np.testing.assert_allclose(values, [9 * N / 2, 9 * N / 2, N / 2, N / 2], rtol=1e-10)
    np.testing.assert_allclose([dominant_frequency(vectors[:, j], 16) for j in range(4)], [2, 2, 5, 5], atol=1e-6)
    stats, _ = gram_statistics(X, 16)
    assert stats["pair_ratio"] == pytest.approx(1.0, abs=1e-10)
    assert stats["toeplitz_pair_ratio"] == pytest.approx(1.0, abs=1e-10)
    assert stats["top2_overlap"] == pytest.approx(1.0, abs=1e-10)


def test_a_non_integer_frequency_is_toeplitz_but_not_circulant():
    """cos(ω(i − j)) with 1.5 cycles over the rows depends on the offset only, but does not wrap around."""
    X = fourier_columns([1.5], [1.0])
    assert toeplitz_share(X) == pytest.approx(1.0, abs=1e-12)
    assert circulant_share(X) < 0.9


def test_random_walks_give_sinusoidal_components_but_no_pair():
    """PCA of random walks: PC1 is about half a cycle and PC2 about one, with very unequal variance: an arch,
    not a circle, although their Gram matrix is largely Toeplitz."""
    stats, _ = gram_statistics(random_walks(400, 300, np.random.default_rng(2)), 16)
    assert stats["pc1_cycles"] == pytest.approx(0.5, abs=0.1) and stats["pc2_cycles"] == pytest.approx(1.0, abs=0.15)
    assert stats["pair_ratio"] < 0.4
    assert stats["toeplitz_share"] > 0.7


def test_toeplitz_gram_reports_a_planted_helix_against_its_baselines():
    """A helix of two turns with a rising axis mixed into 16 dimensions: a near-degenerate pair at two cycles,
    as its Toeplitz part predicts, where the random walks give an unequal pair at different frequencies."""
    rng = np.random.default_rng(3)
    t = np.arange(N)
    helix = np.column_stack([np.cos(4 * np.pi * t / N), np.sin(4 * np.pi * t / N), 0.01 * t])
    Q, _ = np.linalg.qr(rng.standard_normal((16, 3)))  # orthonormal: a circle stays a circle
    P = helix @ Q.T + 0.01 * rng.standard_normal((N, 16))
    shape = ModelShape("helix", "gpt2", 16, N, 1, 1, 1, 1, "pre")
    result = toeplitz_gram({"W_pos": P}, shape, n_draws=3, n_shared=20, seed=0, pad=16, sinusoid_base=10000.0)
    n = {k: v.value for k, v in result.numbers.items()}
    assert n["pc1_cycles"] == pytest.approx(2.0, abs=0.1) and n["pc2_cycles"] == pytest.approx(2.0, abs=0.1)
    assert n["toeplitz_pc1_cycles"] == pytest.approx(2.0, abs=0.1)
    assert n["pair_ratio"] > 0.8 > n["walks_pair_ratio_max"]
    assert n["toeplitz_share"] > 0.9
    assert len(result.tables["statistics"].rows) == 11


def test_the_figures_name_no_model_identifier():
    """The model's registry name ('helix' here, 'gpt2' in the book) appears in no text the figures print: legends
    say what a curve is, the caption names the model."""
    from matplotlib.text import Text

    from analyses.toeplitz_gram import plot_gram, plot_kernels
    from analyses.toolkit import plotting

    t = np.arange(N)
    P = np.column_stack([np.cos(4 * np.pi * t / N), np.sin(4 * np.pi * t / N), 0.01 * t]) @ np.eye(3, 16)
    shape = ModelShape("helix", "gpt2", 16, N, 1, 1, 1, 1, "pre")
    result = toeplitz_gram({"W_pos": P}, shape, n_draws=3, n_shared=20, seed=0, pad=16, sinusoid_base=10000.0)
    for plot in (plot_gram, plot_kernels):
        fig = plot(result, shape)
        fig.draw_without_rendering()
        texts = [text.get_text() for text in fig.findobj(Text)]
        assert texts and not [text for text in texts if shape.name in text or shape.family in text], plot.__name__
        plotting.pyplot().close(fig)


def test_shared_phase_draws_keep_a_circulant_table_exactly_toeplitz():
    """Integer frequencies: G is circulant, so every shift-invariant (shared-phase) draw is too, τ = 1 in each."""
    X = fourier_columns([2, 5], [3.0, 1.0])
    shares = shared_phase_toeplitz_shares(X, 5, np.random.default_rng(0))
    assert shares == pytest.approx(np.ones(5), abs=1e-12)


def test_shared_phase_null_of_a_finite_context_leaves_energy_off_the_toeplitz_part():
    """A non-integer frequency (2.5 cycles): a shift-invariant draw of it is not Toeplitz over a finite context, so the
    null sits below 1, and each draw's τ equals τ computed from its Gram matrix directly (‖G‖ is the table's own)."""
    t = np.arange(N)
    X = np.column_stack([np.cos(5 * np.pi * t / N), np.sin(5 * np.pi * t / N), 0.02 * t])
    rng = np.random.default_rng(1)
    shares = shared_phase_toeplitz_shares(X, 8, rng)
    assert shares.max() < 0.999
    from analyses.toolkit.surrogates import phase_randomise
    Y = phase_randomise(X - X.mean(axis=0), np.random.default_rng(1), shared=True)
    G = Y @ Y.T
    T = np.array([[np.diagonal(G, abs(i - j)).mean() for j in range(N)] for i in range(N)])
    assert shares[0] == pytest.approx(np.sum(T * T) / np.sum(G * G), rel=1e-9)


def test_toeplitz_gram_cites_the_shift_invariant_null_beside_tau():
    rng = np.random.default_rng(3)
    t = np.arange(N)
    Q, _ = np.linalg.qr(rng.standard_normal((16, 3)))
    P = np.column_stack([np.cos(4 * np.pi * t / N), np.sin(4 * np.pi * t / N), 0.01 * t]) @ Q.T
    shape = ModelShape("helix", "gpt2", 16, N, 1, 1, 1, 1, "pre")
    n = toeplitz_gram({"W_pos": P}, shape, n_draws=2, n_shared=30, seed=0, pad=16, sinusoid_base=10000.0).numbers
    low, high = n["shared_nontoeplitz_share_min"].value, n["shared_nontoeplitz_share_max"].value
    assert 0 <= low <= 1 - n["shared_toeplitz_share_mean"].value <= high <= 1
    assert n["n_shared"].value == 30 and 0 <= n["shared_at_or_above"].value <= 30
    assert n["shared_p"].value == (1 + n["shared_at_or_above"].value) / 31
    q025, q975 = n["shared_nontoeplitz_share_q025"].value, n["shared_nontoeplitz_share_q975"].value
    assert low <= q025 <= q975 <= high and q025 < high and q975 > low
