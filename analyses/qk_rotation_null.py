"""Is the rotation of layer 0's query–key forms on the helix more than other directions would show?

Each layer-0 head's QK form on P's top k right-singular directions B, M = Bᵀ diag(γ) W_Q W_Kᵀ diag(γ) B / √d_head
(`toolkit.attention.qk_form`, as in `positional_qk`), has an antisymmetric share a = ‖(M − Mᵀ)/2‖_F / ‖M‖_F.
Two nulls, per head, each keeping the head and the size of the frame:

- whole space: the same head's form on uniformly random (Haar) k-frames of the whole stream, which drops
  everything special about P's directions;
- P's subspace: the form on random k-frames inside the span of the centred P's top `subspace` right-singular
  vectors, which keeps "a direction that carries position" and drops only what is special about the helix's
  three among them (its size varied over `other_subspaces`).

p = (1 + #{frames with a ≥ observed}) / (1 + N); the heads that exceed a null are those Holm's procedure rejects over
the heads of the layer at the report's familywise rate (`toolkit.pvalues`), one family per null and frame size.

Intervention, per head, with its controls: the attention pattern of the position rows alone with a part of the
top-k form taken out of the scores, S − C X Cᵀ (C the coordinates of the standardised rows on B), for X the
antisymmetric part (M − Mᵀ)/2, the symmetric part (M + Mᵀ)/2, its isotropic part (tr M / k) I (which scores
α c_i·c_j, the self-similarity that peaks at the query), the rest of the symmetric part, and the whole form M. The
control, for heads with at least `control_mass` on the current key, is a random part of equal size: X a k × k matrix
of independent Gaussian entries rescaled to the Frobenius norm of the antisymmetric part (and, separately, of the
symmetric part), and a random antisymmetric matrix of the antisymmetric part's norm (a random rotation), taken out
on the same coordinates C; the real part's removal is placed among those random removals
by its percentile. Read in two of the statistics that classify heads (`toolkit.attention.head_statistics`, computed
here without the others): the mean attention on the current key and the mean distance attended.

The subspace null is also run with the first and the last row of P left out (P's top directions and its top
`subspace` recomputed without them), the rows that lie off the helix.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit.attention import antisymmetric_share, head_scores, position_inputs, qk_form, query_rows
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.toolkit.pvalues import FAMILYWISE_ALPHA, at_floor, draws_for, holm, p_value_text
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape

NEEDS = ("W_pos", "blocks.0.attn.W_Q", "blocks.0.attn.W_K", "blocks.0.attn.b_Q", "blocks.0.attn.b_K")
MIN_MASS = 0.01
"""Heads whose mean attention on the current key is below this get no cited ratio of that attention."""
FAMILY_NEEDS = {"gpt2": ("blocks.0.ln1.w", "blocks.0.ln1.b"), "bert": ("W_token_type", "embed.ln.w", "embed.ln.b")}
NULLS = ("whole", "subspace")
"""The two nulls: random frames of the whole stream, random frames inside P's own top subspace."""
PARTS = {"antisymmetric": lambda M: (M - M.T) / 2, "symmetric": lambda M: (M + M.T) / 2, "form": lambda M: M,
         "isotropic": lambda M: np.trace(M) / len(M) * np.eye(len(M)),
         "anisotropic": lambda M: (M + M.T) / 2 - np.trace(M) / len(M) * np.eye(len(M))}
"""The parts of a head's top-k form that the intervention takes out of its scores (isotropic + anisotropic =
symmetric)."""
CONTROLS = {"antisymmetric": ("antisymmetric", False), "symmetric": ("symmetric", False),
            "rotation": ("antisymmetric", True)}
"""Each control: the part whose removal it is compared with, and whether its random parts are antisymmetric (a
random rotation of the same norm) rather than random matrices of every kind."""


