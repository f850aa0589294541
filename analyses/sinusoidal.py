"""The sinusoidal position encoding of Vaswani et al. (2017), its identities, and a comparison with learned tables.

PE(n, 2i) = sin(n ω_i), PE(n, 2i+1) = cos(n ω_i), with ω_i = L^(-2i/D), L = 10000.

Three identities follow from sin² + cos² = 1 and the angle-addition formulas:
‖PE(n)‖ = √(D/2) for every n; PE(n+k) = M_k PE(n) with M_k block-diagonal of 2×2
rotations by k ω_i (independent of n); hence PE(n)·PE(n+k) = Σ_i cos(k ω_i) depends on
the offset k only. The analyses check each identity numerically and set the table
beside a model's learned position matrix of the same shape.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.linalg import (
    components_for,
    cosine_matrix,
    explained_variance_ratio,
    mean_by_offset,
)
from analyses.toolkit.sinusoids import encode, frequencies, sinusoidal_table
from analyses.engine.registry import register
from analyses.engine.results import Accuracy, Number, Result, Table
from analyses.engine.sources import ModelShape


def shift_matrix(k: float, d_model: int, base: float = 10000.0) -> np.ndarray:
    """M_k, the [D, D] block-diagonal matrix with PE(n + k) = M_k PE(n) for every n.

    On the pair (sin nω, cos nω) the block is [[cos kω, sin kω], [-sin kω, cos kω]]:
    sin((n+k)ω) = sin nω cos kω + cos nω sin kω, cos((n+k)ω) = cos nω cos kω - sin nω sin kω.
    """
    omega = frequencies(d_model, base)
    c, s = np.cos(k * omega), np.sin(k * omega)
    M = np.zeros((d_model, d_model))
    even = np.arange(0, d_model, 2)
    M[even, even], M[even, even + 1] = c, s
    M[even + 1, even], M[even + 1, even + 1] = -s, c
    return M


def offset_dot(offsets: np.ndarray, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE(n)·PE(n+k) = Σ_i cos(k ω_i), for each offset k (the same for every n)."""
    k = np.asarray(offsets, dtype=np.float64).reshape(-1)
    return np.cos(k[:, None] * frequencies(d_model, base)[None, :]).sum(axis=1)


