"""Overlap of the position and token subspaces: P's energy in E's top-k subspace, principal angles, Simon's
capture, and E's energy where P's sparse directions live; each verdict also without E_c's first direction, which
the per-token centring leaves to carry the mean token (`token_mean_direction` measures that where W_E is whole)."""

from __future__ import annotations

import numpy as np

from analyses.engine.inputs import ModelInputs
from analyses.engine.registry import register
from analyses.engine.results import Accuracy, Number, Result, Table, Text, spoken_list
from analyses.engine.sources import ModelShape
from analyses.engine.tensors import TOKEN_SUBSPACE
from analyses.position_content.measures import BAND, random_capture_sd, usable_ks
from analyses.toolkit import plotting
from analyses.toolkit.linalg import support_union, top_right_singular_vectors
from analyses.toolkit.pvalues import holm
from analyses.toolkit.subspaces import (captured, energy_fraction, prefix_overlaps, principal_angles, random_basis,
                                        random_energy_moments, sampled_energy_fractions, trace_ratio, width_k)


def position_token_subspaces(tensors: ModelInputs, shape: ModelShape, *, ks: tuple[int, ...],
                             angle_ks: tuple[int, ...], capture_k: int, capture_ks: tuple[int, ...], n_random: int,
                             seed: int, agreement_tol: float, sparse_vectors: int, sparse_mass: float,
                             width_share: float, trained_rows: dict[str, int]) -> Result:
    """P's energy in E's top-k subspace against random subspaces; principal angles; Simon's capture plot; E's
    energy in the dimensions that P's sparse top directions use. For a model in `trained_rows` (MiniLM, whose
    fine-tuning read only its first 128 positions), the enrichment again on those rows alone."""
    D = shape.d_model
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    S_E, V_E = np.asarray(tensors["E_centred.S"]), np.asarray(tensors["E_centred.V"])
    available = V_E.shape[1]
    ks = usable_ks(ks, available, D)
    angle_ks = usable_ks(angle_ks, available, D)
    k_curve = min(available, D - 1)
    rng = np.random.default_rng(seed)
    numbers, tables, arrays, curve = _energy(tensors, P, S_E, V_E, ks, k_curve, n_random, seed, rng, agreement_tol)
    angle_numbers, tables["angles"], angle_arrays = _angles(P, V_E, angle_ks, n_random, rng)
    capture_numbers, tables["blocks"], capture, capture_sd = _capture(P, S_E, V_E, ks, k_curve, capture_k, curve)
    numbers |= angle_numbers | capture_numbers | _sparse_columns(P, S_E, V_E, sparse_vectors, sparse_mass)
    first_numbers, first_tables = _first_direction(P, S_E, V_E, ks, usable_ks(capture_ks, D - 1, D))
    numbers |= first_numbers | _same_width(P, V_E, width_share)
    if shape.name in trained_rows:
        numbers |= _trained_rows(P[:trained_rows[shape.name]], V_E, ks, width_share)
    tables |= first_tables
    arrays |= angle_arrays
    arrays |= {"capture": capture, "capture_sd": np.array(capture_sd), "capture_k": np.array(capture_k),
               "S_E": S_E, "S_P": np.linalg.svd(P, compute_uv=False), "rows_E": np.array(shape.d_vocab),
               "rows_P": np.array(P.shape[0])}
    # E_c's smallest singular values come from Gram eigenvalues (`centred_token_svd`): an eigenvalue moves by about
    # n·u·σ_max² (n ~ 10³ terms), its square root near zero by √(n·u)·σ_max; the last one is zero in exact
    # arithmetic (rows are centred), so its value is rounding noise
    resolution = Accuracy(abs=32 * np.sqrt(np.finfo(np.float64).eps) * float(S_E.max()),
                          basis="singular values from Gram eigenvalues: resolved to about √(n·u)·σ_max, n ~ 10³")
    return Result(numbers, tables, arrays, {"S_E": resolution})


