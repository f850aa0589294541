"""Cosine-similarity structure of the position matrix P, over positions and over embedding dimensions.

Two similarity matrices: over positions, C_pos[i, j] = cos(p_i, p_j) for the rows of P
(n_ctx × n_ctx), and over dimensions, C_dim[a, b] = cos(P[:, a], P[:, b]) for its columns
(D × D). Their distributions use the strict upper triangle (each unordered pair once, exact
zeros kept). Three readings of them:

* the most similar pairs of dimensions, and what such a pair looks like as a trajectory
  (dimension a against dimension b over positions);
* the similarity against offset, m(k) = mean_i cos(p_i, p_{i+k}), with position 0 left out
  (it is an outlier in both models) and, for comparison, kept in; "ringing" is an oscillation
  of m(k) on top of its smooth trend, measured on the residual after a centred moving average;
* each dimension as a function of position, with its smoothness measured by the lag-1
  autocorrelation r₁ = Σ_n (x_n − x̄)(x_{n+1} − x̄) / Σ_n (x_n − x̄)².
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.linalg import cosine_matrix, mean_by_offset, upper_triangle
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape


def top_pairs(C: np.ndarray, n: int, by_abs: bool) -> list[tuple[int, int, float]]:
    """The n pairs (i < j) with the largest C[i, j] (or |C[i, j]|), as (i, j, C[i, j]); ties keep index order."""
    rows, cols = np.triu_indices(C.shape[0], k=1)
    values = upper_triangle(C)
    key = np.abs(values) if by_abs else values
    order = np.argsort(-key, kind="stable")[:n]
    return [(int(rows[k]), int(cols[k]), float(values[k])) for k in order]


def lag1_autocorrelation(X: np.ndarray) -> np.ndarray:
    """r₁ of every column of X over its rows (float64); a constant column raises."""
    X = np.asarray(X, dtype=np.float64)
    Z = X - X.mean(axis=0)
    denominator = (Z * Z).sum(axis=0)
    if np.any(denominator == 0):
        raise ValueError("the lag-1 autocorrelation of a constant column is undefined")
    return (Z[1:] * Z[:-1]).sum(axis=0) / denominator


def moving_average(x: np.ndarray, window: int) -> np.ndarray:
    """Centred moving average over an odd `window`; only the fully covered points (len(x) - window + 1)."""
    if window < 1 or window % 2 == 0 or window > len(x):
        raise ValueError(f"window must be odd and between 1 and {len(x)}, got {window}")
    return np.convolve(x, np.ones(window) / window, mode="valid")


def ringing(curve: np.ndarray, window: int, max_period: float) -> tuple[float, float, np.ndarray]:
    """Period (in samples) and RMS amplitude of the oscillation of `curve` around its moving average.

    The residual r = curve − moving_average(curve, window) (on the fully covered points) is
    Fourier-transformed (zero-padded to 16× its length, mean removed); the period is 1/f at the
    highest peak among periods in [2, max_period]. Returns (period, rms of r, r).
    """
    curve = np.asarray(curve, dtype=np.float64)
    residual = curve[window // 2: len(curve) - window // 2] - moving_average(curve, window)
    n_fft = 16 * len(residual)
    power = np.abs(np.fft.rfft(residual - residual.mean(), n=n_fft)) ** 2
    freqs = np.fft.rfftfreq(n_fft)
    band = (freqs >= 1 / max_period) & (freqs <= 0.5)
    peak = freqs[band][np.argmax(power[band])]
    return float(1 / peak), float(np.sqrt(np.mean(residual**2))), residual


def first_local_extrema(curve: np.ndarray, window: int) -> tuple[int, int]:
    """Indices (into `curve`) of the first local minimum and the first local maximum after it, of the smoothed curve.

    Smoothing: centred moving average over `window` points; -1 where none exists.
    """
    smooth = moving_average(curve, window)
    slope = np.sign(np.diff(smooth))
    minima = np.flatnonzero((slope[:-1] < 0) & (slope[1:] > 0)) + 1
    if not minima.size:
        return -1, -1
    maxima = np.flatnonzero((slope[:-1] > 0) & (slope[1:] < 0)) + 1
    maxima = maxima[maxima > minima[0]]
    shift = window // 2
    return int(minima[0] + shift), int(maxima[0] + shift) if maxima.size else -1


def _distribution_numbers(values: np.ndarray, kind: str, threshold: float) -> dict[str, Number]:
    return {
        f"{kind}_n_pairs": Number(values.size, "d", f"unique off-diagonal pairs ({kind})"),
        f"{kind}_mean": Number(values.mean(), ".3f", f"mean off-diagonal cosine ({kind})"),
        f"{kind}_std": Number(values.std(), ".3f", f"standard deviation of off-diagonal cosines ({kind})"),
        f"{kind}_frac_abs_above": Number(float(np.mean(np.abs(values) > threshold)), ".1%",
                                         f"fraction of off-diagonal |cos| > threshold ({kind})"),
        f"{kind}_max": Number(values.max(), ".4f", f"largest off-diagonal cosine ({kind})"),
        f"{kind}_min": Number(values.min(), ".4f", f"smallest off-diagonal cosine ({kind})"),
    }


def similarity(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, threshold: float, n_top: int,
               trajectory_ranks: tuple[int, ...], smooth_window: int, max_ringing_period: float,
               slow_window: int, n_random_dims: int, n_extreme_dims: int, seed: int,
               tutorial_ranks: tuple[int, int, int]) -> Result:
    """Similarity matrices and distributions, top dimension pairs, the offset curve, and smoothness per dimension."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    C_pos, C_dim = cosine_matrix(P), cosine_matrix(P.T)
    u_pos, u_dim = upper_triangle(C_pos), upper_triangle(C_dim)
    numbers = {"threshold": Number(threshold, "g", "|cos| threshold for the 'strongly similar' fraction")}
    numbers |= _distribution_numbers(u_pos, "positions", threshold)
    numbers |= _distribution_numbers(u_dim, "dimensions", threshold)

    pair_numbers, tables = _pairs(C_dim, n_top, trajectory_ranks, tutorial_ranks)
    offset_numbers, (mean, std, counts, mean_all, residual) = _offsets(C_pos, smooth_window, max_ringing_period,
                                                                       slow_window)
    dimension_numbers, tables["dimension_selection"], (r1, random_dims, smoothest, noisiest) = _dimensions(
        P, n_random_dims, n_extreme_dims, seed)
    numbers |= pair_numbers | offset_numbers | dimension_numbers
    arrays = {"C_pos": C_pos, "C_dim": C_dim, "u_pos": u_pos, "u_dim": u_dim, "P": P,
              "offset_mean": mean, "offset_std": std, "offset_counts": counts, "offset_mean_all": mean_all,
              "residual": residual, "r1": r1, "random_dims": random_dims, "smoothest": smoothest,
              "noisiest": noisiest}
    return Result(numbers, tables, arrays)


