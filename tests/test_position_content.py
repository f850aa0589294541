"""Position against content: planted subspaces with known overlap, invariants, the derived token subspace
against a full E put through the same PCA, and the skip/compute paths on tiny checkpoints (never cited)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import stats
from conftest import Given, gpt2_config, gpt2_state_dict, write_checkpoint
from test_sources import _hub_layout, _sklearn_style_pca

from analyses.engine.cache import Cache
from analyses.engine.pipeline import Job, run, select
from analyses.engine.sources import ModelShape, hub_source, local_source, open_source
from analyses.engine.registry import all_analyses
from analyses.position_content.attention_reading import (attention_energy_reading, attention_position_content,
                                                         missing_energy_bounds)
from analyses.position_content.measures import enrichment_and_z, subspace_bases
from analyses.position_content.mlp_reading import mlp_input_gain, mlp_position_content
from analyses.position_content.norms import interference_ratio, sum_ratio, token_position_sum
from analyses.position_content.token_subspaces import position_token_subspaces
from analyses.toolkit.subspaces import random_basis

D = 24
OVERLAP = {"ks": (3, 6), "angle_ks": (3,), "capture_k": 3, "capture_ks": (1, 3), "n_random": 20, "seed": 0,
           "agreement_tol": 1e-4, "sparse_vectors": 3, "sparse_mass": 0.9, "width_share": 0.125, "trained_rows": {}}


def shape(family="gpt2", d=D, n_layers=2, n_heads=2, n_ctx=40, d_vocab=50) -> ModelShape:
    return ModelShape("planted", family, d, n_ctx, n_layers, n_heads, d_vocab, 4 * d,
                      "pre" if family == "gpt2" else "post")


def planted_position(Q: np.ndarray, rng: np.random.Generator, n_ctx=40, dims=3) -> np.ndarray:
    """Position rows inside span Q[:, :dims], with distinct singular values."""
    return rng.standard_normal((n_ctx, dims)) * [3.0, 2.0, 1.0][:dims] @ Q[:, :dims].T


def token_subspace(V: np.ndarray) -> dict[str, np.ndarray]:
    return {"E_centred.S": np.linspace(10, 1, V.shape[1]), "E_centred.V": V}


def values(result) -> dict:
    return {k: v.value for k, v in result.numbers.items()}


# ---------------------------------------------------------------------------
# 1. Overlap of subspaces


def test_orthogonal_subspaces_have_no_energy_and_right_angles():
    rng = np.random.default_rng(0)
    Q = random_basis(D, D, rng)
    tensors = {"W_pos": planted_position(Q, rng), **token_subspace(Q[:, 3:])}  # E's directions avoid P's span
    n = values(position_token_subspaces(Given(tensors), shape(), **OVERLAP))
    assert n["energy_k3"] == pytest.approx(0, abs=1e-12) and n["energy_k6"] == pytest.approx(0, abs=1e-12)
    assert n["angle_min_k3"] == pytest.approx(90, abs=1e-9) and n["cos2_k3"] == pytest.approx(0, abs=1e-12)
    assert n["complement_energy"] == pytest.approx(1) and n["complement_dims"] == 3
    assert n["complement_capture_ratio"] == pytest.approx(1 / (3 / D))  # P's top 3 lie wholly in the complement
    assert n["below_k3"] == 0  # no random subspace holds less than nothing


def test_identical_subspaces_have_all_the_energy_and_zero_angles():
    rng = np.random.default_rng(1)
    Q = random_basis(D, D, rng)
    tensors = {"W_pos": planted_position(Q, rng), **token_subspace(Q)}
    result = position_token_subspaces(Given(tensors), shape(), **OVERLAP)
    n = values(result)
    assert n["energy_k3"] == pytest.approx(1, abs=1e-12) and n["ratio_k3"] == pytest.approx(D / 3)
    assert n["angle_min_k3"] == pytest.approx(0, abs=1e-6) and n["cos2_k3"] == pytest.approx(1, abs=1e-12)
    np.testing.assert_allclose(result.arrays["angles_k3"], 0, atol=1e-6)
    assert n["below_k3"] == 1


def test_random_token_subspaces_give_k_over_d_with_the_stated_spread():
    """E's directions drawn uniformly at random: the reported z has mean 0 and sd 1 over many draws."""
    rng = np.random.default_rng(2)
    P = planted_position(random_basis(D, D, rng), rng)
    params = OVERLAP | {"n_random": 2}
    draws = [values(position_token_subspaces(Given({"W_pos": P, **token_subspace(random_basis(D, D, rng))}), shape(),
                                             **params)) for _ in range(400)]
    for k in (3, 6):
        z = np.array([d[f"z_k{k}"] for d in draws])
        energy = np.array([d[f"energy_k{k}"] for d in draws])
        assert abs(z.mean()) < 4 / np.sqrt(len(z)), k
        assert abs(z.std() - 1) < 0.12, k
        assert abs(energy.mean() - k / D) < 4 * draws[0][f"sd_k{k}"] / np.sqrt(len(z))


