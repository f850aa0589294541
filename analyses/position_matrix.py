"""The position matrix at a glance: its shape, row norms, and the matrix itself; and the last row.

P is the learned table of position embeddings, one row p_n ∈ R^D per position n.
Row norms ‖p_n‖₂ show how strongly each position writes into the residual stream;
the heatmap shows which embedding dimensions carry position at all.

The last row of GPT-2's P looks untrained. `last_position` tests that reading against what an
untrained row would be: D independent draws from N(0, σ₀²) with σ₀ the initialisation scale of
OpenAI's released model code (`wpe` initialised with standard deviation 0.01). Normality
(Shapiro–Wilk and D'Agostino–Pearson), the scale (a χ² interval for σ and the χ² test of σ = σ₀),
the largest |cosine| with every other row against random directions, and the share of its squared
norm in the top-k principal subspace of the other rows against a random direction, whose share
is Beta(k/2, (D − k)/2)-distributed with mean k/D.
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
                    n_extremes: int, small_entries: tuple[float, ...]) -> Result:
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
        "abs_median": Number(float(np.median(np.abs(P))), ".4f", "median |entry| of P"),
        "n_exact_zeros": Number(int(np.count_nonzero(P == 0)), "d", "entries of P that are exactly zero"),
    }
    inner = norms[1:-1]
    numbers |= {
        "inner_norm_cv": Number(float(inner.std() / inner.mean()), ".1%",
                                "coefficient of variation of the row norms without the first and the last row"),
        "inner_norm_p1": Number(float(np.percentile(inner, 1)), ".2f", "1st percentile of those norms"),
        "inner_norm_p99": Number(float(np.percentile(inner, 99)), ".2f", "99th percentile of those norms"),
        "inner_norm_min": Number(float(inner.min()), ".2f", "smallest of those norms"),
        "inner_norm_max": Number(float(inner.max()), ".2f", "largest of those norms"),
        "inner_norm_max_position": Number(int(np.argmax(inner)) + 1, "d", "position of the largest of those norms"),
    }
    for t in small_entries:
        key = f"frac_abs_below_{t:g}".replace(".", "_")
        numbers[key] = Number(float(np.mean(np.abs(P) < t)), ".0%", f"share of entries with |P_ij| < {t:g}")
        numbers[f"{key}_threshold"] = Number(t, "g", "the threshold of that share")
    extremes = [*order[:n_extremes], *order[::-1][:n_extremes]]
    table = Table(("position", "row norm", "norm / median", "kind"),
                  tuple((int(i), norms[i], norms[i] / np.median(norms), "smallest" if k < n_extremes else "largest")
                        for k, i in enumerate(extremes)),
                  formats={"row norm": ".4f", "norm / median": ".3f"})
    return Result(numbers, {"norm_extremes": table}, {"P": P, "norms": norms, "clip": np.array(clip)})


def plot_heatmap(result: Result, shape: ModelShape):
    """P as positions × dimensions, diverging colours centred on 0 and clipped symmetrically."""
    P, clip = result.arrays["P"], float(result.arrays["clip"])
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 4.6))
    image = ax.imshow(P, aspect="auto", cmap=plotting.DIVERGING, vmin=-clip, vmax=clip, interpolation="nearest")
    ax.set_xlabel("embedding dimension")
    ax.set_ylabel("position")
    pct = result.numbers["clip_percentile"].text
    plotting.colorbar(fig, image, ax, f"value (clipped at the {pct}th percentile of |P|)")
    return fig


def plot_norms(result: Result, shape: ModelShape):
    """Row norm against position, on a log scale so that both extremes and the bulk are visible."""
    norms = result.arrays["norms"]
    fig, ax = plotting.subplots(figsize=(plotting.MAX_WIDTH, 3.6))
    ax.plot(np.arange(len(norms)), norms, lw=1, color="C0")
    ax.axhline(float(np.median(norms)), color="0.5", lw=0.8, ls="--", label="median")
    extremes = [result.numbers[key].value for key in ("norm_max_position", "norm_min_position")]
    plotting.mark_positions(ax, extremes, norms, len(norms))
    ax.set_yscale("log")
    plotting.plain_log_ticks(ax.yaxis)
    ax.set_xlabel("position")
    ax.set_ylabel(r"row norm $\Vert p_n\Vert$ (log scale)")
    ax.legend(loc="upper center")
    return fig


register(
    "position_matrix", "The position matrix at a glance", position_matrix,
    needs=("W_pos",), params={"clip_percentile": 99.0, "n_extremes": 3, "small_entries": (0.01, 0.05)},
    figures={"heatmap": plot_heatmap, "norms": plot_norms},
    groups=("first report", "notebook subset", "position table"),
)


def beta_share_tail(share: float, k: int, d: int) -> float:
    """P(‖Π_k u‖² ≥ share) for a uniformly random unit vector u in R^d and a fixed k-dimensional projector Π_k.

    ‖Π_k u‖² = χ²_k / (χ²_k + χ²_{d−k}) is Beta(k/2, (d − k)/2), mean k/d.
    """
    from scipy.stats import beta

    return float(beta.sf(share, k / 2, (d - k) / 2))


def last_position(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, init_std: float, ks: tuple[int, ...],
                  n_random: int, level: float, seed: int) -> Result:
    """Is the last row of P an untrained draw? Normality, scale, and overlaps against random directions."""
    from scipy import stats

    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    n_pos, d = P.shape
    x, before, others = P[-1], P[-2], P[:-1]
    sd, sd_before = float(x.std(ddof=1)), float(before.std(ddof=1))
    ss = float(((x - x.mean()) ** 2).sum())
    tail = (1 - level) / 2
    sd_low, sd_high = np.sqrt(ss / stats.chi2.ppf([1 - tail, tail], d - 1))
    chi2_p = float(stats.chi2.cdf(ss / init_std**2, d - 1))  # one-sided: smaller than the initial scale
    shapiro = stats.shapiro(x)
    k2 = stats.normaltest(x)
    other_shapiro = np.array([stats.shapiro(row).pvalue for row in others])
    unit = lambda M: M / np.linalg.norm(M, axis=-1, keepdims=True)  # noqa: E731
    cos_others = unit(others) @ unit(x)
    random = unit(np.random.default_rng(seed).standard_normal((n_random, d)))
    random_max = np.abs(random @ unit(others).T).max(axis=1)
    observed_max = float(np.abs(cos_others).max())
    centred = others - others.mean(axis=0)
    _, _, vt = np.linalg.svd(centred, full_matrices=False)
    numbers = {
        "position": Number(n_pos - 1, "d", "the last position"),
        "init_std": Number(init_std, "g", "initialisation standard deviation of wpe in OpenAI's released model code"),
        "mean": Number(float(x.mean()), ".1e", "mean of the last row's entries"),
        "sd": Number(sd, ".4f", "standard deviation of the last row's entries"),
        "sd_low": Number(float(sd_low), ".4f", f"lower end of the {level:.0%} χ² interval for that standard deviation"),
        "sd_high": Number(float(sd_high), ".4f", f"upper end of that interval"),
        "level": Number(level, ".0%", "coverage of the interval"),
        "sd_over_init": Number(sd / init_std, ".2f", "that standard deviation over the initialisation scale"),
        "sd_before": Number(sd_before, ".3f", "standard deviation of the entries of the second-to-last row"),
        "sd_before_over_sd": Number(sd_before / sd, ".0f", "second-to-last row's standard deviation over the last row's"),
        "chi2_p_init": Number(chi2_p, "sci2", "χ² test of σ = init_std against σ < init_std (p-value)"),
        "kurtosis": Number(float(stats.kurtosis(x)), ".2f", "excess kurtosis of the last row's entries (0 for a Gaussian)"),
        "skewness": Number(float(stats.skew(x)), ".2f", "skewness of the last row's entries"),
        "shapiro_w": Number(float(shapiro.statistic), ".4f", "Shapiro–Wilk W of the last row"),
        "shapiro_p": Number(float(shapiro.pvalue), ".2f", "Shapiro–Wilk p-value of the last row"),
        "normaltest_p": Number(float(k2.pvalue), ".2f", "D'Agostino–Pearson p-value of the last row"),
        "others_shapiro_p_max": Number(float(other_shapiro.max()), "sci2",
                                       "largest Shapiro–Wilk p-value of any other row"),
        "others_normal_count": Number(int(np.sum(other_shapiro > 0.05)), "d",
                                      "other rows with Shapiro–Wilk p > 0.05"),
        "max_abs_cos": Number(observed_max, ".3f", "largest |cos| between the last row and any other row"),
        "n_random": Number(n_random, "d", "random directions in the baseline"),
        "seed": Number(seed, "d", "seed of the random directions"),
        "random_max_abs_cos_median": Number(float(np.median(random_max)), ".3f",
                                            "median over random directions of their largest |cos| with the other rows"),
        "random_max_abs_cos_p95": Number(float(np.percentile(random_max, 95)), ".3f", "95th percentile of the same"),
        "max_abs_cos_p": Number(float(np.mean(random_max >= observed_max)), ".2f",
                                "share of random directions whose largest |cos| is at least the last row's"),
        "norm": Number(float(np.linalg.norm(x)), ".4f", "norm of the last row"),
        "init_norm": Number(init_std * np.sqrt(d), ".3f", "expected norm of an initial row, init_std·√D"),
    }
    rows = []
    for k in ks:
        share = float(np.sum((vt[:k] @ x) ** 2) / np.sum(x**2))
        p = beta_share_tail(share, k, d)
        rows.append((k, share, k / d, p))
        numbers[f"share_top{k}"] = Number(share, ".2%", f"share of ‖x‖² in the top-{k} principal subspace of the other rows")
        numbers[f"chance_top{k}"] = Number(k / d, ".2%", f"a random direction's expected share, {k}/D")
        numbers[f"share_top{k}_p"] = Number(p, ".2g", f"P(random direction's share ≥ observed), top {k}")
    table = Table(("principal subspace (k)", "share of the last row", "random direction (k/D)",
                   "P(random ≥ observed)"), tuple(rows),
                  formats={"share of the last row": ".2%", "random direction (k/D)": ".2%", "P(random ≥ observed)": ".2f"})
    return Result(numbers, {"subspace": table}, {"x": x, "sd": np.array(sd), "init_std": np.array(init_std)})


def plot_last_row(result: Result, shape: ModelShape):
    """The last row's entries: histogram against the fitted Gaussian and the initial one, and a normal Q–Q plot."""
    from scipy import stats

    x, sd, init = result.arrays["x"], float(result.arrays["sd"]), float(result.arrays["init_std"])
    position = result.numbers["position"].text
    fig, (left, right) = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 3.6))
    grid = np.linspace(-4 * init, 4 * init, 401)
    left.hist(x, bins=40, density=True, color="C0", alpha=0.6, label=f"entries of $p_{{{position}}}$")
    left.plot(grid, stats.norm.pdf(grid, x.mean(), sd), color="C0", lw=1.4, label=f"Gaussian, sd {sd:.4f}")
    left.plot(grid, stats.norm.pdf(grid, 0, init), color="C3", lw=1.2, ls="--",
              label=f"initialisation (released code), sd {init:g}")
    left.set_xlabel("value")
    left.set_ylabel("density")
    (osm, osr), (slope, intercept, _) = stats.probplot(x, dist="norm")
    right.plot(osm, osr, ".", ms=2, color="C0")
    right.plot(osm, slope * osm + intercept, color="0.3", lw=1)
    right.set_xlabel("standard normal quantile")
    right.set_ylabel("ordered entry")
    right.set_title(f"Q–Q plot, Shapiro–Wilk p = {result.numbers['shapiro_p'].text}")
    fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncol=3)
    return fig


register(
    "last_position", "Is the last position embedding untrained?", last_position,
    needs=("W_pos",), params={"init_std": 0.01, "ks": (3, 10, 30), "n_random": 2000, "level": 0.95, "seed": 0},
    figures={"last_row": plot_last_row},
)