def _energy(tensors: ModelInputs, P: np.ndarray, S_E: np.ndarray, V_E: np.ndarray, ks: tuple[int, ...], k_curve: int,
            n_random: int, seed: int, rng: np.random.Generator, agreement_tol: float):
    """(numbers, tables, arrays, curve): P's energy in E's top-k subspaces against random ones, and against the
    second run of the token PCA where there is one."""
    D, available = P.shape[1], V_E.shape[1]
    # energy of P in E's top-k subspace, every k, against the closed form and sampled random subspaces
    per_direction = np.sum((P @ V_E[:, :k_curve]) ** 2, axis=0) / np.sum(P**2)
    curve = np.cumsum(per_direction)
    ks_all = np.arange(1, k_curve + 1)
    moments = np.stack(random_energy_moments(P, ks_all, "output"), axis=1)
    sampled = sampled_energy_fractions(P, ks_all, n_random, rng, side="output")
    ones = np.ones(D) / np.sqrt(D)
    numbers = {
        "token_subspace_origin": Text(tensors.origin("E_centred.V"), "where E's top directions come from"),
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
    replicate = tensors.replicate_token_subspace()
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
                                             "largest relative difference of the two runs' top-100 singular values",
                                             Accuracy(abs=1e-11, basis="a ratio of two values read from files, less "
                                                      "one: rounding at n·u ≈ 1e-13 relative moves it by about "
                                                      "2e-13 absolute; declared 1e-11")),
            "replicate_energy_kmax": Number(curve_b[k_max - 1], ".2%", "P's energy in the second run's top-k_max subspace"),
        }
        for k in ks:
            numbers[f"replicate_agreement_k{k}"] = Number(agreement[k - 1], ".4f",
                                                          f"mean cos² of the principal angles between the runs' top-{k}")
        columns += ("energy (run b)", "runs agree")
        formats |= {"energy (run b)": ".2%", "runs agree": ".5f"}
        rows = [(*row, curve_b[row[0] - 1], agreement[row[0] - 1]) for row in rows]
    tables = {"energy": Table(columns, tuple(rows), formats=formats)}
    return numbers, tables, arrays, curve


ANGLES = Accuracy(rel=1e-9, abs=1e-9, basis="principal angles in degrees from sines (small) and cosines: rounding "
                                             "about 1e-14 degrees absolute, so an angle that is zero in exact "
                                             "arithmetic (two k-subspaces of D dimensions with 2k > D meet) is noise "
                                             "at that level; declared 1e-9 degrees")


def _angles(P: np.ndarray, V_E: np.ndarray, angle_ks: tuple[int, ...], n_random: int, rng: np.random.Generator):
    """(numbers, table, arrays): principal angles between P's and E's top-k subspaces, against random ones."""
    D = P.shape[1]
    numbers, tables, arrays = {}, {}, {}
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
        # the same k-dimensional comparison with E's first direction left out: E's directions 2..k+1
        theta_wo1 = np.degrees(principal_angles(B_P[:, :k], V_E[:, 1:k + 1])) if k < V_E.shape[1] else None
        arrays |= {f"angles_k{k}": theta, f"angles_lo_k{k}": np.percentile(angle_draws[k], BAND[0], axis=0),
                   f"angles_hi_k{k}": np.percentile(angle_draws[k], BAND[1], axis=0)}
        cos2, (mean, sd) = energy_fraction(B_P[:, :k], V_E[:, :k]), random_energy_moments(B_P[:, :k], k)
        null_min = angle_draws[k][:, 0]
        numbers |= {
            f"angle_min_k{k}": Number(theta[0], ".1f", f"smallest principal angle (degrees) between P's and E's top-{k}",
                                      ANGLES),
            f"angle_median_k{k}": Number(float(np.median(theta)), ".1f", f"median principal angle (degrees), k = {k}",
                                         ANGLES),
            f"angle_null_min_median_k{k}": Number(float(np.median(null_min)), ".1f",
                                                  f"median smallest angle between P's top-{k} and a random {k}-subspace",
                                                  ANGLES),
            f"angle_null_min_lo_k{k}": Number(float(np.percentile(null_min, BAND[0])), ".1f",
                                              f"{BAND[0]:g}th percentile of that smallest angle over random {k}-subspaces",
                                              ANGLES),
            f"cos2_k{k}": Number(cos2, ".3f", f"mean cos² of the principal angles, k = {k}"),
            **({} if theta_wo1 is None else {f"angle_min_wo1_k{k}": Number(
                theta_wo1[0], ".1f", f"smallest principal angle (degrees) between P's top {k} and E's directions "
                                     f"2..{k + 1}", ANGLES)}),
            f"cos2_ratio_k{k}": Number(cos2 / mean, ".2f", f"mean cos² over its random expectation k/D, k = {k}"),
            f"cos2_z_k{k}": Number((cos2 - mean) / sd, ".1f", f"z of the mean cos² against random {k}-subspaces"),
        }
        angle_rows.append((k, theta[0], float(np.median(theta)), float(np.median(null_min)),
                           float(np.percentile(null_min, BAND[0])), cos2, mean, (cos2 - mean) / sd))
    tables["angles"] = Table(("k", "smallest angle", "median angle", "random: median smallest",
                              f"random: {BAND[0]:g} % smallest", "mean cos²", "k/D", "z"), tuple(angle_rows),
                             formats={"smallest angle": ".1f", "median angle": ".1f", "random: median smallest": ".1f",
                                      f"random: {BAND[0]:g} % smallest": ".1f", "mean cos²": ".4f", "k/D": ".4f", "z": ".1f"},
                             accuracy=dict.fromkeys(("smallest angle", "median angle", "random: median smallest",
                                                     f"random: {BAND[0]:g} % smallest"), ANGLES))
    return numbers, tables["angles"], arrays


