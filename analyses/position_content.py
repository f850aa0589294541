"""Position against content: where the position embeddings P sit relative to the token embeddings E, and
which of the two subspaces the attention weights and the first MLP read.

Subspaces. P's top-k subspace B_P,k: the top-k right singular vectors of P as published (uncentred),
as in the attention-alignment analysis. E's top-k subspace B_E,k: the top-k right singular vectors of the
row-centred token embeddings E_c = E − m 1ᵀ (the named quantity `E_centred.V`), computed from `W_E` when the
checkpoint has it and read from a saved rank-k PCA otherwise (GPT-2 offline: only E's top directions, exact
to about the first hundred, and no token norms).

Measures (one definition each, in `analyses.toolkit.subspaces`):

* energy fraction a(W; B) = ‖Bᵀ W‖²_F / ‖W‖²_F (a matrix that reads R^D through its rows) or
  ‖W B‖²_F / ‖W‖²_F (one whose rows live in R^D, like P and E, or that writes into it, like W_O); a
  uniformly random k-subspace gives exactly k/D in expectation, with a closed-form standard deviation;
* enrichment a / (k/D) and z = (a − k/D) / sd against random subspaces of the same dimension;
* principal angles between two subspaces; Simon's capture c_j = v_jᵀ Π v_j of each of E's directions v_j
  by P's top subspace;
* for the sum of a token and a position, ρ = ‖t + p‖ / √(‖t‖² + ‖p‖²) (1 when t ⊥ p), and the interference
  ratio κ = D ‖E Pᵀ‖²_F / (‖E‖²_F ‖P‖²_F): the mean squared dot product over all token–position pairs
  relative to what a uniformly random rotation of P gives (κ = 1 in expectation), 0 for orthogonal row spaces.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Accuracy, Number, Result, Table, Text, spoken_list
from analyses.engine.sources import TOKEN_SUBSPACE, ModelShape
from analyses.toolkit import plotting
from analyses.toolkit.attention import VARIANTS, column_label, input_gain, variant_matrix
from analyses.toolkit.linalg import support_union, top_right_singular_vectors
from analyses.toolkit.subspaces import (captured, energy_fraction, prefix_energy_fractions, prefix_overlaps,
                                        principal_angles, random_basis, random_energy_moments,
                                        sampled_energy_fractions, trace_ratio)

BAND = (2.5, 97.5)
"""Percentiles of the random draws that bound the plotted bands and the reported lower tail."""


def usable_ks(ks, available: int, d_model: int) -> tuple[int, ...]:
    """The ks that the available token directions allow and that are proper subspaces (k < D)."""
    out = tuple(int(k) for k in ks if 0 < k <= available and k < d_model)
    if not out:
        raise ValueError(f"none of k = {tuple(ks)} fits {available} token directions in D = {d_model}")
    return out


def origin_of(tensors: Mapping, name: str) -> str:
    """Where a named quantity comes from, in words (the source's own account when it has one)."""
    origin = getattr(tensors, "origin", None)
    return origin(name) if origin else "given directly to the analysis"


def enrichment_and_z(W: np.ndarray, bases: list[np.ndarray], ks, side: str) -> np.ndarray:
    """[basis, k, (a, a/(k/D), z)]: W's energy share in the subspace of the first k columns of each basis, and
    against uniformly random subspaces of dimension k (whose moments depend on W and k only: computed once)."""
    mean, sd = random_energy_moments(W, list(ks), side)
    a = np.array([prefix_energy_fractions(W, basis, ks, side) for basis in bases])
    z = np.where(sd > 0, (a - mean) / np.where(sd > 0, sd, 1.0), 0.0)
    return np.stack([a, a / mean, z], axis=-1)


def random_capture_sd(k: int, D: int) -> float:
    """Standard deviation of one unit vector's capture by a uniformly random k-subspace (Beta(k/2, (D−k)/2))."""
    return random_energy_moments(np.eye(D, 1), k, "input")[1]


# ---------------------------------------------------------------------------
# 1. Overlap of the two subspaces


def position_token_subspaces(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, ks: tuple[int, ...],
                             angle_ks: tuple[int, ...], capture_k: int, n_random: int, seed: int,
                             agreement_tol: float, sparse_vectors: int, sparse_mass: float) -> Result:
    """P's energy in E's top-k subspace against random subspaces; principal angles; Simon's capture plot; E's
    energy in the dimensions that P's sparse top directions use."""
    from scipy.stats import beta as beta_law

    D = shape.d_model
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    S_E, V_E = np.asarray(tensors["E_centred.S"]), np.asarray(tensors["E_centred.V"])
    available = V_E.shape[1]
    ks = usable_ks(ks, available, D)
    angle_ks = usable_ks(angle_ks, available, D)
    k_curve = min(available, D - 1)
    rng = np.random.default_rng(seed)

    # energy of P in E's top-k subspace, every k, against the closed form and sampled random subspaces
    per_direction = np.sum((P @ V_E[:, :k_curve]) ** 2, axis=0) / np.sum(P**2)
    curve = np.cumsum(per_direction)
    ks_all = np.arange(1, k_curve + 1)
    moments = np.stack(random_energy_moments(P, ks_all, "output"), axis=1)
    sampled = sampled_energy_fractions(P, ks_all, n_random, rng, side="output")
    ones = np.ones(D) / np.sqrt(D)
    numbers = {
        "token_subspace_origin": Text(origin_of(tensors, "E_centred.V"), "where E's top directions come from"),
        "k_available": Number(available, "d", "token directions available (columns of E_centred.V)"),
        "k_max": Number(max(ks), "d", "largest k reported"),
        "n_random": Number(n_random, "d", "uniformly random subspaces sampled per k"),
        "seed": Number(seed, "d", "seed of the random subspaces"),
        "band_coverage": Number(BAND[1] - BAND[0], ".0f", "percent of random draws inside the plotted bands"),
        "band_lo": Number(BAND[0], "g", "lower percentile of the random draws reported"),
        "ones_energy": Number(float(np.sum((P @ ones) ** 2) / np.sum(P**2)), ".2%",
                              "share of ‖P‖² along the all-ones direction, which E_c's directions exclude"),
    }
    rows = []
    for k in ks:
        a, (mean, sd) = curve[k - 1], moments[k - 1]
        below = float(np.mean(sampled[:, k - 1] <= a))
        numbers |= {
            f"energy_k{k}": Number(a, ".2%", f"share of ‖P‖² in E's top-{k} subspace"),
            f"chance_k{k}": Number(mean, ".1%", f"k/D for k = {k}"),
            f"ratio_k{k}": Number(a / mean, ".2f", f"energy over chance at k = {k}"),
            f"sd_k{k}": Number(sd, ".2%", f"sd of the energy over random {k}-subspaces (closed form)"),
            f"z_k{k}": Number((a - mean) / sd, ".1f", f"z of the energy against random {k}-subspaces"),
            f"below_k{k}": Number(below, ".1%", f"share of the sampled random {k}-subspaces holding at most P's energy"),
            f"sampled_sd_k{k}": Number(float(sampled[:, k - 1].std()), ".2%",
                                       f"sd of the energy over the sampled random {k}-subspaces"),
        }
        rows.append((k, a, mean, a / mean, sd, float(sampled[:, k - 1].std()), (a - mean) / sd, below))
    columns = ("k", "energy of P", "k/D", "ratio", "sd (exact)", "sd (sampled)", "z", "random ≤ P")
    formats = {"energy of P": ".2%", "k/D": ".1%", "ratio": ".3f", "sd (exact)": ".2%", "sd (sampled)": ".2%",
               "z": ".1f", "random ≤ P": ".1%"}
    k_max = max(ks)
    for key in ("energy", "chance", "ratio", "z"):
        numbers[f"{key}_kmax"] = numbers[f"{key}_k{k_max}"]

    # a second, independent run of the same PCA, where the subspace comes from such files
    replicate = getattr(tensors, "replicate_token_subspace", lambda: None)()
    arrays = {"curve": curve, "moments": moments, "sampled_lo": np.percentile(sampled, BAND[0], axis=0),
              "sampled_hi": np.percentile(sampled, BAND[1], axis=0), "D": np.array(D)}
    if replicate is not None:
        S_b, V_b = replicate
        kb = min(k_curve, V_b.shape[1])
        agreement = prefix_overlaps(V_E[:, :kb], V_b[:, :kb])
        exact = np.nonzero(1 - agreement > agreement_tol)[0]
        exact_k = int(exact[0]) if exact.size else kb  # the last k before the first disagreement
        curve_b = np.cumsum(np.sum((P @ V_b[:, :kb]) ** 2, axis=0)) / np.sum(P**2)
        arrays |= {"agreement": agreement, "curve_b": curve_b}
        numbers |= {
            "replicate_tol": Number(agreement_tol, "g", "tolerated 1 − agreement of the two runs' subspaces"),
            "replicate_exact_k": Number(exact_k, "d", "largest k up to which the two PCA runs' top-k subspaces agree "
                                                      "within the tolerance"),
            "replicate_sv_diff_k100": Number(float(np.max(np.abs(S_b[:100] / S_E[:100] - 1))), "sci1",
                                             "largest relative difference of the two runs' top-100 singular values"),
            "replicate_energy_kmax": Number(curve_b[k_max - 1], ".2%", "P's energy in the second run's top-k_max subspace"),
        }
        for k in ks:
            numbers[f"replicate_agreement_k{k}"] = Number(agreement[k - 1], ".4f",
                                                          f"mean cos² of the principal angles between the runs' top-{k}")
        columns += ("energy (run b)", "runs agree")
        formats |= {"energy (run b)": ".2%", "runs agree": ".5f"}
        rows = [(*row, curve_b[row[0] - 1], agreement[row[0] - 1]) for row in rows]
    tables = {"energy": Table(columns, tuple(rows), formats=formats)}

    # principal angles between P's and E's top-k subspaces, against random k-subspaces
    B_P = top_right_singular_vectors(P, max(angle_ks))
    angle_draws = {k: np.empty((n_random, k)) for k in angle_ks}
    for i in range(n_random):
        R = random_basis(D, max(angle_ks), rng)
        for k in angle_ks:
            angle_draws[k][i] = np.degrees(principal_angles(B_P[:, :k], R[:, :k]))
    angle_rows = []
    for k in angle_ks:
        theta = np.degrees(principal_angles(B_P[:, :k], V_E[:, :k]))
        arrays |= {f"angles_k{k}": theta, f"angles_lo_k{k}": np.percentile(angle_draws[k], BAND[0], axis=0),
                   f"angles_hi_k{k}": np.percentile(angle_draws[k], BAND[1], axis=0)}
        cos2, (mean, sd) = energy_fraction(B_P[:, :k], V_E[:, :k]), random_energy_moments(B_P[:, :k], k)
        null_min = angle_draws[k][:, 0]
        numbers |= {
            f"angle_min_k{k}": Number(theta[0], ".1f", f"smallest principal angle (degrees) between P's and E's top-{k}"),
            f"angle_median_k{k}": Number(float(np.median(theta)), ".1f", f"median principal angle (degrees), k = {k}"),
            f"angle_null_min_median_k{k}": Number(float(np.median(null_min)), ".1f",
                                                  f"median smallest angle between P's top-{k} and a random {k}-subspace"),
            f"angle_null_min_lo_k{k}": Number(float(np.percentile(null_min, BAND[0])), ".1f",
                                              f"{BAND[0]:g}th percentile of that smallest angle over random {k}-subspaces"),
            f"cos2_k{k}": Number(cos2, ".3f", f"mean cos² of the principal angles, k = {k}"),
            f"cos2_ratio_k{k}": Number(cos2 / mean, ".2f", f"mean cos² over its random expectation k/D, k = {k}"),
            f"cos2_z_k{k}": Number((cos2 - mean) / sd, ".1f", f"z of the mean cos² against random {k}-subspaces"),
        }
        angle_rows.append((k, theta[0], float(np.median(theta)), float(np.median(null_min)),
                           float(np.percentile(null_min, BAND[0])), cos2, mean, (cos2 - mean) / sd))
    tables["angles"] = Table(("k", "smallest angle", "median angle", "random: median smallest",
                              f"random: {BAND[0]:g} % smallest", "mean cos²", "k/D", "z"), tuple(angle_rows),
                             formats={"smallest angle": ".1f", "median angle": ".1f", "random: median smallest": ".1f",
                                      f"random: {BAND[0]:g} % smallest": ".1f", "mean cos²": ".4f", "k/D": ".4f", "z": ".1f"})

    # Simon's capture: how much of each of E's directions P's top subspace holds, and P's energy by blocks
    B_cap = top_right_singular_vectors(P, capture_k)
    capture = captured(V_E[:, :k_curve], B_cap)
    chance, capture_sd = capture_k / D, random_capture_sd(capture_k, D)
    edges = [0, *[k for k in ks if k <= k_curve]]
    if edges[-1] < k_curve:
        edges.append(k_curve)
    block_rows = []
    for lo, hi in zip(edges[:-1], edges[1:]):
        energy = curve[hi - 1] - (curve[lo - 1] if lo else 0.0)
        block_rows.append((f"{lo + 1}–{hi}", hi - lo, energy, energy / ((hi - lo) / D),
                           float(capture[lo:hi].mean()), float(capture[lo:hi].mean()) / chance))
    rest = D - k_curve
    if rest:  # the complement of the available directions: known as a whole, not direction by direction
        energy = 1 - curve[-1]
        rest_capture = (capture_k - capture.sum()) / rest
        block_rows.append((f"{k_curve + 1}–{D} (complement)" if rest > 1 else f"{D} (the all-ones direction)", rest, energy, energy / (rest / D), rest_capture,
                           rest_capture / chance))
        numbers |= {"complement_dims": Number(rest, "d", "dimensions outside the available token directions"),
                    "complement_energy": Number(energy, ".1%", "share of ‖P‖² outside E's available directions"),
                    "complement_share": Number(rest / D, ".1%", "their share of the D dimensions"),
                    "complement_capture_ratio": Number(rest_capture / chance, ".2f",
                                                       "mean capture of the complement's directions over chance")}
    tables["blocks"] = Table(("E's directions", "dimensions", "energy of P", "energy / chance",
                              f"capture by P's top {capture_k}", "capture / chance"), tuple(block_rows),
                             formats={"energy of P": ".2%", "energy / chance": ".3f",
                                      f"capture by P's top {capture_k}": ".4f", "capture / chance": ".3f"})
    first = min(10, k_curve)
    first_sd = random_energy_moments(V_E[:, :first], capture_k)[1]  # the mean capture of `first` orthonormal directions
    numbers |= {
        "capture_k": Number(capture_k, "d", "dimension of P's subspace in the capture plot"),
        "capture_chance": Number(chance, ".2%", "capture of one direction by a random subspace of that dimension"),
        "capture_first10_ratio": Number(float(capture[:first].mean()) / chance, ".2f",
                                        "mean capture of E's first ten directions over chance"),
        "capture_first10_z": Number((float(capture[:first].mean()) - chance) / first_sd, ".1f",
                                    "z of that mean against random subspaces (exact sd)"),
        "capture_max": Number(float(capture.max()), ".3f", "largest capture of one available direction"),
        "capture_argmax": Number(int(capture.argmax()) + 1, "d", "which direction of E that is"),
    }
    # E's first direction alone: its capture against the Beta(k/2, (D − k)/2) law of a random subspace's
    # capture of one unit vector, and corrected for having looked at every available direction
    p_first = float(beta_law.sf(capture[0], capture_k / 2, (D - capture_k) / 2))
    numbers |= {
        "capture_1": Number(float(capture[0]), ".3f", "capture c₁ of E's first direction by P's top subspace"),
        "capture_1_ratio": Number(float(capture[0]) / chance, ".1f", "c₁ over chance k/D"),
        "capture_1_p": Number(p_first, "sci0", "one-sided p of c₁ under the Beta(k/2, (D − k)/2) law of a random "
                                              "subspace"),
        "capture_1_p_corrected": Number(min(1.0, p_first * k_curve), "sci0",
                                        "that p times the number of available directions (Bonferroni)"),
        "capture_n_tested": Number(k_curve, "d", "directions of E whose capture is plotted (the Bonferroni factor)"),
    }
    if k_curve > first:
        numbers["capture_rest_ratio"] = Number(float(capture[first:].mean()) / chance, ".2f",
                                               f"mean capture of E's directions {first + 1}–{k_curve} over chance")
    # how spread E_c's energy is: the missing directions only add to the total, so shares of the available
    # energy bound the full shares from above, and the count of directions for 90 % from below
    e_cumulative = np.cumsum(S_E**2) / np.sum(S_E**2)
    numbers |= {
        "e_top30_share_max": Number(float(e_cumulative[min(30, available) - 1]), ".1%",
                                    "upper bound on the share of ‖E_c‖²_F in its top 30 directions"),
        "e_k90_min": Number(int(np.searchsorted(e_cumulative, 0.9) + 1), "d",
                            "lower bound on the directions E_c needs for 90 % of its energy"),
    }
    # Simon's "disjoint index sets": E_c's energy in the embedding dimensions that P's top sparse directions use.
    # Known exactly within E's available directions; each missing direction of E_c (all but the all-ones one,
    # which E_c lacks) has σ² ≤ the last available σ², so at most `missing_max` energy is unaccounted for, and
    # it could fall anywhere: the share lies between t/(T + m) and (t + m)/(T + m).
    union = support_union(top_right_singular_vectors(P, sparse_vectors), sparse_mass)
    column_energy = (V_E**2) @ S_E**2  # diag(V S² Vᵀ): E_c's energy per embedding dimension
    T_E, t_U = float(np.sum(S_E**2)), float(column_energy[union].sum())
    missing_max = max(D - 1 - available, 0) * float(S_E[-1] ** 2)
    mask = np.zeros(D)
    mask[union] = 1
    share_ratio, share_sd = trace_ratio(V_E * S_E**2 @ V_E.T, np.diag(mask))
    numbers |= {
        "sparse_union": Number(len(union), "d", f"dimensions in the union of the {sparse_mass:.0%} supports of P's "
                                               f"top {sparse_vectors} right singular vectors"),
        "sparse_union_share_of_d": Number(len(union) / D, ".1%", "their share of the D dimensions"),
        "sparse_p_energy": Number(float(np.sum(P[:, union] ** 2) / np.sum(P**2)), ".1%",
                                  "share of ‖P‖²_F in those dimensions"),
        "sparse_e_energy": Number(t_U / T_E, ".1%", "share of E_c's available energy in those dimensions"),
        "sparse_e_energy_lo": Number(t_U / (T_E + missing_max), ".1%",
                                     "lower bound on E_c's full share there (all missing energy elsewhere)"),
        "sparse_e_energy_hi": Number((t_U + missing_max) / (T_E + missing_max), ".1%",
                                     "upper bound on that share (all missing energy there)"),
        "sparse_e_missing_max": Number(missing_max / (T_E + missing_max), ".1%",
                                       "largest share of E_c's energy its missing directions can hold"),
        "sparse_e_ratio": Number(share_ratio, ".2f", "E_c's available share there over the dimensions' share"),
    }
    if share_sd > 0:  # zero when the columns are all of R^D
        numbers["sparse_e_z"] = Number((share_ratio - 1) / share_sd, ".1f",
                                       "z of that ratio against uniformly random rotations of E_c's available energy")
    arrays |= {"capture": capture, "capture_sd": np.array(capture_sd), "capture_k": np.array(capture_k),
               "S_E": S_E, "S_P": np.linalg.svd(P, compute_uv=False), "rows_E": np.array(shape.d_vocab),
               "rows_P": np.array(P.shape[0])}
    # E_c's smallest singular values come from Gram eigenvalues (`centred_token_svd`), resolved to about
    # √ε·σ_max; the last one is zero in exact arithmetic (rows are centred), so its value is rounding noise
    resolution = Accuracy(abs=4 * np.sqrt(np.finfo(np.float64).eps) * float(S_E.max()),
                          basis="singular values from Gram eigenvalues: resolved to about √ε·σ_max")
    return Result(numbers, tables, arrays, {"S_E": resolution})


def plot_energy(result: Result, shape: ModelShape):
    """P's energy in E's top-k subspace against k, with random subspaces; with a replicate, the runs' agreement."""
    a = result.arrays
    curve, moments, D = a["curve"], a["moments"], int(a["D"])
    k = np.arange(1, curve.size + 1)
    panels = 2 if "agreement" in a else 1
    fig, axes = plotting.subplots(1, panels, figsize=(plotting.MAX_WIDTH if panels == 2 else 4.6, 4.0), squeeze=False)
    ax = axes[0, 0]
    ax.fill_between(k, a["sampled_lo"], a["sampled_hi"], color="0.85", lw=0,
                    label=f"random subspaces, central {result.numbers['band_coverage'].text} % "
                          f"of {result.numbers['n_random'].text}")
    ax.plot(k, moments[:, 0], color="0.3", lw=1, ls="--", label="random: k/D")
    ax.plot(k, curve, color="C3", lw=1.6, label="P in E's top-k subspace")
    if "curve_b" in a:
        ax.plot(np.arange(1, a["curve_b"].size + 1), a["curve_b"], color="C0", lw=1.2, ls=(0, (2, 2)),
                label="same, second PCA run (on top)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("k (E's top-k directions)")
    ax.set_ylabel(r"share of $\|P\|_F^2$ (log scale)")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18))
    ax.set_title("P in E's top-k subspaces")
    if panels == 2:
        ax = axes[0, 1]
        ax.plot(np.arange(1, a["agreement"].size + 1), np.clip(1 - a["agreement"], 1e-12, None), color="C0")
        ax.axhline(result.numbers["replicate_tol"].value, color="0.4", lw=0.8, ls="--", label="tolerance")
        ax.axvline(result.numbers["replicate_exact_k"].value, color="C3", lw=0.8, ls=":",
                   label=f"k = {result.numbers['replicate_exact_k'].text}")
        ax.set_yscale("log")
        ax.set_xlabel("k")
        ax.set_ylabel("1 − mean cos² between\nthe runs' top-k subspaces")
        ax.set_title("two independent PCA runs of E")
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.18))
    fig.suptitle(f"{shape.name}: position against token subspaces (D = {D})")
    return fig


