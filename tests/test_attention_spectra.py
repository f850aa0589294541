"""Closed-form checks of the anisotropy measures, the layout of the full matrices, and the subspace alignment."""

from __future__ import annotations

import numpy as np
import pytest

from analyses.attention_spectra import anisotropy, energy_fraction
from analyses.toolkit.attention import full_matrix, input_gain
from analyses.toolkit.pvalues import draws_for
from analyses.engine.sources import ModelShape

D = 48


def orthogonal(rng: np.random.Generator, d: int) -> np.ndarray:
    q, _ = np.linalg.qr(rng.standard_normal((d, d)))
    return q


def test_orthogonal_matrix_is_isotropic():
    Q = 3.0 * orthogonal(np.random.default_rng(0), D)
    a = anisotropy(np.linalg.svd(Q, compute_uv=False))
    assert a["condition"] == pytest.approx(1.0, abs=1e-12)
    assert a["effective_rank"] == pytest.approx(D, abs=1e-9)
    assert a["log_volume"] == pytest.approx(D * np.log(3.0), abs=1e-10)  # |det(3Q)| = 3^D


def test_rank_r_projector_has_effective_rank_r():
    B = orthogonal(np.random.default_rng(1), D)[:, :5]
    s = np.linalg.svd(B @ B.T, compute_uv=False)
    from analyses.toolkit.linalg import effective_rank

    assert effective_rank(np.where(s > 1e-10, s, 0.0)) == pytest.approx(5.0, abs=1e-9)
    with pytest.raises(ValueError):  # a singular matrix has no finite condition number or log-volume
        anisotropy(s * (s > 1e-10))


def test_log_volume_is_log_abs_determinant():
    W = np.random.default_rng(2).standard_normal((D, D))
    assert anisotropy(np.linalg.svd(W, compute_uv=False))["log_volume"] == pytest.approx(
        np.linalg.slogdet(W)[1], abs=1e-9)


def test_subspace_with_itself_and_random_subspaces():
    rng = np.random.default_rng(3)
    k = 4
    B = orthogonal(rng, D)[:, :k]
    assert energy_fraction(B @ B.T, B) == pytest.approx(1.0, abs=1e-12)
    assert energy_fraction(B @ B.T, B, side="output") == pytest.approx(1.0, abs=1e-12)
    W = rng.standard_normal((D, D))
    draws = [energy_fraction(W, orthogonal(rng, D)[:, :k]) for _ in range(400)]
    # E = k/D exactly; the mean of 400 draws has standard error well below 0.01 here
    assert np.mean(draws) == pytest.approx(k / D, abs=0.01)
    # the whole space takes all the energy, a complementary subspace the rest
    Q = orthogonal(rng, D)
    assert energy_fraction(W, Q[:, :k]) + energy_fraction(W, Q[:, k:]) == pytest.approx(1.0, abs=1e-12)


def test_energy_fraction_is_sigma_weighted_overlap_of_input_singular_vectors():
    rng = np.random.default_rng(4)
    W = rng.standard_normal((D, 30))
    B = orthogonal(rng, D)[:, :3]
    U, s, _ = np.linalg.svd(W, full_matrices=False)
    weighted = np.sum(s**2 * np.sum((B.T @ U) ** 2, axis=0)) / np.sum(s**2)
    assert energy_fraction(W, B) == pytest.approx(weighted, abs=1e-12)


def test_full_matrix_layout_is_x_at_w():
    """Head h of the full D × D query map is columns h·d_head … (h+1)·d_head; W_O stacks heads as rows."""
    rng = np.random.default_rng(5)
    H, dh = 3, 4
    tensors = {"blocks.0.attn.W_Q": rng.standard_normal((H, H * dh, dh)),
               "blocks.0.attn.W_O": rng.standard_normal((H, dh, H * dh))}
    x = rng.standard_normal(H * dh)
    q = x @ full_matrix(tensors, 0, "Q")
    for h in range(H):
        np.testing.assert_allclose(q[h * dh:(h + 1) * dh], x @ tensors["blocks.0.attn.W_Q"][h], atol=1e-12)
    z = rng.standard_normal((H, dh))
    np.testing.assert_allclose(z.reshape(-1) @ full_matrix(tensors, 0, "O"),
                               sum(z[h] @ tensors["blocks.0.attn.W_O"][h] for h in range(H)), atol=1e-12)