def _capture(P: np.ndarray, S_E: np.ndarray, V_E: np.ndarray, ks: tuple[int, ...], k_curve: int, capture_k: int,
             curve: np.ndarray):
    """(numbers, table, capture, its sd): Simon's capture of E's directions by P's top subspace, and how spread
    E_c's energy is."""
    from scipy.stats import beta as beta_law

    D, available = P.shape[1], V_E.shape[1]
    numbers, tables = {}, {}
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
    return numbers, tables["blocks"], capture, capture_sd


def _sparse_columns(P: np.ndarray, S_E: np.ndarray, V_E: np.ndarray, sparse_vectors: int, sparse_mass: float) -> dict:
    """E_c's energy in the embedding dimensions that P's sparse top directions use (numbers)."""
    D, available = P.shape[1], V_E.shape[1]
    numbers = {}
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
    # the same without E_c's first direction v₁ (its part σ₁² v₁v₁ᵀ of the energy removed)
    without = column_energy - S_E[0] ** 2 * V_E[:, 0] ** 2
    ratio_wo1, sd_wo1 = trace_ratio(V_E[:, 1:] * S_E[1:] ** 2 @ V_E[:, 1:].T, np.diag(mask))
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
        "sparse_e_energy_wo1": Number(float(without[union].sum() / without.sum()), ".1%",
                                      "the same share without E_c's first direction"),
        "sparse_e_energy_wo1_lo": Number(float(without[union].sum() / (without.sum() + missing_max)), ".1%",
                                         "its lower bound (all missing energy elsewhere)"),
        "sparse_e_energy_wo1_hi": Number(float((without[union].sum() + missing_max) / (without.sum() + missing_max)),
                                         ".1%", "its upper bound (all missing energy there)"),
        "sparse_e_ratio_wo1": Number(ratio_wo1, ".2f", "that share over the dimensions' share"),
    }
    if share_sd > 0:  # zero when the columns are all of R^D
        numbers["sparse_e_z"] = Number((share_ratio - 1) / share_sd, ".1f",
                                       "z of that ratio against uniformly random rotations of E_c's available energy")
        numbers["sparse_e_z_wo1"] = Number((ratio_wo1 - 1) / sd_wo1, ".1f", "the same without E_c's first direction")
    else:
        numbers["sparse_degenerate"] = Text("yes", "P's sparse directions use every dimension: the test cannot apply")
    return numbers