def plot_spectra(result: Result, shape: ModelShape):
    """Both singular spectra, per row: σ_i/√rows is the root-mean-square coordinate of a row along direction i."""
    a = result.arrays
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 3.8))
    for key, rows, label, colour in (("S_P", "rows_P", "position embeddings P (uncentred)", "C3"),
                                     ("S_E", "rows_E", "token embeddings E_c (row-centred)", "C0")):
        s = a[key] / np.sqrt(float(a[rows]))
        s = s[s > 1e-6 * s[0]]  # E_c's null direction (the all-ones vector, removed by the centring) is left out
        ax.plot(np.arange(1, s.size + 1), s, color=colour, lw=1.4, label=f"{label}, {s.size} values")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("index i (log scale)")
    ax.set_ylabel(r"$\sigma_i / \sqrt{\mathrm{rows}}$ (RMS coordinate of a row)")
    ax.set_title(f"{shape.name}: singular spectra of P and E")
    ax.legend(loc="lower left")
    return fig


def plot_capture(result: Result, shape: ModelShape):
    """Simon's plot: the capture of each of E's directions by P's top subspace, with the random-subspace band."""
    a = result.arrays
    capture, D, k = a["capture"], int(a["D"]), int(a["capture_k"])
    j = np.arange(1, capture.size + 1)
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 4.0))
    sd = float(a["capture_sd"])
    ax.axhspan(max(k / D - 2 * sd, 0), k / D + 2 * sd, color="0.88", lw=0, label="random subspace: mean ± 2 sd")
    ax.axhline(k / D, color="0.3", lw=0.8, ls="--")
    ax.plot(j, capture, ".", ms=2.5, color="C0", label="E's direction j")
    window = 10
    if capture.size >= window:
        smooth = np.convolve(capture, np.ones(window) / window, mode="valid")
        ax.plot(j[window // 2:window // 2 + smooth.size], smooth, color="C0", lw=1.2, label=f"moving mean of {window}")
    if capture.size < D:
        rest = (k - capture.sum()) / (D - capture.size)
        ax.hlines(rest, capture.size + 1, D, color="C3", lw=2, label="mean over the complement")
    ax.set_xlim(0, D + 1)
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.set_ylim(0, 1)
    ax.set_xlabel("direction j of E (by singular value)")
    ax.set_ylabel(rf"$v_j^\top \Pi\, v_j$, $\Pi$ onto P's top {k} (symlog)")
    ax.set_title(f"{shape.name}: how much of each token direction P's top-{k} subspace holds")
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.15), ncol=2)
    return fig