def _pairs(C_dim: np.ndarray, n_top: int, trajectory_ranks: tuple[int, ...], tutorial_ranks: tuple[int, int, int]):
    """(numbers, tables): the most similar and most anti-similar pairs of dimensions."""
    # most similar pairs of dimensions
    by_cos, by_abs = top_pairs(C_dim, n_top, by_abs=False), top_pairs(C_dim, max(n_top, *trajectory_ranks),
                                                                        by_abs=True)
    anti = top_pairs(-C_dim, 1, by_abs=False)[0]
    pair_formats = {"cosine": ".4f"}
    tables = {
        "top_pairs_cos": Table(("rank", "dimension a", "dimension b", "cosine"),
                               tuple((r + 1, a, b, c) for r, (a, b, c) in enumerate(by_cos)), pair_formats),
        "top_pairs_abs": Table(("rank", "dimension a", "dimension b", "cosine"),
                               tuple((r + 1, a, b, c) for r, (a, b, c) in enumerate(by_abs[:n_top])), pair_formats),
        "trajectory_pairs": Table(("rank by abs(cosine)", "dimension a", "dimension b", "cosine"),
                                  tuple((r, *by_abs[r - 1]) for r in trajectory_ranks), pair_formats),
    }
    # the selection a tutorial printed as its "top 10": 0-based ranks np.linspace(first, last, count) of the
    # ranking by signed cosine (every ~22nd pair of the top 200 for (0, 200, 10))
    first, last, count = tutorial_ranks
    picked = np.linspace(first, last, count).astype(int)
    by_signed = top_pairs(C_dim, int(picked.max()) + 1, by_abs=False)
    tables["tutorial_ranks"] = Table(("rank by signed cosine", "dimension a", "dimension b", "cosine"),
                                     tuple((int(r) + 1, *by_signed[r]) for r in picked), pair_formats)
    numbers = {
        "top_pair_a": Number(by_cos[0][0], "d", "dimension a of the most similar pair"),
        "top_pair_b": Number(by_cos[0][1], "d", "dimension b of the most similar pair"),
        "top_pair_cos": Number(by_cos[0][2], ".4f", "cosine of the most similar pair of dimensions"),
        "top_anti_a": Number(anti[0], "d", "dimension a of the most anti-similar pair"),
        "top_anti_b": Number(anti[1], "d", "dimension b of the most anti-similar pair"),
        "top_anti_cos": Number(-anti[2], ".4f", "cosine of the most anti-similar pair of dimensions"),
        "n_top": Number(n_top, "d", "rows in each top-pairs table"),
        "n_trajectories": Number(len(trajectory_ranks), "d", "pairs drawn as trajectories"),
    }

    return numbers, tables