def _same_width(P: np.ndarray, V_E: np.ndarray, width_share: float) -> dict:
    """P's energy in E's top-k subspace over chance, with k the same fraction of the width in every model (GPT-2's
    top 30 of 768 by default), with its exact z and without E's first direction."""
    D = P.shape[1]
    k = width_k(width_share, D)
    a = float(np.sum((P @ V_E[:, :k]) ** 2) / np.sum(P**2))
    mean, sd = random_energy_moments(P, k, "output")
    numbers = {"width_k": Number(k, "d", f"k = {width_share:.4g} of the width"),
               "width_share_of_d": Number(k / D, ".1%", "that k over D"),
               "width_ratio": Number(a / mean, ".2f", "P's energy in E's top width_k over chance"),
               "width_z": Number((a - mean) / sd, ".1f", "its z against random subspaces (exact sd)")}
    if k > 1:
        without = float(np.sum((P @ V_E[:, 1:k]) ** 2) / np.sum(P**2)) / ((k - 1) / D)
        numbers["width_ratio_wo1"] = Number(without, ".2f", "the same without E's first direction, over (k − 1)/D")
    return numbers


def _trained_rows(P: np.ndarray, V_E: np.ndarray, ks: tuple[int, ...], width_share: float) -> dict:
    """The enrichment of P's energy in E's top-k subspace over chance (`ratio_k`, and at the same fraction of the
    width) on the rows `P` alone: the positions fine-tuning read, without those only pre-training trained."""
    numbers = {"trained_rows": Number(P.shape[0], "d", "positions fine-tuning read (model card)")}
    numbers |= {f"{key}_trained": number for key, number in _same_width(P, V_E, width_share).items()
                if key in ("width_ratio", "width_z")}
    for k in ks:
        a = float(np.sum((P @ V_E[:, :k]) ** 2) / np.sum(P**2))
        mean, sd = random_energy_moments(P, k, "output")
        numbers |= {f"ratio_k{k}_trained": Number(a / mean, ".2f", f"energy over chance at k = {k}, those rows alone"),
                    f"z_k{k}_trained": Number((a - mean) / sd, ".1f", "its z against random subspaces (exact sd)")}
    return numbers


def _first_direction(P: np.ndarray, S_E: np.ndarray, V_E: np.ndarray, ks: tuple[int, ...],
                     capture_ks: tuple[int, ...]) -> tuple[dict, dict[str, Table]]:
    """(numbers, tables): the P–E overlap verdicts that E_c's first direction v₁ can decide, with and without it.

    v₁'s capture by P's top-k subspace for every k in `capture_ks` (against the Beta(k/2, (D − k)/2) law of a random
    k-subspace; each p uncorrected, and whether Holm's procedure over the sizes rejects it), and energy-weighted, D‖P v₁‖²/‖P‖² (1 for a random direction, with its exact sd); P's energy in E's
    directions 2..k over (k − 1)/D beside its energy in E's top k over k/D."""
    from scipy.stats import beta as beta_law

    D = P.shape[1]
    v1 = V_E[:, 0]
    numbers = {"e1_share": Number(float(S_E[0] ** 2 / np.sum(S_E**2)), ".0%",
                                  "σ₁² over E_c's available energy (an upper bound where directions are missing)"),
               "e1_over_e2": Number(float(S_E[0] / S_E[1]), ".1f", "σ₁ / σ₂ of E_c")}
    capture_rows = []
    for k in capture_ks:
        basis = top_right_singular_vectors(P, k)
        c1 = float(np.sum((v1 @ basis) ** 2))
        p = float(beta_law.sf(c1, k / 2, (D - k) / 2))
        p_energy = float(np.sum((P @ basis) ** 2) / np.sum(P**2))
        numbers |= {f"c1_ratio_k{k}": Number(c1 / (k / D), ".1f", f"capture of v₁ by P's top {k}, over k/D"),
                    f"c1_p_k{k}": Number(p, "sci0", f"one-sided p of that capture under the Beta law, k = {k}"),
                    f"p_energy_k{k}": Number(p_energy, ".0%", f"share of ‖P‖² in P's top {k}")}
        capture_rows.append((k, p_energy, c1, c1 / (k / D), p))
    for (k, *_, p), rejected in zip(capture_rows, holm([row[-1] for row in capture_rows])):
        numbers[f"c1_below_k{k}"] = Text("yes" if rejected else "no",
                                         f"v₁'s capture by P's top {k} beyond chance by Holm's procedure over the "
                                         f"{len(capture_ks)} subspace sizes ({spoken_list(map(str, capture_ks))})")
    along = float(np.sum((P @ v1) ** 2) / np.sum(P**2))
    sd = random_energy_moments(P, 1, "output")[1]
    numbers |= {"c1_weighted": Number(along * D, ".1f", "D‖P v₁‖²/‖P‖²: P's energy along v₁ over a random direction's"),
                "c1_weighted_z": Number((along - 1 / D) / sd, ".1f", "its z against random directions (exact sd)")}
    energy_rows = []
    for k in ks:
        with_first = float(np.sum((P @ V_E[:, :k]) ** 2) / np.sum(P**2)) / (k / D)
        without = float(np.sum((P @ V_E[:, 1:k]) ** 2) / np.sum(P**2)) / ((k - 1) / D)
        numbers[f"ratio_wo1_k{k}"] = Number(without, ".2f", f"P's energy in E's directions 2..{k} over (k − 1)/D")
        energy_rows.append((k, with_first, without))
    tables = {"first_capture": Table(("P's top k", "share of P", "capture of v₁", "over chance k/D", "p (Beta law)"),
                                     tuple(capture_rows), formats={"share of P": ".0%", "capture of v₁": ".3f",
                                                                   "over chance k/D": ".1f", "p (Beta law)": "sci0"}),
              "without_first": Table(("k", "P in E's top k, over k/D", "P in E's directions 2..k, over (k − 1)/D"),
                                     tuple(energy_rows), formats={"P in E's top k, over k/D": ".2f",
                                                                  "P in E's directions 2..k, over (k − 1)/D": ".2f"})}
    return numbers, tables


