"""Low rank: how few directions hold the position embeddings, and how sparse those directions are.

Three measurements of the position matrix P [n_ctx, D], each repeated on the
sinusoidal table of the same shape (the fixed encoding that learned positions replaced):

* PCA of the centred rows: the fraction of variance r_i along each principal axis and
  k_f = min{k : r_1 + … + r_k ≥ f}, on all positions and on subsets of them;
* the singular values σ_i of the uncentred P: the mass m_k = Σ_{i≤k} σ_i² / Σ_i σ_i² of
  the top k and the effective rank exp H(σ / Σσ);
* the sparsity of the top right singular vectors v ∈ R^D (‖v‖ = 1): the number of
  embedding indices that carry 90 % of Σ_j v_j², the participation ratio 1 / Σ_j v_j⁴,
  and the overlap (Jaccard index) of the index sets of different vectors.
"""

from __future__ import annotations

from collections.abc import Mapping
from itertools import combinations

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.linalg import (components_for, effective_rank, explained_variance_ratio, mass_support, support_union,
                                     top_right_singular_vectors)
from analyses.toolkit.sinusoids import sinusoidal_table
from analyses.toolkit.subspaces import principal_angles
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape


def position_subsets(n_positions: int, split: int) -> dict[str, np.ndarray]:
    """The row sets compared in the PCA: key -> position indices (all; without 0; ≥ split; < split)."""
    if not 1 < split < n_positions - 1:
        raise ValueError(f"split must lie strictly inside 1..{n_positions - 2}, got {split}")
    n = np.arange(n_positions)
    return {"all": n, "no_first": n[1:], "late": n[split:], "early": n[:split], "early_no_first": n[1:split]}


SUBSET_LABELS = {"all": "all positions", "no_first": "without position 0", "late": "positions ≥ {split}",
                 "early": "positions < {split}", "early_no_first": "positions 1 to {split} − 1"}


def singular_mass(singular_values: np.ndarray, k: int) -> float:
    """m_k = Σ_{i≤k} σ_i² / Σ_i σ_i²: the share of ‖P‖_F² captured by the best rank-k approximation."""
    s2 = np.sort(np.asarray(singular_values, dtype=np.float64))[::-1] ** 2
    return float(s2[:k].sum() / s2.sum())


def participation_ratio(v: np.ndarray) -> float:
    """(Σ v_j²)² / Σ v_j⁴: m for a vector spread evenly over m indices, ≈ (D + 2) / 3 for a random one."""
    v2 = np.asarray(v, dtype=np.float64) ** 2
    return float(v2.sum() ** 2 / (v2**2).sum())


def jaccard(a: np.ndarray, b: np.ndarray) -> float:
    """|a ∩ b| / |a ∪ b| of two index sets."""
    a, b = set(np.asarray(a).tolist()), set(np.asarray(b).tolist())
    return len(a & b) / len(a | b)


def gaussian_support_fraction(mass: float) -> float:
    """The fraction of indices that carry `mass` of a random (Gaussian) direction's squared norm, as D → ∞.

    The largest |x| above a threshold a hold E[x² 1{|x|>a}] = 2(aφ(a) + 1 − Φ(a)) of E[x²] = 1;
    solve that for `mass` and return P(|x| > a) = 2(1 − Φ(a)).
    """
    from scipy.optimize import brentq
    from scipy.stats import norm

    if not 0 < mass < 1:
        raise ValueError(f"mass must lie in (0, 1), got {mass}")
    a = brentq(lambda a: 2 * (a * norm.pdf(a) + norm.sf(a)) - mass, 0.0, 40.0, xtol=1e-14)
    return float(2 * norm.sf(a))


def _pca_row(ratios: np.ndarray, fractions: tuple[float, ...]) -> tuple:
    return (float(ratios[0]), float(ratios[:3].sum()), *(components_for(ratios, f) for f in fractions))


def _pct(fraction: float) -> str:
    return f"{fraction * 100:g}"