def _offsets(C_pos: np.ndarray, smooth_window: int, max_ringing_period: float, slow_window: int):
    """(numbers, curves): mean similarity against offset, its slow extrema and its ringing."""
    n_pos = len(C_pos)
    # similarity against offset; position 0 excluded, and kept for comparison
    mean, std, counts = mean_by_offset(C_pos, exclude=(0,))
    mean_all, _, _ = mean_by_offset(C_pos)
    half = n_pos // 2  # offsets 1..n/2: every mean averages at least n/2 - 1 pairs
    period, amplitude, residual = ringing(mean[:half], smooth_window, max_ringing_period)
    k_min, k_max = first_local_extrema(mean[:n_pos - n_pos // 8], slow_window)
    below = np.flatnonzero(mean < 0)
    numbers = {}
    if k_min >= 0 and k_max >= 0:  # a curve without a dip and a rise after it has no slow oscillation to report
        numbers |= {
            "offset_first_min": Number(k_min + 1, "d", "offset of the first local minimum of the smoothed curve"),
            "offset_first_min_value": Number(mean[k_min], ".3f", "mean cosine at that offset"),
            "offset_next_max": Number(k_max + 1, "d", "offset of the next local maximum of the smoothed curve"),
            "offset_next_max_value": Number(mean[k_max], ".3f", "mean cosine at that offset"),
        }
    numbers |= {
        "offset_first_negative": Number(int(below[0]) + 1 if below.size else -1, "d",
                                        "first offset k at which the mean cos(p_i, p_i+k) (position 0 out) is < 0"),
        "offset_mean_1": Number(mean[0], ".3f", "mean cosine at offset 1 (position 0 out)"),
        "offset_mean_10": Number(mean[9], ".3f", "mean cosine at offset 10 (position 0 out)"),
        "offset_mean_100": Number(mean[99], ".3f", "mean cosine at offset 100 (position 0 out)"),
        "slow_window": Number(slow_window, "d", "moving-average window (tokens) for the slow extrema"),
        "ringing_period": Number(period, ".2f", "dominant period (tokens) of the offset-curve residual"),
        "ringing_amplitude": Number(amplitude, ".4f", "RMS of the residual of the offset curve"),
        "ringing_window": Number(smooth_window, "d", "moving-average window (tokens) removed before the ringing"),
        "ringing_max_offset": Number(half, "d", "largest offset used for the ringing"),
        "offset_pos0_max_change": Number(float(np.nanmax(np.abs(mean_all - mean))), ".3f",
                                         "largest change of the mean curve when position 0 is kept"),
        "offset_pos0_max_change_at": Number(int(np.nanargmax(np.abs(mean_all - mean))) + 1, "d",
                                            "offset at which keeping position 0 changes the mean most"),
    }

    return numbers, (mean, std, counts, mean_all, residual)


def _dimensions(P: np.ndarray, n_random_dims: int, n_extreme_dims: int, seed: int):
    """(numbers, table, arrays): how smooth each dimension is over positions (position 0 left out)."""
    d = P.shape[1]
    # individual dimensions over positions (position 0 left out)
    r1 = lag1_autocorrelation(P[1:])
    energy = (P[1:] ** 2).sum(axis=0)
    order = np.argsort(r1, kind="stable")
    rng = np.random.default_rng(seed)
    random_dims = np.sort(rng.choice(d, size=n_random_dims, replace=False))
    smoothest, noisiest = order[::-1][:n_extreme_dims], order[:n_extreme_dims]
    table = Table(
        ("selection", "dimension", "lag-1 autocorrelation"),
        tuple((kind, int(i), r1[i]) for kind, dims in (("random", random_dims), ("smoothest", smoothest),
                                                       ("noisiest", noisiest)) for i in dims),
        {"lag-1 autocorrelation": ".3f"})
    numbers = {
        "r1_median": Number(float(np.median(r1)), ".3f", "median lag-1 autocorrelation over dimensions"),
        "r1_min": Number(r1.min(), ".3f", "smallest lag-1 autocorrelation"),
        "r1_max": Number(r1.max(), ".4f", "largest lag-1 autocorrelation"),
        "r1_frac_above_09": Number(float(np.mean(r1 > 0.9)), ".1%", "fraction of dimensions with r1 > 0.9"),
        "r1_frac_below_05": Number(float(np.mean(r1 < 0.5)), ".1%", "fraction of dimensions with r1 < 0.5"),
        "energy_frac_smooth": Number(float(energy[r1 > 0.9].sum() / energy.sum()), ".1%",
                                     "share of Σ P² (positions ≥ 1) in the dimensions with r1 > 0.9"),
        "energy_frac_noisy": Number(float(energy[r1 < 0.5].sum() / energy.sum()), ".1%",
                                    "share of Σ P² (positions ≥ 1) in the dimensions with r1 < 0.5"),
        "smoothest_dim": Number(int(smoothest[0]), "d", "dimension with the largest r1"),
        "noisiest_dim": Number(int(noisiest[0]), "d", "dimension with the smallest r1"),
        "n_random_dims": Number(n_random_dims, "d", "randomly chosen dimensions plotted"),
        "seed": Number(seed, "d", "seed of the random choice of dimensions"),
    }
    return numbers, table, (r1, random_dims, smoothest, noisiest)


def plot_heatmaps(result: Result, shape: ModelShape):
    """C_pos and C_dim side by side on one diverging −1..1 scale (20 colour steps of 0.1: light SVGs)."""
    cmap = plotting.pyplot().get_cmap(plotting.DIVERGING, 20)
    fig, axes = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, plotting.PANEL_HEIGHT))
    for ax, key, what in zip(axes, ("C_pos", "C_dim"), ("position", "embedding dimension")):
        C = result.arrays[key]
        image = ax.imshow(C, cmap=cmap, vmin=-1, vmax=1, interpolation="nearest")
        ax.set_xlabel(what)
        ax.set_ylabel(what)
        ax.set_title(f"over {what}s ({C.shape[0]} × {C.shape[0]})")
    fig.colorbar(image, ax=axes, fraction=0.03, pad=0.02).set_label("cosine similarity")
    return fig