def plot_angles(result: Result, shape: ModelShape):
    """Principal angles between P's and E's top-k subspaces against the smallest angle to random subspaces."""
    a = result.arrays
    ks = [int(key[len("angles_k"):]) for key in a if key.startswith("angles_k")]
    fig, axes = plotting.subplots(1, len(ks), figsize=(plotting.MAX_WIDTH, 3.2), sharey=True, squeeze=False)
    for ax, k in zip(axes[0], ks):
        theta, index = a[f"angles_k{k}"], np.arange(1, k + 1)
        ax.fill_between(index, a[f"angles_lo_k{k}"], a[f"angles_hi_k{k}"], color="0.85", lw=0,
                        label=f"P against random k-subspaces, central {result.numbers['band_coverage'].text} %")
        ax.plot(index, theta, color="C3", lw=1.4, label="P against E")
        ax.set_title(f"k = {k}")
        ax.set_xlabel("angle index")
        ax.set_ylim(0, 90)
    axes[0, 0].set_ylabel("principal angle (degrees)")
    axes[0, 0].set_yticks(range(0, 91, 15))
    fig.legend(*axes[0, 0].get_legend_handles_labels(), loc="outside lower center", ncol=2)
    fig.suptitle(f"{shape.name}: principal angles between P's and E's top-k subspaces")
    return fig