def test_input_gain_follows_the_norm_placement():
    shape = lambda fam: ModelShape("m", fam, 4, 8, 2, 2, 10, 16, "pre" if fam == "gpt2" else "post")  # noqa: E731
    tensors = {"blocks.0.ln1.w": np.full(4, 1.0), "blocks.1.ln1.w": np.full(4, 2.0), "embed.ln.w": np.full(4, 3.0),
               "blocks.0.ln2.w": np.full(4, 4.0)}
    assert input_gain(tensors, shape("gpt2"), 1)[0] == 2.0
    assert input_gain(tensors, shape("bert"), 0)[0] == 3.0
    assert input_gain(tensors, shape("bert"), 1)[0] == 4.0


def test_reported_layer5_query_anisotropy(gpt2_weights):
    """The reference values of the weights' README: log-volume 393.94, effective rank 535.52, κ ≈ 3.48e4."""
    from analyses.engine.sources import local_source

    source = local_source("gpt2", gpt2_weights)
    a = anisotropy(np.linalg.svd(full_matrix(source.tensors, 5, "Q"), compute_uv=False))
    assert a["log_volume"] == pytest.approx(393.94, abs=0.005)
    assert a["effective_rank"] == pytest.approx(535.52, abs=0.005)
    assert a["condition"] == pytest.approx(3.48e4, rel=0.005)


BASELINES = {"n_gaussian": 3, "n_shuffles": 1, "seed": 0, "alpha": 0.05}


def _layer_tensors(rng, matrices: dict[str, np.ndarray], H: int, layer: int = 0) -> dict[str, np.ndarray]:
    """Canonical per-head tensors of one layer whose full D × D maps (x @ W layout) are the given matrices."""
    dh = D // H
    out = {}
    for kind in "QKV":
        W = matrices.get(kind, rng.standard_normal((D, D)))
        out[f"blocks.{layer}.attn.W_{kind}"] = W.reshape(D, H, dh).transpose(1, 0, 2)
    out[f"blocks.{layer}.attn.W_O"] = matrices.get("O", rng.standard_normal((D, D))).reshape(H, dh, D)
    out[f"blocks.{layer}.ln1.w"] = np.ones(D)
    return out


def test_attention_spectra_reports_the_anisotropy_of_a_planted_spectrum():
    """W_Q = U diag(σ) Vᵀ with σ = 2^(−i/3): condition 2^((D−1)/3), log-volume Σ log σ, effective rank exp H(σ/Σσ)."""
    from analyses.attention_spectra import attention_spectra

    rng = np.random.default_rng(7)
    s = 2.0 ** (-np.arange(D) / 3)
    W = orthogonal(rng, D) @ np.diag(s) @ orthogonal(rng, D)
    shape = ModelShape("planted", "gpt2", D, 8, 1, 4, 10, 4 * D, "pre")
    result = attention_spectra(_layer_tensors(rng, {"Q": W}, 4), shape, reference_model="gpt2", reference_layer=0,
                               reference={"log_volume": 0.0, "effective_rank": 0.0, "condition": 1.0}, **BASELINES)
    row = result.tables["anisotropy"].rows[0]
    assert row[:2] == (0, "W_Q")
    p = s / s.sum()
    assert row[4] == pytest.approx(2 ** ((D - 1) / 3), rel=1e-9)
    assert row[5] == pytest.approx(np.log(s).sum(), abs=1e-9)
    assert row[6] == pytest.approx(np.exp(-(p * np.log(p)).sum()), rel=1e-10)