def test_energy_blocks_and_captures_add_up():
    rng = np.random.default_rng(3)
    P = rng.standard_normal((40, D))
    result = position_token_subspaces(Given({"W_pos": P, **token_subspace(random_basis(D, 20, rng))}), shape(), **OVERLAP)
    blocks = result.tables["blocks"]
    assert sum(blocks.column("energy of P")) == pytest.approx(1, abs=1e-12)
    assert sum(d * c for d, c in zip(blocks.column("dimensions"), blocks.column("capture by P's top 3"))) == \
        pytest.approx(3, abs=1e-12)
    curve = result.arrays["curve"]
    assert np.all(np.diff(curve) >= 0) and curve.size == 20
    assert result.numbers["energy_k6"].value == pytest.approx(curve[5])


def test_first_direction_capture_has_a_uniform_p_value_under_random_token_directions():
    """c₁'s p under the Beta(k/2, (D − k)/2) law: 0 when E's first direction lies in P's top subspace, 1 when it
    is orthogonal to it, and uniform on [0, 1] when E's directions are random."""
    rng = np.random.default_rng(4)
    Q = random_basis(D, D, rng)
    P = planted_position(Q, rng)
    inside = values(position_token_subspaces(Given({"W_pos": P, **token_subspace(Q)}), shape(), **OVERLAP))
    assert inside["capture_1"] == pytest.approx(1) and inside["capture_1_p"] == pytest.approx(0, abs=1e-12)
    outside = values(position_token_subspaces(Given({"W_pos": P, **token_subspace(Q[:, 3:])}), shape(), **OVERLAP))
    assert outside["capture_1_p"] == pytest.approx(1) and outside["capture_1_p_corrected"] == 1
    params = OVERLAP | {"n_random": 2}
    p = np.array([values(position_token_subspaces(Given({"W_pos": P, **token_subspace(random_basis(D, D, rng))}), shape(),
                                                  **params))["capture_1_p"] for _ in range(400)])
    assert stats.kstest(p, "uniform").pvalue > 1e-3


def test_token_energy_in_the_sparse_columns_of_p_with_the_bounds_of_the_missing_directions():
    """P on the dimensions 0, 1, 2 (its top vectors are e_0, e_1, e_2); E's directions the unit vectors with known
    σ: the share is their σ² over all; truncated, the bounds hold the full value."""
    rng = np.random.default_rng(5)
    P = np.linalg.qr(rng.standard_normal((40, 3)))[0] * [3.0, 2.0, 1.0] @ np.eye(D)[:3]
    S = np.linspace(5, 1, D - 1)
    full = values(position_token_subspaces(Given({"W_pos": P, "E_centred.S": S, "E_centred.V": np.eye(D)[:, :D - 1]}),
                                           shape(), **OVERLAP))
    share = np.sum(S[:3] ** 2) / np.sum(S**2)
    assert full["sparse_union"] == 3 and full["sparse_p_energy"] == pytest.approx(1)
    assert full["sparse_e_energy"] == pytest.approx(share)
    assert full["sparse_e_energy_lo"] == full["sparse_e_energy_hi"] == pytest.approx(share)  # nothing is missing
    assert full["sparse_e_ratio"] == pytest.approx(share / (3 / D))
    k = 10
    cut = values(position_token_subspaces(Given({"W_pos": P, "E_centred.S": S[:k], "E_centred.V": np.eye(D)[:, :k]}),
                                          shape(), **OVERLAP))
    m = (D - 1 - k) * S[k - 1] ** 2
    assert cut["sparse_e_energy_lo"] == pytest.approx(np.sum(S[:3] ** 2) / (np.sum(S[:k] ** 2) + m))
    assert cut["sparse_e_energy_lo"] <= share <= cut["sparse_e_energy_hi"]


def test_sparse_columns_are_those_of_the_sparse_directions_analysis():
    """One definition of P's sparse columns: the parameters match those the low-rank chapter cites."""
    analyses = all_analyses()
    mine, theirs = analyses["position_token_subspaces"].params, analyses["sparse_directions"].params
    assert (mine["sparse_vectors"], mine["sparse_mass"]) == (theirs["n_vectors"], theirs["mass"])


def test_replicate_run_marks_where_the_token_directions_stop_agreeing():
    rng = np.random.default_rng(4)
    Q = random_basis(D, D, rng)
    V = Q[:, :10]
    V_b = V.copy()
    c = np.cos(np.pi / 4)
    V_b[:, 4], V_b[:, 5] = c * V[:, 4] + c * V[:, 5], -c * V[:, 4] + c * V[:, 5]  # turn directions 5 and 6
    tensors = Given({"W_pos": rng.standard_normal((40, D)), **token_subspace(V)},
                    replicate=(np.linspace(10, 1, 10), V_b), origin="planted {name}")
    n = values(position_token_subspaces(tensors, shape(), **OVERLAP | {"ks": (3, 5, 6)}))
    assert n["replicate_exact_k"] == 4
    assert n["replicate_agreement_k5"] == pytest.approx((4 + c**2) / 5)
    assert n["replicate_agreement_k6"] == pytest.approx(1)  # the plane of 5 and 6 is shared
    assert n["token_subspace_origin"] == "planted E_centred.V"


