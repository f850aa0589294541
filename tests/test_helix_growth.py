"""Growing a helix: each trajectory statistic on histories whose answers are known in closed form."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.engine.sources import ModelShape
from analyses.helix_growth import gaussian_null, half_way_index, helix_growth, onset_index, trajectory

N, D, T = 256, 128, 64
SHAPE = ModelShape("toy", "gpt2", D, N, 1, 4, 50, 4 * D, "pre")


def circle(n: int = N, period: int = T) -> np.ndarray:
    """Positions on a circle in the first two coordinates, `period` positions per turn."""
    angle = 2 * np.pi * np.arange(n) / period
    P = np.zeros((n, D))
    P[:, 0], P[:, 1] = np.cos(angle), np.sin(angle)
    return P


def history(tables: list[np.ndarray], steps: list[int], loss: list[float], V: np.ndarray | None = None) -> dict:
    V = np.eye(D) if V is None else V
    return {"history.steps": np.array(steps), "history.W_pos": np.stack(tables).astype(np.float32),
            "history.E_centred.S": np.ones((len(steps), D)), "history.E_centred.V": np.stack([V] * len(steps)),
            "history.train_loss": np.linspace(8, 3, max(steps)), "history.eval_steps": np.array(steps),
            "history.eval_loss": np.array(loss)}


def test_onset_is_where_the_values_stay_above_the_threshold_for_good():
    assert onset_index(np.array([0.1, 0.5, 0.2, 0.6, 0.7]), 0.4) == 3
    assert onset_index(np.array([0.5, 0.6]), 0.4) == 0
    assert onset_index(np.array([0.5, 0.3]), 0.4) is None


def test_the_half_way_step_is_the_first_with_half_of_the_total_change():
    assert half_way_index(np.array([8.0, 7.0, 5.0, 4.5, 4.0])) == 2  # a fall to 6.0
    assert half_way_index(np.array([8.0, 6.0, 7.0, 4.0])) == 1  # exactly half counts
    assert half_way_index(np.array([0.1, 0.2, 0.6, 0.5, 0.9])) == 2  # a rise to 0.5
    assert half_way_index(np.array([10.0, 5.5, 4.9, 0.0])) == 2  # 5.5 is short of half the fall (5.0)


def test_gaussian_noise_has_no_low_rank_structure_and_a_toeplitz_share_near_d_over_d_plus_n():
    """For i.i.d. X [N, D], ‖G‖² ≈ N D² + N² D of which the Toeplitz part keeps ≈ N D² (the diagonal)."""
    null = gaussian_null((N, D), 3, 20, seed=1)
    assert np.all(null[:, 0] < 0.1) and np.all(null[:, 0] > 3 / D)
    assert null[:, 1].mean() == pytest.approx(D / (D + N), abs=0.03)
    np.testing.assert_array_equal(null, gaussian_null((N, D), 3, 20, seed=1))


def test_a_circle_has_full_top_share_full_toeplitz_share_and_its_own_period():
    t = trajectory(history([circle()], [0], [1.0]), k=3, token_k=10, edge=100)
    assert t["share"][0] == pytest.approx(1.0, abs=1e-6)
    assert t["toeplitz"][0] == pytest.approx(1.0, abs=1e-6)  # whole turns: G_ij = cos(2π(i − j)/T)
    assert t["period"][0] == pytest.approx(T, rel=1e-4)
    np.testing.assert_allclose(t["norms"][0], 1.0, rtol=1e-6)


def test_enrichment_is_d_over_k_inside_the_token_subspace_and_zero_outside():
    rng = np.random.default_rng(0)
    V, _ = np.linalg.qr(rng.standard_normal((D, D)))
    inside = circle()[:, :2] @ V[:, :2].T  # rows in span(V[:, :2]), inside the top 10 token directions
    outside = circle()[:, :2] @ V[:, 20:22].T
    t = trajectory(history([inside, outside], [0, 1], [1.0, 1.0], V), k=3, token_k=10, edge=100)
    assert t["enrichment"][0] == pytest.approx(D / 10, rel=1e-5)
    assert t["enrichment"][1] == pytest.approx(0.0, abs=1e-6)


def test_onset_and_loss_on_a_run_whose_circle_emerges_from_noise():
    rng = np.random.default_rng(2)
    noise = rng.standard_normal((N, D)) * 0.05
    weights = [0.0, 0.0, 0.05, 0.5, 1.0]  # the circle's amplitude per snapshot; the noise stays
    tables = [w * circle() + noise for w in weights]
    steps, loss = [0, 10, 100, 1000, 3000], [8.0, 7.5, 7.0, 4.0, 3.0]
    r = helix_growth(history(tables, steps, loss), SHAPE, k=3, token_k=10, edge=100, n_null=20, seed=0, shown=4)
    assert r.numbers["onset_step"].value == 1000
    assert r.numbers["loss_half_step"].value == 1000  # 8 → 3: half the fall is 5.5, first reached at 1000
    assert r.numbers["onset_vs_half"].text == "at"
    assert r.numbers["share_half_step"].value == 1000
    assert r.numbers["period_final"].value == pytest.approx(T, rel=0.01)
    assert r.tables["trajectory"].column("helix period")[:3] == ["—", "—", "—"]
