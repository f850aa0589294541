"""The shift map of a position table, held out: does one map, or one rotation, carry position n to n + k?

For the sinusoidal table, p_{n+k} = R_k p_n exactly, R_k a rotation (the derivation of the sinusoidal chapter), so a
map fitted on some positions predicts every other. The same question of a learned table, answered out of sample:
the pairs (x_n, x_{n+k}) are split by the block of n (alternating blocks of `block` positions, fold A the even
blocks, fold B the odd ones); a map is fitted on one fold's pairs and scored on the other's, both ways. Each score is
the share of the held-out move, ‖X_{+k} − X‖_F over the test pairs, that the map leaves unexplained (0: exact;
1: no better than standing still, x_{n+k} ≈ x_n; above 1: worse), for

* affine: the least-squares map x_n M_k + b_k;
* orthogonal: the best orthogonal Q_k with the best translation (orthogonal Procrustes on the centred pairs).

The coordinates are the principal axes of the training fold's rows (centred at their mean): the top three (the
helix), and "full": every axis whose singular value is above RANK_TOLERANCE of the largest, at most half the
fewest training pairs, so that every least-squares fit has at least two pairs per parameter. Row 0 (whose step to
row 1 is fifty times the median step) and the untrained last rows are left out.

A fitted map predicts a smooth curve's next point from its neighbours' without any shift structure, so the learned
table is compared with two nulls of its shape that have none: Gaussian random walks, and independent-phase
surrogates of the table itself (each column's power spectrum kept, so its smoothness, the cross-column phases
destroyed). For a random walk the move is independent of the position, so the best map is standing still and a
held-out share is 1 or more. The positive control is a sinusoidal table of the same length, `control_width`
columns and base `control_base`, a rotation exactly and well conditioned (its slowest pair turns about once over a
few hundred rows, so no two columns are nearly dependent): every held-out share is zero up to rounding. The sinusoidal table of the learned
table's full width is shown in the top spaces only: most of its slow columns are nearly dependent (numerical rank
about 200 of 768 at GPT-2's shape), so which axes its full space keeps, and the map fitted along the barely spanned
ones, change with the inputs' rounding (its longest-shift share changes entirely in single precision) and with the block size. p-values are one-sided (the learned table's share at or below the null's), Holm over the
tests of one map in one space (every shift against both nulls).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.pvalues import FAMILYWISE_ALPHA, holm, p_value_text
from analyses.toolkit.sinusoids import sinusoidal_table
from analyses.toolkit.surrogates import phase_randomiser, random_walks
from analyses.engine.registry import register
from analyses.engine.results import Accuracy, Number, Result, Table, Text, checked_sample
from analyses.engine.sources import ModelShape

STATISTICS = ("affine", "orthogonal")
SPLITS = ("fold A", "fold B", "both")
NULLS = ("walks", "surrogates")
SHARE = Accuracy(rel=1e-6, abs=1e-6, basis="a share of norms of out-of-sample predictions from QR and SVD factors in "
                                          "float64: the fitted map multiplies input errors by the condition number "
                                          "of the training coordinates (up to 1e6 where axes down to RANK_TOLERANCE "
                                          "are kept); inputs perturbed at 2^10 u moved it by at most 1e-8; declared "
                                          "1e-6")
RANK_TOLERANCE = 1e-6
"""Principal axes with a singular value below this fraction of the largest are left out of the full space (the
sinusoidal table of GPT-2's shape has numerical rank about 200: its slow columns are nearly dependent)."""
CONTROL_BOUND = 1e-4
"""The held-out share below which the narrow sinusoidal control counts as exact (cited as this bound; its
coordinates' condition number is at most about 1e4, and rounding leaves at most 3e-6: 254 rows, blocks of 64, a
64-step shift, where the training pairs are fewest)."""
MIN_PAIRS = 8
"""The fewest training pairs a fold may have for a shift."""


def best_orthogonal(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The orthogonal Q minimising ‖A Q − B‖_F (orthogonal Procrustes: U Vᵀ from the SVD of AᵀB)."""
    U, _, Vt = np.linalg.svd(A.T @ B)
    return U @ Vt


def block_parity(n: int, block: int) -> np.ndarray:
    """0 or 1 for each of n positions: the parity of its block of `block` positions (fold A: 0, fold B: 1)."""
    return (np.arange(n) // block) % 2


def principal_axes(X: np.ndarray, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The mean of X[rows] and its principal axes (rows of Vᵀ) whose singular value is above RANK_TOLERANCE of the
    largest, largest first."""
    mean = X[rows].mean(axis=0)
    _, s, Vt = np.linalg.svd(X[rows] - mean, full_matrices=False)
    return mean, Vt[:int(np.sum(s > RANK_TOLERANCE * s[0]))]


def full_rank(n: int, ks: tuple[int, ...], block: int) -> int:
    """The most axes the full space may keep: half the fewest training pairs of any fold and shift."""
    fewest = min(int(np.sum(block_parity(n - k, block) == fold)) for k in ks for fold in (0, 1))
    if fewest < MIN_PAIRS:
        raise ValueError(f"{n} rows leave a fold {fewest} training pairs at blocks of {block} (need {MIN_PAIRS})")
    return fewest // 2


def heldout_sums(X: np.ndarray, ks: tuple[int, ...], block: int, ranks: tuple[int | None, ...]) -> np.ndarray:
    """[len(ranks), len(ks), 2 folds, 3]: per space (top r axes of the training fold's rows; None: the full space),
    shift k and training fold, the squared residual of the affine and of the orthogonal map on the other fold's
    pairs, and the squared held-out move ‖X_{+k} − X‖²_F."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    caps = [full_rank(n, ks, block) if r is None else r for r in ranks]
    out = np.empty((len(ranks), len(ks), 2, 3))
    parity = block_parity(n, block)
    for fold in (0, 1):
        mean, axes = principal_axes(X, np.flatnonzero(parity == fold))
        for j, cap in enumerate(caps):
            Z = (X - mean) @ axes[:cap].T
            for i, k in enumerate(ks):
                train = parity[:n - k] == fold
                A, B, At, Bt = Z[:n - k][train], Z[k:][train], Z[:n - k][~train], Z[k:][~train]
                Q_, R_ = np.linalg.qr(np.column_stack([A, np.ones(len(A))]))
                affine = np.column_stack([At, np.ones(len(At))]) @ np.linalg.solve(R_, Q_.T @ B) - Bt
                mean_A, mean_B = A.mean(axis=0), B.mean(axis=0)
                orthogonal = (At - mean_A) @ best_orthogonal(A - mean_A, B - mean_B) + mean_B - Bt
                out[j, i, fold] = (np.sum(affine ** 2), np.sum(orthogonal ** 2), np.sum((Bt - At) ** 2))
    return out


def heldout_shares(X: np.ndarray, ks: tuple[int, ...], block: int, ranks: tuple[int | None, ...]) -> np.ndarray:
    """[len(ranks), len(ks), 3 splits, 2 statistics]: the share of the held-out move each map leaves unexplained, fitted on
    fold B and tested on A, fitted on A and tested on B, and both pooled, √(Σ residual² / Σ move²)."""
    sums = heldout_sums(X, ks, block, ranks)
    splits = np.concatenate([sums[:, :, ::-1], sums.sum(axis=2, keepdims=True)], axis=2)
    return np.sqrt(splits[..., :2] / splits[..., 2:])


def shift_map_analysis(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, ks: tuple[int, ...],
                       blocks: tuple[int, ...], ranks: tuple[int, ...], leading_rows: int, untrained_rows: int,
                       n_draws: int, seed: int, sinusoid_base: float, control_width: int,
                       control_base: float, n_sample: int, cached_rows: Mapping | None) -> Result:
    """Held-out shift maps of the learned table (without its first and untrained rows), the sinusoidal table of its
    shape, and `n_draws` random walks and independent-phase surrogates, at the first of `blocks`; the learned
    table's range over every block size and split. Each null draw's shares are a row of the table `rows`; with
    `cached_rows` (that table as cached, which the recomputation check hands in) every draw is still drawn, so that
    the generator's stream is the same, but only `n_sample` draws of each null are measured again, the rest read from
    the rows."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    P = P[leading_rows:len(P) - untrained_rows]
    n, d = P.shape
    spaces = (*ranks, None)
    names = tuple("full" if r is None else f"top{r}" for r in spaces)
    learned = np.stack([heldout_shares(P, ks, b, spaces) for b in blocks])
    sinusoidal = np.stack([heldout_shares(sinusoidal_table(n, d, sinusoid_base), ks, b, ranks) for b in blocks])
    control = np.stack([heldout_shares(sinusoidal_table(n, control_width, control_base), ks, b, (None,))
                        for b in blocks])
    rng = np.random.default_rng(seed)
    surrogate = phase_randomiser(P, shared=False)
    null_tables = {"walks": lambda: random_walks(n, d, rng), "surrogates": lambda: surrogate(rng)}
    nulls = {name: np.empty((n_draws, len(spaces), len(ks), len(STATISTICS))) for name in NULLS}
    draw_columns = [f"{space} k{k} {statistic}" for space in names for k in ks for statistic in STATISTICS]
    cached = {} if cached_rows is None else {
        (name, int(draw)): [cached_rows[c][i] for c in draw_columns]
        for i, (name, draw) in enumerate(zip(cached_rows["null"], cached_rows["draw"]))}
    sample = checked_sample(n_draws, n_sample) if cached else set(range(n_draws))
    for draw in range(n_draws):
        for name in NULLS:
            table = null_tables[name]()
            if draw in sample or (name, draw) not in cached:
                nulls[name][draw] = heldout_shares(table, ks, blocks[0], spaces)[:, :, -1]
            else:
                nulls[name][draw] = np.reshape(cached[name, draw], nulls[name][draw].shape)
    draw_rows = tuple((name, draw, *nulls[name][draw].ravel().tolist()) for name in NULLS for draw in range(n_draws))
    observed = learned[0, :, :, -1]  # [space, k, statistic] at the first block size, both folds pooled
    p = {name: (1 + np.sum(nulls[name] <= observed, axis=0)) / (1 + n_draws) for name in NULLS}
    below = {}
    for j, space in enumerate(names):
        for s, statistic in enumerate(STATISTICS):
            family = [(name, i) for name in NULLS for i in range(len(ks))]
            for (name, i), rejected in zip(family, holm([p[name][j, i, s] for name, i in family])):
                below[name, j, i, s] = rejected
    shown = (ks[0], ks[len(ks) // 2], ks[-1])
    numbers = {"n_rows": Number(n, "d", "rows the maps are fitted and tested on"),
               "leading_rows": Number(leading_rows, "d", "first rows left out"),
               "n_draws": Number(n_draws, "d", "draws of each null"),
               "seed": Number(seed, "d", "seed of the null draws"),
               "alpha": Number(FAMILYWISE_ALPHA, ".2f", "familywise error rate of Holm's procedure per map and space"),
               "block": Number(blocks[0], "d", "positions per block of the folds"),
               "other_blocks": Text(" and ".join(str(b) for b in blocks[1:]), "other block sizes tried"),
               "full_rank": Number(full_rank(n, ks, blocks[0]), "d",
                                   "most principal axes kept in the full space at the first block size"),
               **{f"k_{i}": Number(k, "d", f"shift shown ({i})") for i, k in zip(("first", "middle", "last"), shown)}}
    rows = []
    for j, space in enumerate(names):
        for s, statistic in enumerate(STATISTICS):
            for i, k in enumerate(ks):
                key = f"{space}_k{k}_{statistic}"
                spread = learned[:, j, i, :, s]
                what = f"{space} coordinates, shift {k}: held-out share of the move the {statistic} map misses"
                numbers |= {
                    f"learned_{key}": Number(float(observed[j, i, s]), ".2f", f"learned table, {what}", SHARE),
                    f"learned_{key}_low": Number(float(spread.min()), ".2f",
                                                 f"learned table, {what}: least over block sizes and splits", SHARE),
                    f"learned_{key}_high": Number(float(spread.max()), ".2f",
                                                  f"learned table, {what}: most over block sizes and splits", SHARE)}
                if j < len(ranks):
                    numbers[f"sinusoidal_{key}"] = Number(float(sinusoidal[0, j, i, -1, s]), ".2f",
                                                          f"sinusoidal table, {what}", SHARE)
                for name in NULLS:
                    numbers |= {
                        f"{name}_{key}": Number(float(nulls[name][:, j, i, s].mean()), ".2f",
                                                f"{name} (mean of {n_draws}), {what}", SHARE),
                        f"{name}_{key}_p": Text(p_value_text(float(p[name][j, i, s]), n_draws),
                                                f"{name}: one-sided p of the learned table's share, {key}"),
                        f"{name}_{key}_below": Text("yes" if below[name, j, i, s] else "no",
                                                    f"{name}: learned share below the null's (Holm), {key}")}
                rows.append((space.replace("top", "top "), statistic, k, observed[j, i, s], spread.min(),
                             spread.max(), float(sinusoidal[0, j, i, -1, s]) if j < len(ranks) else "—",
                             *(v for name in NULLS for v in (nulls[name][:, j, i, s].mean(),
                                                             p_value_text(float(p[name][j, i, s]), n_draws)
                                                             .removeprefix("p = ").removeprefix("p "),
                                                             "yes" if below[name, j, i, s] else "no"))))
    numbers["control_width"] = Number(control_width, "d", "width of the narrow sinusoidal table (the control)")
    numbers["control_base"] = Number(control_base, ".0f", "base of the narrow sinusoidal table's frequencies")
    worst = float(control.max())
    numbers["control_max"] = Number.bound(
        worst, CONTROL_BOUND, "the narrow sinusoidal table's largest held-out share, every shift, block and split",
        "an exact map leaves rounding amplified by the condition number of the training coordinates (up to 1e6), "
        "and the axes below RANK_TOLERANCE left out; the control's leaves at most 3e-6 on the report's tables") \
        if worst < CONTROL_BOUND else Text(
        "not recovered", "the narrow sinusoidal table's held-out shares: too few rows to resolve its columns (which "
        "axes the full space keeps, and so the share, changes with rounding)")
    columns = ("coordinates", "map", "shift k", "learned", "learned, least", "learned, most", "sinusoidal",
               "walks (mean)", "p, walks", "below walks (Holm)", "surrogates (mean)", "p, surrogates",
               "below surrogates (Holm)")
    shares = ("learned", "learned, least", "learned, most", "sinusoidal", "walks (mean)", "surrogates (mean)")
    table = Table(columns, tuple(rows), formats=dict.fromkeys(shares, ".2f"), accuracy=dict.fromkeys(shares, SHARE))
    arrays = {"ks": np.array(ks, dtype=np.float64), "blocks": np.array(blocks, dtype=np.float64),
              "learned": learned, "sinusoidal": sinusoidal, **{f"{name}_draws": nulls[name] for name in NULLS}}
    return Result(numbers, {"shift_maps": table, "rows": Table(("null", "draw", *draw_columns), draw_rows,
                                                               accuracy=dict.fromkeys(draw_columns, SHARE))}, arrays,
                  {name: SHARE for name in arrays if name not in ("ks", "blocks")})


def plot_shift_maps(result: Result, shape: ModelShape):
    """The held-out share of the move by k that each map leaves unexplained, against k: the learned table (its
    range over block sizes and splits shaded), the sinusoidal table (top spaces) and the nulls' 5-95 % bands, per
    map and space."""
    ks = result.arrays["ks"]
    learned, sinusoidal = result.arrays["learned"], result.arrays["sinusoidal"]
    n_spaces = learned.shape[1]
    fig, axes = plotting.subplots(n_spaces, len(STATISTICS), figsize=(plotting.MAX_WIDTH, 2.4 * n_spaces),
                                  sharex=True, squeeze=False)
    for j in range(n_spaces):
        for s, ax in enumerate(axes[j]):
            for name, colour in (("walks", "0.45"), ("surrogates", "C2")):
                draws = result.arrays[f"{name}_draws"][:, j, :, s]
                ax.fill_between(ks, *np.quantile(draws, [0.05, 0.95], axis=0), color=colour, alpha=0.25, lw=0)
                ax.plot(ks, draws.mean(axis=0), color=colour, marker="o", ms=3, lw=1.0,
                        label=f"{name.replace('walks', 'random walks')} (mean, 5-95 %)")
            ax.fill_between(ks, learned[:, j, :, :, s].min(axis=(0, 2)), learned[:, j, :, :, s].max(axis=(0, 2)),
                            color="C0", alpha=0.2, lw=0)
            ax.plot(ks, learned[0, j, :, -1, s], color="C0", marker="o", ms=3, lw=1.3,
                    label="learned (range over blocks and splits)")
            if j < sinusoidal.shape[1]:  # the full-width sinusoidal table's full space is not determined
                ax.plot(ks, sinusoidal[0, j, :, -1, s], color="C3", marker="s", ms=3, lw=1.0, label="sinusoidal")
            ax.axhline(1.0, color="0.2", lw=0.6, ls=":")
            ax.set_xscale("log", base=2)
            shown = [learned[:, j, :, :, s].max()] + [np.quantile(result.arrays[f"{name}_draws"][:, j, :, s], 0.95)
                                                      for name in NULLS]
            ax.set_ylim(0, 1.1 * max(shown))
            ax.set_title(f"{STATISTICS[s]} map, {'full space' if j == n_spaces - 1 else 'top principal axes'}",
                         fontsize=9)
        axes[j][0].set_ylabel("held-out share\nleft unexplained")
    for ax in axes[-1]:
        ax.set_xlabel("shift k (positions)")
    fig.legend(*axes[0][0].get_legend_handles_labels(), loc="outside lower center", ncol=2, fontsize=plotting.MIN_FONT)
    return fig


register(
    "shift_map", "The shift map of the position table, held out", shift_map_analysis,
    needs=("W_pos",), params={"ks": (1, 8, 64), "blocks": (64, 32, 128), "ranks": (3,), "leading_rows": 1,
                              "untrained_rows": 1, "n_draws": 119, "seed": 0, "sinusoid_base": 10000.0,
                              "control_width": 16, "control_base": 100.0, "n_sample": 3, "cached_rows": None},
    figures={"shift_maps": plot_shift_maps}, groups=("position table",),
)