register(
    "position_token_subspaces", "Overlap of the position and token subspaces", position_token_subspaces,
    needs=("W_pos", *TOKEN_SUBSPACE),
    params={"ks": (10, 30, 100, 300, 500), "angle_ks": (10, 30, 100), "capture_k": 30, "n_random": 200, "seed": 0,
            "agreement_tol": 1e-4, "sparse_vectors": 10, "sparse_mass": 0.9},  # the last two: sparse_directions' own
    figures={"energy": plot_energy, "spectra": plot_spectra, "capture": plot_capture, "angles": plot_angles},
)


# ---------------------------------------------------------------------------
# 2. Norms, and whether adding behaves like concatenating


LARGEST = 0.01
"""The share of sampled pairs with the largest |ρ − 1| whose token norms are reported."""


def sum_ratio(T: np.ndarray, Q: np.ndarray) -> np.ndarray:
    """ρ = ‖t + p‖ / √(‖t‖² + ‖p‖²) for paired rows t of T and p of Q: 1 exactly when t ⊥ p."""
    T, Q = np.asarray(T, dtype=np.float64), np.asarray(Q, dtype=np.float64)
    return np.linalg.norm(T + Q, axis=1) / np.sqrt(np.sum(T**2, axis=1) + np.sum(Q**2, axis=1))


def interference_ratio(E: np.ndarray, P: np.ndarray) -> tuple[float, float]:
    """κ = D ‖E Pᵀ‖²_F / (‖E‖²_F ‖P‖²_F) and its standard deviation over uniformly random rotations of P.

    ‖E Pᵀ‖²_F = tr(EᵀE PᵀP) sums the squared dot products of all token–position pairs; a random rotation of
    P gives 1 on average (`trace_ratio`, with the exact sd).
    """
    E, P = np.asarray(E, dtype=np.float64), np.asarray(P, dtype=np.float64)
    return trace_ratio(E.T @ E, P.T @ P)


