"""The position-matrix analysis: closed forms on synthetic tables, published values on the real weights."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.position_matrix import position_matrix, row_norms, symmetric_clip
from analyses.toolkit.sinusoids import sinusoidal_table
from analyses.engine.sources import ModelShape, open_source

SHAPE = ModelShape("synthetic", "gpt2", 64, 200, 1, 1, 1, 1, "pre")


def test_sinusoidal_rows_have_norm_sqrt_half_d():
    table = sinusoidal_table(200, 64)
    np.testing.assert_allclose(row_norms(table), np.sqrt(32), rtol=1e-14)
    result = position_matrix({"W_pos": table}, SHAPE, clip_percentile=99.0, n_extremes=2, small_entries=(0.01,))
    assert result.numbers["norm_std"].value == pytest.approx(0, abs=1e-12)
    assert result.numbers["norm_mean"].value == pytest.approx(np.sqrt(32), rel=1e-14)


def test_extremes_and_statistics_on_a_planted_matrix():
    rng = np.random.default_rng(0)
    P = rng.standard_normal((50, 8))
    P[7] *= 100
    P[42] *= 1e-3
    result = position_matrix({"W_pos": P}, SHAPE, clip_percentile=90.0, n_extremes=1, small_entries=(0.01,))
    n = result.numbers
    assert (n["norm_max_position"].value, n["norm_min_position"].value) == (7, 42)
    assert n["norm_max"].value == pytest.approx(np.linalg.norm(P[7]))
    assert n["norm_std"].value == pytest.approx(np.linalg.norm(P, axis=1).std())
    assert result.tables["norm_extremes"].column("position") == [42, 7]
    assert n["clip_value"].value == pytest.approx(np.percentile(np.abs(P), 90))


def test_symmetric_clip_bounds_the_stated_share_of_entries():
    x = np.linspace(-1, 1, 2001)[None, :]
    c = symmetric_clip(x, 50)
    assert np.mean(np.abs(x) <= c) == pytest.approx(0.5, abs=1e-3)
    with pytest.raises(ValueError):
        symmetric_clip(x, 0)


def test_real_gpt2_row_norms_match_published_reference(gpt2_weights):
    """The weights' README publishes: row norms mean 3.3901, std 0.2620, max 9.8756, min 0.1179."""
    src = open_source("gpt2", gpt2_weights)
    n = position_matrix(src.tensors, src.shape, clip_percentile=99.0, n_extremes=3, small_entries=(0.01,)).numbers
    assert [n[k].text for k in ("norm_mean", "norm_std", "norm_max", "norm_min")] == [
        "3.3901", "0.2620", "9.8756", "0.1179"]


def test_inner_norms_and_small_entries():
    P = np.ones((6, 4))
    P[0] *= 10  # first and last rows are left out of the inner statistics
    P[-1] *= 0.01
    P[2, 0] = 0.0
    n = position_matrix({"W_pos": P}, SHAPE, clip_percentile=99.0, n_extremes=1, small_entries=(0.05,)).numbers
    norms = np.linalg.norm(P[1:-1], axis=1)
    assert n["inner_norm_cv"].value == pytest.approx(norms.std() / norms.mean())
    assert n["frac_abs_below_0_05"].value == pytest.approx(5 / 24)  # 4 entries of the last row and one zero
    assert n["n_exact_zeros"].value == 1


def test_beta_share_of_a_random_direction():
    from analyses.position_matrix import beta_share_tail

    rng = np.random.default_rng(0)
    u = rng.standard_normal((200000, 20))
    share = (u[:, :3] ** 2).sum(axis=1) / (u**2).sum(axis=1)  # a fixed 3-dimensional projector
    assert share.mean() == pytest.approx(3 / 20, abs=2e-3)
    for q in (0.05, 0.15, 0.4):
        assert beta_share_tail(q, 3, 20) == pytest.approx(np.mean(share >= q), abs=4e-3)


def _last_position(P, **kw):
    from analyses.position_matrix import last_position

    params = {"init_std": 0.01, "ks": (2, 5), "n_random": 500, "level": 0.95, "seed": 0} | kw
    return {k: v.value for k, v in last_position({"W_pos": P}, SHAPE, **params).numbers.items()}


def test_an_untrained_last_row_looks_like_a_random_gaussian_draw():
    """Rows on a smooth curve, plus a last row drawn from N(0, 0.004²): Gaussian, at its own scale (far below
    0.01), and no closer to the other rows or their principal subspace than a random direction."""
    rng = np.random.default_rng(1)
    t = np.linspace(0, 3, 199)
    curve = np.column_stack([np.cos(t), np.sin(t), t]) @ rng.standard_normal((3, 64))
    P = np.vstack([curve, 0.004 * rng.standard_normal(64)])
    n = _last_position(P)
    assert n["sd_low"] < 0.004 < n["sd_high"] and n["chi2_p_init"] < 1e-10
    assert n["shapiro_p"] > 0.01 and abs(n["kurtosis"]) < 1.5
    assert n["share_top2_p"] > 0.01 and n["max_abs_cos_p"] > 0.01
    assert n["sd_over_init"] == pytest.approx(n["sd"] / 0.01)


def test_a_trained_last_row_is_caught():
    """A last row that continues the curve lies in the other rows' principal subspace: p-values collapse."""
    rng = np.random.default_rng(2)
    t = np.linspace(0, 3, 200)
    P = np.column_stack([np.cos(t), np.sin(t), t]) @ rng.standard_normal((3, 64))
    n = _last_position(P)
    assert n["share_top2"] > 0.8 and n["share_top2_p"] < 1e-10
    assert n["max_abs_cos"] > 0.99 and n["max_abs_cos_p"] == 0.0


def test_last_row_sd_is_the_sample_standard_deviation():
    """Last row 1, 2, …, 20: sample variance (ddof 1) = d(d + 1)/12 = 35, so sd = √35 exactly (√33.25 with
    ddof 0); the row before it is 2 × the same, sd_before = 2√35."""
    rng = np.random.default_rng(4)
    x = np.arange(1.0, 21.0)
    P = np.vstack([rng.standard_normal((28, 20)), 2 * x[::-1], x])
    n = _last_position(P)
    assert n["sd"] == pytest.approx(np.sqrt(35), rel=1e-12)
    assert n["sd_before"] == pytest.approx(2 * np.sqrt(35), rel=1e-12)
    assert n["sd_over_init"] == pytest.approx(np.sqrt(35) / 0.01, rel=1e-12)