def plot_energy(result: Result, shape: ModelShape):
    """P's energy in E's top-k subspace against k, with random subspaces; with a replicate, the runs' agreement."""
    a = result.arrays
    curve, moments = a["curve"], a["moments"]
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
    return fig


def token_mean_direction(tensors: ModelInputs, shape: ModelShape) -> Result:
    """What E_c's first direction v₁ is, where the token rows are whole: E_c = E − m 1ᵀ subtracts each token's mean
    over its dimensions, not the mean token ē, so the mean row of E_c (ē less its own mean) stays in E_c and, when it
    is large, becomes v₁. Its |cosine| with v₁, the share of ‖E_c‖² the mean row carries (T‖ē_c‖²/‖E_c‖², what a
    centring over tokens would remove); `position_token_subspaces` gives σ₁'s share of the spectrum."""
    E = np.asarray(tensors["W_E"], dtype=np.float64)
    centred = E - E.mean(axis=1, keepdims=True)
    mean_row = centred.mean(axis=0)
    V = np.asarray(tensors["E_centred.V"], dtype=np.float64)
    return Result({
        "v1_mean_cos": Number(float(abs(mean_row @ V[:, 0]) / np.linalg.norm(mean_row)), ".2f",
                              "|cos| between E_c's first direction and its mean row (the mean token, centred)"),
        "mean_token_share": Number(float(E.shape[0] * mean_row @ mean_row / np.sum(centred**2)), ".0%",
                                   "share of ‖E_c‖²_F in the mean row: what centring over tokens removes"),
    })


register(
    "token_mean_direction", "What the token embeddings' first centred direction is", token_mean_direction,
    needs=("W_E", "E_centred.V"),
)

register(
    "position_token_subspaces", "Overlap of the position and token subspaces", position_token_subspaces,
    needs=("W_pos", *TOKEN_SUBSPACE),
    params={"ks": (10, 30, 100, 300, 500), "angle_ks": (10, 30, 100), "capture_k": 30, "n_random": 200, "seed": 0,
            "agreement_tol": 1e-4, "sparse_vectors": 10, "sparse_mass": 0.9, "capture_ks": (3, 5, 10, 30),
            "width_share": 30 / 768,  # GPT-2's top 30: the same fraction of every model's width  # the last two: sparse_directions' own
            "trained_rows": {"all-MiniLM-L6-v2": 128}},  # MiniLM's fine-tuned length (corpus_forward.WINDOWS)
    figures={"energy": plot_energy, "spectra": plot_spectra, "capture": plot_capture, "angles": plot_angles},
)