def token_position_sum(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_pairs: int, seed: int,
                       ks: tuple[int, ...]) -> Result:
    """Token against position norms; ‖t + p‖ against √(‖t‖² + ‖p‖²); the same with p pointing at random; κ."""
    E = np.asarray(tensors["W_E"], dtype=np.float64)
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    D = shape.d_model
    rng = np.random.default_rng(seed)
    token_norms, position_norms = np.linalg.norm(E, axis=1), np.linalg.norm(P, axis=1)
    t, p = E[rng.integers(0, len(E), n_pairs)], P[rng.integers(0, len(P), n_pairs)]
    rho = sum_ratio(t, p)
    directions = rng.standard_normal(p.shape)
    p_random = directions / np.linalg.norm(directions, axis=1, keepdims=True) * np.linalg.norm(p, axis=1, keepdims=True)
    rho_random = sum_ratio(t, p_random)
    position_share = np.sum(p**2, axis=1) / (np.sum(t**2, axis=1) + np.sum(p**2, axis=1))
    kappa, kappa_sd = interference_ratio(E, P)
    mean_token, mean_position = E.mean(axis=0), P.mean(axis=0)
    kappa_centred, kappa_centred_sd = interference_ratio(E - mean_token, P)
    largest = np.abs(rho - 1) >= np.percentile(np.abs(rho - 1), 100 * (1 - LARGEST))
    numbers = {
        "n_pairs": Number(n_pairs, "d", "sampled token–position pairs"),
        "seed": Number(seed, "d", "seed of the pairs and of the random directions"),
        "n_tokens": Number(len(E), "d", "token embeddings"),
        "token_norm_median": Number(float(np.median(token_norms)), ".3f", "median ‖t‖ over all tokens"),
        "token_norm_p5": Number(float(np.percentile(token_norms, 5)), ".3f", "5th percentile of ‖t‖"),
        "token_norm_p95": Number(float(np.percentile(token_norms, 95)), ".3f", "95th percentile of ‖t‖"),
        "position_norm_median": Number(float(np.median(position_norms)), ".3f", "median ‖p‖ over all positions"),
        "position_norm_p5": Number(float(np.percentile(position_norms, 5)), ".3f", "5th percentile of ‖p‖"),
        "position_norm_p95": Number(float(np.percentile(position_norms, 95)), ".3f", "95th percentile of ‖p‖"),
        "norm_ratio": Number(float(np.median(token_norms) / np.median(position_norms)), ".2f",
                             "median ‖t‖ over median ‖p‖"),
        "position_share_median": Number(float(np.median(position_share)), ".1%",
                                        "median share ‖p‖²/(‖t‖² + ‖p‖²) of the sum's squared norm from position"),
        "rho_dev_median": Number(float(np.median(np.abs(rho - 1))), ".2%", "median |ρ − 1| over the sampled pairs"),
        "rho_dev_p99": Number(float(np.percentile(np.abs(rho - 1), 99)), ".2%", "99th percentile of |ρ − 1|"),
        "rho_dev_max": Number(float(np.max(np.abs(rho - 1))), ".2%", "largest |ρ − 1|"),
        "rho_mean": Number(float(rho.mean() - 1), ".2%", "mean of ρ − 1 (positive: t and p point the same way)"),
        "random_rho_dev_median": Number(float(np.median(np.abs(rho_random - 1))), ".2%",
                                        "median |ρ − 1| with p turned to a random direction (same norms)"),
        "random_rho_dev_p99": Number(float(np.percentile(np.abs(rho_random - 1), 99)), ".2%",
                                     "99th percentile of |ρ − 1| with p in a random direction"),
        "rms_cross_ratio": Number(float(np.sqrt(np.mean((rho**2 - 1) ** 2) / np.mean((rho_random**2 - 1) ** 2))), ".2f",
                                  "RMS of the relative cross term ρ² − 1, over the same with random directions"),
        "kappa": Number(kappa, ".3f", "interference ratio κ over all token–position pairs (1: random orientation)"),
        "kappa_sd": Number(kappa_sd, ".3f", "sd of κ over uniformly random rotations of P"),
        "kappa_z": Number((kappa - 1) / kappa_sd, ".1f", "z of κ against random rotations"),
        "kappa_centred": Number(kappa_centred, ".3f", "κ with the mean token embedding removed from every token"),
        "kappa_centred_z": Number((kappa_centred - 1) / kappa_centred_sd, ".1f", "z of that κ against random rotations"),
        "cos_means": Number(float(mean_token @ mean_position / np.linalg.norm(mean_token) / np.linalg.norm(mean_position)),
                            ".2f", "cosine between the mean token embedding and the mean position embedding"),
        "largest_dev_share": Number(LARGEST, ".0%", "share of pairs called the largest deviations"),
        "largest_dev_token_norm": Number(float(np.median(np.linalg.norm(t[largest], axis=1))), ".3f",
                                         "median ‖t‖ in that share of pairs with the largest |ρ − 1|"),
    }
    rows = []
    for k in usable_ks(ks, D, D):
        basis = top_right_singular_vectors(P, k)
        a, ratio, z = enrichment_and_z(E, [basis], [k], "output")[0, 0]
        numbers |= {f"token_energy_k{k}": Number(a, ".2%", f"share of ‖E‖² in P's top-{k} subspace"),
                    f"token_ratio_k{k}": Number(ratio, ".2f", f"that share over k/D, k = {k}"),
                    f"token_z_k{k}": Number(z, ".1f", f"z of that share against random {k}-subspaces")}
        rows.append((k, a, k / D, ratio, z))
    tables = {"token_energy": Table(("k", "share of ‖E‖² in P's top k", "k/D", "ratio", "z"), tuple(rows),
                                    formats={"share of ‖E‖² in P's top k": ".2%", "k/D": ".2%", "ratio": ".2f",
                                             "z": ".1f"})}
    show = slice(0, min(n_pairs, 3000))
    arrays = {"token_norms": token_norms, "position_norms": position_norms, "rho": rho, "rho_random": rho_random,
              "sum_norm": np.linalg.norm(t + p, axis=1)[show],
              "root": np.sqrt(np.sum(t**2, axis=1) + np.sum(p**2, axis=1))[show]}
    return Result(numbers, tables, arrays)


def plot_norms_and_sum(result: Result, shape: ModelShape):
    """Norm histograms; ‖t + p‖ against √(‖t‖² + ‖p‖²); ρ − 1 for the real pairs and for random directions."""
    a = result.arrays
    fig, axes = plotting.subplots(1, 3, figsize=(plotting.MAX_WIDTH, 3.0))
    ax = axes[0]
    top = max(a["token_norms"].max(), a["position_norms"].max()) * 1.02
    bins = np.linspace(0, top, 80)
    ax.hist(a["token_norms"], bins=bins, density=True, alpha=0.6, color="C0", label="tokens ‖t‖")
    ax.hist(a["position_norms"], bins=bins, density=True, alpha=0.6, color="C3", label="positions ‖p‖")
    ax.set_xlabel("norm")
    ax.set_ylabel("density")
    ax = axes[1]
    ax.plot(a["root"], a["sum_norm"], ".", ms=1.5, color="C0", alpha=0.5, rasterized=True)
    lim = [0, max(a["root"].max(), a["sum_norm"].max()) * 1.02]
    ax.plot(lim, lim, color="0.3", lw=0.8, ls="--", label="diagonal: equal")
    ax.set_xlim(lim)
    ax.set_ylim(lim)
    ax.set_xlabel("√(‖t‖² + ‖p‖²)")
    ax.set_ylabel("‖t + p‖")
    ax = axes[2]
    dev = np.concatenate([a["rho"], a["rho_random"]]) - 1
    edge = float(np.percentile(np.abs(dev), 99.9))
    bins = np.linspace(-edge, edge, 100)
    ax.hist(a["rho_random"] - 1, bins=bins, density=True, alpha=0.6, color="0.5", label="p in a random\ndirection")
    ax.hist(a["rho"] - 1, bins=bins, density=True, alpha=0.6, color="C0", label="real pairs")
    ax.set_xlabel("ρ − 1, with ρ = ‖t + p‖\nover √(‖t‖² + ‖p‖²)")
    ax.xaxis.set_major_locator(plotting.pyplot().MaxNLocator(4))
    ax.set_ylabel("density")
    ax.set_ylim(0, ax.get_ylim()[1] * 1.35)  # headroom for the legend
    for ax, where in zip(axes, ("upper right", "upper left", "upper left")):
        ax.legend(loc=where)
    fig.suptitle(f"{shape.name}: token and position norms, and the norm of their sum")
    return fig


register(
    "token_position_sum", "Token and position norms, and the norm of their sum", token_position_sum,
    needs=("W_E", "W_pos"), params={"n_pairs": 20000, "seed": 0, "ks": (10, 30)},
    figures={"norms_and_sum": plot_norms_and_sum},
)


# ---------------------------------------------------------------------------
# 3. What the attention weights read, and where W_O writes

SUBSPACES = ("P", "E")


