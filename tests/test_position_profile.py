"""The six-statistic profile of a position table (`toolkit.position_profile`) and its per-model analysis: closed
forms on a circle and a line, and the analysis's windows recomputed independently."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import Given

from analyses.engine.shapes import ModelShape
from analyses.position_profiles import position_profile
from analyses.toolkit.position_profile import profile, turns, windows


def circle(n: int, k: int, d: int = 6) -> np.ndarray:
    """n rows going k times round a unit circle in the first two of d dimensions."""
    theta = 2 * np.pi * k * np.arange(n) / n
    X = np.zeros((n, d))
    X[:, 0], X[:, 1] = np.cos(theta), np.sin(theta)
    return X


@pytest.mark.parametrize("k", [1, 3, 7])
def test_a_circle_of_k_turns(k):
    """Two equal components (λ₂/λ₁ = 1, all the variance in 2), k (n − 1)/n turns from row 0 to row n − 1 (around
    local centres averaged over a whole number of rows near one turn: exact to that rounding), a circulant Gram
    (τ = 1), equal norms."""
    stats = profile(circle(256, k))
    assert stats["k90"] == 2 and stats["turns"] == pytest.approx(k * 255 / 256, abs=1e-3)
    for key in ("top3_share", "pair_ratio", "toeplitz_share", "row0_over_median"):
        assert stats[key] == pytest.approx(1, abs=1e-9), key


def test_a_line_has_one_component_and_an_outlying_first_row():
    n = 64
    X = np.zeros((n, 4))
    X[:, 0] = np.arange(n) + 1.0
    X[0, 1] = 10.0  # row 0: norm √(1 + 100)
    stats = profile(X)
    norms = np.linalg.norm(X, axis=1)
    assert stats["row0_over_median"] == pytest.approx(np.sqrt(101) / np.median(norms), rel=1e-12)
    X[0, 1] = 0.0
    stats = profile(X)
    assert stats["k90"] == 1 and stats["pair_ratio"] == pytest.approx(0, abs=1e-12)


def test_turns_do_not_depend_on_the_direction_of_travel():
    assert turns(circle(100, 2)[::-1]) == pytest.approx(2 * 99 / 100, abs=1e-9)


def test_windows():
    assert windows(1024, 512, 256) == [0, 256, 512]
    assert windows(512, 512, 256) == [0] and windows(256, 512, 256) == []


def _shape(n: int, d: int) -> ModelShape:
    return ModelShape("test", "gpt2", d, n, 1, 2, 11, 4 * d, "pre")


def test_a_longer_table_gets_its_windows_and_the_sinusoidal_table_of_their_shape():
    rng = np.random.default_rng(0)
    P = np.cumsum(rng.standard_normal((96, 8)), axis=0)
    result = position_profile(Given({"W_pos": P.astype(np.float32)}), _shape(96, 8), window=32, stride=32,
                              sinusoid_base=10000.0)
    assert result.numbers["n_windows"].value == 3
    window = profile(P.astype(np.float32)[32:64])
    for key, value in window.items():
        assert result.numbers[f"w32_{key}"].value == pytest.approx(value, rel=1e-12, abs=1e-12), key
    assert result.tables["profile"].column("positions") == [96, 32, 32, 32, 96, 32]


def test_a_table_no_longer_than_the_window_is_profiled_whole():
    P = np.random.default_rng(1).standard_normal((32, 8)).astype(np.float32)
    result = position_profile(Given({"W_pos": P}), _shape(32, 8), window=32, stride=16, sinusoid_base=10000.0)
    assert result.numbers["n_windows"].value == 0 and "w0_turns" not in result.numbers
    assert result.tables["profile"].column("table") == ["learned, positions 0–31", "sinusoidal, 32 × 8"]
