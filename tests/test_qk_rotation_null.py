"""The per-head nulls of the QK rotation and the intervention: closed forms, the exact reduced sampler against
direct Haar frames, a planted rotation that only the whole-space null passes, a key number recomputed from the
weights by a second route, and the chapters' readings in the cache (the old wording and the old null must not
come back)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import ks_2samp

from analyses.toolkit.attention import antisymmetric_share
from analyses.qk_rotation_null import (PARTS, bartlett_wishart, current_key_mass,
                                       equal_norm_parts, frame_null, holm_thresholds, masked_scores, random_frames,
                                       subspace_null, undecided)
from analyses.toolkit.attention import attention_pattern, head_statistics, query_rows
from analyses.toolkit.pvalues import FAMILYWISE_ALPHA, draws_for

ROOT = Path(__file__).resolve().parents[1]
J = np.array([[0.0, -1.0], [1.0, 0.0]])


def flat(text: str) -> str:
    return re.sub(r"\s+", " ", text)


def cached(model: str, analysis: str) -> dict:
    path = ROOT / "report" / "_cache" / model / analysis / "numbers.json"
    return {k: v["value"] for k, v in json.loads(path.read_text()).items()}


def heads(text: str) -> list[str]:
    return [] if text == "none" else text.replace(" and ", ", ").split(", ")


def test_antisymmetric_share_of_a_rotation_a_symmetric_map_and_a_mixture():
    """A pure rotation form (a quarter-turn J, which scores keys on a circle by sin(θ_i − θ_j)) has share 1, a
    symmetric form 0, and αI + βJ has |β| / √(α² + β²)."""
    assert antisymmetric_share(J) == pytest.approx(1.0)
    assert antisymmetric_share(np.diag([2.0, 3.0])) == pytest.approx(0.0)
    for alpha, beta in ((1.0, 1.0), (0.3, -2.0), (-1.5, 0.2)):
        assert antisymmetric_share(alpha * np.eye(2) + beta * J) == pytest.approx(abs(beta) / np.hypot(alpha, beta))
    theta = np.linspace(0, 2 * np.pi, 7)
    c = np.stack([np.cos(theta), np.sin(theta)], axis=1)
    assert c @ J @ c.T == pytest.approx(np.sin(theta[:, None] - theta[None, :]))


def test_bartlett_wishart_has_the_mean_and_spread_of_explicit_gaussian_grams():
    """E W = df · I, Var W_ij = df (1 + δ_ij) for W = bᵀb with b a df × k Gaussian matrix."""
    rng = np.random.default_rng(1)
    W = bartlett_wishart(12, 3, 40000, rng)
    assert W.mean(axis=0) == pytest.approx(12 * np.eye(3), abs=0.15)
    assert W.var(axis=0) == pytest.approx(12 * (1 + np.eye(3)), rel=0.05)
    assert np.allclose(W, np.swapaxes(W, 1, 2))
    with pytest.raises(ValueError):
        bartlett_wishart(2, 3, 1, rng)


def _head(rng, D=40, d=4):
    return rng.standard_normal((1, D, d)), rng.standard_normal((1, D, d))


@pytest.mark.parametrize("k", [2, 3, 5])
def test_the_reduced_sampler_draws_the_same_null_as_direct_haar_frames(k):
    """The read-space reduction with a Wishart rest (40 dimensions, a head reading 8 of them) against frames drawn
    whole: the same distribution of shares (two-sample KS), for the whole space and for a subspace."""
    rng = np.random.default_rng(2)
    read_q, read_k = _head(rng)
    gain = np.ones(40)
    direct = frame_null(read_q[0], read_k[0], gain, random_frames(40, k, 3000, rng))
    reduced = subspace_null(read_q, read_k, None, (k, 5), 3000, rng)[k][:, 0]
    assert ks_2samp(direct, reduced).pvalue > 1e-3
    U = random_frames(40, 12, 1, rng)[0]
    direct = frame_null(read_q[0], read_k[0], gain, U @ random_frames(12, k, 3000, rng))
    reduced = subspace_null(read_q, read_k, U, (k,), 3000, rng)[k][:, 0]
    assert ks_2samp(direct, reduced).pvalue > 1e-3


def test_a_rotation_of_every_position_direction_passes_the_whole_space_null_and_not_the_subspace_one():
    """A head that rotates every direction of a 10-dimensional position subspace U (and is symmetric outside it)
    has share 1 on P's frame B ⊂ U, above random frames of the whole space but not above random frames of U, which
    all have share 1 too; a head that rotates only B's plane passes both."""
    rng = np.random.default_rng(3)
    D, m = 40, 10
    U = random_frames(D, m, 1, rng)[0]
    B = U[:, :2]
    G = rng.standard_normal((D, 6))
    G -= U @ (U.T @ G)
    everywhere = np.kron(np.eye(m // 2), J)  # quarter-turns in all five planes of U
    only_b = np.zeros((m, m))
    only_b[:2, :2], only_b[2:, 2:] = J, np.eye(m - 2)
    for rotation, passes_subspace in ((everywhere, False), (only_b, True)):
        read_q, read_k = np.hstack([U @ rotation, G])[None], np.hstack([U, G])[None]
        observed = antisymmetric_share(B.T @ read_q[0] @ read_k[0].T @ B)
        assert observed == pytest.approx(1.0)
        nulls = {name: subspace_null(read_q, read_k, basis, (2,), 999, rng)[2][:, 0]
                 for name, basis in (("whole", None), ("subspace", U))}
        assert (1 + np.sum(nulls["whole"] >= observed - 1e-9)) / 1000 < 0.01
        assert ((1 + np.sum(nulls["subspace"] >= observed - 1e-9)) / 1000 < 0.01) == passes_subspace


def test_equal_norm_controls_have_the_norm_of_the_part_they_stand_in_for():
    """Each random part has exactly the Frobenius norm of the rotation (or symmetric) part of a form, whatever its
    entries; the antisymmetric kind is antisymmetric; the draws differ from one another."""
    rng = np.random.default_rng(6)
    M = rng.standard_normal((3, 3)) * np.array([5.0, 1.0, 0.2])
    for part, antisymmetric in (("antisymmetric", False), ("symmetric", False), ("antisymmetric", True)):
        norm = np.linalg.norm(PARTS[part](M))
        R = equal_norm_parts(3, norm, 500, rng, antisymmetric)
        assert np.linalg.norm(R, axis=(1, 2)) == pytest.approx(np.full(500, norm), rel=1e-12)
        assert np.allclose(R, -np.swapaxes(R, 1, 2)) == antisymmetric
        assert np.std(R[:, 0, 1]) > 0.1 * norm


def test_the_isotropic_and_anisotropic_parts_add_up_to_the_symmetric_part():
    """(tr M / k) I + the rest = (M + Mᵀ)/2; the isotropic part scores α c_i·c_j, largest on the diagonal (the query
    itself) for rows of equal norm."""
    rng = np.random.default_rng(7)
    M = rng.standard_normal((3, 3))
    assert PARTS["isotropic"](M) + PARTS["anisotropic"](M) == pytest.approx(PARTS["symmetric"](M))
    assert np.trace(PARTS["anisotropic"](M)) == pytest.approx(0.0, abs=1e-12)
    c = rng.standard_normal((20, 3))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    scores = c @ PARTS["isotropic"](M) @ c.T
    assert scores == pytest.approx(np.trace(M) / 3 * c @ c.T)
    assert (np.argmax(scores * np.sign(np.trace(M)), axis=1) == np.arange(20)).all()


def test_holm_thresholds_and_undecided_heads():
    """Thresholds α/m, α/(m − 1), … in the order of the p-values; a p within Monte Carlo error of its threshold is
    undecided, one far from it is not."""
    p = np.array([0.03, 0.0001, 0.0085, 0.5])
    assert holm_thresholds(p) == pytest.approx(FAMILYWISE_ALPHA / np.array([2, 4, 3, 1]))
    assert list(undecided(p, 9999)) == [False, False, False, False]
    assert list(undecided(np.array([0.0001, 0.0165, 0.9, 0.9]), 9999)) == [False, True, False, False]


def test_current_key_mass_and_distance_match_the_full_pattern_statistics():
    rng = np.random.default_rng(4)
    S = 3 * rng.standard_normal((50, 50))
    queries = query_rows(50, True, 5)
    distance = np.abs(queries[:, None] - np.arange(50)[None, :])
    stats = head_statistics(attention_pattern(S, True), queries)
    mass, mean_distance = current_key_mass(masked_scores(S, True), queries, distance)
    assert mass == pytest.approx(stats["mass_self"], rel=1e-12)
    assert mean_distance == pytest.approx(stats["mean_distance"], rel=1e-12)


def test_registered_frames_meet_holms_smallest_threshold():
    import analyses.qk_rotation_null  # noqa: F401  (registers the analysis)
    from analyses.engine.registry import _REGISTRY

    params = _REGISTRY["qk_rotation_null"].params
    numbers = cached("gpt2", "qk_rotation_null")
    assert params["n_frames"] >= draws_for(numbers["n_heads"]) == numbers["draws_needed"]
    assert 1 / (1 + params["n_frames"]) <= numbers["holm_smallest"] == pytest.approx(0.05 / numbers["n_heads"])
    assert params["subspace"] == numbers["subspace"] == 30


def test_head3_recomputed_from_the_weights_by_a_second_route(gpt2_weights):
    """Head 3 from the raw tensors with direct Haar frames inside the centred P's top 30 (another seed, QR frames in
    the full space): its p against that null is no smaller than the cached one allows, far above Holm's threshold;
    and its current-key attention without the symmetric part of the form, from the full pattern."""
    from analyses.engine.sources import local_source
    from analyses.toolkit.attention import head_scores, position_inputs

    source = local_source("gpt2", gpt2_weights)
    tensors = source.tensors
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    _, _, vt = np.linalg.svd(P - P.mean(axis=0), full_matrices=False)
    _, _, vt_raw = np.linalg.svd(P, full_matrices=False)
    z, gain, bias = position_inputs(tensors, source.shape)
    W_Q, W_K = (np.asarray(tensors[f"blocks.0.attn.W_{x}"][3], dtype=np.float64) for x in "QK")
    B = vt_raw[:3].T
    observed = antisymmetric_share(B.T @ (gain[:, None] * W_Q) @ (gain[:, None] * W_K).T @ B)
    frames = vt[:30].T @ random_frames(30, 3, 2000, np.random.default_rng(11))
    null = frame_null(W_Q, W_K, gain, frames)
    p = (1 + np.sum(null >= observed)) / 2001
    numbers = cached("gpt2", "qk_rotation_null")
    assert observed == pytest.approx(numbers["head3_antisymmetric"], rel=1e-9)
    assert abs(p - float(numbers["subspace_head3_p"].removeprefix("p = "))) < 4 * np.sqrt(p * (1 - p) / 2000) + 0.01
    assert p > FAMILYWISE_ALPHA / 12
    M = B.T @ (gain[:, None] * W_Q) @ (gain[:, None] * W_K).T @ B / 8
    c = z @ B
    S = head_scores(z * gain + bias, W_Q, tensors["blocks.0.attn.b_Q"][3], W_K, tensors["blocks.0.attn.b_K"][3])
    queries = query_rows(1024, True, 32)
    without = head_statistics(attention_pattern(S - c @ ((M + M.T) / 2) @ c.T, True), queries)["mass_self"]
    assert without == pytest.approx(numbers["head3_mass_self_antisymmetric"], rel=1e-9)


def test_the_chapter_readings_hold_in_the_cached_numbers():
    """The chapters read: against the whole stream the current-token heads exceed their null and head 8 sits on its
    threshold; inside P's subspace no head does at three directions (so the rotation is not the helix plane's in
    particular); the other sizes flag every head but the last against the whole stream, the first-position head
    included, and at most one head inside P's subspace (none without P's first and last row); taking out either part
    of the form cuts the current-key attention of the current-token heads; the symmetric part's removal lies below
    every random part of equal norm and rests on its isotropic part; the rotation's at the low edge of its own."""
    numbers = cached("gpt2", "qk_rotation_null")
    classes = cached("gpt2", "positional_attention")
    current = [int(h) for h in heads(classes["heads_current_token"])]
    assert {str(h) for h in current} <= set(heads(numbers["heads_exceed"]))
    assert numbers["heads_undecided"] == "8" and numbers["subspace_heads_undecided"] == "none"
    assert numbers["subspace_n_exceed"] == 0 and numbers["subspace_heads_exceed"] == "none"
    sizes = [int(k) for k in heads(numbers["other_sizes"])]
    last = str(numbers["n_heads"] - 1)
    for k in sizes:
        assert heads(numbers[f"k{k}_heads_not_exceed"]) == [last]
        assert classes["heads_first_position"] in heads(numbers[f"k{k}_heads_exceed"])
        assert numbers[f"k{k}_subspace_n_exceed"] <= 1
    assert numbers["k2_subspace_heads_exceed"] in heads(classes["heads_local_window"])
    assert numbers["inner_subspace_n_exceed"] == 0 and numbers["subspaces_no_head"].startswith("5, 10, 20, 30 and 50")
    for head in current:
        with_all = numbers[f"head{head}_mass_self"]
        for part in ("symmetric", "antisymmetric", "no_form"):  # the key names what is left; each is a cut
            assert numbers[f"head{head}_mass_self_{part}"] < 0.5 * with_all
        # the symmetric part's removal lies below every random part of its norm; the isotropic part carries it
        assert numbers[f"head{head}_random_symmetric_as_low"] == 0
        assert numbers[f"head{head}_mass_self_antisymmetric"] < numbers[f"head{head}_random_symmetric_min"]
        assert numbers[f"head{head}_mass_self_no_isotropic"] < 0.05 * with_all
        assert numbers[f"head{head}_mass_self_no_anisotropic"] > 0.9 * with_all
        # the rotation's removal sits at the low edge of random parts of its norm, of either kind
        for control in ("antisymmetric", "rotation"):
            assert numbers[f"head{head}_random_{control}_as_low"] <= numbers["n_controls"] / 10
            assert numbers[f"head{head}_mass_self_symmetric"] < numbers[f"head{head}_random_{control}_mean"]
        assert numbers[f"head{head}_distance_symmetric"] > 2 * numbers[f"head{head}_distance"]
        for k in sizes:
            assert numbers[f"k{k}_head{head}_mass_self_ratio"] < 0.5
    ratios = [numbers[f"k{k}_head3_mass_self_ratio"] for k in sizes]
    assert min(ratios) == numbers[f"k{max(sizes)}_head3_mass_self_ratio"]  # the appendix cites these as the range
    assert max(ratios) == numbers[f"k{min(sizes)}_head3_mass_self_ratio"]


def test_the_old_wording_and_the_old_null_do_not_come_back():
    """The rotation is no longer read as the helix's in particular, nor as what alone makes a current-token head;
    every frame size's verdict is in the text under both nulls; the subspace null is cited beside the whole-space
    one wherever the rotation's null is."""
    chapter = flat((ROOT / "report" / "attention.qmd").read_text())
    appendix = flat((ROOT / "report" / "appendix-attention.qmd").read_text())
    abstract = flat((ROOT / "report" / "index.qmd").read_text())
    for text in (chapter, appendix, abstract):
        assert "rotate along the helix beyond what random directions give" not in text
        assert "The rotation is a large part of what makes these heads current-token heads" not in text
        assert "Attention rotates the helix" not in text
        assert "for the local-window heads the verdict changes with the size" not in text
        for withdrawn in ("reads position by rotating it", "changes nothing", "too weak at those sizes",
                          "too weak a baseline", "read the helix largely by rotating it", "both parts are needed",
                          "head3_mass_self_random_whole", "head3_mass_self_random_subspace"):
            assert withdrawn not in text
        if "qk_rotation_null.head3_null_q95" in text:
            assert "qk_rotation_null.subspace_head3_null_q95" in text or "subspace_head3_p" in text
    assert "not the helix plane in particular" in chapter
    assert "as it reads any three of $P$'s top directions" in abstract  # not the helix plane in particular
    for text in (chapter, abstract):
        assert "rests on the symmetric" in text
        assert "qk_rotation_null.head3_mass_self_antisymmetric" in text
        assert "qk_rotation_null.head3_random_antisymmetric_mean" in text
    assert "qk_rotation_null.heads_undecided" in chapter and "qk_rotation_null.head8_p" in chapter
    for k in (2, 4, 6):
        assert f"qk_rotation_null.k{k}_n_exceed" in appendix
        assert f"qk_rotation_null.k{k}_subspace_{'heads' if k == 2 else 'n'}_exceed" in appendix
    assert "qk_rotation_null.subspace_n_exceed" in appendix and "qk_rotation_null.subspace_n_exceed" in chapter
    assert "symmetric first-position head" in appendix
    assert "qk_rotation_null.head3_mass_self_no_isotropic" in chapter
    assert "qk_rotation_null.inner_subspace_n_exceed" in chapter


def test_the_subspace_null_holds_over_the_sizes_the_chapter_names():
    """No head exceeds in P's top 5 to 50 directions; heads do only in its top 100, the size whose P-energy the
    chapter cites (learned_mass_top100) beside the top 30's."""
    numbers = cached("gpt2", "qk_rotation_null")
    assert numbers["subspaces_no_head"] == "5, 10, 20, 30 and 50" and numbers["subspaces_some_head"] == "100"
    assert numbers["subspace100_n_exceed"] > 0 and numbers["subspace50_n_exceed"] == 0
    assert numbers["subspace"] == 30  # the chapter cites learned_mass_top30 for it
    chapter = flat((ROOT / "report" / "attention.qmd").read_text())
    assert "low_rank.learned_mass_top100" in chapter and "qk_rotation_null.subspace100_heads_exceed" in chapter