def subspace_bases(tensors: Mapping[str, np.ndarray], k_max: int) -> dict[str, np.ndarray]:
    """P's (uncentred) and E's (row-centred) top-k_max right singular vectors, [D, k_max] each."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    return {"P": top_right_singular_vectors(P, k_max), "E": np.asarray(tensors["E_centred.V"])[:, :k_max]}


def reading_table(stats: np.ndarray, ks: tuple[int, ...], labels: list[str], primary: int) -> Table:
    """stats [layer, column, subspace, k, (a, ratio, z)] as rows (layer, matrix) with ratios per subspace and k."""
    p = ks.index(primary)
    rows = []
    for layer in range(stats.shape[0]):
        for c, label in enumerate(labels):
            rows.append((layer, label, *(stats[layer, c, s, i, 1] for s in range(2) for i in range(len(ks))),
                         stats[layer, c, 0, p, 2], stats[layer, c, 1, p, 2]))
    columns = ("layer", "matrix", *(f"{name}: k = {k}" for name in SUBSPACES for k in ks),
               f"z P (k = {primary})", f"z E (k = {primary})")
    return Table(columns, tuple(rows), formats={c: (".1f" if c.startswith("z") else ".2f") for c in columns[2:]})


def attention_position_content(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, ks: tuple[int, ...],
                               primary_k: int, strong: float) -> Result:
    """Share of each attention matrix's reading (W_O: writing) energy in P's and in E's top-k subspaces."""
    L, D = shape.n_layers, shape.d_model
    available = np.asarray(tensors["E_centred.V"]).shape[1]
    ks = usable_ks(ks, available, D)
    bases = subspace_bases(tensors, max(ks))
    stats = np.zeros((L, len(VARIANTS), 2, len(ks), 3))
    for layer in range(L):
        gain = input_gain(tensors, shape, layer)
        for c, (kind, variant) in enumerate(VARIANTS):
            W, side = variant_matrix(tensors, layer, kind, variant, gain)
            stats[layer, c] = enrichment_and_z(W, [bases[name] for name in SUBSPACES], ks, side)
    labels = [column_label(*v) for v in VARIANTS]
    p = ks.index(primary_k)
    numbers = {"primary_k": Number(primary_k, "d", "k of the heatmap and of the cited values"),
               "chance": Number(primary_k / D, ".1%", "k/D at that k"),
               "token_subspace_origin": Text(origin_of(tensors, "E_centred.V"), "where E's top directions come from")}
    for c, (kind, variant) in enumerate(VARIANTS):
        tag = {"raw": "raw", "γ-folded": "", "output": ""}[variant]
        key = f"{kind.lower()}{'_' + tag if tag else ''}"
        for s, name in enumerate(SUBSPACES):
            n = name.lower()
            numbers[f"l0_{key}_{n}"] = Number(stats[0, c, s, p, 1], ".2f",
                                              f"layer 0, {labels[c]}: enrichment in {name}'s top-{primary_k}")
            numbers[f"l0_{key}_{n}_z"] = Number(stats[0, c, s, p, 2], ".0f",
                                                f"layer 0, {labels[c]}: z in {name}'s top-{primary_k}")
            if variant != "raw" and L > 1:
                numbers[f"later_{key}_{n}_median"] = Number(
                    float(np.median(stats[1:, c, s, p, 1])), ".2f",
                    f"median over layers ≥ 1 of {labels[c]}'s enrichment in {name}'s top-{primary_k}")
        if variant != "raw":
            more_e = int(np.sum(stats[:, c, 1, p, 1] > stats[:, c, 0, p, 1]))
            numbers[f"n_layers_e_over_p_{key}"] = Number(more_e, "d",
                                                         f"layers where {labels[c]} reads E's subspace more than P's")
    folded = [c for c, (_, v) in enumerate(VARIANTS) if v == "γ-folded"]
    numbers["n_layers"] = Number(L, "d", "layers")
    numbers["max_p_folded"] = Number(float(stats[:, folded, 0, p, 1].max()), ".2f",
                                     "largest enrichment in P's subspace of any gain-folded W_Q, W_K, W_V")
    where = np.unravel_index(int(np.argmax(stats[:, folded, 0, p, 1])), (L, len(folded)))
    numbers["max_p_folded_layer"] = Number(int(where[0]), "d", "its layer")
    numbers["max_p_folded_matrix"] = Text(labels[folded[where[1]]], "its matrix")
    numbers["strong"] = Number(strong, "g", "enrichment above which a layer counts as reading P strongly")
    numbers["layers_strong_p"] = Text(
        spoken_list(layer for layer in range(L) if stats[layer, folded, 0, p, 1].max() > strong),
        f"layers whose gain-folded W_Q, W_K or W_V reads P's top-{primary_k} above that enrichment")
    table = reading_table(stats, ks, labels, primary_k)
    layer0 = Table(table.columns, tuple(row for row in table.rows if row[0] == 0), table.formats)
    return Result(numbers, {"reading": table, "layer0": layer0},
                  {"stats": stats, "ks": np.array(ks), "primary": np.array(primary_k)})


def reading_heatmaps(ratios: np.ndarray, names: tuple[str, str], bar_label: str, title: str, shape: ModelShape):
    """Two heatmaps [layer, column] of ratios to 1 (log colour, white = 1), one per subspace, values written in."""
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    top = float(np.ceil(np.abs(np.log10(ratios)).max() * 10) / 10)
    norm = LogNorm(vmin=10**-top, vmax=10**top)
    fig, axes = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 0.25 * ratios.shape[0] + 2.4), sharey=True)
    labels = [column_label(*v).replace(f"W_{v[0]}", f"$W_{v[0]}$") for v in VARIANTS]
    for s, (ax, name) in enumerate(zip(axes, names)):
        image = ax.imshow(ratios[:, :, s], cmap=plotting.DIVERGING, norm=norm, aspect="auto", interpolation="nearest")
        for (layer, c), value in np.ndenumerate(ratios[:, :, s]):
            ax.text(c, layer, f"{value:.2f}", ha="center", va="center", fontsize=7,
                    color="white" if abs(np.log10(value)) > 0.6 * top else "black")
        ax.set_xticks(range(len(VARIANTS)), labels, rotation=90)
        ax.set_title(name)
    axes[0].set_ylabel("layer")
    axes[0].set_yticks(range(ratios.shape[0]))
    bar = fig.colorbar(image, ax=list(axes), fraction=0.04, pad=0.02)
    bar.set_label(bar_label)
    plotting.plain_log_ticks(bar.ax.yaxis)
    fig.suptitle(title)
    return fig


def plot_reading(result: Result, shape: ModelShape):
    """Enrichment a/(k/D) of every attention matrix in P's and in E's top-k subspaces (log colour, 1 = chance)."""
    stats, ks, primary = result.arrays["stats"], list(result.arrays["ks"]), int(result.arrays["primary"])
    return reading_heatmaps(stats[:, :, :, ks.index(primary), 1],
                            tuple(f"top-{primary} subspace of {name}" for name in ("P (position)", "E (tokens)")),
                            "enrichment a / (k/D)\n(log scale, 1 = chance)",
                            f"{shape.name}: what each attention matrix reads ($W_O$: writes), position against tokens",
                            shape)


register(
    "attention_position_content", "What the attention weights read: position against token subspaces",
    attention_position_content,
    needs=("W_pos", "E_centred.V", "blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V",
           "blocks.*.attn.W_O"),
    family_needs={"gpt2": ("blocks.*.ln1.w",), "bert": ("embed.ln.w", "blocks.*.ln2.w")},  # `input_gain`
    params={"ks": (10, 30, 100), "primary_k": 30, "strong": 1.5},
    figures={"reading": plot_reading},
)


