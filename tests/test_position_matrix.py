"""The position-matrix analysis: closed forms on synthetic tables, published values on the real weights."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.position_matrix import position_matrix, row_norms, symmetric_clip
from analyses.sinusoidal import sinusoidal_table
from analyses.engine.sources import ModelShape, open_source

SHAPE = ModelShape("synthetic", "gpt2", 64, 200, 1, 1, 1, 1, "pre")


def test_sinusoidal_rows_have_norm_sqrt_half_d():
    table = sinusoidal_table(200, 64)
    np.testing.assert_allclose(row_norms(table), np.sqrt(32), rtol=1e-14)
    result = position_matrix({"W_pos": table}, SHAPE, clip_percentile=99.0, n_extremes=2)
    assert result.numbers["norm_std"].value == pytest.approx(0, abs=1e-12)
    assert result.numbers["norm_mean"].value == pytest.approx(np.sqrt(32), rel=1e-14)


def test_extremes_and_statistics_on_a_planted_matrix():
    rng = np.random.default_rng(0)
    P = rng.standard_normal((50, 8))
    P[7] *= 100
    P[42] *= 1e-3
    result = position_matrix({"W_pos": P}, SHAPE, clip_percentile=90.0, n_extremes=1)
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
    n = position_matrix(src.tensors, src.shape, clip_percentile=99.0, n_extremes=3).numbers
    assert [n[k].text for k in ("norm_mean", "norm_std", "norm_max", "norm_min")] == [
        "3.3901", "0.2620", "9.8756", "0.1179"]
