"""The position matrix at a glance: its shape, row norms, and the matrix itself.

P is the learned table of position embeddings, one row p_n ∈ R^D per position n.
Row norms ‖p_n‖₂ show how strongly each position writes into the residual stream;
the heatmap shows which embedding dimensions carry position at all.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape


def row_norms(matrix: np.ndarray) -> np.ndarray:
    """‖p_n‖₂ for every row n, in float64."""
    return np.linalg.norm(np.asarray(matrix, dtype=np.float64), axis=1)


def symmetric_clip(matrix: np.ndarray, percentile: float) -> float:
    """The value c such that `percentile` % of the entries satisfy |x| ≤ c (a colour range of [-c, c])."""
    if not 0 < percentile <= 100:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    return float(np.percentile(np.abs(matrix), percentile))


def position_matrix(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, clip_percentile: float,
                    n_extremes: int) -> Result:
    """Shape, row-norm statistics (population std), extreme positions, and the arrays for the figures."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    norms = row_norms(P)
    order = np.argsort(norms, kind="stable")
    clip = symmetric_clip(P, clip_percentile)
    mean_row = P.mean(axis=0)
    numbers = {
        "n_positions": Number(P.shape[0], "d", "number of positions (rows of P)"),
        "d_model": Number(P.shape[1], "d", "embedding dimensions (columns of P)"),
        "norm_mean": Number(norms.mean(), ".4f", "mean row norm"),
        "norm_std": Number(norms.std(), ".4f", "population standard deviation of the row norms"),
        "norm_median": Number(float(np.median(norms)), ".4f", "median row norm"),
        "norm_min": Number(norms.min(), ".4f", "smallest row norm"),
        "norm_min_position": Number(int(order[0]), "d", "position with the smallest row norm"),
        "norm_max": Number(norms.max(), ".4f", "largest row norm"),
        "norm_max_position": Number(int(order[-1]), "d", "position with the largest row norm"),
        "norm_max_over_median": Number(norms.max() / np.median(norms), ".2f", "largest norm / median norm"),
        "mean_row_norm_ratio": Number(np.linalg.norm(mean_row) / norms.mean(), ".3f",
                                      "norm of the mean row relative to the mean row norm"),
        "clip_percentile": Number(clip_percentile, "g", "percentile of |P| at which the heatmap is clipped"),
        "clip_value": Number(clip, ".3f", "heatmap colour range is [-clip_value, clip_value]"),
        "abs_max": Number(float(np.abs(P).max()), ".3f", "largest |entry| of P"),
    }
    extremes = [*order[:n_extremes], *order[::-1][:n_extremes]]
    table = Table(("position", "row norm", "norm / median", "kind"),
                  tuple((int(i), norms[i], norms[i] / np.median(norms), "smallest" if k < n_extremes else "largest")
                        for k, i in enumerate(extremes)),
                  formats={"row norm": ".4f", "norm / median": ".3f"})
    return Result(numbers, {"norm_extremes": table}, {"P": P, "norms": norms, "clip": np.array(clip)})


def plot_heatmap(result: Result, shape: ModelShape):
    """P as positions × dimensions, diverging colours centred on 0 and clipped symmetrically."""
    P, clip = result.arrays["P"], float(result.arrays["clip"])
    fig, ax = plotting.subplots(figsize=(6.4, 4.6))
    image = ax.imshow(P, aspect="auto", cmap=plotting.DIVERGING, vmin=-clip, vmax=clip, interpolation="nearest")
    ax.set_xlabel("embedding dimension")
    ax.set_ylabel("position")
    pct = result.numbers["clip_percentile"].text
    plotting.colorbar(fig, image, ax, f"value (clipped at the {pct}th percentile of |P|)")
    ax.set_title(f"{shape.name}: position embeddings P ({P.shape[0]} × {P.shape[1]})")
    return fig


def plot_norms(result: Result, shape: ModelShape):
    """Row norm against position, on a log scale so that both extremes and the bulk are visible."""
    norms = result.arrays["norms"]
    fig, ax = plotting.subplots()
    ax.plot(np.arange(len(norms)), norms, lw=1, color="C0")
    ax.axhline(float(np.median(norms)), color="0.5", lw=0.8, ls="--", label="median")
    extremes = [result.numbers[key].value for key in ("norm_max_position", "norm_min_position")]
    plotting.mark_positions(ax, extremes, norms, len(norms))
    ax.set_yscale("log")
    ax.set_xlabel("position")
    ax.set_ylabel("row norm ‖p_n‖ (log scale)")
    ax.set_title(f"{shape.name}: norm of each position embedding")
    ax.legend(loc="upper center")
    return fig


register(
    "position_matrix", "The position matrix at a glance", position_matrix,
    needs=("W_pos",), params={"clip_percentile": 99.0, "n_extremes": 3},
    figures={"heatmap": plot_heatmap, "norms": plot_norms},
)