def low_rank(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, fractions: tuple[float, ...], split: int,
             mass_ks: tuple[int, ...], sinusoid_base: float) -> Result:
    """PCA on position subsets, the uncentred singular spectrum, and the same for the sinusoidal table."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    S = sinusoidal_table(*P.shape, base=sinusoid_base)
    subsets = position_subsets(len(P), split)
    ratios = {key: explained_variance_ratio(P[rows]) for key, rows in subsets.items()}
    ratios["sinusoidal"] = explained_variance_ratio(S)
    numbers = {"split": Number(split, "d", "first position of the late subset (positions ≥ split)")}
    for key, r in ratios.items():
        numbers[f"{key}_pc1"] = Number(r[0], ".1%", f"{key}: variance share of the first principal component")
        numbers[f"{key}_top3"] = Number(r[:3].sum(), ".1%", f"{key}: variance share of the top 3 components")
        for f in fractions:
            numbers[f"{key}_k{_pct(f)}"] = Number(components_for(r, f), "d",
                                                  f"{key}: components needed for {_pct(f)}% of the variance")
    for i in range(3):
        numbers[f"all_pc{i + 1}_share"] = Number(ratios["all"][i], ".4f", f"variance share of PC{i + 1}, all rows")
    late_basis = top_right_singular_vectors(P[subsets["late"]], 3, center=True)
    for key in ("early", "early_no_first"):
        angles = np.degrees(principal_angles(top_right_singular_vectors(P[subsets[key]], 3, center=True), late_basis))
        for i, angle in enumerate(angles):
            numbers[f"{key}_late_angle{i + 1}"] = Number(float(angle), ".1f", f"principal angle {i + 1} (degrees) "
                                                         f"between the top-3 PCA subspaces of {key} and late rows")
    labels = {k: v.format(split=split) for k, v in SUBSET_LABELS.items()}
    pca_rows = [(f"learned, {labels[k]}", len(rows), *_pca_row(ratios[k], fractions)) for k, rows in subsets.items()]
    pca_rows.append(("sinusoidal, all positions", len(S), *_pca_row(ratios["sinusoidal"], fractions)))
    k_cols = tuple(f"k for {_pct(f)}%" for f in fractions)
    pca_table = Table(("rows of P", "positions", "PC1 share", "top-3 share", *k_cols), tuple(pca_rows),
                      formats={"PC1 share": ".1%", "top-3 share": ".1%"})

    s_learned = np.linalg.svd(P, compute_uv=False)
    s_sin = np.linalg.svd(S, compute_uv=False)
    for key, s in (("learned", s_learned), ("sinusoidal", s_sin)):
        numbers[f"{key}_effective_rank"] = Number(effective_rank(s), ".1f", f"{key}: effective rank exp H(σ/Σσ)")
        numbers[f"{key}_numerical_rank"] = Number(int(np.sum(s > s[0] * max(P.shape) * np.finfo(float).eps)), "d",
                                                  f"{key}: numerical rank (σ_i > σ_1 · max(n, D) · machine ε)")
        numbers[f"{key}_sigma1_over_sigma4"] = Number(s[0] / s[3], ".2f", f"{key}: σ1 / σ4")
        for k in mass_ks:
            numbers[f"{key}_mass_top{k}"] = Number(singular_mass(s, k), ".2%",
                                                   f"{key}: share of ‖P‖_F² in the top {k} singular directions")
    for i in range(4):
        numbers[f"sigma{i + 1}"] = Number(s_learned[i], ".2f", f"singular value σ{i + 1} of the uncentred P")
    V_centred = top_right_singular_vectors(P, 3, center=True)
    V_raw = top_right_singular_vectors(P, 3)
    numbers["top3_subspace_overlap"] = Number(
        float(np.sum((V_centred.T @ V_raw) ** 2) / 3), ".4f",
        "‖V_c^T V_u‖_F² / 3: overlap of the top-3 right singular subspaces of centred and uncentred P (1 = equal)")
    mass_table = Table(("k", "learned", "sinusoidal"),
                       tuple((k, singular_mass(s_learned, k), singular_mass(s_sin, k)) for k in mass_ks),
                       formats={"learned": ".2%", "sinusoidal": ".2%"})
    arrays = {"ratios_" + k: r for k, r in ratios.items()} | {"s_learned": s_learned, "s_sinusoidal": s_sin}
    return Result(numbers, {"pca_subsets": pca_table, "singular_mass": mass_table}, arrays)


def plot_cumulative_variance(result: Result, shape: ModelShape):
    """Cumulative explained variance against the number of principal components (log x), per row set."""
    fig, ax = plotting.subplots()
    styles = {"all": ("C0", "-"), "no_first": ("C2", ":"), "late": ("C1", "--"), "early": ("C4", "-."),
              "early_no_first": ("C5", ":"), "sinusoidal": ("0.3", "-")}
    split = result.numbers["split"].value
    for key, (color, ls) in styles.items():
        r = result.arrays["ratios_" + key]
        label = "sinusoidal table, same shape" if key == "sinusoidal" else "learned, " + SUBSET_LABELS[key].format(
            split=split)
        k = np.arange(1, len(r) + 1)
        ax.plot(k, np.cumsum(r), color=color, ls=ls, lw=1.4, label=label)
    plotting.cumulative_variance_axes(ax)
    return fig


def plot_singular_values(result: Result, shape: ModelShape):
    """Normalised singular values σ_i/σ_1 of the uncentred learned and sinusoidal tables, log y."""
    fig, ax = plotting.subplots()
    for key, color in (("learned", "C0"), ("sinusoidal", "0.3")):
        s = result.arrays[f"s_{key}"]
        ax.plot(np.arange(1, len(s) + 1), s / s[0], color=color, lw=1.4,
                label=f"{key} (effective rank {result.numbers[f'{key}_effective_rank'].text})")
        ax.axvline(result.numbers[f"{key}_effective_rank"].value, color=color, lw=0.8, ls=":")
    floor = 1e-5
    ax.set_yscale("log")
    ax.set_ylim(floor, 1.5)
    cut = result.numbers["sinusoidal_numerical_rank"].value
    if cut < len(result.arrays["s_sinusoidal"]):
        ax.annotate(f"sinusoidal: numerically zero beyond i = {cut}", (cut, floor), xytext=(6, 12),
                    textcoords="offset points", fontsize=8, color="0.3")
    ax.set_xlabel("index i of the singular value")
    ax.set_ylabel(r"$\sigma_i / \sigma_1$ (log scale)")
    ax.legend(loc="upper right")
    return fig


register(
    "low_rank", "Low rank of the position embeddings: PCA and singular values", low_rank,
    needs=("W_pos",),
    params={"fractions": (0.5, 0.8, 0.9, 0.95, 0.99), "split": 100, "mass_ks": (1, 2, 3, 10, 30, 100),
            "sinusoid_base": 10000.0},
    figures={"cumulative_variance": plot_cumulative_variance, "singular_values": plot_singular_values},
    groups=("first report", "notebook subset", "position table"),
)


def sparse_directions(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_vectors: int, mass: float,
                      sinusoid_base: float) -> Result:
    """Support size, participation ratio and support overlap of the top right singular vectors of P."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    D = P.shape[1]
    V = top_right_singular_vectors(P, n_vectors)
    V_sin = top_right_singular_vectors(sinusoidal_table(*P.shape, base=sinusoid_base), n_vectors)
    s = np.linalg.svd(P, compute_uv=False)[:n_vectors]
    supports = [mass_support(V[:, k], mass) for k in range(n_vectors)]
    sizes = np.array([len(x) for x in supports])
    ratios = np.array([participation_ratio(V[:, k]) for k in range(n_vectors)])
    sin_sizes = np.array([len(mass_support(V_sin[:, k], mass)) for k in range(n_vectors)])
    sin_ratios = np.array([participation_ratio(V_sin[:, k]) for k in range(n_vectors)])
    pairs = [jaccard(supports[i], supports[j]) for i, j in combinations(range(n_vectors), 2)]
    union3 = np.unique(np.concatenate(supports[:3]))
    union = support_union(V, mass)
    column_energy = (P**2).sum(axis=0) / (P**2).sum()
    pct = f"{mass * 100:g}%"
    numbers = {
        "n_vectors": Number(n_vectors, "d", "number of top right singular vectors examined"),
        "mass_percent": Number(mass * 100, "g", "share (in %) of squared mass that defines a vector's support"),
        "support_median": Number(float(np.median(sizes)), "g", f"median number of indices holding {pct} of a vector"),
        "support_min": Number(int(sizes.min()), "d", f"fewest indices holding {pct} of a vector"),
        "support_max": Number(int(sizes.max()), "d", f"most indices holding {pct} of a vector"),
        "support_top3_mean": Number(float(sizes[:3].mean()), ".1f", "mean support size of the top 3 vectors"),
        "pr_median": Number(float(np.median(ratios)), ".1f", "median participation ratio"),
        "pr_min": Number(float(ratios.min()), ".1f", "smallest participation ratio"),
        "pr_max": Number(float(ratios.max()), ".1f", "largest participation ratio"),
        "union_top3": Number(len(union3), "d", "indices in the union of the supports of the top 3 vectors"),
        "union_all": Number(len(union), "d", f"indices in the union of the supports of the top {n_vectors} vectors"),
        "union_all_share_of_d": Number(len(union) / D, ".1%", "that union as a share of the embedding dimensions"),
        "union_all_energy": Number(float(column_energy[union].sum()), ".1%",
                                   "share of ‖P‖_F² in the columns of that union"),
        "jaccard_mean": Number(float(np.mean(pairs)), ".3f", "mean pairwise Jaccard index of the supports"),
        "jaccard_max": Number(float(np.max(pairs)), ".3f", "largest pairwise Jaccard index of the supports"),
        "gaussian_support": Number(gaussian_support_fraction(mass) * D, ".0f",
                                   f"indices holding {pct} of a random direction in R^D (large-D limit)"),
        "gaussian_pr": Number((D + 2) / 3, ".0f", "participation ratio of a random direction, (D + 2) / 3"),
        "sinusoidal_support_median": Number(float(np.median(sin_sizes)), "g",
                                            "sinusoidal table: median support size of its top vectors"),
        "sinusoidal_support_top3_mean": Number(float(sin_sizes[:3].mean()), ".1f",
                                               "sinusoidal table: mean support size of its top 3 vectors"),
        "sinusoidal_pr_median": Number(float(np.median(sin_ratios)), ".1f",
                                       "sinusoidal table: median participation ratio of its top vectors"),
    }
    rows = tuple((k + 1, s[k], int(sizes[k]), ratios[k], int(np.abs(V[:, k]).argmax()),
                  float(np.abs(V[:, k]).max() ** 2), int(sin_sizes[k]), sin_ratios[k]) for k in range(n_vectors))
    table = Table(("vector", "σ", f"indices for {pct}", "participation ratio", "largest index", "its share",
                   f"sinusoidal: indices for {pct}", "sinusoidal: participation ratio"), rows,
                  formats={"σ": ".2f", "participation ratio": ".1f", "its share": ".1%",
                           "sinusoidal: participation ratio": ".1f"})
    overlap = np.array([[jaccard(a, b) for b in supports] for a in supports])
    return Result(numbers, {"sparsity": table}, {"V": V, "sizes": sizes, "overlap": overlap})


