"""Token and position norms, and the norm of their sum: how close to orthogonal a token and a position are."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape
from analyses.position_content.measures import enrichment_and_z, usable_ks
from analyses.toolkit import plotting
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.toolkit.subspaces import trace_ratio


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
    return fig


register(
    "token_position_sum", "Token and position norms, and the norm of their sum", token_position_sum,
    needs=("W_E", "W_pos"), params={"n_pairs": 20000, "seed": 0, "ks": (10, 30)},
    figures={"norms_and_sum": plot_norms_and_sum},
)