def energy_grams(tensors: Mapping[str, np.ndarray], shape: ModelShape) -> dict[str, np.ndarray]:
    """X_cᵀX_c for X = P and E, with X_c = X less each row's mean (what a LayerNorm passes on): P's in full;
    E's as V S² Vᵀ from its available directions (all of them when W_E is present)."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    P_c = P - P.mean(axis=1, keepdims=True)
    S, V = np.asarray(tensors["E_centred.S"], dtype=np.float64), np.asarray(tensors["E_centred.V"], dtype=np.float64)
    return {"P": P_c.T @ P_c, "E": (V * S**2) @ V.T}


def missing_energy_bounds(S: np.ndarray, V: np.ndarray, B: np.ndarray, D: int) -> tuple[float, float]:
    """Bounds on r = D tr(A B) / (tr A tr B) for E_c's full A when only its top directions (S, V) are known.

    The D − 1 − k missing directions (E_c lacks the all-ones one) each hold σ² ≤ σ_k², so the missing energy m
    lies in [0, (D − 1 − k) σ_k²] and adds at most σ_k² tr(Π B) to tr(A B), Π projecting onto the complement
    of V and of the all-ones vector: r ≥ D t / ((T + m_max) tr B) and r ≤ D (t + σ_k² tr(Π B)) / (T tr B).
    """
    S, V, B = (np.asarray(x, dtype=np.float64) for x in (S, V, B))
    t, T, tr_B = float(np.sum(((V * S**2) @ V.T) * B)), float(np.sum(S**2)), float(np.trace(B))
    n_missing = D - 1 - V.shape[1]
    if n_missing <= 0:
        return D * t / (T * tr_B), D * t / (T * tr_B)
    ones = np.ones((D, 1)) / np.sqrt(D)
    in_complement = tr_B - float(np.sum((V.T @ B) * V.T)) - float((ones.T @ B @ ones).item())
    s2 = float(S[-1] ** 2)
    return D * t / ((T + n_missing * s2) * tr_B), D * (t + s2 * in_complement) / (T * tr_B)


def attention_energy_reading(tensors: Mapping[str, np.ndarray], shape: ModelShape) -> Result:
    """How strongly every attention matrix reads (W_O: writes) where P's and E's energy is, weighted by it:
    r_X(W) = D ‖X_c W‖²_F / (‖X_c‖²_F ‖W‖²_F), 1 for a map blind to X's geometry, against W turned by uniformly
    random rotations (same singular values; exact mean 1 and sd); for E also the range that its missing
    directions allow, and the value with the second PCA run where there is one."""
    L, D = shape.n_layers, shape.d_model
    grams = energy_grams(tensors, shape)
    S_E, V_E = np.asarray(tensors["E_centred.S"]), np.asarray(tensors["E_centred.V"])
    replicate = getattr(tensors, "replicate_token_subspace", lambda: None)()
    gram_b = (np.asarray(replicate[1], dtype=np.float64) * np.asarray(replicate[0], dtype=np.float64) ** 2) @ \
        np.asarray(replicate[1], dtype=np.float64).T if replicate is not None else None
    # [layer, column, (r_P, sd_P, r_E, sd_E, r_E lower bound, r_E upper bound, r_E second run)]
    stats = np.zeros((L, len(VARIANTS), 7))
    for layer in range(L):
        gain = input_gain(tensors, shape, layer)
        for c, (kind, variant) in enumerate(VARIANTS):
            W, side = variant_matrix(tensors, layer, kind, variant, gain)
            B = W @ W.T if side == "input" else W.T @ W
            r_p, sd_p = trace_ratio(grams["P"], B)
            r_e, sd_e = trace_ratio(grams["E"], B)
            lo, hi = missing_energy_bounds(S_E, V_E, B, D)
            r_b = trace_ratio(gram_b, B)[0] if gram_b is not None else r_e
            stats[layer, c] = (r_p, sd_p, r_e, sd_e, lo, hi, r_b)
    labels = [column_label(*v) for v in VARIANTS]
    numbers = {"token_subspace_origin": Text(origin_of(tensors, "E_centred.V"), "where E's directions come from"),
               "k_available": Number(V_E.shape[1], "d", "directions of E_c available"),
               "n_layers": Number(L, "d", "layers")}
    if replicate is not None:
        numbers["e_replicate_max_rel_diff"] = Number(
            float(np.max(np.abs(stats[:, :, 6] / stats[:, :, 2] - 1))), ".1%",
            "largest relative difference of any r_E between the two PCA runs")
    folded = [c for c, (_, v) in enumerate(VARIANTS) if v == "γ-folded"]
    for c, (kind, variant) in enumerate(VARIANTS):
        tag = {"raw": "raw", "γ-folded": "", "output": ""}[variant]
        key = f"{kind.lower()}{'_' + tag if tag else ''}"
        for name, (r, sd) in (("p", (0, 1)), ("e", (2, 3))):
            numbers[f"l0_{key}_{name}"] = Number(stats[0, c, r], ".2f",
                                                 f"layer 0, {labels[c]}: r_{name.upper()} (1: blind to its geometry)")
            numbers[f"l0_{key}_{name}_sd"] = Number(stats[0, c, sd], ".2f",
                                                    f"layer 0, {labels[c]}: sd of r_{name.upper()} over random rotations")
            if L > 1:
                numbers[f"later_{key}_{name}_median"] = Number(
                    float(np.median(stats[1:, c, r])), ".2f", f"median over layers ≥ 1 of {labels[c]}'s r_{name.upper()}")
        numbers[f"l0_{key}_e_lo"] = Number(stats[0, c, 4], ".2f", f"layer 0, {labels[c]}: lower bound of r_E")
        numbers[f"l0_{key}_e_hi"] = Number(stats[0, c, 5], ".2f", f"layer 0, {labels[c]}: upper bound of r_E")
        numbers[f"n_layers_p_over_e_{key}"] = Number(int(np.sum(stats[:, c, 0] > stats[:, c, 5])), "d",
                                                     f"layers where {labels[c]}'s r_P exceeds r_E's upper bound")
        numbers[f"n_layers_p_above_{key}"] = Number(int(np.sum(stats[:, c, 0] > 1 + 2 * stats[:, c, 1])), "d",
                                                    f"layers where {labels[c]}'s r_P is above 1 by more than 2 sd")
    where = np.unravel_index(int(np.argmax(stats[1:, folded, 0])), (L - 1, len(folded))) if L > 1 else None
    if where is not None:
        numbers["later_max_p_folded"] = Number(float(stats[1:, folded, 0].max()), ".2f",
                                               "largest r_P of a gain-folded W_Q, W_K, W_V in layers ≥ 1")
        numbers["later_max_p_folded_layer"] = Number(int(where[0]) + 1, "d", "its layer")
        numbers["later_max_p_folded_matrix"] = Text(labels[folded[where[1]]], "its matrix")
    numbers["sd_max"] = Number(float(stats[:, :, [1, 3]].max()), ".2f",
                               "largest sd of r_P or r_E over random rotations, any layer and matrix")
    rows = tuple((layer, labels[c], stats[layer, c, 0], stats[layer, c, 1], stats[layer, c, 2], stats[layer, c, 4],
                  stats[layer, c, 5], stats[layer, c, 3]) for layer in range(L) for c in range(len(VARIANTS)))
    columns = ("layer", "matrix", "r_P", "sd (rotations)", "r_E", "r_E at least", "r_E at most", "sd (rotations) ")
    table = Table(columns, rows, formats={col: ".2f" for col in columns[2:]})
    layer0 = Table(columns, tuple(row for row in rows if row[0] == 0), table.formats)
    return Result(numbers, {"reading": table, "layer0": layer0}, {"stats": stats})


def plot_energy_reading(result: Result, shape: ModelShape):
    """r_P and r_E of every attention matrix (log colour, 1 = blind to the geometry)."""
    stats = result.arrays["stats"]
    return reading_heatmaps(stats[:, :, [0, 2]], ("$P_c$ (position)", "$E_c$ (tokens)"),
                            "energy-weighted reading $r_X$\n(log scale, 1 = blind)",
                            f"{shape.name}: how strongly each attention matrix reads ($W_O$: writes) "
                            "where $P$'s and $E$'s energy is", shape)


register(
    "attention_energy_reading", "What the attention weights read, weighted by where P's and E's energy is",
    attention_energy_reading,
    needs=("W_pos", *TOKEN_SUBSPACE, "blocks.*.attn.W_Q", "blocks.*.attn.W_K", "blocks.*.attn.W_V",
           "blocks.*.attn.W_O"),
    family_needs={"gpt2": ("blocks.*.ln1.w",), "bert": ("embed.ln.w", "blocks.*.ln2.w")},  # `input_gain`
    figures={"reading": plot_energy_reading},
)


# ---------------------------------------------------------------------------
# 4. What the MLPs read


def mlp_input_gain(tensors: Mapping[str, np.ndarray], shape: ModelShape, layer: int) -> np.ndarray:
    """The LayerNorm gain γ in front of layer `layer`'s MLP: GPT-2's ln_2 of that layer; BERT's attention-output
    LayerNorm of that layer (canonical `ln1`), whose output is what the MLP reads."""
    name = f"blocks.{layer}.ln2.w" if shape.family == "gpt2" else f"blocks.{layer}.ln1.w"
    return np.asarray(tensors[name], dtype=np.float64)


MLP_VARIANTS = ("raw", "γ-folded")


def mlp_position_content(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, ks: tuple[int, ...], primary_k: int,
                         curve_k: int) -> Result:
    """Share of each MLP input matrix's reading energy in P's and in E's top-k subspaces, against random ones."""
    L, D = shape.n_layers, shape.d_model
    available = np.asarray(tensors["E_centred.V"]).shape[1]
    ks = usable_ks(ks, available, D)
    curve_k = usable_ks((curve_k,), available, D)[0]
    bases = subspace_bases(tensors, max(*ks, curve_k))
    stats = np.zeros((L, len(MLP_VARIANTS), 2, len(ks), 3))
    for layer in range(L):
        W = np.asarray(tensors[f"blocks.{layer}.mlp.W_in"], dtype=np.float64)
        for v, variant in enumerate(MLP_VARIANTS):
            M = mlp_input_gain(tensors, shape, layer)[:, None] * W if variant == "γ-folded" else W
            stats[layer, v] = enrichment_and_z(M, [bases[name] for name in SUBSPACES], ks, "input")
    # layer 0, gain folded, every k up to curve_k: enrichment and the random band
    M0 = mlp_input_gain(tensors, shape, 0)[:, None] * np.asarray(tensors["blocks.0.mlp.W_in"], dtype=np.float64)
    k_all = np.arange(1, curve_k + 1)
    total = np.sum(M0**2)
    curves = {name: np.cumsum(np.sum((bases[name][:, :curve_k].T @ M0) ** 2, axis=1)) / total / (k_all / D)
              for name in SUBSPACES}
    mean, sd = random_energy_moments(M0, k_all)
    labels = [f"{'diag(γ)' if v == 'γ-folded' else ''}W_in" for v in MLP_VARIANTS]
    p = ks.index(primary_k)
    numbers = {"primary_k": Number(primary_k, "d", "k of the cited values"),
               "token_subspace_origin": Text(origin_of(tensors, "E_centred.V"), "where E's top directions come from")}
    for v, variant in enumerate(MLP_VARIANTS):
        tag = "_raw" if variant == "raw" else ""
        for s, name in enumerate(SUBSPACES):
            n = name.lower()
            for i, k in enumerate(ks):
                numbers[f"l0{tag}_{n}_k{k}"] = Number(stats[0, v, s, i, 1], ".2f",
                                                      f"layer 0, {labels[v]}: enrichment in {name}'s top-{k}")
                numbers[f"l0{tag}_{n}_z_k{k}"] = Number(stats[0, v, s, i, 2], ".1f",
                                                        f"layer 0, {labels[v]}: z in {name}'s top-{k}")
        more_e = stats[:, v, 1, p, 1] > stats[:, v, 0, p, 1]
        numbers[f"n_layers_e_over_p{tag}"] = Number(int(more_e.sum()), "d",
                                                    f"layers whose {labels[v]} reads E's top-{primary_k} more than P's")
        numbers[f"layers_e_over_p{tag}"] = Text(spoken_list(np.nonzero(more_e)[0].tolist()), "those layers")
    numbers["n_layers"] = Number(L, "d", "layers")
    rows = []
    for layer in range(L):
        for v in range(len(MLP_VARIANTS)):
            rows.append((layer, labels[v], *(stats[layer, v, s, i, 1] for s in range(2) for i in range(len(ks))),
                         stats[layer, v, 0, p, 2], stats[layer, v, 1, p, 2]))
    columns = ("layer", "matrix", *(f"{name}: k = {k}" for name in SUBSPACES for k in ks),
               f"z P (k = {primary_k})", f"z E (k = {primary_k})")
    table = Table(columns, tuple(rows), formats={c: (".1f" if c.startswith("z") else ".2f") for c in columns[2:]})
    arrays = {"stats": stats, "ks": np.array(ks), "primary": np.array(primary_k), "curve_P": curves["P"],
              "curve_E": curves["E"], "band": 2 * sd / mean}
    return Result(numbers, {"reading": table}, arrays)