def plot_vectors(result: Result, shape: ModelShape, n_shown: int = 4):
    """The top right singular vectors over the embedding indices; the indices of each 90 % support in colour."""
    V, sizes = result.arrays["V"], result.arrays["sizes"]
    mass = result.numbers["mass_percent"].value / 100
    fig, axes = plotting.subplots(n_shown, 1, figsize=(plotting.MAX_WIDTH, 1.5 * n_shown + 0.8), sharex=True)
    lim = float(np.abs(V[:, :n_shown]).max()) * 1.05
    for k, ax in enumerate(axes):
        v = V[:, k]
        inside = np.zeros(len(v), dtype=bool)
        inside[mass_support(v, mass)] = True
        ax.vlines(np.flatnonzero(~inside), 0, v[~inside], color="0.65", lw=0.6)
        ax.vlines(np.flatnonzero(inside), 0, v[inside], color="C3", lw=1.0)
        ax.axhline(0, color="0.3", lw=0.5)
        ax.set_ylim(-lim, lim)
        ax.set_ylabel(f"v{k + 1}")
        ax.set_title(f"{sizes[k]} indices hold {mass:.0%} of ‖v{k + 1}‖²", loc="right", fontsize=8, color="C3",
                     pad=2)
    axes[-1].set_xlabel("embedding index")
    return fig