def test_derived_pca_gives_the_numbers_of_the_full_token_embeddings(tmp_path, tiny_model):
    """A tiny checkpoint with W_E against the same checkpoint without it but with the saved PCA of E."""
    rng = np.random.default_rng(5)
    state = gpt2_state_dict(rng, with_wte=True, with_mlp=True)
    state["wte.weight"] = (rng.standard_normal((11, 8)) * np.linspace(3, 0.2, 8)).astype(np.float32)
    full = local_source("tiny-gpt2", write_checkpoint(tmp_path / "full", state, gpt2_config()))
    directory = write_checkpoint(tmp_path / "partial", {k: v for k, v in state.items() if k != "wte.weight"},
                                 gpt2_config())
    (directory / "derived").mkdir()
    T = _sklearn_style_pca(state["wte.weight"].astype(np.float64), 5)
    np.save(directory / "derived" / "wte_pca500_a.npy", T)
    np.save(directory / "derived" / "wte_pca500_b.npy", T)
    derived = local_source("tiny-gpt2", directory)
    params = {"ks": (2, 4), "angle_ks": (2,), "capture_k": 2, "capture_ks": (2,), "n_random": 10, "seed": 0,
              "agreement_tol": 1e-4, "sparse_vectors": 2, "sparse_mass": 0.9, "width_share": 0.1, "trained_rows": {}}
    a = position_token_subspaces(full.tensors, full.shape, **params)
    b = position_token_subspaces(derived.tensors, derived.shape, **params)
    for key in ("energy_k2", "energy_k4", "angle_min_k2", "cos2_k2", "z_k4"):
        assert b.numbers[key].value == pytest.approx(a.numbers[key].value, rel=1e-4, abs=1e-6), key
    np.testing.assert_allclose(b.arrays["capture"], a.arrays["capture"][:5], rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b.arrays["curve"], a.arrays["curve"][:5], rtol=1e-4, atol=1e-6)
    assert "computed from the full token embeddings" in a.numbers["token_subspace_origin"].value
    assert "derived/wte_pca500_a.npy" in b.numbers["token_subspace_origin"].value
    assert "replicate_exact_k" not in a.numbers and b.numbers["replicate_exact_k"].value == 5
    attention = {"ks": (2, 4), "primary_k": 2, "strong": 1.5}
    x = attention_position_content(full.tensors, full.shape, **attention)
    y = attention_position_content(derived.tensors, derived.shape, **attention)
    np.testing.assert_allclose(y.arrays["stats"], x.arrays["stats"], rtol=1e-4, atol=1e-6)


# ---------------------------------------------------------------------------
# 2. Norms and the sum


def test_sum_ratio_is_one_for_orthogonal_pairs_and_known_for_parallel_ones():
    t, p = np.array([[3.0, 0, 0], [0, 2.0, 0]]), np.array([[0, 4.0, 0], [0, 1.0, 0]])
    np.testing.assert_allclose(sum_ratio(t, p), [1.0, 3 / np.sqrt(5)])


def test_interference_ratio_closed_forms():
    rng = np.random.default_rng(6)
    Q = random_basis(D, D, rng)
    E, P = rng.standard_normal((50, 10)) @ Q[:, 3:13].T, planted_position(Q, rng)
    assert interference_ratio(E, P)[0] == pytest.approx(0, abs=1e-12)  # orthogonal row spaces: concatenation
    kappa, sd = interference_ratio(np.eye(D), P)
    assert kappa == pytest.approx(1) and sd == pytest.approx(0, abs=1e-12)  # isotropic tokens: any P gives 1
    E = rng.standard_normal((50, D)) * np.linspace(2, 0.1, D)
    draws = np.array([interference_ratio(E, P @ random_basis(D, D, rng).T)[0] for _ in range(4000)])
    kappa_sd = interference_ratio(E, P)[1]
    assert abs(draws.mean() - 1) < 4 * kappa_sd / np.sqrt(len(draws))
    assert draws.std() == pytest.approx(kappa_sd, rel=0.08)


def test_token_position_sum_on_orthogonal_subspaces_is_concatenation():
    rng = np.random.default_rng(7)
    Q = random_basis(D, D, rng)
    tensors = {"W_E": rng.standard_normal((50, 10)) @ Q[:, 3:13].T, "W_pos": planted_position(Q, rng)}
    n = values(token_position_sum(tensors, shape(), n_pairs=500, seed=0, ks=(3,)))
    assert n["rho_dev_max"] == pytest.approx(0, abs=1e-12) and n["kappa"] == pytest.approx(0, abs=1e-12)
    assert n["token_energy_k3"] == pytest.approx(0, abs=1e-12) and n["token_ratio_k3"] == pytest.approx(0, abs=1e-18)
    assert n["random_rho_dev_median"] > 0.01  # random directions of the same norms do interfere
    assert n["kappa_centred"] == pytest.approx(0, abs=1e-12)  # removing the mean token keeps E's rows in its span


