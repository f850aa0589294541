"""Is the similarity structure of P more than a simpler matrix would give anyway? Four null models.

Each null keeps one property of P and randomises the rest; what the observation shows beyond a
null is what that property cannot explain. From weakest to strongest:

* "entries": all n_ctx·D entries of P permuted together. Keeps the multiset of values; destroys
  every structure, including each dimension's own mean and scale.
* "columns": each dimension's values permuted over positions, independently per dimension. Keeps
  every dimension's marginal (mean, scale, outliers); destroys its order along positions, so also
  its smoothness.
* "phases_independent": each column phase-randomised on its own (`toolkit.surrogates`). Keeps
  every dimension's power spectrum, hence its mean, scale and smoothness (its autocovariance at
  every lag); destroys how the dimensions are coordinated with one another.
* "phases_shared": one set of random phases for all columns. Also keeps every cross-spectrum, so
  PᵀP, the cosines between dimensions and the singular values of P are kept exactly; it destroys
  only where along the context things happen (the part of PPᵀ that is not circulant).

Statistics: for each of the two similarity matrices (over positions: rows of P; over dimensions:
its columns), the standard deviation of the unique off-diagonal cosines, the fraction with
|cos| > t and the largest |cos|; and for P itself the share of variance in its top k principal
components. Statistics that a null keeps by construction are reported as kept, not tested. No statistic's
direction was fixed before the data were seen (a shuffle makes the cosines depend on offset less than P does, a
surrogate can make them spread more), so every test is two-sided (`toolkit.pvalues.two_sided_p`, exact for N
draws, floor 1/(1 + N)); the effect size (observed − null mean) / null std gives the side and the distance. The
report's one rule decides what is rejected: Holm's procedure at a 5 % familywise rate (`toolkit.pvalues`) over the
tests of one question, and each null asks its own (what P has beyond shuffled values, beyond each dimension's
spectrum, beyond a shift-invariant process): its family is its own tests, m of them, and it is drawn
N = `draws_for`(m) times, so that every test can meet the family's smallest threshold alpha/m on its own draws.
Everything is float64: an effect size divides by a
null standard deviation as small as 4e-5, which would magnify float32 rounding (different on every BLAS kernel)
into printed digits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.linalg import cosine_matrix, explained_variance_ratio, upper_triangle
from analyses.toolkit.pvalues import (FAMILYWISE_ALPHA, draws_for, holm, p_floor, p_value_cell, p_value_text,
                                      two_sided_p)
from analyses.toolkit.surrogates import phase_randomiser
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text
from analyses.engine.sources import ModelShape

Surrogate = Callable[[np.random.Generator], np.ndarray]
"""Draws one surrogate of P from a generator."""
KINDS = ("positions", "dimensions")
STATISTICS = ("std", "frac_abs_above", "max_abs")
STATISTIC_LABELS = {"std": "std of cos", "frac_abs_above": "fraction with abs(cos) > t", "max_abs": "largest abs(cos)",
                    "nonoffset": "share of cos² not a function of offset", "spread": "sd of cos over n at fixed offset"}
POSITION_STATISTICS = ("nonoffset", "spread")
"""Statistics of the position cosines that see where along the context the similarity changes (the others pool
every pair): 1 − τ, τ the share of Σ cos² that the mean cosine at each offset explains, and the mean over offsets
1 … n/2 of the standard deviation of cos(p_n, p_{n+k}) over n."""
PCA_KEY = "pca_top"
"""Key of the principal-component statistic: variance share of the top `n_components` components."""


def shuffle_entries(P: np.ndarray) -> Surrogate:
    """All entries of P permuted together (same shape). Each draw shuffles one buffer in place (a uniform permutation
    of any arrangement of the values is a uniform permutation of P's): the next draw overwrites it."""
    values = np.array(P, dtype=np.float64, order="C")

    def draw(rng: np.random.Generator) -> np.ndarray:
        rng.shuffle(values.reshape(-1))
        return values

    return draw


def shuffle_columns(P: np.ndarray) -> Surrogate:
    """Each column of P permuted over the rows, independently. Each draw permutes one column-major buffer in place
    (each column contiguous): the next draw overwrites it."""
    values = np.array(P, dtype=np.float64, order="F")
    return lambda rng: rng.permuted(values, axis=0, out=values)


def phases_independent(P: np.ndarray) -> Surrogate:
    """Each column of P phase-randomised with its own phases (keeps every column's power spectrum)."""
    return phase_randomiser(P, shared=False)


def phases_shared(P: np.ndarray) -> Surrogate:
    """All columns of P phase-randomised with the same phases (keeps every cross-spectrum, hence PᵀP)."""
    return phase_randomiser(P, shared=True)


NULLS: dict[str, Callable[[np.ndarray], Surrogate]] = {
    "entries": shuffle_entries, "columns": shuffle_columns, "phases_independent": phases_independent,
    "phases_shared": phases_shared}
"""Each null model: given P, a function drawing one surrogate of P from a generator (what is the same in every
draw, such as P's spectrum, computed once)."""
NULL_LABELS = {"entries": "all entries shuffled", "columns": "each dimension shuffled",
               "phases_independent": "independent phases", "phases_shared": "shared phases"}
KEPT_BY_CONSTRUCTION = {"phases_shared": frozenset({"dimensions_std", "dimensions_frac_abs_above",
                                                    "dimensions_max_abs", PCA_KEY})}
"""Statistics a null reproduces exactly (up to rounding) because it keeps PᵀP and the singular values."""
STATISTIC_KEYS = (*(f"{kind}_{s}" for kind in KINDS for s in STATISTICS), *(f"positions_{s}" for s in POSITION_STATISTICS),
                  PCA_KEY)
"""Every statistic, in the order of the table."""
TESTED = {null: tuple(k for k in STATISTIC_KEYS if k not in KEPT_BY_CONSTRUCTION.get(null, ())) for null in NULLS}
"""The statistics each null is tested on: all it does not keep by construction. They are the null's Holm family."""
DRAWS_NEEDED = {null: draws_for(len(tested)) for null, tested in TESTED.items()}
"""Draws per null: the fewest whose floor 1/(1 + N) meets its family's smallest Holm threshold alpha/m."""


@cache
def _upper_pairs(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Row and column indices of the strict upper triangle of an n × n matrix, row by row (as `upper_triangle`)."""
    return np.triu_indices(n, k=1)


@cache
def _upper_offsets(n: int) -> np.ndarray:
    """Offsets of the strict upper triangle's entries, row by row, in a column-major (Fortran) n × n array:
    BLAS writes its products that way, so they are read without a copy of the whole matrix."""
    rows, cols = _upper_pairs(n)
    return rows + cols * n


@cache
def _pair_offsets(n: int) -> tuple[np.ndarray, np.ndarray]:
    """The offset j − i of each pair of the strict upper triangle (row by row), and the number of pairs at each offset
    1 … n − 1."""
    rows, cols = _upper_pairs(n)
    offsets = cols - rows
    return offsets, np.bincount(offsets, minlength=n)[1:]


def _upper_of_blas(C: np.ndarray) -> np.ndarray:
    """The strict upper triangle, row by row, of a matrix that BLAS returned (column-major)."""
    return C.ravel(order="F")[_upper_offsets(len(C))]


def _cosines_blas(M: np.ndarray) -> np.ndarray:
    """The unique off-diagonal cosines of the rows of M; BLAS dsyrk fills only the upper triangle (half the work
    of a full product)."""
    from scipy.linalg.blas import dsyrk

    U = M / np.linalg.norm(M, axis=1, keepdims=True)
    return _upper_of_blas(dsyrk(1.0, U.T, trans=1))


def top_variance_share(P: np.ndarray, k: int) -> float:
    """Share of the variance of P's rows (centred) in its top k principal components (float64 SVD)."""
    return float(explained_variance_ratio(P)[:k].sum())


def _top_share_of_covariance(C: np.ndarray, k: int) -> float:
    """Σ of the k largest eigenvalues of a symmetric covariance over its trace, by Lanczos iteration (ARPACK,
    fixed start vector, relative tolerance 1e-10: exact to rounding for the sum of well-separated top values).
    Only C's upper triangle is read (BLAS dsymv), so a product that BLAS filled half of needs no mirroring."""
    from scipy.linalg.blas import dsymv
    from scipy.sparse.linalg import LinearOperator, eigsh

    n = len(C)
    operator = LinearOperator((n, n), matvec=lambda x: dsymv(1.0, C, np.ravel(x)), dtype=np.float64)
    top = eigsh(operator, k=k, which="LA", v0=np.ones(n), tol=1e-10, return_eigenvectors=False)
    return float(top.sum() / np.trace(C))


def _statistics(values: np.ndarray, kind: str, threshold: float, bins: int, stats: dict, hists: dict) -> None:
    """std, fraction of |v| > threshold, largest |v|, and histogram of the unique cosines `values`."""
    magnitude = np.abs(values)
    stats[f"{kind}_std"] = float(values.std())
    stats[f"{kind}_frac_abs_above"] = float(np.count_nonzero(magnitude > threshold) / values.size)
    stats[f"{kind}_max_abs"] = float(magnitude.max())
    index = np.clip(((values + 1) * (bins / 2)).astype(np.int64), 0, bins - 1)
    hists[kind] = np.bincount(index, minlength=bins)


def _position_statistics(values: np.ndarray, stats: dict) -> None:
    """1 − τ and the mean spread over n at fixed offset (POSITION_STATISTICS) of the unique position cosines."""
    n = int(round((1 + np.sqrt(1 + 8 * values.size)) / 2))
    offsets, counts = _pair_offsets(n)
    means = np.bincount(offsets, weights=values, minlength=n)[1:] / counts
    squares = np.bincount(offsets, weights=values * values, minlength=n)[1:] / counts
    stats["positions_nonoffset"] = float(1 - np.dot(counts, means ** 2) / np.dot(values, values))
    half = n // 2
    stats["positions_spread"] = float(np.sqrt(np.clip(squares[:half] - means[:half] ** 2, 0.0, None)).mean())


def similarity_statistics(P: np.ndarray, threshold: float, bins: int, n_components: int = 3, exact: bool = True,
                          kept: frozenset[str] = frozenset()) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """The statistics of P, and histogram counts of the off-diagonal cosines of both similarity matrices.

    Returns ({"<kind>_<statistic>": value, PCA_KEY: value}, {kind: counts over `bins` equal bins of [-1, 1]}).
    exact=True: cosines from `linalg.cosine_matrix`, PCA by SVD. exact=False, for the many null draws, the
    same statistics with half the arithmetic: symmetric rank-k products (dsyrk), one PᵀP for both the dimension
    cosines and the covariance, whose top eigenvalues come from Lanczos iteration; the dimension statistics and
    the PCA share are not computed when `kept` holds them all (a null that keeps them by construction).
    """
    from scipy.linalg.blas import dsyr, dsyrk

    stats: dict[str, float] = {}
    hists: dict[str, np.ndarray] = {}
    if exact:
        for kind, M in zip(KINDS, (P, P.T)):
            values = upper_triangle(cosine_matrix(M))
            _statistics(values, kind, threshold, bins, stats, hists)
            if kind == "positions":
                _position_statistics(values, stats)
        stats[PCA_KEY] = top_variance_share(P, n_components)
        return stats, hists
    P = np.asarray(P, dtype=np.float64)
    positions = _cosines_blas(P)
    _statistics(positions, "positions", threshold, bins, stats, hists)
    _position_statistics(positions, stats)
    if {f"dimensions_{s}" for s in STATISTICS} | {PCA_KEY} <= kept:
        return stats, hists
    gram = dsyrk(1.0, P, trans=1)  # PᵀP, upper triangle, column-major
    scale = 1 / np.sqrt(np.diag(gram))
    rows, cols = _upper_pairs(len(gram))
    cosines = _upper_of_blas(gram)
    cosines *= scale[rows]
    cosines *= scale[cols]
    _statistics(cosines, "dimensions", threshold, bins, stats, hists)
    mean = P.mean(axis=0)
    covariance = dsyr(-float(len(P)), mean, a=gram, overwrite_a=True)  # PᵀP − n·m mᵀ, upper triangle, in place
    stats[PCA_KEY] = _top_share_of_covariance(covariance, n_components)
    return stats, hists


def effect_size(null: np.ndarray, observed: float) -> float:
    """(observed − mean of the null) / its standard deviation (ddof 1); ±inf when the null is constant."""
    null = np.asarray(null, dtype=np.float64)
    gap, spread = observed - null.mean(), null.std(ddof=1)
    if spread == 0:
        return float(np.copysign(np.inf, gap)) if gap else 0.0
    return float(gap / spread)


def null_draws(P: np.ndarray, null: str, n_draws: int, seed: int, threshold: float, bins: int,
               n_components: int = 3) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Statistics (arrays of length n_draws) and histograms ([n_draws, bins]) of one null model; what the null
    keeps by construction is not computed."""
    rng = np.random.default_rng(seed)
    stats: dict[str, np.ndarray] = {}
    hists: dict[str, np.ndarray] = {}
    P = np.asarray(P, dtype=np.float64)
    surrogate, kept = NULLS[null](P), KEPT_BY_CONSTRUCTION.get(null, frozenset())
    for draw in range(n_draws):
        values, counts = similarity_statistics(surrogate(rng), threshold, bins, n_components, exact=False,
                                               kept=kept)
        for key, value in values.items():
            stats.setdefault(key, np.empty(n_draws))[draw] = value
        for kind, count in counts.items():
            hists.setdefault(kind, np.empty((n_draws, bins), dtype=np.int64))[draw] = count
    return stats, hists


def _label(key: str, threshold: float, n_components: int) -> tuple[str, str]:
    """(similarity, statistic) columns of the table for a statistic key."""
    if key == PCA_KEY:
        return "P itself (PCA)", f"variance share of the top {n_components} components"
    kind, statistic = key.split("_", 1)
    return kind, STATISTIC_LABELS[statistic].replace("> t", f"> {threshold:g}")


def shuffle_nulls(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_draws: int | None, seed: int,
                  threshold: float, bins: int, n_components: int) -> Result:
    """Observed statistics of P against four null models: two-sided p-values, Holm's verdicts within each null's
    family of tests and effect sizes where a null can differ. n_draws=None draws each null `DRAWS_NEEDED` times
    (`draws_for` its number of tests), the fewest with which every test can meet its family's smallest Holm threshold
    on its own draws; an integer draws every null that many times."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    observed, observed_hists = similarity_statistics(P, threshold, bins, n_components)
    numbers = {
        "seed": Number(seed, "d", "seed of the generator of the first null (the i-th null uses seed + i)"),
        "threshold": Number(threshold, "g", "|cos| threshold"),
        "n_components": Number(n_components, "d", "principal components in the variance-share statistic"),
        "alpha": Number(FAMILYWISE_ALPHA, ".2f", "familywise error rate of Holm's procedure within each null"),
    }
    rows, arrays = [], {"observed_hists": observed_hists, "observed": observed}
    tested_rows, tested_nulls, rejected, effects = [], [], [], []
    for offset, null in enumerate(NULLS):
        draws, family = DRAWS_NEEDED[null] if n_draws is None else n_draws, len(TESTED[null])
        numbers |= {
            f"{null}_n_draws": Number(draws, "d", f"{null} null: draws"),
            f"{null}_n_draws_needed": Number(DRAWS_NEEDED[null], "d",
                                             f"{null} null: fewest draws whose floor 1/(1 + N) meets alpha / n_tests"),
            f"{null}_n_tests": Number(family, "d", f"{null} null: tests, the size of its Holm family"),
            f"{null}_min_p_value": Number(p_floor(draws), ".4f", f"{null} null: smallest attainable p-value, 1/(1 + N)"),
            f"{null}_holm_threshold_min": Number(FAMILYWISE_ALPHA / family, ".4f",
                                                 f"{null} null: Holm's smallest threshold, alpha / n_tests"),
            f"{null}_floor_cell": Text(p_value_cell(p_floor(draws), draws), f"{null} null: a p-value at the floor"),
        }
        stats, hists = null_draws(P, null, draws, seed + offset, threshold, bins, n_components)
        arrays[f"{null}_stats"], arrays[f"{null}_hists"] = stats, hists
        family_rows, family_p, family_keys, family_effects = [], [], [], []
        for key in STATISTIC_KEYS:
            similarity_kind, label = _label(key, threshold, n_components)
            if key not in TESTED[null]:  # equal to the observation by construction: not drawn, not tested
                numbers[f"{null}_{key}_null_mean"] = Number(observed[key], ".3f", f"{null} null: {key}, kept")
                rows.append((NULL_LABELS[null], similarity_kind, label, observed[key], observed[key], 0.0,
                             observed[key], observed[key], "kept exactly", "kept exactly", "kept exactly", draws))
                continue
            null_values = stats[key]
            mean, spread = float(null_values.mean()), float(null_values.std(ddof=1))
            numbers[f"{null}_{key}_null_mean"] = Number(mean, ".3f", f"{null} null: mean of {key}")
            p, z = two_sided_p(null_values, observed[key]), effect_size(null_values, observed[key])
            row = [NULL_LABELS[null], similarity_kind, label, observed[key], mean, spread, float(null_values.min()),
                   float(null_values.max()), p_value_cell(p, draws), None,
                   z if np.isfinite(z) else "unbounded (constant null)", draws]
            rows.append(row)
            family_rows.append(row)
            family_p.append(p)
            family_keys.append(key)
            family_effects.append(z)
            numbers |= {
                f"{null}_{key}_null_min": Number(null_values.min(), ".3f", f"{null} null: smallest {key} over draws"),
                f"{null}_{key}_null_max": Number(null_values.max(), ".3f", f"{null} null: largest {key} over draws"),
                f"{null}_{key}_p": Text(p_value_text(p, draws), f"{null} null: two-sided p-value of {key}"),
            }
            if np.isfinite(z):  # JSON has no infinity: a constant null gets no effect-size number
                numbers[f"{null}_{key}_effect"] = Number(z, ".0f" if abs(z) >= 10 else ".1f",
                                                         f"{null} null: effect size of {key}")
        family_rejected = holm(family_p)
        for row, reject, z, key in zip(family_rows, family_rejected, family_effects, family_keys):
            row[9] = ("yes, above" if z > 0 else "yes, below") if reject else "no"
            numbers[f"{null}_{key}_holm"] = Text(("rejected (above)" if z > 0 else "rejected (below)") if reject else
                                                 "not rejected", f"{null} null: Holm's verdict on {key} in its family")
        numbers[f"{null}_n_rejected"] = Number(sum(family_rejected), "d", f"{null} null: tests rejected (Holm)")
        tested_rows += family_rows
        tested_nulls += [null] * len(family_rows)
        rejected += family_rejected
        effects += family_effects
    for key, value in observed.items():
        numbers[f"observed_{key}"] = Number(value, ".3f", f"observed {key}")
    shuffles = {"entries", "columns"}
    in_shuffles = [n in shuffles for n in tested_nulls]
    shuffle_effects = [abs(z) for z, s in zip(effects, in_shuffles) if s and np.isfinite(z)]
    numbers |= {
        "n_tests": Number(len(tested_rows), "d", "null/statistic pairs tested (not kept by construction)"),
        "n_tests_at_floor": Number(sum(isinstance(r[8], str) for r in tested_rows), "d",
                                   "tested pairs whose p-value is the floor 1/(1 + the null's draws)"),
        "n_rejected": Number(sum(rejected), "d", "tests rejected by Holm's procedure, each null's family on its own"),
        "n_rejected_below": Number(sum(r and z < 0 for r, z in zip(rejected, effects)), "d",
                                   "of them with the observation below the null"),
        "n_shuffle_tests": Number(sum(in_shuffles), "d", "tests of the two shuffles"),
        "n_shuffle_rejected": Number(sum(r for r, s in zip(rejected, in_shuffles) if s), "d",
                                     "of them rejected (Holm within each null)"),
        "n_shuffle_at_floor": Number(sum(isinstance(r[8], str) for r, s in zip(tested_rows, in_shuffles) if s), "d",
                                     "shuffle tests whose p-value is the floor (observation outside every draw)"),
        "n_surrogate_tests": Number(len(tested_rows) - sum(in_shuffles), "d", "tests of the two phase surrogates"),
        "n_surrogate_rejected": Number(sum(r for r, s in zip(rejected, in_shuffles) if not s), "d",
                                       "of them rejected (Holm within each null)"),
        "shuffle_effect_min": Number(min(shuffle_effects), ".0f", "smallest |effect size| against the shuffles"),
        "shuffle_effect_max": Number(max(shuffle_effects), ".0f", "largest finite |effect size| against the shuffles"),
    }
    table = Table(("null", "similarity", "statistic", "observed", "null mean", "null std", "null min", "null max",
                   "p-value", "Holm", "effect size", "draws"), tuple(tuple(r) for r in rows),
                  {"observed": ".3f", "null mean": ".3f", "null std": ".2e", "null min": ".3f", "null max": ".3f",
                   "p-value": ".4f", "effect size": ".3g", "draws": "d"})
    return Result(numbers, {"null_tests": table}, arrays)


COLORS = {"entries": "0.45", "columns": "C1", "phases_independent": "C2", "phases_shared": "C4"}


def plot_bands(result: Result, shape: ModelShape):
    """Observed density of off-diagonal cosines against each null's median and 0.5–99.5 % band, per kind."""
    fig, axes = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, plotting.PANEL_HEIGHT), sharey=True)
    for ax, kind in zip(axes, KINDS):
        observed = result.arrays["observed_hists"][kind]
        bins = len(observed)
        edges = np.linspace(-1, 1, bins + 1)
        width = 2 / bins
        for null in NULLS:
            if f"{kind}_std" in KEPT_BY_CONSTRUCTION.get(null, ()):
                continue  # identical to the observation
            hists = result.arrays[f"{null}_hists"][kind]
            density = hists / (hists.sum(axis=1, keepdims=True) * width)
            low, median, high = np.percentile(density, [0.5, 50, 99.5], axis=0)
            ax.fill_between(edges, np.append(low, low[-1]), np.append(high, high[-1]), step="post",
                            color=COLORS[null], alpha=0.35, lw=0)
            ax.stairs(median, edges, color=COLORS[null], lw=1, label=f"null: {NULL_LABELS[null]}")
        ax.stairs(observed / (observed.sum() * width), edges, color="C0", lw=1.6, label="observed")
        ax.set_xlim(-1, 1)
        ax.set_xlabel("cosine (each pair once)")
        ax.set_title(f"between {kind}")
    axes[0].set_ylabel("density")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncols=3)
    return fig