def test_alignment_enrichment_of_matrices_that_read_only_inside_or_outside_the_position_subspace():
    """A W_Q whose rows live in P's top-3 subspace reads it with enrichment D/3; one orthogonal to it, 0."""
    from analyses.attention_spectra import attention_alignment

    rng = np.random.default_rng(8)
    Q = orthogonal(rng, D)
    P = rng.standard_normal((64, 3)) @ np.diag([5.0, 3.0, 2.0]) @ Q[:, :3].T  # rank 3: top-3 subspace = Q[:, :3]
    inside = Q[:, :3] @ rng.standard_normal((3, D))
    outside = Q[:, 3:] @ rng.standard_normal((D - 3, D))
    tensors = _layer_tensors(rng, {"Q": inside, "K": outside}, 4) | _layer_tensors(rng, {}, 4, 1) | {"W_pos": P}
    shape = ModelShape("planted", "gpt2", D, 64, 2, 4, 10, 4 * D, "pre")
    numbers = attention_alignment(tensors, shape, ks=(3,), n_overlap_vectors=2, overlap_k=2).numbers
    assert numbers["l0_q_k3"].value == pytest.approx(D / 3, rel=1e-9)
    assert numbers["l0_k_k3"].value == pytest.approx(0.0, abs=1e-9)
    assert numbers["l0_q_folded_k3"].value == pytest.approx(D / 3, rel=1e-9)  # γ = 1 changes nothing


def test_baselines_call_noise_noise_and_see_a_planted_spectrum():
    """Gaussian W_Q, W_K, W_V, W_O sit on the Marchenko–Pastur effective rank and have unremarkable condition
    numbers; a planted steep spectrum falls far below the Gaussian effective rank while its shuffle does not."""
    from analyses.attention_spectra import attention_spectra
    from analyses.toolkit.random_matrices import mp_effective_rank_fraction

    rng = np.random.default_rng(9)
    s = 2.0 ** (-np.arange(D) / 2)
    planted = orthogonal(rng, D) @ np.diag(s) @ orthogonal(rng, D)
    shape = ModelShape("planted", "gpt2", D, 8, 2, 4, 10, 4 * D, "pre")
    tensors = _layer_tensors(rng, {}, 4) | _layer_tensors(rng, {"Q": planted}, 4, 1)
    result = attention_spectra(tensors, shape, reference_model="none", reference_layer=0, reference={}, **BASELINES)
    rows = {(r[0], r[1]): r for r in result.tables["baselines"].rows}
    limit = mp_effective_rank_fraction(1.0) * D
    assert result.numbers["gaussian_effective_rank_limit"].value == pytest.approx(limit)
    for kind in "QKVO":  # layer 0 is noise
        assert rows[(0, f"W_{kind}")][6] == pytest.approx(1.0, abs=0.05)  # effective rank / Gaussian
        assert abs(rows[(0, f"W_{kind}")][8]) < 6  # log-volume within a few Gaussian sd of its exact mean
    planted_row = rows[(1, "W_Q")]
    assert planted_row[6] < 0.25 and planted_row[3] < 1e-4  # low effective rank; condition 2^23.5 is extreme
    # a condition number of about D is typical of noise: no evidence of anisotropy
    assert all(rows[(0, f"W_{k}")][3] > 1e-3 for k in "QKVO")
    assert planted_row[7] == pytest.approx(limit, rel=0.1)  # its shuffle is noise again