def column_period(column: int, d_model: int, base: float = 10000.0) -> float:
    """Period in positions of column j of the table: 2π / ω_⌊j/2⌋ (columns 2i and 2i + 1 share ω_i)."""
    if not 0 <= column < d_model:
        raise ValueError(f"column must lie in 0..{d_model - 1}, got {column}")
    return float(2 * np.pi / frequencies(d_model, base)[column // 2])


EPS = float(np.finfo(np.float64).eps)


def coordinate_error(largest_position: float) -> float:
    """Worst-case error of one coordinate of PE(n) for n ≤ `largest_position`: the angle n·ω is rounded with
    relative error ε, an absolute error up to ε·n, which sin and cos pass on; a factor 4 covers their own
    rounding and the product: 4ε(n + 1)."""
    return 4 * EPS * (largest_position + 1)


def rounding_bounds(n_positions: int, d_model: int, offsets: tuple[int, ...]) -> dict[str, float]:
    """Worst-case float64 errors of the identities over a table of N rows (the limits the cited checks are
    printed as, since the errors themselves are rounding noise that differs between machines):

    norm    | ‖PE(n)‖ − √(D/2) |      ≤ D ε √(D/2)            (D squares summed, sin² + cos² = 1 to 2ε)
    shift   ‖PE(n+k) − M_k PE(n)‖   ≤ √D · 4ε(N + k)        (per offset k; the coordinate error at n + k)
    rotation |M_kᵀM_k − I|           ≤ 4ε                    (c² + s² of one rounded angle)
    dot     |PE(m)·PE(n) − Σ cos|    ≤ D (2c + ε D/2)        (c = coordinate error at N − 1)
    spread  std over n of the cosine ≤ dot / (D/2)
    """
    D, N = d_model, n_positions
    dot = D * (2 * coordinate_error(N - 1) + EPS * D / 2)
    return {"norm": D * EPS * np.sqrt(D / 2), "rotation": 4 * EPS, "dot": dot, "spread": dot / (D / 2),
            **{f"shift_{k}": np.sqrt(D) * coordinate_error(N - 1 + k) for k in offsets}}


ROUNDING = "the worst case of float64 rounding of the angles and sums (sinusoidal.rounding_bounds)"


def sinusoidal_identities(*, n_positions: int, d_model: int, base: float, offsets: tuple[int, ...],
                          example_columns: tuple[int, ...]) -> Result:
    """The norm, shift and offset identities checked over a whole table in float64, each cited as the
    worst-case rounding bound that its largest error stays below (see `rounding_bounds`).

    The shift identity is checked for every row n and each offset k in `offsets`, which may exceed
    the table (PE(n + k) is then evaluated directly). The dot-product identity is checked on every
    pair of rows; `mean_by_offset` then gives the spread of the cosine over n at each offset.
    """
    S = sinusoidal_table(n_positions, d_model, base)
    n = np.arange(n_positions)
    norm = np.sqrt(d_model / 2)
    bounds = rounding_bounds(n_positions, d_model, offsets)
    norm_error = np.abs(np.linalg.norm(S, axis=1) - norm).max()

    rows, shift_errors, rotation_errors = [], [], []
    for k in offsets:
        M = shift_matrix(k, d_model, base)
        shift_errors.append(np.linalg.norm(encode(n + k, d_model, base) - S @ M.T, axis=1).max())
        rotation_errors.append(np.abs(M.T @ M - np.eye(d_model)).max())
        rows.append((int(k), bounds[f"shift_{k}"], "yes" if shift_errors[-1] < bounds[f"shift_{k}"] else "no",
                     "yes" if rotation_errors[-1] < bounds["rotation"] else "no"))
    columns = ("offset k", "bound √D·4ε(N+k) on ‖PE(n+k) − M_k PE(n)‖", "every n within the bound",
               "M_kᵀM_k − I within 4ε")
    shift = Table(columns, tuple(rows), formats={columns[1]: "sci1"})

    closed = offset_dot(np.arange(n_positions), d_model, base)
    dot_error = np.abs(S @ S.T - closed[np.abs(n[:, None] - n[None, :])]).max()
    C = cosine_matrix(S)
    means, stds, _ = mean_by_offset(C)
    curve = closed[1:] / norm**2
    first_negative = int(np.argmax(curve < 0)) + 1 if np.any(curve < 0) else 0
    numbers = {
        "n_positions": Number(n_positions, "d", "rows of the sinusoidal table checked"),
        "d_model": Number(d_model, "d", "dimension D of the table"),
        "base": Number(base, "g", "base L of the frequencies"),
        "norm": Number(norm, ".4f", "the constant row norm √(D/2)"),
        "norm_sq": Number(d_model // 2, "d", "the squared row norm D/2"),
        "norm_max_error": Number.bound(norm_error, bounds["norm"], "max over rows of |‖PE(n)‖ − √(D/2)|", ROUNDING),
        "n_offsets": Number(len(offsets), "d", "number of offsets k at which the shift identity is checked"),
        "offset_max": Number(max(offsets), "d", "largest offset checked"),
        "shift_max_error": Number.bound(max(shift_errors), bounds[f"shift_{max(offsets)}"],
                                        "max over n, k of ‖PE(n+k) − M_k PE(n)‖, below the bound at the largest k",
                                        ROUNDING),
        "orthogonality_max_error": Number.bound(max(rotation_errors), bounds["rotation"],
                                                "max over k of |M_kᵀM_k − I|", ROUNDING),
        "eps": Number(EPS, "sci2", "float64 machine epsilon"),
        "dot_max_error": Number.bound(dot_error, bounds["dot"], "max over all pairs of |PE(m)·PE(n) − Σ cos((n−m)ω_i)|",
                                      ROUNDING),
        "offset_spread_max": Number.bound(np.nanmax(stds), bounds["spread"],
                                          "max over k of the std over n of cos(PE(n), PE(n+k))", ROUNDING),
        "cos_offset_1": Number(curve[0], ".4f", "cosine between neighbouring positions, (2/D) Σ cos ω_i"),
        "first_negative_offset": Number(first_negative, "d", "smallest offset with a negative cosine (0: none)"),
        "cos_min": Number(curve.min(), ".4f", "smallest cosine over the offsets in the table"),
        "fastest_period": Number(column_period(0, d_model, base), ".2f",
                                 "period in positions of the fastest pair, 2π"),
        "slowest_period": Number(column_period(d_model - 1, d_model, base), ".0f",
                                 "period in positions of the slowest pair, 2π L^(1 − 2/D)"),
        "nyquist_period": Number(2, "d", "shortest period that integer positions can represent (Nyquist)"),
    }
    periods = Table(("column", "pair i", "period (positions)", "cycles in the table"),
                    tuple((c, c // 2, column_period(c, d_model, base), n_positions / column_period(c, d_model, base))
                          for c in example_columns),
                    formats={"period (positions)": ".0f", "cycles in the table": ".2f"})
    for c in example_columns:
        numbers[f"period_column_{c}"] = Number(column_period(c, d_model, base), ".0f", f"period of column {c}")
    return Result(numbers, {"shift": shift, "column_periods": periods}, {"S": S, "C": C, "means": means, "curve": curve})


def plot_table(result: Result, shape: ModelShape | None):
    """The table: fast sinusoids in the first columns, slowly varying (nearly constant) ones in the last."""
    S = result.arrays["S"]
    fig, ax = plotting.subplots(figsize=(6.4, 4.6))
    image = ax.imshow(S, aspect="auto", cmap=plotting.DIVERGING, vmin=-1, vmax=1, interpolation="nearest",
                      rasterized=True)
    ax.set_xlabel("embedding dimension (pair i = columns 2i, 2i+1)")
    ax.set_ylabel("position n")
    plotting.colorbar(fig, image, ax, "PE(n, j)")
    return fig


def plot_cosines(result: Result, shape: ModelShape | None):
    """cos(PE(m), PE(n)) is constant along every diagonal: it depends on n − m only."""
    C = result.arrays["C"]
    fig, ax = plotting.subplots(figsize=(5.6, 4.6), layout="compressed")  # keeps the square's labels inside
    image = ax.imshow(C, cmap=plotting.DIVERGING, vmin=-1, vmax=1, interpolation="nearest", rasterized=True)
    ax.set_xlabel("position n")
    ax.set_ylabel("position m")
    plotting.colorbar(fig, image, ax, "cosine similarity")
    return fig


register(
    "sinusoidal_identities", "Identities of the sinusoidal table, checked numerically", sinusoidal_identities,
    scope="common",
    params={"n_positions": 1024, "d_model": 768, "base": 10000.0,
            "offsets": (0, 1, 2, 3, 7, 64, 500, 1023, 1024, 5000, 100000),
            "example_columns": (0, 200, 300, 333, 400, 466, 500, 600, 767)},
    figures={"table": plot_table, "cosines": plot_cosines},
    groups=("first report",),
)


def sinusoidal_components(*, d_model: int, n_positions: tuple[int, ...], bases: tuple[float, ...],
                          fraction: float) -> Result:
    """Principal components needed for `fraction` of the variance of sinusoidal tables of several shapes and bases.

    "Centred" is PCA (the mean row removed, as `explained_variance_ratio` does); "uncentred" uses the
    squared singular values of the raw table, a convention some studies use.
    """
    rows = []
    for base in bases:
        for n in n_positions:
            S = sinusoidal_table(n, d_model, base)
            s = np.linalg.svd(S, compute_uv=False) ** 2
            rows.append((n, base, components_for(explained_variance_ratio(S), fraction),
                         components_for(s / s.sum(), fraction)))
    table = Table(("positions N", "base L", "components (centred)", "components (uncentred)"), tuple(rows),
                  formats={"base L": "g"})
    numbers = {"fraction": Number(fraction, ".0%", "fraction of the variance"),
               "d_model": Number(d_model, "d", "dimension D of every table"),
               "min_components": Number(min(min(r[2], r[3]) for r in rows), "d", "smallest count in the table"),
               "max_components": Number(max(max(r[2], r[3]) for r in rows), "d", "largest count in the table")}
    for n, base, centred, uncentred in rows:
        numbers[f"centred_n{n}_base{base:g}"] = Number(centred, "d", f"centred count, N = {n}, L = {base:g}")
        numbers[f"uncentred_n{n}_base{base:g}"] = Number(uncentred, "d", f"uncentred count, N = {n}, L = {base:g}")
    return Result(numbers, {"components": table})


register(
    "sinusoidal_components", "How many components a sinusoidal table needs", sinusoidal_components,
    scope="common",
    params={"d_model": 768, "n_positions": (256, 512, 1024, 2048), "bases": (1000.0, 10000.0), "fraction": 0.9},
    groups=("first report",),
)


def sinusoidal_vs_learned(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, base: float,
                          fraction: float) -> Result:
    """A model's learned P beside the sinusoidal table of the same shape.

    Similarity against offset (mean and spread over n of cos(p_n, p_{n+k}), position 0 left out of
    both, as in the similarity chapter) and the number of principal components for `fraction`
    of the variance (all positions, centred).
    """
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    S = sinusoidal_table(*P.shape, base)
    spread_bound = rounding_bounds(*P.shape, ())["spread"]
    curves, numbers, ratios = {}, {}, {}
    for key, X in (("learned", P), ("sinusoidal", S)):
        means, stds, _ = mean_by_offset(cosine_matrix(X), exclude=(0,))
        ratios[key] = explained_variance_ratio(X)
        curves[key] = np.stack([means, stds])
        first_negative = int(np.argmax(means < 0)) + 1 if np.any(means < 0) else 0
        numbers |= {
            f"components_{key}": Number(components_for(ratios[key], fraction), "d",
                                        f"principal components for the fraction of the variance ({key})"),
            f"cos_offset_1_{key}": Number(means[0], ".4f", f"mean cosine between neighbours ({key})"),
            f"spread_offset_1_{key}": Number.bound(stds[0], spread_bound, "std over n of the neighbour cosine "
                                                   "(sinusoidal)", ROUNDING) if key == "sinusoidal" else
                                      Number(stds[0], "sci2", "std over n of the neighbour cosine (learned)"),
            f"spread_max_{key}": Number(np.nanmax(stds), ".3f", f"largest std over n at any offset ({key})",
                                        Accuracy(abs=spread_bound, basis=f"rounding: {ROUNDING}")
                                        if key == "sinusoidal" else None),
            f"first_negative_offset_{key}": Number(first_negative, "d",
                                                   f"smallest offset with a negative mean cosine, 0 if none ({key})"),
            f"cos_min_{key}": Number(np.nanmin(means), ".3f", f"smallest mean cosine over offsets ({key})"),
        }
    numbers |= {"fraction": Number(fraction, ".0%", "fraction of the variance"),
                "n_positions": Number(P.shape[0], "d", "positions"), "d_model": Number(P.shape[1], "d", "dimension")}
    return Result(numbers, {}, {f"curve_{k}": v for k, v in curves.items()} | {f"ratio_{k}": v for k, v in ratios.items()})


def plot_offset_curves(result: Result, shape: ModelShape):
    """Mean cosine against offset (lines) and its spread over n (bands): zero band for the sinusoidal table."""
    fig, ax = plotting.subplots()
    for key, colour in (("learned", "C0"), ("sinusoidal", "C1")):
        means, stds = result.arrays[f"curve_{key}"]
        k = np.arange(1, len(means) + 1)
        ax.fill_between(k, means - stds, means + stds, color=colour, alpha=0.25, lw=0)
        ax.plot(k, means, color=colour, lw=1.0, label=f"{key} ({'mean ± std over n' if key == 'learned' else 'exact'})")
    ax.axhline(0, color="0.5", lw=0.6)
    ax.set_xscale("log")
    ax.set_xlabel("offset k = |m − n| (positions, log scale)")
    ax.set_ylabel(r"cosine similarity $\cos(p_n, p_{n+k})$")
    ax.set_ylim(-1, 1)
    ax.legend(loc="lower left")
    return fig


def plot_variance(result: Result, shape: ModelShape):
    """Cumulative explained variance: the learned table reaches the threshold with far fewer components."""
    fig, ax = plotting.subplots()
    fraction = result.numbers["fraction"].value
    for key, colour in (("learned", "C0"), ("sinusoidal", "C1")):
        cumulative = np.cumsum(result.arrays[f"ratio_{key}"])
        m = result.numbers[f"components_{key}"].value
        ax.plot(np.arange(1, len(cumulative) + 1), cumulative, color=colour, lw=1.4, label=f"{key}: {m} components")
        ax.plot([m], [cumulative[m - 1]], "o", color=colour, ms=4)
    ax.axhline(fraction, color="0.5", lw=0.8, ls="--", label=f"{result.numbers['fraction'].text} of the variance")
    ax.set_xscale("log")
    ax.set_xlabel("number of principal components (log scale)")
    ax.set_ylabel("cumulative fraction of variance")
    ax.set_ylim(0, 1.02)
    ax.legend(loc="lower right")
    return fig


register(
    "sinusoidal_vs_learned", "The learned position matrix beside the sinusoidal table", sinusoidal_vs_learned,
    needs=("W_pos",), params={"base": 10000.0, "fraction": 0.9},
    figures={"offset_curves": plot_offset_curves, "variance": plot_variance},
    groups=("first report",),
)