HATCHES = {"entries": "", "columns": "////", "phases_independent": "....", "phases_shared": "xxxx"}
"""Each null's bar fill besides its colour, so that the bars stay apart in grey print."""
STATISTIC_WORDS = {"std of cos": "cosine\nspread", "largest abs(cos)": "largest\n|cosine|",
                   "share of cos² not a function of offset": "not set\nby offset",
                   "sd of cos over n at fixed offset": "spread at\none offset",
                   "variance share of the top 3 components": "top-3\nvariance"}
"""The statistics in words for a tick label (the table's names are formulas)."""
KIND_WORDS = {"positions": "between positions", "dimensions": "between dimensions"}
"""What a statistic compares, in words, for the label under its group of ticks (else: the whole table)."""


def statistic_words(statistic: str) -> str:
    """A two-line tick label in words for a statistic of the null tests."""
    if statistic.startswith("fraction with abs(cos) > "):
        return f"share with\n|cos| > {statistic.rsplit(' ', 1)[-1]}"
    return STATISTIC_WORDS[statistic]


def plot_effects(result: Result, shape: ModelShape):
    """|effect size| of every statistic under every null, log scale: how far each null falls short. Each null's
    bars have their own colour and fill pattern; tick labels in words, upright."""
    rows = result.tables["null_tests"].rows
    keys = [(r[1], r[2]) for r in rows if r[0] == NULL_LABELS["entries"]]
    order = list(KIND_WORDS)
    keys.sort(key=lambda key: order.index(key[0]) if key[0] in order else len(order))  # stable: grouped by kind
    plt = plotting.pyplot()
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 4.2))
    width = 0.8 / len(NULLS)
    for i, null in enumerate(NULLS):
        values = []
        for key in keys:
            row = next(r for r in rows if r[0] == NULL_LABELS[null] and (r[1], r[2]) == key)
            values.append(abs(row[10]) if not isinstance(row[10], str) else np.nan)
        x = np.arange(len(keys)) + (i - (len(NULLS) - 1) / 2) * width
        with plt.rc_context({"hatch.linewidth": 0.6, "hatch.color": "white"}):
            ax.bar(x, values, width, color=COLORS[null], hatch=HATCHES[null], edgecolor="white", linewidth=0.3,
                   label=NULL_LABELS[null])
        for xi, v in zip(x, values):
            if np.isnan(v):
                ax.text(xi, 1.2, "kept", rotation=90, ha="center", va="bottom", color=COLORS[null])
    ax.set_yscale("log")
    ax.axhline(3, color="0.4", lw=0.8, ls="--")
    ax.set_xticks(range(len(keys)), [statistic_words(s) for _, s in keys])
    groups = [KIND_WORDS.get(kind, "whole table") for kind, _ in keys]
    names = list(dict.fromkeys(groups))
    below = ax.secondary_xaxis("bottom")
    below.spines["bottom"].set_position(("outward", 26))
    below.spines["bottom"].set_visible(False)
    below.set_xticks([np.mean([i for i, g in enumerate(groups) if g == name]) for name in names], names)
    below.tick_params(length=0, labelsize=9)
    for i in range(1, len(groups)):
        if groups[i] != groups[i - 1]:
            ax.axvline(i - 0.5, color="0.8", lw=0.6)
    ax.set_ylabel("|effect size|\n(null standard deviations, log)")
    fig.legend(loc="outside upper center", ncols=2)
    return fig


register(
    "shuffle_nulls", "Similarity statistics against four null models", shuffle_nulls,
    needs=("W_pos",), params={"n_draws": None, "seed": 0, "threshold": 0.5, "bins": 100, "n_components": 3},
    figures={"bands": plot_bands, "effects": plot_effects},
    groups=("first report", "notebook subset"),
)
