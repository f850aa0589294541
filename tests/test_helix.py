"""The helix: a planted helix, planted sinusoids, and planted outliers are recovered."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.helix import axial_rise, extrapolation_error, helix, helix_3d_html
from analyses.toolkit.sinusoids import fit_sinusoid
from analyses.engine.sources import ModelShape

HELIX = {"n_components": 3, "edge": 50, "window": 4, "fft_pad": 16, "n_outliers": 3,
         "period_edges": (25, 50, 100, 200, 260), "period_windows": 4, "untrained_rows": 1,
         "other_windows": (2, 6)}
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
    assert (numbers["helix_first"].value, numbers["helix_last"].value) == (0, 999)  # every row lies on the helix
    assert numbers["turns_total"].value == pytest.approx(999 / 200, rel=5e-3)
    assert numbers["turns_total_low"].value <= numbers["turns_total"].value <= numbers["turns_total_high"].value
    # a clean helix: every variant of the rule counts the same turns, and the end turns as fast and as wide as the bulk
    # a window truncated at the ends moves the axis there, by a fraction of a turn
    assert numbers["turns_rules_low"].value <= 999 / 200 <= numbers["turns_rules_high"].value
    assert numbers["turns_rules_high"].value - numbers["turns_rules_low"].value < 0.3
    assert (numbers["helix_rows"].value, numbers["helix_span"].value) == (1000, 1000)
    assert numbers["radius_end"].value == pytest.approx(3.0, rel=2e-2)
    for key in ("tangent_period_end_low", "tangent_period_end_high"):  # 15 to 45 short chords of a noisy helix
        assert numbers[key].value == pytest.approx(200.0, rel=6e-2), key
    assert numbers["tangent_period_bulk_low"].value == pytest.approx(200.0, rel=5e-3)
    assert numbers["period_half_first"].value == pytest.approx(200.0, rel=5e-3)
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


def test_start_speed_compares_steps_in_the_full_space_and_in_the_plane():
    """On a uniform helix every step has the same length, so both ratios of the start's median step to the bulk's
    are one (in the plane up to the PCA's slight mixing of the finite helix's axis into it)."""
    numbers = helix({"W_pos": planted_helix(noise=0.0)}, None, **HELIX).numbers
    assert numbers["step_start_full"].value == pytest.approx(1.0, abs=1e-9)
    assert numbers["step_start_plane"].value == pytest.approx(1.0, abs=0.01)