def random_frames(d: int, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n random orthonormal d × k frames (QR of Gaussian matrices, signs fixed by R's diagonal: Haar-distributed)."""
    Q, R = np.linalg.qr(rng.standard_normal((n, d, k)))
    return Q * np.sign(np.diagonal(R, axis1=-2, axis2=-1))[:, None, :]


def frame_null(W_Q: np.ndarray, W_K: np.ndarray, gain: np.ndarray, frames: np.ndarray) -> np.ndarray:
    """The head's antisymmetric share on each of the given orthonormal frames [n, D, k] (direct, for tests)."""
    left = np.swapaxes(frames, -1, -2) @ (gain[:, None] * np.asarray(W_Q, dtype=np.float64))
    right = np.swapaxes(frames, -1, -2) @ (gain[:, None] * np.asarray(W_K, dtype=np.float64))
    return antisymmetric_share(left @ np.swapaxes(right, -1, -2))


def bartlett_wishart(df: int, k: int, n: int, rng: np.random.Generator) -> np.ndarray:
    """n draws [n, k, k] of a Wishart(I_k, df) matrix bᵀb (b a df × k Gaussian matrix), by Bartlett's decomposition
    L Lᵀ: L lower triangular, L_ii² ~ χ²(df − i), L_ij ~ N(0, 1) below the diagonal. Its top-left j × j block is
    Wishart(I_j, df) too."""
    if df < k:
        raise ValueError(f"Bartlett's decomposition needs df >= k, got df = {df}, k = {k}")
    L = np.zeros((n, k, k))
    below = np.tril_indices(k, -1)
    L[:, below[0], below[1]] = rng.standard_normal((n, len(below[0])))
    L[:, np.arange(k), np.arange(k)] = np.sqrt(rng.chisquare(df - np.arange(k), size=(n, k)))
    return L @ np.swapaxes(L, 1, 2)


def subspace_null(read_q: np.ndarray, read_k: np.ndarray, basis: np.ndarray | None, sizes: tuple[int, ...],
                  n_frames: int, rng: np.random.Generator) -> dict[int, np.ndarray]:
    """{k: shares [n_frames, H]}: each head's antisymmetric share of Fᵀ Q̃ K̃ᵀ F on n_frames uniformly random
    orthonormal k-frames F of the span of `basis` (D × m orthonormal; None: the whole space), Q̃, K̃ = read_q, read_k
    [H, D, d] (the γ-folded maps).

    Exact and cheap. In the basis's coordinates a frame is G L⁻ᵀ, G an m × k Gaussian matrix and GᵀG = L Lᵀ (the
    share is the same on every orthonormal basis of a frame's span, which is Haar-distributed). G enters the form
    only through Gᵀ Q̃, Gᵀ K̃ and GᵀG. With C (m × r, r = 2d) an orthonormal basis holding the head's read space
    [Q̃, K̃], G = C a + C⊥ b, so Gᵀ Q̃ = aᵀ (Cᵀ Q̃) and GᵀG = aᵀa + bᵀb with bᵀb Wishart(m − r) independent of a: per
    frame r × k numbers are drawn, not m × k. One draw serves every head (each head's null is exact; the heads'
    frames differ) and, by its first k columns, every size k."""
    read_q, read_k = np.asarray(read_q, dtype=np.float64), np.asarray(read_k, dtype=np.float64)
    if basis is not None:
        read_q, read_k = basis.T @ read_q, basis.T @ read_k
    H, m, d = read_q.shape
    k_max = max(sizes)
    rest = 0.0
    if m - 2 * d >= k_max:  # reduce each head to its read space, the rest of the frame to a Wishart draw
        C = np.linalg.qr(np.concatenate([read_q, read_k], axis=2))[0]  # [H, m, 2d]
        read_q, read_k = np.swapaxes(C, 1, 2) @ read_q, np.swapaxes(C, 1, 2) @ read_k
        rest = bartlett_wishart(m - 2 * d, k_max, n_frames, rng)
    r = read_q.shape[1]
    a = rng.standard_normal((n_frames, r, k_max))
    gram = np.swapaxes(a, 1, 2) @ a + rest
    inverse = {k: np.linalg.inv(np.linalg.cholesky(gram[:, :k, :k])) for k in sizes}  # L⁻¹ per frame and size
    flat = np.swapaxes(a, 1, 2).reshape(-1, r)  # [n · k_max, r]: one GEMM per head and side
    shares = {k: np.empty((n_frames, H)) for k in sizes}
    for head in range(H):
        left = (flat @ read_q[head]).reshape(n_frames, k_max, d)
        right = (flat @ read_k[head]).reshape(n_frames, k_max, d)
        raw = left @ np.swapaxes(right, 1, 2)  # Gᵀ Q̃ K̃ᵀ G for the largest frame; its blocks serve the smaller
        for k in sizes:
            shares[k][:, head] = antisymmetric_share(inverse[k] @ raw[:, :k, :k] @ np.swapaxes(inverse[k], 1, 2))
    return shares


def equal_norm_parts(k: int, norm: float, n: int, rng: np.random.Generator, antisymmetric: bool = False
                     ) -> np.ndarray:
    """n random k × k matrices [n, k, k], independent Gaussian entries (or their antisymmetric parts) rescaled to
    Frobenius norm `norm` each: the control for taking a part of that norm out of a head's form."""
    X = rng.standard_normal((n, k, k))
    if antisymmetric:
        X = (X - np.swapaxes(X, 1, 2)) / 2
    return X * (norm / np.linalg.norm(X, axis=(1, 2)))[:, None, None]


def masked_scores(S: np.ndarray, causal: bool) -> np.ndarray:
    """The scores with the keys a causal mask hides set to −inf (a copy)."""
    S = np.array(S, dtype=np.float64)
    if causal:
        S[np.triu_indices(S.shape[0], k=1)] = -np.inf
    return S


def current_key_mass(S_masked: np.ndarray, queries: np.ndarray, distance: np.ndarray | None = None):
    """Mean over `queries` of the softmax weight of key i in row i of masked scores (`head_statistics`' mass_self),
    and, given the |i − j| of those rows, (mass_self, mean_distance) without the pattern's other statistics."""
    rows = S_masked[queries]
    top = rows.max(axis=1, keepdims=True)
    weights = np.exp(rows - top)
    weights /= weights.sum(axis=1, keepdims=True)
    mass = float(weights[np.arange(len(queries)), queries].mean())
    return mass if distance is None else (mass, float((weights * distance).sum(axis=1).mean()))


def empirical_p(null: np.ndarray, observed: np.ndarray) -> np.ndarray:
    """(1 + #{draws ≥ observed}) / (1 + N), per column of null [N, H] against observed [H]."""
    return (1 + np.count_nonzero(null >= observed, axis=0)) / (1 + null.shape[0])


def holm_thresholds(p_values) -> np.ndarray:
    """Each test's Holm threshold alpha / (m − rank), rank its place in the ascending order of the p-values."""
    order = np.argsort(p_values, kind="stable")
    thresholds = np.empty(len(p_values))
    thresholds[order] = FAMILYWISE_ALPHA / (len(p_values) - np.arange(len(p_values)))
    return thresholds


def undecided(p_values: np.ndarray, n_draws: int) -> np.ndarray:
    """Whether each p's Monte Carlo 95 % interval, p ± 1.96 √(p (1 − p) / N), holds its Holm threshold: the draws
    do not decide that test (more draws would, unless p sits on the threshold)."""
    p = np.asarray(p_values, dtype=np.float64)
    return np.abs(p - holm_thresholds(p)) <= 1.96 * np.sqrt(p * (1 - p) / n_draws)


def frame_test(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, sizes: tuple[int, ...], subspace: int,
               other_subspaces: tuple[int, ...], n_frames: int, n_controls: int, control_mass: float, seed: int,
               min_query: int, n_components: int) -> dict:
    """The observed shares, both nulls' shares and p-values for every frame size; each head's (attention on the
    current key, mean distance) with and without each part of its top-`n_components` form and without the
    antisymmetric part of the form of every other size; and, for heads with at least `control_mass` on the current
    key, that attention without random parts of the norm of the antisymmetric and of the symmetric part."""
    causal = shape.family == "gpt2"
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    z, gain, bias = position_inputs(tensors, shape)
    W_Q, W_K = np.asarray(tensors["blocks.0.attn.W_Q"], np.float64), np.asarray(tensors["blocks.0.attn.W_K"], np.float64)
    b_Q, b_K = tensors["blocks.0.attn.b_Q"], tensors["blocks.0.attn.b_K"]
    read_q, read_k = gain[None, :, None] * W_Q, gain[None, :, None] * W_K
    own = top_right_singular_vectors(P, subspace, center=True)
    top = top_right_singular_vectors(P, max(sizes))  # its first k columns are P's top k directions
    rng = np.random.default_rng(seed)
    observed = {k: np.array([antisymmetric_share(qk_form(W_Q[h], W_K[h], gain, top[:, :k]))
                             for h in range(shape.n_heads)]) for k in sizes}
    nulls = {"whole": subspace_null(read_q, read_k, None, sizes, n_frames, rng),
             "subspace": subspace_null(read_q, read_k, own, sizes, n_frames, rng)}
    p_values = {(name, k): empirical_p(nulls[name][k], observed[k]) for name in NULLS for k in sizes}
    for m in other_subspaces:  # the subspace null's one arbitrary choice, varied (frames of n_components directions)
        null = subspace_null(read_q, read_k, top_right_singular_vectors(P, m, center=True), (n_components,), n_frames,
                             rng)[n_components]
        p_values[f"subspace{m}", n_components] = empirical_p(null, observed[n_components])
    inner = P[1:-1]  # the subspace null without the rows off the helix: both P's top k and its top subspace redone
    inner_top = top_right_singular_vectors(inner, n_components)
    observed_inner = np.array([antisymmetric_share(qk_form(W_Q[h], W_K[h], gain, inner_top))
                               for h in range(shape.n_heads)])
    null = subspace_null(read_q, read_k, top_right_singular_vectors(inner, subspace, center=True), (n_components,),
                         n_frames, rng)[n_components]
    p_values["subspace_inner", n_components] = empirical_p(null, observed_inner)
    # the intervention and its controls on the top n_components directions; the other sizes' antisymmetric parts
    queries = query_rows(shape.n_ctx, causal, min_query)
    distance = np.abs(queries[:, None] - np.arange(shape.n_ctx)[None, :])
    X = z * gain + bias
    effects = []
    for head in range(shape.n_heads):
        S = masked_scores(head_scores(X, W_Q[head], b_Q[head], W_K[head], b_K[head]), causal)
        stats = {"with": current_key_mass(S, queries, distance)}
        for k in sizes:
            M, c = qk_form(W_Q[head], W_K[head], gain, top[:, :k]), z @ top[:, :k]
            for part, take in PARTS.items():
                if k == n_components or part == "antisymmetric":
                    stats[part, k] = current_key_mass(S - c @ take(M) @ c.T, queries, distance)
        if stats["with"][0] >= control_mass:
            M, c = qk_form(W_Q[head], W_K[head], gain, top[:, :n_components]), z @ top[:, :n_components]
            for control, (part, antisymmetric) in CONTROLS.items():
                randoms = equal_norm_parts(n_components, float(np.linalg.norm(PARTS[part](M))), n_controls, rng,
                                           antisymmetric)
                stats[f"random_{control}"] = np.array([current_key_mass(S - c @ R @ c.T, queries) for R in randoms])
        effects.append(stats)
    return {"observed": observed, "observed_inner": observed_inner, "nulls": nulls, "p": p_values,
            "effects": effects}


def _heads(flags) -> str:
    return spoken_list(h for h, flag in enumerate(flags) if flag)


def _p_text(p: float, n_draws: int) -> str:
    """p as `p_value_text` prints it, with two significant digits below 0.01 (9,999 draws resolve them)."""
    return p_value_text(p, n_draws) if at_floor(p, n_draws) or p >= 0.01 else f"p = {p:.2g}"


def qk_rotation_null(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_components: int,
                     other_sizes: tuple[int, ...], subspace: int, other_subspaces: tuple[int, ...], n_frames: int,
                     n_controls: int, control_mass: float, seed: int, min_query: int) -> Result:
    """Each layer-0 head's antisymmetric share on P's top directions against random frames of the whole space and of
    P's own top `subspace` directions, for frames of `n_components` and of `other_sizes` directions, and against
    frames of `n_components` directions in P's top `other_subspaces`; the attention pattern with each part of the top
    form, or a random part of the same norm, taken out."""
    H = shape.n_heads
    if n_frames < draws_for(H):
        raise ValueError(f"{n_frames} frames cannot meet Holm's smallest threshold over {H} heads "
                         f"(at least {draws_for(H)} needed)")
    k0, sizes = n_components, (n_components, *other_sizes)
    test = frame_test(tensors, shape, sizes=sizes, subspace=subspace, other_subspaces=other_subspaces,
                      n_frames=n_frames, n_controls=n_controls, control_mass=control_mass, seed=seed,
                      min_query=min_query, n_components=n_components)
    observed, nulls, p, effects = test["observed"], test["nulls"], test["p"], test["effects"]
    exceeds = {key: holm(list(values)) for key, values in p.items()}
    numbers = {
        "n_frames": Number(n_frames, "d", "random orthonormal frames per head, size and null"),
        "draws_needed": Number(draws_for(H), "d", "fewest draws whose floor 1/(1 + N) meets Holm's smallest threshold"),
        "holm_smallest": Number(FAMILYWISE_ALPHA / H, ".3g", "Holm's smallest threshold alpha / heads"),
        "subspace": Number(subspace, "d", "directions of the centred P's top subspace that the second null draws in"),
        "n_controls": Number(n_controls, "d", "random parts of equal norm taken out, per part and head"),
        "seed": Number(seed, "d", "seed of the random frames"),
        "alpha": Number(FAMILYWISE_ALPHA, ".2f", "familywise error rate of Holm's procedure over the heads"),
        "n_heads": Number(H, "d", "heads tested"),
        "other_sizes": Text(spoken_list(other_sizes), "other frame sizes tried"),
    }
    for name in NULLS:
        prefix = "" if name == "whole" else "subspace_"
        for k in sizes:
            tag = prefix if k == k0 else f"k{k}_{prefix}"
            flags = exceeds[name, k]
            numbers[f"{tag}n_exceed"] = Number(sum(flags), "d", f"heads exceeding the {name} null on {k} directions (Holm)")
            numbers[f"{tag}heads_exceed"] = Text(_heads(flags), f"those heads ({name} null, {k} directions)")
            numbers[f"{tag}heads_not_exceed"] = Text(_heads(not f for f in flags),
                                                     f"the other heads ({name} null, {k} directions)")
            numbers[f"{tag}heads_undecided"] = Text(_heads(undecided(p[name, k], n_frames)),
                                                    f"heads whose p lies within Monte Carlo error of their Holm "
                                                    f"threshold ({name} null, {k} directions)")
        thresholds = holm_thresholds(p[name, k0])
        for head in range(H):
            null = nulls[name][k0][:, head]
            numbers |= {
                f"{prefix}head{head}_null_median": Number(float(np.median(null)), ".2f",
                                                          f"head {head}: median share, {name} null"),
                f"{prefix}head{head}_null_q95": Number(float(np.quantile(null, 0.95)), ".2f",
                                                       f"head {head}: 95th percentile, {name} null"),
                f"{prefix}head{head}_p": Text(_p_text(p[name, k0][head], n_frames), f"head {head}: p, {name} null"),
                f"{prefix}head{head}_threshold": Number(float(thresholds[head]), ".3g",
                                                        f"head {head}: its Holm threshold, {name} null"),
            }
    for head in range(H):
        e = effects[head]
        mass, distance = e["with"]
        numbers |= {
            f"head{head}_antisymmetric": Number(observed[k0][head], ".2f", f"head {head}: share on P's frame"),
            f"head{head}_mass_self": Number(mass, ".2f", f"head {head}: mean attention on the current key"),
            f"head{head}_distance": Number(distance, ".1f", f"head {head}: mean distance attended"),
        }
        for part, tag in (("antisymmetric", "symmetric"), ("symmetric", "antisymmetric"), ("form", "no_form"),
                          ("isotropic", "no_isotropic"), ("anisotropic", "no_anisotropic")):
            part_mass, part_distance = e[part, k0]
            numbers[f"head{head}_mass_self_{tag}"] = Number(
                part_mass, ".2f" if part_mass >= MIN_MASS else ".1g",
                f"head {head}: mean attention on the current key, {part} part of the top form taken out")
            numbers[f"head{head}_distance_{tag}"] = Number(part_distance, ".1f",
                                                           f"head {head}: mean distance, {part} part taken out")
        for control, (part, antisymmetric) in CONTROLS.items():
            if f"random_{control}" in e:
                randoms, real = e[f"random_{control}"], e[part, k0][0]
                tag = f"head{head}_random_{control}"
                kind = "random antisymmetric part" if antisymmetric else "random part"
                numbers |= {
                    f"{tag}_mean": Number(float(randoms.mean()), ".2f", f"head {head}: current-key attention, a "
                                          f"{kind} of the {part} part's norm taken out, mean over the draws"),
                    f"{tag}_min": Number(float(randoms.min()), ".2g", f"head {head}: the lowest of those"),
                    f"{tag}_max": Number(float(randoms.max()), ".2f", f"head {head}: the highest of those"),
                    f"{tag}_as_low": Number(int(np.sum(randoms <= real)), "d",
                                            f"head {head}: how many of those random removals leave no more than "
                                            f"taking the {part} part out does (a count: a percentage of "
                                            f"{len(randoms)} draws would print a digit on a half)"),
                }
        for k in other_sizes:
            if mass >= MIN_MASS:  # a ratio of two near-zero masses fixes no digit
                numbers[f"k{k}_head{head}_mass_self_ratio"] = Number(
                    e["antisymmetric", k][0] / mass, ".2f",
                    f"head {head}, {k} directions: current-key attention without the antisymmetric part / with it")
    heads = Table(
        ("head", "antisymmetric share", "whole space, 95th pct.", "p, whole space", "exceeds, whole space",
         "P's subspace, 95th pct.", "p, P's subspace", "exceeds, P's subspace"),
        tuple((h, observed[k0][h], float(np.quantile(nulls["whole"][k0][:, h], 0.95)),
               _p_text(p["whole", k0][h], n_frames).removeprefix("p = ").removeprefix("p "),
               "yes" if exceeds["whole", k0][h] else "no", float(np.quantile(nulls["subspace"][k0][:, h], 0.95)),
               _p_text(p["subspace", k0][h], n_frames).removeprefix("p = ").removeprefix("p "),
               "yes" if exceeds["subspace", k0][h] else "no") for h in range(H)),
        formats={"antisymmetric share": ".2f", "whole space, 95th pct.": ".2f", "P's subspace, 95th pct.": ".2f"})
    sizes_table = Table(("directions", "exceed, whole space", "exceed, P's subspace"),
                        tuple((k, _heads(exceeds["whole", k]), _heads(exceeds["subspace", k])) for k in sorted(sizes)))
    subspaces_table = Table(("directions of P", "exceed, P's subspace"),
                            tuple((m, _heads(exceeds[f"subspace{m}" if m != subspace else "subspace", k0]))
                                  for m in sorted((subspace, *other_subspaces))))
    for m in other_subspaces:
        flags = exceeds[f"subspace{m}", k0]
        numbers[f"subspace{m}_n_exceed"] = Number(sum(flags), "d", f"heads exceeding the null in P's top {m} (Holm)")
        numbers[f"subspace{m}_heads_exceed"] = Text(_heads(flags), f"those heads (P's top {m}, {k0} directions)")
    inner_flags = exceeds["subspace_inner", k0]
    numbers |= {
        "inner_subspace_n_exceed": Number(sum(inner_flags), "d", f"heads exceeding the null in P's top {subspace} "
                                          "with P's first and last row left out (Holm)"),
        "inner_subspace_heads_exceed": Text(_heads(inner_flags), "those heads"),
    }
    for head in range(H):
        numbers[f"inner_subspace_head{head}_p"] = Text(_p_text(p["subspace_inner", k0][head], n_frames),
                                                      f"head {head}: p, P's subspace null without its first and last row")
    numbers["other_subspaces"] = Text(spoken_list(other_subspaces), "other sizes of P's subspace tried")
    verdicts = {m: any(exceeds[f"subspace{m}" if m != subspace else "subspace", k0])
                for m in sorted((subspace, *other_subspaces))}
    numbers["subspaces_no_head"] = Text(spoken_list(m for m, some in verdicts.items() if not some),
                                        "sizes of P's subspace in which no head exceeds the null")
    numbers["subspaces_some_head"] = Text(spoken_list(m for m, some in verdicts.items() if some),
                                          "sizes of P's subspace in which some head exceeds the null")
    part_columns = tuple(f"{part} part out" if part != "form" else "whole form out" for part in PARTS)
    control_columns = tuple(f"random{', antisymmetric' if anti else ''}, {part} norm, out"
                            for part, anti in CONTROLS.values())
    intervention = Table(
        ("head", "current key", *part_columns, *control_columns, "distance", "distance, antisymmetric out"),
        tuple((h, effects[h]["with"][0], *(effects[h][part, k0][0] for part in PARTS),
               *(float(effects[h][f"random_{control}"].mean()) if f"random_{control}" in effects[h] else "—"
                 for control in CONTROLS),
               effects[h]["with"][1], effects[h]["antisymmetric", k0][1]) for h in range(H)),
        formats={"current key": ".3f", **{c: ".3f" for c in part_columns + control_columns}, "distance": ".1f",
                 "distance, antisymmetric out": ".1f"})
    return Result(numbers, {"heads": heads, "sizes": sizes_table, "subspaces": subspaces_table,
                            "intervention": intervention},
                  {"shares": observed[k0], "whole": nulls["whole"][k0], "subspace": nulls["subspace"][k0]})


register(
    "qk_rotation_null", "Layer-0 QK rotations against random frames, and without them", qk_rotation_null,
    needs=NEEDS, family_needs=FAMILY_NEEDS,
    params={"n_components": 3, "other_sizes": (2, 4, 6), "subspace": 30, "other_subspaces": (5, 10, 20, 50, 100),
            "n_frames": 9999, "n_controls": 200,
            "control_mass": 0.2, "seed": 0, "min_query": 32},
)