def test_qk_antisymmetry_matches_the_dense_map_and_its_closed_forms():
    """a = ‖(M − Mᵀ)/2‖/‖M‖ from d × d products equals the dense D × D computation; 0 for K = Q (symmetric M),
    1 for an antisymmetric M; the slides' d(M, Mᵀ) = a/(1 + a) from its definition."""
    from analyses.qk_symmetry import qk_antisymmetry, qk_distance

    rng = np.random.default_rng(3)
    Q, K = rng.standard_normal((5, D, 6)), rng.standard_normal((5, D, 6))
    a = qk_antisymmetry(Q, K)
    for h in range(5):
        M = Q[h] @ K[h].T
        assert a[h] == pytest.approx(np.linalg.norm((M - M.T) / 2) / np.linalg.norm(M), rel=1e-12)
        gap = np.linalg.norm(M - M.T)
        assert qk_distance(a[h]) == pytest.approx(gap / (2 * np.linalg.norm(M) + gap), rel=1e-12)
    assert qk_antisymmetry(Q, Q) == pytest.approx(np.zeros(5), abs=1e-7)
    J = np.kron(np.eye(D // 2), np.array([[0.0, 1.0], [-1.0, 0.0]]))  # W_Q = I, W_K = Jᵀ: M = J, antisymmetric
    assert qk_antisymmetry(np.eye(D), J.T) == pytest.approx(1.0)
    assert qk_distance(np.array(1.0)) == pytest.approx(0.5)


def test_qk_trace_ratio_closed_forms():
    """s = tr(M²)/‖M‖²_F equals the dense computation; +1 for a symmetric M (K = Q), −1 for an antisymmetric one
    (M = J), and 1/D on average for independent Gaussian maps (E tr(M²) = D d, E ‖M‖² ≈ D² d)."""
    from analyses.qk_symmetry import qk_trace_ratio

    rng = np.random.default_rng(4)
    Q, K = rng.standard_normal((5, D, 6)), rng.standard_normal((5, D, 6))
    s = qk_trace_ratio(Q, K)
    for h in range(5):
        M = Q[h] @ K[h].T
        assert s[h] == pytest.approx(np.trace(M @ M) / np.sum(M * M), rel=1e-10)
    assert qk_trace_ratio(Q, Q) == pytest.approx(np.ones(5), rel=1e-12)
    J = np.kron(np.eye(D // 2), np.array([[0.0, 1.0], [-1.0, 0.0]]))
    assert qk_trace_ratio(np.eye(D), J.T) == pytest.approx(-1.0)
    big = qk_trace_ratio(rng.standard_normal((400, 64, 8)), rng.standard_normal((400, 64, 8)))
    assert big.mean() == pytest.approx(1 / 64, abs=0.004)


def test_qk_symmetry_finds_a_planted_symmetric_head_and_the_gaussian_level():
    """Random heads sit at the Gaussian level a ≈ √((1 − 1/D)/2); a head with W_K = W_Q is the most symmetric (d = 0)."""
    from analyses.qk_symmetry import qk_symmetry

    rng = np.random.default_rng(5)
    shape = ModelShape("planted", "gpt2", D, 8, 2, 4, 10, 4 * D, "pre")
    tensors = {f"blocks.{layer}.attn.W_{kind}": rng.standard_normal((4, D, D // 4)) for layer in range(2)
               for kind in "QK"}
    tensors["blocks.1.attn.W_K"][2] = tensors["blocks.1.attn.W_Q"][2]
    result = qk_symmetry(tensors, shape, n_random=draws_for(shape.n_layers * shape.n_heads), seed=0)
    n = result.numbers
    assert n["d_min"].value == pytest.approx(0.0, abs=1e-7) and n["d_min_head"].value == "1.2"
    level = np.sqrt((1 - 1 / D) / 2)
    assert n["d_random_mean"].value == pytest.approx(level / (1 + level), abs=0.01)
    assert n["d_median"].value == pytest.approx(level / (1 + level), abs=0.02)
    assert result.tables["distances"].rows[1][3] == pytest.approx(0.0, abs=1e-7)
    assert n["most_symmetric"].value.startswith("1.2")
    assert n["s_max"].value == pytest.approx(1.0) and result.tables["trace_ratio"].rows[1][3] == pytest.approx(1.0)
    assert n["s_random_mean"].value == pytest.approx(1 / D, abs=3 * n["s_random_sd"].value / np.sqrt(n["n_random"].value))


def test_qk_symmetry_refuses_too_few_gaussian_pairs_for_holm_over_every_head():
    """'Beyond every Gaussian pair' is p = 1/(1 + N); it must meet Holm's smallest threshold α/(L·H), so fewer than
    draws_for(L·H) pairs is an error, and that many is accepted."""
    from analyses.qk_symmetry import qk_symmetry

    rng = np.random.default_rng(7)
    shape = ModelShape("planted", "gpt2", D, 8, 2, 4, 10, 4 * D, "pre")
    tensors = {f"blocks.{layer}.attn.W_{kind}": rng.standard_normal((4, D, D // 4)) for layer in range(2)
               for kind in "QK"}
    needed = draws_for(8)
    with pytest.raises(ValueError, match=f"need {needed}"):
        qk_symmetry(tensors, shape, n_random=needed - 1, seed=0)
    n = qk_symmetry(tensors, shape, n_random=needed, seed=0).numbers
    assert n["n_random"].value == n["n_random_needed"].value == needed == 159


def test_qk_symmetry_counts_a_planted_antisymmetric_head_in_the_tail():
    """A head with W_K = W_Q J (M = W_Q Jᵀ W_Qᵀ, antisymmetric) has s = −1, lies below every Gaussian draw, and is
    the only head named in the antisymmetric tail."""
    from analyses.qk_symmetry import qk_symmetry

    rng = np.random.default_rng(6)
    shape = ModelShape("planted", "gpt2", D, 8, 1, 4, 10, 4 * D, "pre")
    d_head = D // 4
    J = np.kron(np.eye(d_head // 2), np.array([[0.0, 1.0], [-1.0, 0.0]]))
    tensors = {f"blocks.0.attn.W_{kind}": rng.standard_normal((4, D, d_head)) for kind in "QK"}
    tensors["blocks.0.attn.W_K"][1] = tensors["blocks.0.attn.W_Q"][1] @ J
    n = qk_symmetry(tensors, shape, n_random=draws_for(shape.n_layers * shape.n_heads), seed=0).numbers
    assert n["s_min"].value == pytest.approx(-1.0) and n["d_max_head"].value == "0.1"
    assert n["n_above_random"].value >= 1 and "1 (s = -1.000)" in n["layer0_antisymmetric"].value


def test_the_strongest_later_reader_carries_its_raw_enrichment_and_its_layers_gain():
    """Layer 1's K = [A; B] reads P's top-3 subspace (the first three axes) through A and the rest through B, and its
    gain is 3 on those axes, 1 elsewhere: raw enrichment ‖A‖² / ‖K‖² · D/3, folded 9‖A‖² / (9‖A‖² + ‖B‖²) · D/3 (the
    larger, so the later maximum), and the gain ratio 9 / mean(γ²) = 9 D / (27 + D − 3)."""
    from analyses.attention_spectra import attention_alignment

    rng = np.random.default_rng(10)
    P = rng.standard_normal((64, 3)) @ np.diag([5.0, 3.0, 2.0]) @ np.eye(D)[:3]
    A, B = rng.standard_normal((3, D)), 0.3 * rng.standard_normal((D - 3, D))
    layer1 = _layer_tensors(rng, {"K": np.vstack([A, B])}, 4, 1)
    layer1["blocks.1.ln1.w"] = np.where(np.arange(D) < 3, 3.0, 1.0)
    tensors = _layer_tensors(rng, {"Q": 0.01 * rng.standard_normal((D, D))}, 4) | layer1 | {"W_pos": P}
    shape = ModelShape("planted", "gpt2", D, 64, 2, 4, 10, 4 * D, "pre")
    numbers = {k: v.value for k, v in attention_alignment(tensors, shape, ks=(3,), n_overlap_vectors=2,
                                                          overlap_k=2).numbers.items()}
    a, b = np.sum(A**2), np.sum(B**2)
    assert numbers["later_max_layer_k3"] == 1 and numbers["later_max_matrix_k3"] == 4  # diag(γ) W_K
    assert numbers["later_max_k3"] == pytest.approx(9 * a / (9 * a + b) * D / 3, rel=1e-9)
    assert numbers["later_max_raw_k3"] == pytest.approx(a / (a + b) * D / 3, rel=1e-9)
    assert numbers["later_max_gain_ratio_k3"] == pytest.approx(9 * D / (27 + D - 3), rel=1e-9)
