"""The shift map: exact maps on tables whose shift is one rotation, and a random walk that no rotation follows."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.engine.sources import ModelShape
from analyses.shift_map import best_orthogonal, coordinate_sets, shift_map_analysis, shift_statistics
from analyses.toolkit.sinusoids import sinusoidal_table
from analyses.toolkit.surrogates import random_walks

KS = (1, 2, 4, 8, 16)


def test_best_orthogonal_recovers_a_planted_rotation():
    rng = np.random.default_rng(0)
    A = rng.standard_normal((50, 4))
    Q, _ = np.linalg.qr(rng.standard_normal((4, 4)))
    assert best_orthogonal(A, A @ Q) == pytest.approx(Q, abs=1e-12)


def test_the_sinusoidal_table_shifts_by_one_rotation_repeated():
    """p_{n+k} = p_n R_k with R_k = R_1^k: every map is exact in the full space, up to rounding."""
    X = coordinate_sets(sinusoidal_table(300, 32), ())[0]
    assert np.abs(shift_statistics(X, KS)).max() < 1e-9


def test_a_rotating_and_rising_table_is_exact_and_a_random_walk_is_not():
    """x_n = x_0 R^n + n b, R three plane rotations and b along the axis R fixes (a helix in 7 dimensions with three
    frequencies): every map exact. A random walk: the
    affine map leaves some of the move, a rotation more, the repeated one step more still at larger k."""
    rng = np.random.default_rng(1)
    angles = (0.05, 0.011, 0.2)
    R = np.eye(7)
    for i, a in enumerate(angles):
        R[2 * i:2 * i + 2, 2 * i:2 * i + 2] = [[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]]
    x, b = rng.standard_normal(7), np.r_[np.zeros(6), 0.01]
    rows = [x]
    for _ in range(399):
        rows.append(rows[-1] @ R)
    X = np.array(rows) + np.arange(400)[:, None] * b
    assert np.abs(shift_statistics(X, KS)).max() < 1e-9
    walk = shift_statistics(random_walks(400, 6, rng), KS)
    assert (walk[:, 0] > 0.05).all() and (walk[:, 1] >= walk[:, 0] - 1e-12).all() and walk[-1, 2] > walk[-1, 1]


def test_analysis_tables_the_learned_table_beside_its_baselines():
    rng = np.random.default_rng(2)
    P = np.cumsum(rng.standard_normal((120, 8)), axis=0)
    shape = ModelShape("toy", "gpt2", 8, 120, 1, 1, 1, 1, "pre")
    result = shift_map_analysis({"W_pos": P}, shape, ks=(1, 4, 16), ranks=(3,), untrained_rows=1, n_walks=3, seed=0,
                                sinusoid_base=10000.0)
    assert result.numbers["n_rows"].value == 119 and result.numbers["k_last"].value == 16
    assert result.numbers["sinusoidal_full_k16_orthogonal"].value < 1e-9
    table = result.tables["shift_maps"]
    assert len(table.rows) == 3 * 2 * 3
    assert result.arrays["learned"].shape == (2, 3, 3)


def test_the_chapter_readings_hold_in_the_cached_numbers():
    """The sinusoidal chapter reads GPT-2's shift maps as: in full, affine better than random walks at every shift
    shown, the best orthogonal map no better than for random walks, the repeated one step no better than the best
    orthogonal map; in the top three coordinates, the three maps agree; the sinusoidal table exact."""
    import json
    from pathlib import Path

    cache = Path(__file__).resolve().parents[1] / "report" / "_cache"
    numbers = {k: v["value"] for k, v in json.loads((cache / "gpt2" / "shift_map" / "numbers.json").read_text()).items()}
    for k in (numbers["k_first"], numbers["k_middle"], numbers["k_last"]):
        assert numbers[f"learned_full_k{k}_affine"] < numbers[f"walks_full_k{k}_affine"]
        assert numbers[f"learned_full_k{k}_orthogonal"] >= numbers[f"walks_full_k{k}_orthogonal"]
        assert numbers[f"learned_full_k{k}_repeated"] >= numbers[f"learned_full_k{k}_orthogonal"] - 1e-9
        top3 = [numbers[f"learned_top3_k{k}_{s}"] for s in ("affine", "orthogonal", "repeated")]
        assert max(top3) - min(top3) < 0.05
        assert max(numbers[f"sinusoidal_full_k{k}_{s}"] for s in ("affine", "orthogonal", "repeated")) < 1e-6
    for model in ("kjv_gpt2", "kjv_gpt2_seed1"):
        trained = {k: v["value"] for k, v in json.loads((cache / model / "shift_map" / "numbers.json").read_text()).items()}
        assert trained["learned_full_k1_affine"] < trained["walks_full_k1_affine"]
        assert trained["learned_full_k64_orthogonal"] > trained["walks_full_k64_orthogonal"]


def test_a_table_wider_than_its_rows_is_fitted_in_half_as_many_coordinates():
    """GPT-1's shape (fewer rows than width): no full-space fit has more pairs than parameters, so the "full"
    coordinates are the top n/2 principal ones, for the table and its baselines alike."""
    rng = np.random.default_rng(3)
    P = np.cumsum(rng.standard_normal((31, 40)), axis=0)
    shape = ModelShape("wide", "gpt2", 40, 31, 1, 1, 1, 1, "pre")
    result = shift_map_analysis({"W_pos": P}, shape, ks=(1, 2, 4), ranks=(3,), untrained_rows=1, n_walks=2, seed=0,
                                sinusoid_base=10000.0)
    assert result.numbers["full_rank"].value == 15 and result.numbers["k_last"].value == 4