def plot_mlp_reading(result: Result, shape: ModelShape):
    """Layer 0's gain-folded W_in against k; every layer's enrichment at the primary k."""
    a = result.arrays
    k = np.arange(1, a["curve_P"].size + 1)
    fig, (left, right) = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 3.9))
    left.fill_between(k, np.clip(1 - a["band"], 1e-3, None), 1 + a["band"], color="0.85", lw=0,
                      label="random subspaces: 1 ± 2 sd")
    left.axhline(1, color="0.3", lw=0.8, ls="--")
    left.plot(k, a["curve_E"], color="C0", lw=1.5, label="E's top-k (tokens)")
    left.plot(k, a["curve_P"], color="C3", lw=1.5, label="P's top-k (position)")
    left.set_xscale("log")
    left.set_yscale("log")
    left.set_xlabel("k (log scale)")
    left.set_ylabel("enrichment a / (k/D) (log scale)")
    plotting.plain_log_ticks(left.yaxis)
    left.set_title(r"layer 0, diag(γ)$W_{in}$")
    stats, ks, primary = a["stats"], list(a["ks"]), int(a["primary"])
    layers = np.arange(stats.shape[0])
    i = ks.index(primary)
    for s, (name, colour) in enumerate((("P", "C3"), ("E", "C0"))):
        right.plot(layers, stats[:, 1, s, i, 1], "o-", color=colour, label=rf"{name}, diag(γ)$W_{{in}}$")
        right.plot(layers, stats[:, 0, s, i, 1], "x:", color=colour, label=rf"{name}, raw $W_{{in}}$")
    right.axhline(1, color="0.3", lw=0.8, ls="--")
    right.set_yscale("log")
    plotting.plain_log_ticks(right.yaxis)
    right.set_xticks(layers)
    right.set_xlabel("layer")
    right.set_ylabel(f"enrichment at k = {primary} (log scale)")
    right.set_title("every layer's MLP input")
    left.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2))
    right.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    fig.suptitle(f"{shape.name}: what the MLP input weights read, position against tokens")
    return fig


register(
    "mlp_position_content", "What the MLP input weights read: position against token subspaces", mlp_position_content,
    needs=("W_pos", "E_centred.V", "blocks.*.mlp.W_in"),
    family_needs={"gpt2": ("blocks.*.ln2.w",), "bert": ("blocks.*.ln1.w",)},  # `mlp_input_gain`
    params={"ks": (10, 30, 100), "primary_k": 30, "curve_k": 100},
    figures={"reading": plot_mlp_reading},
)
