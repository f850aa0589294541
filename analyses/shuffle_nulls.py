"""Is the similarity structure of P more than its values would give anyway? Two shuffle null models.

Null "entries": all n_ctx·D entries of P permuted together. It keeps the multiset of values
and destroys every structure, including each dimension's own mean and scale.
Null "columns": each dimension's values permuted over positions, independently per dimension.
It keeps every dimension's marginal (mean, scale, outliers) and destroys only the order, so
what survives it is organisation across positions, not a side effect of unequal dimensions.

For each of the two similarity matrices (over positions: rows of P; over dimensions: its
columns), three statistics of the unique off-diagonal cosines: their standard deviation, the
fraction with |cos| > t, and the largest |cos|. With N draws, the one-sided empirical p-value is
p = (1 + #{null ≥ observed}) / (1 + N), and the effect size is (observed − null mean) / null std.
Observed values are computed in float64; null draws use float32 matmuls (error ~1e-6, far below
every gap reported here).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

import numpy as np
from scipy.linalg.blas import ssyrk

from analyses.toolkit import plotting
from analyses.toolkit.linalg import cosine_matrix, upper_triangle
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape

KINDS = ("positions", "dimensions")
STATISTICS = ("std", "frac_abs_above", "max_abs")
STATISTIC_LABELS = {"std": "std of cos", "frac_abs_above": "fraction with abs(cos) > t", "max_abs": "largest abs(cos)"}


def shuffle_entries(P: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """All entries of P permuted together (same shape)."""
    return rng.permutation(P.ravel()).reshape(P.shape)


def shuffle_columns(P: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Each column of P permuted over the rows, independently."""
    return rng.permuted(P, axis=0)


NULLS: dict[str, Callable[[np.ndarray, np.random.Generator], np.ndarray]] = {
    "entries": shuffle_entries, "columns": shuffle_columns}


def _cosines_float32(M: np.ndarray) -> np.ndarray:
    """The unique off-diagonal cosines of the rows of M in float32; BLAS ssyrk fills only the upper triangle."""
    U = M / np.linalg.norm(M, axis=1, keepdims=True)
    return upper_triangle(ssyrk(1.0, U.T, trans=1))


