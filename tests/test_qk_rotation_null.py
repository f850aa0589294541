"""The per-head null of the QK rotation: closed forms, random frames, and the chapter's readings in the cache."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from analyses.qk_rotation_null import antisymmetric_share, frame_null, random_frames


def test_antisymmetric_share_of_a_rotation_a_symmetric_map_and_a_mixture():
    J = np.array([[0.0, -1.0], [1.0, 0.0]])
    assert antisymmetric_share(J) == pytest.approx(1.0)
    assert antisymmetric_share(np.diag([2.0, 3.0])) == pytest.approx(0.0)
    assert antisymmetric_share(np.eye(2) + J) == pytest.approx(np.sqrt(0.5))


def test_random_frames_are_orthonormal_and_a_planted_rotation_stands_out_only_in_its_own_frame():
    rng = np.random.default_rng(0)
    frames = random_frames(40, 3, 200, rng)
    assert np.einsum("nij,nik->njk", frames, frames) == pytest.approx(np.broadcast_to(np.eye(3), (200, 3, 3)), abs=1e-12)
    B = random_frames(40, 3, 1, rng)[0]
    rotation = np.array([[0.0, -1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    G = rng.standard_normal((40, 5))
    G -= B @ (B.T @ G)  # outside B's span
    # W_Q W_Kᵀ = B R Bᵀ + G Gᵀ: a rotation inside B's span, a symmetric map outside it. (A map antisymmetric
    # everywhere would be antisymmetric on every frame: the null asks what is special about the frame.)
    W_Q, W_K = np.hstack([B @ rotation, G]), np.hstack([B, G])
    gain = np.ones(40)
    own = frame_null(W_Q, W_K, gain, B[None])[0]
    others = frame_null(W_Q, W_K, gain, frames)
    assert own == pytest.approx(1.0)
    assert np.quantile(others, 0.95) < own


def test_the_chapter_readings_hold_in_the_cached_numbers():
    """The attention chapter reads: the current-token heads exceed their null under Holm, and taking the
    antisymmetric part out lowers their attention on the current key and lengthens the distance they attend, on
    P's top three directions and on frames of every other size tried."""
    cache = Path(__file__).resolve().parents[1] / "report" / "_cache" / "gpt2"
    numbers = {k: v["value"] for k, v in json.loads((cache / "qk_rotation_null" / "numbers.json").read_text()).items()}
    current = json.loads((cache / "positional_attention" / "numbers.json").read_text())["heads_current_token"]["value"]
    exceed = numbers["heads_exceed"]
    for head in [int(h) for h in current.replace(" and ", ", ").split(", ")]:
        assert str(head) in exceed.replace(" and ", ", ").split(", ")
        assert numbers[f"head{head}_mass_self_symmetric"] < 0.5 * numbers[f"head{head}_mass_self"]
        assert numbers[f"head{head}_distance_symmetric"] > 2 * numbers[f"head{head}_distance"]
    sizes = [int(k) for k in numbers["other_sizes"].replace(" and ", ", ").split(", ")]
    local = json.loads((cache / "positional_attention" / "numbers.json").read_text())["heads_local_window"]["value"]
    for k in sizes:  # "the local-window heads among them" at every other size; none of them at three directions
        listed = numbers[f"k{k}_heads_exceed"].replace(" and ", ", ").split(", ")
        assert set(local.replace(" and ", ", ").split(", ")) <= set(listed)
        assert numbers[f"k{k}_n_exceed"] == len(listed)
    for k in sizes:  # the reading holds on frames of every size tried
        listed = numbers[f"k{k}_heads_exceed"].replace(" and ", ", ").split(", ")
        for head in [int(h) for h in current.replace(" and ", ", ").split(", ")]:
            assert str(head) in listed and numbers[f"k{k}_head{head}_mass_self_ratio"] < 0.5
    ratios = [numbers[f"k{k}_head3_mass_self_ratio"] for k in sizes]
    assert min(ratios) == numbers[f"k{max(sizes)}_head3_mass_self_ratio"]  # the chapter cites these as the range
    assert max(ratios) == numbers[f"k{min(sizes)}_head3_mass_self_ratio"]