def plot_distributions(result: Result, shape: ModelShape):
    """Densities of the unique off-diagonal cosines, over positions and over dimensions, on one axis."""
    fig, ax = plotting.subplots()
    bins = np.linspace(-1, 1, 101)
    for key, label, color in (("u_pos", "between positions", "C0"), ("u_dim", "between dimensions", "C1")):
        values = result.arrays[key]
        ax.hist(values, bins=bins, density=True, histtype="step", lw=1.5, color=color,
                label=f"{label} ({values.size:,} pairs)")
    ax.set_xlabel("cosine similarity (off-diagonal, each pair once)")
    ax.set_ylabel("density")
    ax.set_xlim(-1, 1)
    ax.legend(loc="upper left")
    return fig


def plot_trajectories(result: Result, shape: ModelShape):
    """Dimension a against dimension b over positions, coloured by position, for the documented ranks."""
    table = result.tables["trajectory_pairs"]
    P = result.arrays["P"]
    n = len(table.rows)
    ncols = 3
    nrows = -(-n // ncols)
    fig, axes = plotting.subplots(nrows, ncols, figsize=(plotting.MAX_WIDTH, plotting.PANEL_HEIGHT),
                                  squeeze=False)
    positions = np.arange(P.shape[0])
    for ax, (rank, a, b, c) in zip(axes.flat, table.rows):
        points = ax.scatter(P[:, a], P[:, b], c=positions, cmap=plotting.POSITION, s=3, rasterized=True)
        ax.set_xlabel(f"dimension {a}")
        ax.set_ylabel(f"dimension {b}")
        ax.set_title(f"rank {rank}: cos = {c:.3f}".replace("-", "\N{MINUS SIGN}"))
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    fig.colorbar(points, ax=axes, fraction=0.03, pad=0.02).set_label("position")
    return fig


def plot_offset(result: Result, shape: ModelShape):
    """Mean ± std of cos(p_i, p_i+k) against k (position 0 out); what keeping position 0 changes; the residual."""
    mean, std = result.arrays["offset_mean"], result.arrays["offset_std"]
    mean_all, residual = result.arrays["offset_mean_all"], result.arrays["residual"]
    k = np.arange(1, len(mean) + 1)
    fig, (ax, ax_0, ax_r) = plotting.subplots(3, 1, figsize=(plotting.MAX_WIDTH, plotting.PANEL_HEIGHT), sharex=True,
                                              gridspec_kw={"height_ratios": (2, 1, 1)})
    ax.fill_between(k, mean - std, mean + std, color="C0", alpha=0.25, lw=0, label="± 1 std over pairs")
    ax.plot(k, mean, color="C0", lw=1.2, label="mean")
    ax.set_ylabel("cos(p_i, p_j)")
    ax.legend(loc="upper right")
    ax_0.plot(k, mean_all - mean, color="C3", lw=0.9)
    ax_0.set_ylabel("change")
    window = result.numbers["ringing_window"].value
    ax_r.plot(np.arange(1 + window // 2, 1 + window // 2 + len(residual)), residual, color="C2", lw=0.9)
    ax_r.set_ylabel("residual")
    ax_r.set_xlabel("offset |i − j| (tokens)")
    for a in (ax, ax_0, ax_r):
        a.axhline(0, color="0.5", lw=0.6)
    ax.set_xlim(0, len(mean) + 1)
    return fig


def plot_dimensions_random(result: Result, shape: ModelShape):
    """The randomly selected dimensions against position (position 0 left out)."""
    return _dimension_panels(result, [("random", result.arrays["random_dims"])])


def plot_dimensions_extremes(result: Result, shape: ModelShape):
    """The smoothest and the noisiest dimensions by r₁ against position (position 0 left out)."""
    return _dimension_panels(result, [("smoothest", result.arrays["smoothest"]), ("noisiest", result.arrays["noisiest"])])


def _dimension_panels(result: Result, groups):
    P, r1 = result.arrays["P"], result.arrays["r1"]
    dims = [(kind, int(i)) for kind, group in groups for i in group]
    ncols = 3
    nrows = -(-len(dims) // ncols)
    fig, axes = plotting.subplots(nrows, ncols, figsize=(plotting.MAX_WIDTH, plotting.PANEL_HEIGHT), sharex=True,
                                  squeeze=False)
    positions = np.arange(1, P.shape[0])
    for ax, (kind, i) in zip(axes.flat, dims):
        ax.plot(positions, P[1:, i], lw=0.7, color="C0" if kind != "noisiest" else "C1")
        ax.set_title(f"{kind} {i}: r₁ = {r1[i]:.3f}".replace("-", "\N{MINUS SIGN}"), fontsize=plotting.MIN_FONT)
    for ax in axes[-1]:
        ax.set_xlabel("position")
    for ax in axes[:, 0]:
        ax.set_ylabel("value")
    return fig


def plot_smoothness(result: Result, shape: ModelShape):
    """Histogram of r₁ over all dimensions, with the smoothest and noisiest marked."""
    r1 = result.arrays["r1"]
    fig, ax = plotting.subplots()
    ax.hist(r1, bins=np.linspace(min(r1.min(), 0), 1, 61), color="C0")
    for key, color in (("smoothest", "C2"), ("noisiest", "C1")):
        for i in result.arrays[key]:
            ax.axvline(r1[i], color=color, lw=0.6, ls=":")
    ax.axvline(float(np.median(r1)), color="k", lw=1, ls="--",
               label=f"median {np.median(r1):.3f}".replace("-", "\N{MINUS SIGN}"))
    ax.set_xlabel("lag-1 autocorrelation r₁ of a dimension over positions 1…n−1")
    ax.set_ylabel("number of dimensions")
    ax.legend(loc="upper left")
    return fig


register(
    "similarity", "Cosine similarity over positions and dimensions", similarity,
    needs=("W_pos",),
    params={"threshold": 0.5, "n_top": 10, "trajectory_ranks": (1, 2, 3, 10, 100, 1000), "smooth_window": 15,
            "max_ringing_period": 32.0, "slow_window": 51, "n_random_dims": 6, "n_extreme_dims": 3, "seed": 0,
            "tutorial_ranks": (0, 200, 10)},
    figures={"heatmaps": plot_heatmaps, "distributions": plot_distributions, "trajectories": plot_trajectories,
             "offset": plot_offset, "dimensions_random": plot_dimensions_random,
             "dimensions_extremes": plot_dimensions_extremes, "smoothness": plot_smoothness},
    groups=("first report", "notebook subset", "position table"),
)
