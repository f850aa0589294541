"""The helix: a planted helix, planted sinusoids, and planted outliers are recovered."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.helix import axial_rise, extrapolation_error, helix, helix_3d_html, phase_turns
from analyses.toolkit.sinusoids import fit_sinusoid
from analyses.engine.sources import ModelShape

HELIX = {"n_components": 3, "edge": 50, "window": 4, "fft_pad": 16, "n_outliers": 3,
         "period_edges": (25, 50, 100, 200, 260), "period_windows": 4}
SHAPE = ModelShape("toy helix", "gpt2", 32, 1000, 1, 1, 1, 1, "pre")


def planted_helix(noise: float, seed: int = 0, n: int = 1000, period: float = 200.0, radius: float = 3.0,
                  rise: float = 0.004, D: int = 32) -> np.ndarray:
    """radius·(cos, sin)(2πn/T) plus rise·n along an axis, rotated into R^D by a random orthonormal map."""
    rng = np.random.default_rng(seed)
    t = np.arange(n)
    local = np.column_stack([radius * np.cos(2 * np.pi * t / period), radius * np.sin(2 * np.pi * t / period),
                             rise * t])
    Q, _ = np.linalg.qr(rng.standard_normal((D, 3)))
    return local @ Q.T + noise * rng.standard_normal((n, D))


def test_planted_helix_is_recovered():
    numbers = helix({"W_pos": planted_helix(noise=0.01)}, None, **HELIX).numbers
    assert numbers["top3"].value > 0.99
    for k in (1, 2):
        assert numbers[f"pc{k}_period"].value == pytest.approx(200.0, rel=2e-3)
        assert numbers[f"pc{k}_r2"].value > 0.99
    assert abs(numbers["pc3_spearman"].value) > 0.95  # noise (0.01) swaps ranks of neighbours (rise 0.004)
    assert numbers["turns_total"].value == pytest.approx(999 / 200, rel=5e-3)
    assert numbers["period"].value == pytest.approx(200.0, rel=5e-3)
    assert numbers["radius_bulk"].value == pytest.approx(3.0, rel=1e-2)
    assert numbers["pitch_bulk"].value == pytest.approx(0.004 * 200, rel=2e-2)


def test_helix_is_deterministic_and_its_html_is_byte_stable():
    P = planted_helix(noise=0.01)
    a, b = helix({"W_pos": P}, None, **HELIX), helix({"W_pos": P.copy()}, None, **HELIX)
    assert {k: v.value for k, v in a.numbers.items()} == {k: v.value for k, v in b.numbers.items()}
    html = helix_3d_html(a, SHAPE)
    assert html == helix_3d_html(b, SHAPE)
    assert html.startswith("```{=html}\n") and html.endswith("\n```\n") and 'id="helix-3d-toy-helix"' in html


@pytest.mark.parametrize("period, phase", [(37.3, 0.7), (150.0, -2.0)])
def test_fit_sinusoid_recovers_a_planted_sinusoid(period, phase):
    n = np.arange(400)
    fit = fit_sinusoid(n, 1.5 + 2.0 * np.cos(2 * np.pi * n / period + phase), pad=16)
    assert fit.period == pytest.approx(period, rel=1e-6)
    assert fit.amplitude == pytest.approx(2.0, rel=1e-6) and fit.offset == pytest.approx(1.5, abs=1e-6)
    assert np.cos(fit.phase - phase) == pytest.approx(1.0, abs=1e-9)
    assert fit.r2 == pytest.approx(1.0, abs=1e-10) and not fit.at_bound


def test_fit_sinusoid_flags_a_trend_without_a_cycle():
    n = np.arange(300)
    fit = fit_sinusoid(n, 0.01 * n, pad=16)
    assert fit.at_bound and fit.period == pytest.approx(600.0)


def test_phase_turns_counts_turns():
    t = np.linspace(0, 3.25, 500)
    turns = phase_turns(np.cos(2 * np.pi * t + 1.0), np.sin(2 * np.pi * t + 1.0))
    assert turns[0] == 0.0 and turns[-1] == pytest.approx(3.25, abs=1e-12)


def test_extrapolation_error_measures_a_planted_jump_in_steps():
    n = np.arange(60, dtype=float)
    direction, across = np.array([0.6, 0.8, 0.0]), np.array([0.0, 0.0, 1.0])
    X = n[:, None] * direction  # a straight line with unit steps
    X[0] += 20 * across
    X[-1] -= 7 * across
    error = extrapolation_error(X, window=4)
    assert error[0] == pytest.approx(20.0, abs=1e-9) and error[-1] == pytest.approx(7.0, abs=1e-9)
    np.testing.assert_allclose(error[1:-1], 0.0, atol=1e-9)
    with pytest.raises(ValueError):
        extrapolation_error(X, window=1)


def test_outlier_scores_on_a_helix_with_a_displaced_first_position():
    P = planted_helix(noise=0.0)
    step = np.linalg.norm(P[1] - P[0])
    P[0] += 30 * step * np.linalg.svd(P - P.mean(0))[2][-1]  # off the helix, across its subspace
    numbers = helix({"W_pos": P}, None, **HELIX).numbers
    assert numbers["outlier_first"].value == pytest.approx(30.0, rel=1e-2)
    assert numbers["outlier_rest_p99"].value < 0.2  # a circle bends away from a straight-line fit: O(step / radius)


def test_axial_rise_ignores_the_rotation():
    t = np.arange(300)
    Z = np.column_stack([np.cos(2 * np.pi * t / 30), np.sin(2 * np.pi * t / 30), 0.05 * t])
    R, _ = np.linalg.qr(np.random.default_rng(4).standard_normal((3, 3)))  # any orientation of the axes
    assert axial_rise(Z @ R, 30) == pytest.approx(0.05, rel=1e-9)


def test_helix_period_is_tokens_per_turn_and_its_dependence_on_edge_and_segment_is_tabled():
    """A uniform helix of period 200 gives T = 200 over every edge and segment. A helix that turns every 100 tokens
    over positions 0–499 and every 200 after has, over any symmetric bulk e … 999 − e, (500 − e)(1/100 + 1/200)
    turns in 1000 − 2e tokens: T = 400/3 whatever the edge; its four segments of the bulk 50 … 949 give 100, 100,
    200, 200. Edges that leave less than half the positions (260) are not tabled."""
    from analyses.toolkit.helix_period import helix_period

    P = planted_helix(noise=0.0)
    result = helix({"W_pos": P}, SHAPE, **HELIX)
    assert result.numbers["period"].value == pytest.approx(200.0, rel=1e-3)
    assert result.numbers["period"].value == pytest.approx(helix_period(P, 50), rel=1e-12)
    table = result.tables["period"]
    assert table.column("edge")[:4] == [25, 50, 100, 200] and table.column("positions")[4:] == [
        f"segment {k} of 4" for k in (1, 2, 3, 4)]
    assert table.column("tokens per turn") == pytest.approx([200.0] * 8, rel=1e-2)  # a projected ellipse wobbles
    n = np.arange(1000)
    angle = 2 * np.pi * np.where(n < 500, n / 100, 5 + (n - 500) / 200)  # 100 tokens per turn, then 200
    Q, _ = np.linalg.qr(np.random.default_rng(1).standard_normal((32, 3)))
    bent = np.column_stack([3 * np.cos(angle), 3 * np.sin(angle), 0.004 * n]) @ Q.T
    result = helix({"W_pos": bent}, SHAPE, **HELIX)
    numbers = {k: v.value for k, v in result.numbers.items()}
    periods = result.tables["period"].column("tokens per turn")
    assert periods[:4] == pytest.approx([400 / 3] * 4, rel=0.02)
    assert periods[4:] == pytest.approx([100, 100, 200, 200], rel=0.03)
    assert result.tables["period"].column("from")[4:] == [50, 275, 500, 725]
    assert numbers["period_local_min"] == pytest.approx(100, rel=0.02)
    assert numbers["period_local_max"] == pytest.approx(200, rel=0.02)
    assert numbers["period"] == pytest.approx(900 / (4.5 + 2.25), rel=0.02)  # bulk 50…949: 4.5 + 2.25 turns
    assert numbers["period_edge_first"] == 25 and numbers["period_edge_last"] == 200