def similarity_statistics(P: np.ndarray, threshold: float, bins: int,
                          exact: bool = True) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The statistics of both similarity matrices of P, and histogram counts of their off-diagonal cosines.

    Returns ({"<kind>_<statistic>": value}, {kind: counts over `bins` equal bins of [-1, 1]}).
    exact=True: float64 cosines from `linalg.cosine_matrix`; exact=False: float32, for the many null draws.
    """
    stats, hists = {}, {}
    for kind, M in zip(KINDS, (P, P.T)):
        values = upper_triangle(cosine_matrix(M)) if exact else _cosines_float32(np.asarray(M, dtype=np.float32))
        magnitude = np.abs(values)
        stats[f"{kind}_std"] = float(values.std(dtype=np.float64))
        stats[f"{kind}_frac_abs_above"] = float(np.count_nonzero(magnitude > threshold) / values.size)
        stats[f"{kind}_max_abs"] = float(magnitude.max())
        index = np.clip(((values + 1) * (bins / 2)).astype(np.int64), 0, bins - 1)
        hists[kind] = np.bincount(index, minlength=bins)
    return stats, hists


def empirical_p_value(null: np.ndarray, observed: float) -> float:
    """(1 + #{null ≥ observed}) / (1 + N): one-sided, never 0, exact under exchangeability."""
    null = np.asarray(null)
    return float((1 + np.count_nonzero(null >= observed)) / (1 + null.size))


def effect_size(null: np.ndarray, observed: float) -> float:
    """(observed − mean of the null) / its standard deviation (ddof 1); ±inf when the null is constant."""
    null = np.asarray(null, dtype=np.float64)
    gap, spread = observed - null.mean(), null.std(ddof=1)
    if spread == 0:
        return float(np.copysign(np.inf, gap)) if gap else 0.0
    return float(gap / spread)


def null_draws(P: np.ndarray, null: str, n_draws: int, seed: int, threshold: float,
               bins: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Statistics (arrays of length n_draws) and histograms ([n_draws, bins]) of one null model."""
    rng = np.random.default_rng(seed)
    stats = {f"{k}_{s}": np.empty(n_draws) for k in KINDS for s in STATISTICS}
    hists = {k: np.empty((n_draws, bins), dtype=np.int64) for k in KINDS}
    shuffle = NULLS[null]
    P32 = np.asarray(P, dtype=np.float32)
    for draw in range(n_draws):
        values, counts = similarity_statistics(shuffle(P32, rng), threshold, bins, exact=False)
        for key, value in values.items():
            stats[key][draw] = value
        for kind in KINDS:
            hists[kind][draw] = counts[kind]
    return stats, hists


def shuffle_nulls(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_draws: int, seed: int,
                  threshold: float, bins: int) -> Result:
    """Observed statistics of P's similarity matrices against both shuffle nulls; p-values and effect sizes."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    observed, observed_hists = similarity_statistics(P, threshold, bins)
    numbers = {
        "n_draws": Number(n_draws, "d", "draws per null model"),
        "seed": Number(seed, "d", "seed of the generator (the second null uses seed + 1)"),
        "threshold": Number(threshold, "g", "|cos| threshold"),
        "min_p_value": Number(1 / (1 + n_draws), ".4f", "smallest attainable p-value, 1/(1 + n_draws)"),
    }
    rows, arrays = [], {"observed_hists": observed_hists, "observed": observed}
    for offset, null in enumerate(NULLS):
        stats, hists = null_draws(P, null, n_draws, seed + offset, threshold, bins)
        arrays[f"{null}_stats"], arrays[f"{null}_hists"] = stats, hists
        for key, null_values in stats.items():
            kind, statistic = key.split("_", 1)
            p, z = empirical_p_value(null_values, observed[key]), effect_size(null_values, observed[key])
            label = STATISTIC_LABELS[statistic].replace("> t", f"> {threshold:g}")
            rows.append((null, kind, label, observed[key], null_values.mean(), null_values.std(ddof=1),
                         null_values.max(), p, z if np.isfinite(z) else "unbounded (constant null)"))
            numbers |= {
                f"{null}_{key}_null_mean": Number(null_values.mean(), ".3f", f"{null} null: mean of {key}"),
                f"{null}_{key}_null_max": Number(null_values.max(), ".3f", f"{null} null: largest {key} over draws"),
                f"{null}_{key}_p": Number(p, ".4f", f"{null} null: empirical p-value of {key}"),
            }
            if np.isfinite(z):  # JSON has no infinity: a constant null gets no effect-size number
                numbers[f"{null}_{key}_effect"] = Number(z, ".0f", f"{null} null: effect size of {key}")
    for key, value in observed.items():
        numbers[f"observed_{key}"] = Number(value, ".3f", f"observed {key}")
    table = Table(("null", "similarity", "statistic", "observed", "null mean", "null std", "null max", "p-value",
                   "effect size"), tuple(rows),
                  {"observed": ".3f", "null mean": ".3f", "null std": ".2e", "null max": ".3f", "p-value": ".4f",
                   "effect size": ".0f"})
    return Result(numbers, {"null_tests": table}, arrays)


def plot_bands(result: Result, shape: ModelShape):
    """Observed density of off-diagonal cosines against each null's median and 0.5–99.5 % band, per kind."""
    fig, axes = plotting.subplots(1, 2, figsize=(9.6, 3.8), layout="constrained")
    colors = {"entries": "0.45", "columns": "C1"}
    labels = {"entries": "null: all entries shuffled", "columns": "null: each dimension shuffled"}
    for ax, kind in zip(axes, KINDS):
        observed = result.arrays["observed_hists"][kind]
        bins = len(observed)
        edges = np.linspace(-1, 1, bins + 1)
        width = 2 / bins
        for null in NULLS:
            hists = result.arrays[f"{null}_hists"][kind]
            density = hists / (hists.sum(axis=1, keepdims=True) * width)
            low, median, high = np.percentile(density, [0.5, 50, 99.5], axis=0)
            ax.fill_between(edges, np.append(low, low[-1]), np.append(high, high[-1]), step="post",
                            color=colors[null], alpha=0.35, lw=0)
            ax.stairs(median, edges, color=colors[null], lw=1, label=labels[null])
        ax.stairs(observed / (observed.sum() * width), edges, color="C0", lw=1.5, label="observed")
        ax.set_xlim(-1, 1)
        ax.set_xlabel("cosine similarity (off-diagonal, each pair once)")
        ax.set_ylabel("density")
        ax.set_title(f"between {kind}")
    axes[0].legend(loc="upper left", fontsize=8)
    n = result.numbers["n_draws"].text
    fig.suptitle(f"{shape.name}: observed cosines against {n} draws of each shuffle null (0.5–99.5 % band)")
    return fig


register(
    "shuffle_nulls", "Similarity statistics against two shuffle null models", shuffle_nulls,
    needs=("W_pos",), params={"n_draws": 200, "seed": 0, "threshold": 0.5, "bins": 100},
    figures={"bands": plot_bands},
)