# ---------------------------------------------------------------------------
# 3. Attention and 4. MLP


def heads_in(full: np.ndarray, n_heads: int) -> np.ndarray:
    """A D × D query/key/value map in the x @ W layout as the canonical [n_heads, D, d_head] tensor."""
    d = full.shape[0]
    return full.reshape(d, n_heads, d // n_heads).transpose(1, 0, 2)


def planted_model(rng: np.random.Generator, d=8, n_heads=2, n_layers=2):
    """P in span e_0, e_1; E's directions the rest. Layer 0: W_Q reads P, W_K and W_V read E, W_O writes E;
    the MLP input reads E. Every LayerNorm gain is one."""
    Q = np.eye(d)
    B_P, B_E = Q[:, :2], Q[:, 2:4]
    tensors = {"W_pos": planted_position(Q, rng, dims=2), **token_subspace(Q[:, 2:])}
    for layer in range(n_layers):
        maps = {"Q": B_P @ rng.standard_normal((2, d)), "K": B_E @ rng.standard_normal((2, d)),
                "V": B_E @ rng.standard_normal((2, d))}
        for kind, full in maps.items():
            tensors[f"blocks.{layer}.attn.W_{kind}"] = heads_in(full, n_heads)
        tensors[f"blocks.{layer}.attn.W_O"] = (rng.standard_normal((d, 2)) @ B_E.T).reshape(n_heads, d // n_heads, d)
        tensors[f"blocks.{layer}.mlp.W_in"] = B_E @ rng.standard_normal((2, 4 * d))
        for name in ("ln1.w", "ln2.w"):
            tensors[f"blocks.{layer}.{name}"] = np.ones(d)
    tensors["embed.ln.w"] = np.ones(d)
    return tensors


def test_enrichment_z_is_standardised_over_random_subspaces():
    rng = np.random.default_rng(13)
    W = rng.standard_normal((D, 30)) * np.linspace(3, 0.1, 30)
    draws = np.array([enrichment_and_z(W, [random_basis(D, 4, rng)], [4], "input")[0, 0] for _ in range(3000)])
    assert abs(draws[:, 1].mean() - 1) < 4 * draws[:, 1].std() / np.sqrt(len(draws))  # a/(k/D) averages 1
    assert abs(draws[:, 2].mean()) < 4 / np.sqrt(len(draws)) and abs(draws[:, 2].std() - 1) < 0.05
    np.testing.assert_allclose(draws[:, 1], draws[:, 0] / (4 / D))


def test_position_subspace_is_that_of_p_as_published_not_centred():
    rng = np.random.default_rng(14)
    Q = random_basis(D, D, rng)
    c = rng.standard_normal((40, 1))
    P = 5.0 * np.outer(np.ones(40), Q[:, 0]) + (c - c.mean()) * Q[:, 1]  # a large mean row along Q_0
    basis = subspace_bases({"W_pos": P, **token_subspace(Q[:, 2:])}, 1)["P"]
    assert abs(basis[:, 0] @ Q[:, 0]) == pytest.approx(1, abs=1e-9)  # centring would give Q_1


def test_attention_matrices_reading_planted_subspaces():
    tensors = planted_model(np.random.default_rng(8))
    n = values(attention_position_content(Given(tensors), shape(d=8), ks=(2,), primary_k=2, strong=1.5))
    full, none = 8 / 2, 0.0  # all of the energy in a 2-dimensional subspace of R^8, or none of it
    for key, want in (("l0_q_p", full), ("l0_q_e", none), ("l0_k_e", full), ("l0_k_p", none), ("l0_v_e", full),
                      ("l0_q_raw_p", full), ("l0_o_e", full), ("l0_o_p", none)):
        assert n[key] == pytest.approx(want, abs=1e-9), key
    assert n["n_layers_e_over_p_k"] == 2 and n["n_layers_e_over_p_q"] == 0
    assert n["layers_strong_p"] == "0 and 1"  # W_Q reads only P in both layers


def planted_energy_model(rng: np.random.Generator, d=8, n_heads=2, n_layers=2):
    """Q[:, 0] the all-ones direction; P (row-centred already) on Q[:, 1:3]; E's directions Q[:, 3:]. Every
    layer: W_Q maps P's plane isotropically (orthonormal rows), W_K and W_V read E's first two directions, W_O
    writes into E's first two; gains one."""
    Q = np.linalg.qr(np.column_stack([np.ones(d), rng.standard_normal((d, d - 1))]))[0]
    tensors = {"W_pos": planted_position(Q[:, 1:], rng, dims=2), "E_centred.S": np.linspace(4, 1, d - 3),
               "E_centred.V": Q[:, 3:]}
    frame = random_basis(d, d, rng).T  # orthonormal rows
    for layer in range(n_layers):
        maps = {"Q": Q[:, 1:3] @ frame[:2], "K": Q[:, 3:5] @ frame[:2], "V": Q[:, 3:5] @ frame[2:4]}
        for kind, full in maps.items():
            tensors[f"blocks.{layer}.attn.W_{kind}"] = heads_in(full, n_heads)
        tensors[f"blocks.{layer}.attn.W_O"] = (frame[:, :2] @ Q[:, 3:5].T).reshape(n_heads, d // n_heads, d)
        tensors[f"blocks.{layer}.ln1.w"] = np.ones(d)
    tensors["embed.ln.w"] = np.ones(d)
    return tensors, Q


def test_energy_weighted_reading_of_planted_maps():
    """r_P = D/2 for a map isotropic on P's plane, 0 for one that avoids it; r_E from E's σ²; E's bounds from the
    one missing direction; sds from random rotations are zero for nothing and the table repeats the numbers."""
    d = 8
    tensors, Q = planted_energy_model(np.random.default_rng(10), d)
    result = attention_energy_reading(Given(tensors), shape(d=d))
    n = values(result)
    S2 = np.linspace(4, 1, d - 3) ** 2
    for key in ("q", "q_raw"):
        assert n[f"l0_{key}_p"] == pytest.approx(d / 2) and n[f"l0_{key}_e"] == pytest.approx(0, abs=1e-12)
    for key in ("k", "v", "o"):
        assert n[f"l0_{key}_p"] == pytest.approx(0, abs=1e-12)
        assert n[f"l0_{key}_e"] == pytest.approx(d * S2[:2].sum() / S2.sum() / 2)
        assert n[f"l0_{key}_e_wo1"] == pytest.approx(d * S2[1] / S2[1:].sum() / 2)  # E's first direction left out
    # E_c misses d − 1 − (d − 3) = 2 directions, P's plane, each with σ² ≤ σ_min²: W_Q, which reads only that
    # plane, reads E at 0 if they are empty and at most d σ_min² / ΣS² if they are full
    assert n["l0_q_e_lo"] == pytest.approx(0, abs=1e-12)
    assert n["l0_q_e_hi"] == pytest.approx(d * S2[-1] / S2.sum())
    assert n["l0_q_e_wo1_hi"] == pytest.approx(d * S2[-1] / S2[1:].sum())  # the same bound, E's first left out
    assert n["l0_k_e_wo1_lo"] == pytest.approx(d * S2[1] / 2 / (S2[1:].sum() + 2 * S2[-1]))
    assert n["n_layers_p_over_e_q"] == 2 and n["n_layers_p_over_e_k"] == 0
    assert result.tables["layer0"].rows[3][2] == pytest.approx(n["l0_q_p"])


def test_missing_energy_bounds_hold_the_full_value():
    rng = np.random.default_rng(11)
    d = 12
    E = rng.standard_normal((200, d)) * np.linspace(3, 0.5, d)
    E_c = E - E.mean(axis=1, keepdims=True)
    _, S, Vt = np.linalg.svd(E_c, full_matrices=False)
    for _ in range(20):
        W = rng.standard_normal((d, d)) * rng.uniform(0.1, 3, d)[:, None]
        B = W @ W.T
        truth = d * np.sum((E_c @ W) ** 2) / (np.sum(E_c**2) * np.sum(W**2))
        for k in (3, 7, d - 1):
            lo, hi = missing_energy_bounds(S[:k], Vt[:k].T, B, d)
            assert lo <= truth * (1 + 1e-12) and truth <= hi * (1 + 1e-12), k
        assert (lo, hi) == pytest.approx((truth, truth))  # k = d − 1: nothing missing


def test_the_layernorm_gain_is_folded_into_what_the_attention_reads():
    rng = np.random.default_rng(9)
    tensors = planted_model(rng)
    tensors["blocks.0.attn.W_Q"] = heads_in(rng.standard_normal((8, 8)), 2)  # reads everything
    tensors["blocks.0.ln1.w"] = np.array([1e-3, 1e-3, 1, 1, 1, 1, 1, 1.0])  # but the gain mutes P's dimensions
    n = values(attention_position_content(Given(tensors), shape(d=8), ks=(2,), primary_k=2, strong=1.5))
    assert n["l0_q_raw_p"] > 0.2 and n["l0_q_p"] < 1e-4
    bert = values(attention_position_content(Given(tensors | {"embed.ln.w": np.ones(8)}), shape("bert", d=8), ks=(2,),
                                             primary_k=2, strong=1.5))
    assert bert["l0_q_p"] == pytest.approx(bert["l0_q_raw_p"])  # BERT's layer 0 reads the embedding LayerNorm


def test_mlp_reads_planted_token_subspace_through_the_right_gain():
    rng = np.random.default_rng(10)
    tensors = planted_model(rng)
    n = values(mlp_position_content(Given(tensors), shape(d=8), ks=(2,), primary_k=2, curve_k=3))
    assert n["l0_e_k2"] == pytest.approx(4) and n["l0_p_k2"] == pytest.approx(0, abs=1e-12)
    assert n["n_layers_e_over_p"] == 2 and n["layers_e_over_p"] == "0 and 1"
    tensors["blocks.0.ln1.w"], tensors["blocks.0.ln2.w"] = np.full(8, 2.0), np.full(8, 3.0)
    assert mlp_input_gain(tensors, shape("gpt2", d=8), 0)[0] == 3.0  # GPT-2: ln_2 sits before the MLP
    assert mlp_input_gain(tensors, shape("bert", d=8), 0)[0] == 2.0  # BERT: the attention output's LayerNorm


# ---------------------------------------------------------------------------
# The pipeline: computed where the tensors are, skipped with the reason where they are not


def _small(name: str):
    params = {"position_token_subspaces": {"ks": (2, 4), "angle_ks": (2,), "capture_k": 2, "capture_ks": (2,),
                                           "n_random": 5, "seed": 0, "agreement_tol": 1e-4, "sparse_vectors": 2,
                                           "sparse_mass": 0.9, "width_share": 0.1, "trained_rows": {}},
              "attention_energy_reading": {},
              "token_position_sum": {"n_pairs": 50, "seed": 0, "ks": (2,)},
              "attention_position_content": {"ks": (2, 4), "primary_k": 2, "strong": 1.5},
              "mlp_position_content": {"ks": (2, 4), "primary_k": 2, "curve_k": 4}}[name]
    return dataclasses.replace(select([name])[0], params=params)


NAMES = ("position_token_subspaces", "token_position_sum", "attention_position_content", "attention_energy_reading",
         "mlp_position_content")


def _run(source, tmp_path):
    cache = Cache(tmp_path / "cache", tmp_path / "_variables.yml")
    run([Job(_small(name), source.slug, source) for name in NAMES], cache, progress=False)
    return {name: cache.manifest(source.slug, name) for name in NAMES}


def test_mlp_analyses_run_on_a_full_tiny_checkpoint_from_the_hub_cache(tmp_path, tiny_model, monkeypatch):
    full = write_checkpoint(tmp_path / "full", gpt2_state_dict(np.random.default_rng(11)), gpt2_config())
    _hub_layout(tmp_path / "hf", "test-org/tiny-gpt2", [full / "config.json", full / "model.safetensors"])
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    source = hub_source("tiny-gpt2", cache_dir=tmp_path / "hf")
    manifests = _run(source, tmp_path)
    assert {name: m["status"] for name, m in manifests.items()} == dict.fromkeys(NAMES, "ok")
    assert "l0_e_k2" in (tmp_path / "cache" / "tiny_gpt2" / "mlp_position_content" / "numbers.json").read_text()


def test_partial_tiny_checkpoint_skips_what_it_cannot_compute_and_says_why(tmp_path, tiny_checkpoint):
    source = local_source("tiny-gpt2", tiny_checkpoint)  # no wte, no MLP matrices, no derived PCA
    manifests = _run(source, tmp_path / "bare")
    assert {name: m["status"] for name, m in manifests.items()} == dict.fromkeys(NAMES, "skipped")
    assert "`W_pos`" not in manifests["mlp_position_content"]["reason"]
    assert "`E_centred.V`, `blocks.*.mlp.W_in`" in manifests["mlp_position_content"]["reason"]
    # with the saved PCA of the token embeddings beside it, what needs only P, E's directions and attention runs
    (tiny_checkpoint / "derived").mkdir()
    np.save(tiny_checkpoint / "derived" / "wte_pca500_a.npy",
            _sklearn_style_pca(np.random.default_rng(12).standard_normal((11, 8)), 5))
    manifests = _run(local_source("tiny-gpt2", tiny_checkpoint), tmp_path / "derived")
    assert {name: m["status"] for name, m in manifests.items()} == {
        "position_token_subspaces": "ok", "token_position_sum": "skipped", "attention_position_content": "ok",
        "attention_energy_reading": "ok", "mlp_position_content": "skipped"}
    assert "`W_E`" in manifests["token_position_sum"]["reason"]
    assert "`blocks.*.mlp.W_in`" in manifests["mlp_position_content"]["reason"]
    assert "E_centred" not in manifests["mlp_position_content"]["reason"]


def test_real_gpt2_offline_splits_into_what_it_can_and_cannot_compute(gpt2_weights):
    source = open_source("gpt2", gpt2_weights)
    missing = {name: source.missing(select([name])[0].needs) for name in NAMES}
    assert missing == {"position_token_subspaces": [], "token_position_sum": ["W_E"],
                       "attention_position_content": [], "attention_energy_reading": [],
                       "mlp_position_content": ["blocks.*.mlp.W_in"]}


def test_data_and_methods_says_what_gpt2s_e_is_where_it_first_appears():
    """Issue 37, item 8: GPT-2's E is a published rank-500 PCA, not W_E; the chapter that introduces the data must
    say so (source, per-token centring, the exact range, what cannot be checked) and not claim 'no substitutes'."""
    from pathlib import Path

    report = Path(__file__).resolve().parents[1] / "report"
    text = (report / "data-and-methods.qmd").read_text()
    assert "never run on substitutes" not in text
    for needed in ("{#sec-data-token-pca}", "a published PCA", "centred on its\nown mean", "replicate_exact_k",
                   "no token's row", "@sec-appendix-token-pca"):
        assert needed in text, needed
    assert text.index("{#sec-data-token-pca}") < text.index("{#sec-data-verification}")
    details = (report / "appendix-methods.qmd").read_text()  # the sources and what cannot be checked, in full
    for needed in ("{#sec-appendix-token-pca}", "permanentmercy/CALF_POWERED_BY_BUG", "wwy-1208/TMT",
                   "cannot be checked offline"):
        assert needed in details, needed


def test_the_verdicts_without_e_s_first_direction_remove_exactly_its_part():
    """P on dimensions 0, 1, 2; E_c's first direction e_0 (inside P's dimensions) with σ₁ large, the others e_3..:
    with v₁ E_c's energy sits in P's dimensions far above their share, without it none does, and the capture of
    v₁ = e_0 by P's top-k subspace is 1 for every k that includes P's direction e_0 (ratio D/k), 0 before."""
    rng = np.random.default_rng(7)
    P = np.linalg.qr(rng.standard_normal((40, 3)))[0] * [3.0, 2.0, 1.0] @ np.eye(D)[:3]
    V = np.eye(D)[:, [0, *range(3, D - 1)]]
    S = np.concatenate([[20.0], np.linspace(5, 1, V.shape[1] - 1)])
    result = position_token_subspaces(Given({"W_pos": P, "E_centred.S": S, "E_centred.V": V}), shape(), **OVERLAP)
    n = values(result)
    assert n["sparse_union"] == 3
    assert n["sparse_e_energy"] == pytest.approx(S[0] ** 2 / np.sum(S**2))
    assert n["sparse_e_ratio"] == pytest.approx(S[0] ** 2 / np.sum(S**2) / (3 / D))
    assert n["sparse_e_energy_wo1"] == pytest.approx(0, abs=1e-15) and n["sparse_e_ratio_wo1"] == pytest.approx(0)
    missing = (D - 1 - V.shape[1]) * S[-1] ** 2  # e_1 and e_2 are missing: at most this energy, possibly in P's
    assert n["sparse_e_energy_wo1_lo"] == pytest.approx(0, abs=1e-15)
    assert n["sparse_e_energy_wo1_hi"] == pytest.approx(missing / (np.sum(S[1:] ** 2) + missing))
    cut = values(position_token_subspaces(Given({"W_pos": P, "E_centred.S": S[:10], "E_centred.V": V[:, :10]}),
                                          shape(), **OVERLAP))
    m = (D - 1 - 10) * S[9] ** 2  # the missing directions' largest energy, all of it possibly in P's dimensions
    assert cut["sparse_e_energy_wo1_hi"] == pytest.approx(m / (np.sum(S[1:10] ** 2) + m))
    assert n["c1_ratio_k1"] == pytest.approx(D) and n["c1_ratio_k3"] == pytest.approx(D / 3)
    assert n["c1_below_k1"] == n["c1_below_k3"] == "yes"  # all of v₁ captured: p ≈ 0, below Holm's thresholds
    assert n["c1_weighted"] == pytest.approx(D * 9 / 14)  # ‖P e_0‖²/‖P‖² = 9/(9 + 4 + 1)
    assert n["e1_over_e2"] == pytest.approx(4.0) and n["e1_share"] == pytest.approx(400 / np.sum(S**2))
    # P's energy in E's directions 2..k: none (they avoid P's dimensions), against (k − 1)/D
    assert n["ratio_wo1_k3"] == pytest.approx(0, abs=1e-12) and n["ratio_k3"] == pytest.approx(9 / 14 / (3 / D))
    assert result.tables["first_capture"].column("P's top k") == [1, 3]


def test_the_first_centred_token_direction_is_the_mean_token_when_that_is_large():
    """E = noise + 1 c + ... : each token's own mean is subtracted, not the mean token, so a common vector c
    (centred over dimensions) stays in E_c and becomes its first direction; its share of ‖E_c‖² is T‖c̄‖²/‖E_c‖²."""
    from analyses.position_content.token_subspaces import token_mean_direction
    from analyses.toolkit.linalg import centred_token_svd

    rng = np.random.default_rng(8)
    c = rng.standard_normal(D) * 3
    E = rng.standard_normal((400, D)) * 0.5 + c
    _, V = centred_token_svd(E)
    n = values(token_mean_direction(Given({"W_E": E, "E_centred.V": V}), shape()))
    assert n["v1_mean_cos"] > 0.99
    centred = E - E.mean(axis=1, keepdims=True)
    assert n["mean_token_share"] == pytest.approx(400 * np.sum(centred.mean(axis=0) ** 2) / np.sum(centred**2))
    assert n["mean_token_share"] > 0.8
    # without the common vector, the first direction has nothing to do with the (near-zero) mean row
    E0 = rng.standard_normal((400, D)) * np.linspace(3, 1, D)
    _, V0 = centred_token_svd(E0)
    assert values(token_mean_direction(Given({"W_E": E0, "E_centred.V": V0}), shape()))[
        "mean_token_share"] < 0.01


ONE_DIRECTION = {  # a cited verdict that E_c's first direction decides → what must be cited beside it
    ("var gpt2.position_token_subspaces.capture_1_ratio >", "var gpt2.position_token_subspaces.c1_ratio_k30 >"):
        ("var gpt2.position_token_subspaces.c1_ratio_k3 >", "var gpt2.position_token_subspaces.c1_weighted >"),
    ("var gpt2.position_token_subspaces.sparse_e_ratio >", "var gpt2.position_token_subspaces.sparse_e_energy >"):
        ("var gpt2.position_token_subspaces.sparse_e_ratio_wo1 >",
         "var gpt2.position_token_subspaces.sparse_e_energy_wo1 >"),
    ("var gpt2.attention_energy_reading.l0_o_e >",): ("var gpt2.attention_energy_reading.l0_o_e_wo1 >",),
    ("var gpt2.position_token_subspaces.angle_min_k30 >",): ("var gpt2.position_token_subspaces.angle_min_wo1_k30 >",),
}
RETRACTED = ("GPT-2 does not keep position and content in disjoint places", "corrected: more than their share",
             "are therefore not disjoint", "confirmed, for the first direction", "Keys and $W_O$ serve both",
             "keys and $W_O$ serve both", "Under either reading the second half fails")


def _units(text: str) -> list[str]:
    """Paragraphs, and each row of a table on its own."""
    out = []
    for block in text.split("\n\n"):
        out += block.splitlines() if block.lstrip().startswith("|") else [block]
    return out


@pytest.mark.parametrize("chapter", ("position-content.qmd", "appendix-claims.qmd", "growing-helix.qmd"))
def test_a_verdict_that_one_direction_decides_is_cited_with_and_without_it(chapter):
    """Issue 37, item 2: E_c's first direction (the mean token where E is whole) alone made 'not disjoint' and the
    3.2× capture; wherever either is cited, the same paragraph or table row cites it without that direction (or
    over P's k / energy-weighted), and the retracted verdicts do not come back."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "report" / chapter).read_text()
    for wording in RETRACTED:
        assert wording not in text, wording
    for unit in _units(text):
        for cited, beside in ONE_DIRECTION.items():
            if any(key in unit for key in cited):
                assert any(key in unit for key in beside), (chapter, unit[:100])


def test_the_same_fraction_of_the_width_picks_k_by_width_and_matches_the_fixed_k():
    """width_share 1/8 of D = 24 is k = 3: the same number as ratio_k3; another width gives another k."""
    from analyses.toolkit.subspaces import width_k

    rng = np.random.default_rng(9)
    Q = random_basis(D, D, rng)
    tensors = {"W_pos": planted_position(Q, rng) + 0.1 * rng.standard_normal((40, D)), **token_subspace(Q[:, 1:])}
    n = values(position_token_subspaces(Given(tensors), shape(), **OVERLAP))
    assert n["width_k"] == 3 and n["width_ratio"] == pytest.approx(n["ratio_k3"])
    assert n["width_ratio_wo1"] == pytest.approx(n["ratio_wo1_k3"])
    assert width_k(30 / 768, 768) == 30 and width_k(30 / 768, 128) == 5 and width_k(30 / 768, 384) == 15


def test_the_smallest_angle_without_e_s_first_direction_skips_exactly_that_direction():
    """P in span(e_0, e_1, e_2); E's directions e_0 then e_5, e_6, …: with v₁ = e_0 the smallest angle is 0, without
    it (E's directions 2..k+1, all outside P's span) it is a right angle."""
    rng = np.random.default_rng(11)
    P = np.linalg.qr(rng.standard_normal((40, 3)))[0] * [3.0, 2.0, 1.0] @ np.eye(D)[:3]
    V = np.eye(D)[:, [0, *range(5, D)]]
    n = values(position_token_subspaces(Given({"W_pos": P, **token_subspace(V)}), shape(), **OVERLAP))
    assert n["angle_min_k3"] == pytest.approx(0, abs=1e-6)
    assert n["angle_min_wo1_k3"] == pytest.approx(90, abs=1e-9)