def plot_overlap(result: Result, shape: ModelShape):
    """Jaccard index between the 90 % supports of the top right singular vectors."""
    overlap = result.arrays["overlap"]
    n = len(overlap)
    fig, ax = plotting.subplots(figsize=(4.8, 4.0), layout="compressed")  # keeps the square's labels inside
    image = ax.imshow(overlap, cmap=plotting.SEQUENTIAL, vmin=0, vmax=1, interpolation="nearest")
    ticks = np.arange(n)
    ax.set_xticks(ticks, [f"v{i + 1}" for i in ticks], fontsize=8)
    ax.set_yticks(ticks, [f"v{i + 1}" for i in ticks], fontsize=8)
    for i in range(n):
        for j in range(n):
            ax.text(j, i, f"{overlap[i, j]:.2f}", ha="center", va="center", fontsize=8,
                    color="black" if overlap[i, j] > 0.5 else "white")
    plotting.colorbar(fig, image, ax, "Jaccard index of the supports")
    return fig


register(
    "sparse_directions", "Sparsity of the embedding-side singular directions", sparse_directions,
    needs=("W_pos",), params={"n_vectors": 10, "mass": 0.9, "sinusoid_base": 10000.0},
    figures={"vectors": plot_vectors, "overlap": plot_overlap},
    groups=("first report",),
)
