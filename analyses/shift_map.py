"""The shift map of a position table: is moving k positions along the table one linear map, one rotation?

For the sinusoidal table, p_{n+k} = R_k p_n exactly, R_k a rotation and R_k = R_1^k (the derivation of the
sinusoidal chapter). The same question of a learned table, over every pair of trained rows k apart, in the table's
top-r principal coordinates and in full (every principal coordinate whose singular value is above 1e-6 of the
largest), for a range of k. Each answer is the share of the move by k, ‖X_{+k} − X‖_F, that a map leaves
unexplained (0: the map is exact; 1: no better than standing still):

* affine: the least-squares map x_n M_k + b_k (how far the move is a linear function of the position's code);
* orthogonal: the best orthogonal Q_k with the best translation (orthogonal Procrustes on the centred pairs): how
  close the best linear map is to a rotation;
* repeated: the one-step orthogonal map applied k times, Q_1^k, with the best translation: whether k steps are one
  step repeated.

Against the sinusoidal table and Gaussian random walks of the same shape (smooth, with no shift structure: in the
full space a map with D² + D parameters fitted to a few more than D pairs fits much of anything, which the walks
show). Shares of norms, so they do not depend on the table's scale; the walks' mean over `n_walks` draws.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.sinusoids import sinusoidal_table
from analyses.toolkit.surrogates import random_walks
from analyses.engine.registry import register
from analyses.engine.results import Accuracy, Number, Result, Table
from analyses.engine.sources import ModelShape

STATISTICS = ("affine", "orthogonal", "repeated")
SHARE = Accuracy(rel=1e-7, abs=1e-6, basis="a share of norms from QR and SVD factors in float64: an exact map "
                                           "leaves a residual of rounding size, up to about 1e-8 of the move where "
                                           "nearly dependent coordinates are kept (down to RANK_TOLERANCE); inputs "
                                           "perturbed at n·u moved it by 3e-10; declared 1e-6 absolute")
RANK_TOLERANCE = 1e-6
"""Principal coordinates with a singular value below this fraction of the largest are left out of the full space
(the sinusoidal table of GPT-2's shape has numerical rank about 200: its slow columns are nearly dependent)."""


def best_orthogonal(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """The orthogonal Q minimising ‖A Q − B‖_F (orthogonal Procrustes: U Vᵀ from the SVD of AᵀB)."""
    U, _, Vt = np.linalg.svd(A.T @ B)
    return U @ Vt


def shift_statistics(X: np.ndarray, ks: tuple[int, ...]) -> np.ndarray:
    """[len(ks), 3]: for each k, the share of the move by k left unexplained by the best affine map, by the best
    orthogonal map with a translation, and by the one-step orthogonal map applied k times with a translation."""
    X = np.asarray(X, dtype=np.float64)
    one_step = best_orthogonal(X[:-1] - X[:-1].mean(axis=0), X[1:] - X[1:].mean(axis=0))
    out = np.empty((len(ks), len(STATISTICS)))
    for i, k in enumerate(ks):
        A, B = X[:-k], X[k:]
        moved = np.linalg.norm(B - A)
        basis = np.linalg.qr(np.column_stack([A, np.ones(len(A))]))[0]
        A_c, B_c = A - A.mean(axis=0), B - B.mean(axis=0)
        out[i] = (np.linalg.norm(B - basis @ (basis.T @ B)) / moved,
                  np.linalg.norm(A_c @ best_orthogonal(A_c, B_c) - B_c) / moved,
                  np.linalg.norm(A_c @ np.linalg.matrix_power(one_step, k) - B_c) / moved)
    return out


def coordinate_sets(P: np.ndarray, ranks: tuple[int, ...], cap: int | None = None) -> list[np.ndarray]:
    """P's top-r principal coordinates for each r in `ranks`, then (the full space) all those whose singular value is
    above RANK_TOLERANCE of the largest, at most `cap` of them, from one SVD."""
    U, s, _ = np.linalg.svd(P - P.mean(axis=0), full_matrices=False)
    full = min(int(np.sum(s > RANK_TOLERANCE * s[0])), cap or len(s))
    return [U[:, :r] * s[:r] for r in (*ranks, full)]


def shift_map_analysis(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, ks: tuple[int, ...],
                       ranks: tuple[int, ...], untrained_rows: int, n_walks: int, seed: int,
                       sinusoid_base: float) -> Result:
    """Shift maps of the learned table, the sinusoidal table and random walks, in the top-r coordinates and in full."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    P = P[:len(P) - untrained_rows]
    n, d = P.shape
    # The full-space fit needs more pairs than parameters per output; a table with fewer rows than that (GPT-1: 512
    # positions of width 768) is fitted in its top n/2 principal coordinates instead.
    cap = d if n - max(ks) > d + 1 else n // 2
    ks = tuple(k for k in ks if n - k > cap + 1)
    rng = np.random.default_rng(seed)
    subspaces = (*ranks, None)
    coordinates = {"learned": coordinate_sets(P, ranks, cap),
                   "sinusoidal": coordinate_sets(sinusoidal_table(n, d, sinusoid_base), ranks, cap)}
    stats = {name: np.stack([shift_statistics(X, ks) for X in sets]) for name, sets in coordinates.items()}
    walks = np.stack([np.stack([shift_statistics(X, ks) for X in coordinate_sets(random_walks(n, d, rng), ranks, cap)])
                      for _ in range(n_walks)])
    stats["walks"] = walks.mean(axis=0)
    shown = (ks[0], ks[len(ks) // 2], ks[-1])
    numbers = {"n_rows": Number(n, "d", "trained rows the maps are fitted on"),
               "n_walks": Number(n_walks, "d", "random walks of the same shape"),
               "seed": Number(seed, "d", "seed of the random walks"),
               "full_rank": Number(coordinates["learned"][-1].shape[1], "d",
                                   "principal coordinates of the learned table kept in the full space"),
               **{f"k_{i}": Number(k, "d", f"shift shown ({i})") for i, k in zip(("first", "middle", "last"), shown)}}
    rows = []
    for j, r in enumerate(subspaces):
        space = "full" if r is None else f"top{r}"
        for name, values in stats.items():
            for i, k in enumerate(ks):
                if k not in shown:
                    continue
                rows.append((name.replace("walks", "random walks (mean)"), "full" if r is None else f"top {r}", k,
                             *values[j, i]))
                for s_index, statistic in enumerate(STATISTICS):
                    numbers[f"{name}_{space}_k{k}_{statistic}"] = Number(
                        float(values[j, i, s_index]), ".2f",
                        f"{name} table, {space} coordinates, shift {k}: share of the move the {statistic} map misses",
                        SHARE)
    columns = ("table", "coordinates", "shift k", "affine", "orthogonal", "one step repeated")
    table = Table(columns, tuple(rows), formats=dict.fromkeys(columns[3:], ".2f"),
                  accuracy=dict.fromkeys(columns[3:], SHARE))
    arrays = {"ks": np.array(ks, dtype=np.float64), "ranks": np.array([r or d for r in subspaces], dtype=np.float64),
              **stats}
    return Result(numbers, {"shift_maps": table}, arrays, dict.fromkeys(stats, SHARE))


def plot_shift_maps(result: Result, shape: ModelShape):
    """The share of the move by k that each map leaves unexplained, against k, per table and coordinates."""
    ks, ranks = result.arrays["ks"], result.arrays["ranks"]
    fig, axes = plotting.subplots(1, 3, figsize=(plotting.MAX_WIDTH, 3.2), sharex=True)
    colours = {"learned": "C0", "sinusoidal": "C3", "walks": "0.45"}
    titles = ("best affine map", "best orthogonal map", "one step's map, k times")
    for s, ax in enumerate(axes):
        for name, colour in colours.items():
            for j, r in enumerate(ranks):
                full = j == len(ranks) - 1
                label = f"{name.replace('walks', 'random walks (mean)')}, " + ("full" if full else f"top {int(r)}")
                ax.plot(ks, result.arrays[name][j, :, s], color=colour, lw=1.3 if full else 1.0,
                        ls="-" if full else "--", marker="o" if full else "s", ms=3, label=label)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("shift k (positions)")
        ax.set_title(titles[s], fontsize=9)
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("share of the move left unexplained")
    fig.legend(*axes[0].get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=plotting.MIN_FONT)
    return fig


register(
    "shift_map", "The shift map of the position table", shift_map_analysis,
    needs=("W_pos",), params={"ks": (1, 2, 4, 8, 16, 32, 64), "ranks": (3,), "untrained_rows": 1, "n_walks": 10,
                              "seed": 0, "sinusoid_base": 10000.0},
    figures={"shift_maps": plot_shift_maps}, groups=("position table",),
)
