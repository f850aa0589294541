"""Why a helix? How far the position Gram matrix depends on offset only, and what that predicts.

With X the position table centred over positions (rows n = 0 … N−1), the Gram matrix G = X Xᵀ holds
the inner products of every pair of positions. If G depended on the offset i − j only, it would be
a Toeplitz matrix; if it were moreover periodic in the offset it would be circulant, diagonalised
exactly by the discrete Fourier basis, and every frequency would come as a cosine–sine pair of
equal eigenvalue. A cosine–sine pair with equal variance traced against each other is a circle,
so the principal components of a matrix whose similarity depends on offset only are sinusoids,
and its top two form a circle when the offset kernel peaks at a frequency other than zero
(Gray 2006 for the Toeplitz–circulant link; Novembre & Stephens 2008 for sinusoidal principal
components of smooth data).

Measured here, for P and for baselines of the same shape:

* the Toeplitz share τ = ‖T(G)‖²_F / ‖G‖²_F, T(G) the best Toeplitz approximation (each diagonal
  replaced by its mean, an orthogonal projection, so ‖G‖² = ‖T(G)‖² + ‖G − T(G)‖²);
* the circulant share κ = Σ_f (FGFᴴ)_ff² / ‖G‖²_F, F the unitary DFT: the energy on the diagonal of G
  in the Fourier basis, i.e. of its best circulant approximation (κ ≤ τ);
* the top eigenvalues and eigenvectors of G (the principal components over positions): the pair
  ratio λ₂/λ₁ and each eigenvector's frequency (of its least-squares sinusoid, as in `helix`, in
  cycles per context), and the same for T(G): the helix that the offset-only part would give.

Baselines: D independent Gaussian random walks (smooth, not stationary: PCA of a random walk gives
sinusoids of increasing frequency, not a pair), independent-phase surrogates of P (each column's
spectrum kept, columns decoupled), and the sinusoidal table. Beside them, the null for every reading about
offset: shared-phase surrogates of P (one random phase per frequency for all columns, X̃ = U X with U an
orthogonal circulant), which are shift-invariant by construction (their rows have no absolute position) and keep
PᵀP, hence ‖G‖_F and every singular value; their τ is what a shift-invariant process with P's spectra leaves on the
Toeplitz part over a finite context, only τ, over `n_shared` draws. Diagonal sums come from the columns'
autocorrelations by FFT, top eigenpairs from Lanczos iteration (fixed start vector), all float64.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.gram import circulant_share, diagonal_sums, toeplitz_part, toeplitz_share
from analyses.toolkit.sinusoids import dominant_frequency, sinusoidal_table
from analyses.toolkit.surrogates import phase_randomise, phase_randomiser, random_walks
from analyses.engine.registry import register
from analyses.engine.results import COUNT_SHARE, FITTED, Number, Result, Table
from analyses.engine.sources import ModelShape


def top_eigenpairs(G: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """The k largest eigenvalues (descending) and eigenvectors of a symmetric matrix, by Lanczos iteration.

    Eigenvector signs are fixed so that each one's largest-magnitude entry is positive.
    """
    from scipy.sparse.linalg import eigsh

    values, vectors = eigsh(G, k=k, which="LA", v0=np.ones(len(G)), tol=1e-12)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    signs = np.sign(vectors[np.abs(vectors).argmax(axis=0), np.arange(k)])
    return values, vectors * signs


STATISTICS = (
    ("toeplitz_share", "Toeplitz share τ of the Gram matrix"),
    ("circulant_share", "circulant (Fourier-diagonal) share κ"),
    ("top3_share", "variance share of the top 3 principal components"),
    ("pair_ratio", "λ₂/λ₁ of the Gram matrix"),
    ("pc1_cycles", "PC1: frequency of its fitted sinusoid (cycles per context)"),
    ("pc2_cycles", "PC2: frequency of its fitted sinusoid (cycles per context)"),
    ("pc3_cycles", "PC3: frequency of its fitted sinusoid (cycles per context)"),
    ("toeplitz_pair_ratio", "λ₂/λ₁ of the Toeplitz part T(G)"),
    ("toeplitz_pc1_cycles", "T(G), PC1: frequency of its fitted sinusoid (cycles per context)"),
    ("toeplitz_pc2_cycles", "T(G), PC2: frequency of its fitted sinusoid (cycles per context)"),
    ("top2_overlap", "overlap of the top-2 eigenvectors of G and of T(G)"),
)


def gram_statistics(X: np.ndarray, pad: int) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Every statistic of STATISTICS for a table X (rows: positions), and the arrays the figure draws."""
    X = np.asarray(X, dtype=np.float64)
    Xc = X - X.mean(axis=0)
    G = Xc @ Xc.T
    T = toeplitz_part(Xc)
    values, vectors = top_eigenpairs(G, 4)
    t_values, t_vectors = top_eigenpairs(T, 4)
    gram_norm_sq = float(np.sum(G * G))
    stats = {
        "toeplitz_share": toeplitz_share(Xc, gram_norm_sq),
        "circulant_share": circulant_share(Xc, gram_norm_sq),
        "top3_share": float(values[:3].sum() / np.trace(G)),
        "pair_ratio": float(values[1] / values[0]),
        "toeplitz_pair_ratio": float(t_values[1] / t_values[0]),
        "top2_overlap": float(np.sum((vectors[:, :2].T @ t_vectors[:, :2]) ** 2) / 2),
    }
    for j in range(3):
        stats[f"pc{j + 1}_cycles"] = dominant_frequency(vectors[:, j], pad)
    for j in range(2):
        stats[f"toeplitz_pc{j + 1}_cycles"] = dominant_frequency(t_vectors[:, j], pad)
    kernel = diagonal_sums(Xc) / (len(Xc) - np.arange(len(Xc)))
    return stats, {"vectors": vectors, "kernel": kernel / kernel[0], "G": G, "T": T}


def shared_phase_toeplitz_shares(P: np.ndarray, n_draws: int, rng: np.random.Generator) -> np.ndarray:
    """τ of the centred Gram matrix of `n_draws` shared-phase surrogates of P (shift-invariant, PᵀP kept, so ‖G‖²_F is
    P's own and is computed once)."""
    X = np.asarray(P, dtype=np.float64)
    X = X - X.mean(axis=0)
    draw, gram_norm_sq = phase_randomiser(X, shared=True), float(np.sum((X.T @ X) ** 2))
    return np.array([toeplitz_share(draw(rng), gram_norm_sq) for _ in range(n_draws)])


def toeplitz_gram(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_draws: int, n_shared: int, seed: int,
                  pad: int, sinusoid_base: float) -> Result:
    """How Toeplitz (offset-only) the position Gram matrix is, and the components it implies, against baselines."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    n, d = P.shape
    observed, arrays = gram_statistics(P, pad)
    rng = np.random.default_rng(seed)
    walks = [gram_statistics(random_walks(n, d, rng), pad) for _ in range(n_draws)]
    phases = [gram_statistics(phase_randomise(P, rng, shared=False), pad) for _ in range(n_draws)]
    sinusoidal, _ = gram_statistics(sinusoidal_table(n, d, sinusoid_base), pad)
    baselines = {"walks": np.array([[w[0][k] for k, _ in STATISTICS] for w in walks]),
                 "phases": np.array([[p[0][k] for k, _ in STATISTICS] for p in phases])}
    rows = []
    for i, (key, label) in enumerate(STATISTICS):
        rows.append((label, observed[key], baselines["walks"][:, i].mean(), baselines["walks"][:, i].std(ddof=1),
                     baselines["phases"][:, i].mean(), baselines["phases"][:, i].std(ddof=1), sinusoidal[key]))
    columns = ("statistic", "learned table", "random walks: mean", "random walks: sd", "independent phases: mean",
               "independent phases: sd", "sinusoidal table")
    fitted = tuple(FITTED if key.endswith("_cycles") else None for key, _ in STATISTICS)  # one per row
    table = Table(columns, tuple(rows), formats=dict.fromkeys(columns[1:], ".3g"),
                  accuracy=dict.fromkeys(columns[1:], fitted))
    numbers = {"n_draws": Number(n_draws, "d", "draws of each baseline"),
               "seed": Number(seed, "d", "seed of the baseline draws"),
               "pad": Number(pad, "d", "zero-padding factor of the eigenvector spectra"),
               "n_positions": Number(n, "d", "positions (rows of the Gram matrix)")}
    fmt = {"toeplitz_share": ".0%", "circulant_share": ".0%", "top3_share": ".1%", "top2_overlap": ".2f"}
    for i, (key, label) in enumerate(STATISTICS):
        f, accuracy = fmt.get(key, ".2f"), fitted[i]
        numbers[key] = Number(observed[key], f, label, accuracy)
        numbers[f"walks_{key}_mean"] = Number(float(baselines["walks"][:, i].mean()), f, f"random walks: {label}, mean",
                                              accuracy)
        numbers[f"walks_{key}_sd"] = Number(float(baselines["walks"][:, i].std(ddof=1)), ".3f" if "%" in f else f,
                                            f"random walks: {label}, standard deviation", accuracy)
        numbers[f"phases_{key}_mean"] = Number(float(baselines["phases"][:, i].mean()), f,
                                               f"independent phases: {label}, mean", accuracy)
        numbers[f"sinusoidal_{key}"] = Number(sinusoidal[key], f, f"sinusoidal table: {label}", accuracy)
    numbers["walks_pair_ratio_max"] = Number(float(baselines["walks"][:, 3].max()), ".2f",
                                             "largest λ₂/λ₁ over the random-walk draws")
    numbers["walks_toeplitz_share_max"] = Number(float(baselines["walks"][:, 0].max()), ".0%",
                                                 "largest Toeplitz share over the random-walk draws")
    numbers["nontoeplitz_share"] = Number(1 - observed["toeplitz_share"], ".0%",
                                          "share of ‖G‖² outside the Toeplitz part, 1 − τ")
    shared = shared_phase_toeplitz_shares(P, n_shared, rng)
    arrays["shared_toeplitz_shares"] = shared
    numbers |= {
        "n_shared": Number(n_shared, ",d", "shared-phase (shift-invariant) surrogates drawn"),
        "shared_toeplitz_share_mean": Number(float(shared.mean()), ".3f", "shared-phase surrogates: mean τ"),
        "shared_toeplitz_share_sd": Number(float(shared.std(ddof=1)), ".3f", "shared-phase surrogates: sd of τ"),
        "shared_nontoeplitz_share_mean": Number(float(1 - shared.mean()), ".0%",
                                                "shared-phase surrogates: mean share of ‖G‖² outside the Toeplitz part"),
        "shared_nontoeplitz_share_min": Number(float(1 - shared.max()), ".0%",
                                               "shared-phase surrogates: smallest 1 − τ over the draws"),
        "shared_nontoeplitz_share_max": Number(float(1 - shared.min()), ".0%",
                                               "shared-phase surrogates: largest 1 − τ over the draws"),
        "shared_at_or_above": Number(int(np.count_nonzero(shared >= observed["toeplitz_share"])), "d",
                                     "shared-phase draws whose τ is at least P's"),
        "shared_p": Number((1 + np.count_nonzero(shared >= observed["toeplitz_share"])) / (1 + n_shared), ".3f",
                           "Monte Carlo p of P's τ above the shared-phase draws, (1 + #{τ ≥ P's}) / (1 + N)",
                           COUNT_SHARE),
        "shared_nontoeplitz_share_q025": Number(float(np.percentile(1 - shared, 2.5)), ".0%",
                                                "shared-phase surrogates: 2.5th percentile of 1 − τ"),
        "shared_nontoeplitz_share_q975": Number(float(np.percentile(1 - shared, 97.5)), ".0%",
                                                "shared-phase surrogates: 97.5th percentile of 1 − τ"),
        "toeplitz_share_3f": Number(observed["toeplitz_share"], ".3f", "Toeplitz share τ of the Gram matrix"),
        "shared_toeplitz_share_z": Number(float((observed["toeplitz_share"] - shared.mean()) / shared.std(ddof=1)),
                                          ".1f", "(τ of P − mean τ of the shared-phase draws) / their sd"),
    }
    arrays |= {"walk_vectors": walks[0][1]["vectors"], "walk_kernel": walks[0][1]["kernel"],
               "phase_kernel": phases[0][1]["kernel"]}
    return Result(numbers, {"statistics": table}, arrays)


def plot_gram(result: Result, shape: ModelShape):
    """The centred Gram matrix of the positions beside its Toeplitz part (each diagonal replaced by its mean)."""
    G, T = result.arrays["G"], result.arrays["T"]
    top = float(np.percentile(np.abs(G), 99.5))  # a few outlying rows (position 0) would wash out the rest
    fig, axes = plotting.subplots(1, 2, figsize=(8.4, 3.8))
    for ax, M, title in zip(axes, (G, T), (
            "Gram matrix G of the centred positions",
            f"its Toeplitz part T(G): {result.numbers['toeplitz_share'].text} of ‖G‖²")):
        image = ax.imshow(M, cmap=plotting.DIVERGING, vmin=-top, vmax=top, interpolation="nearest", rasterized=True)
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("position j")
        ax.set_ylabel("position i")
    fig.colorbar(image, ax=axes, fraction=0.03, pad=0.02).set_label("inner product (clipped at the 99.5th pct)")
    return fig


def plot_kernels(result: Result, shape: ModelShape):
    """Offset kernels t_k / t_0 (left) and the top two principal components over positions (right)."""
    fig, (left, right) = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 4.0))
    k = np.arange(len(result.arrays["kernel"]))
    for key, label, style in (("kernel", "the position table", dict(color="C0", lw=1.5)),
                              ("walk_kernel", "a random walk", dict(color="0.4", lw=1.2, ls="--")),
                              ("phase_kernel", "independent phases of P", dict(color="C2", lw=1.0, ls=":"))):
        left.plot(k, result.arrays[key], label=label, **style)
    left.axhline(0, color="0.6", lw=0.6)
    left.set_xlabel("offset k (positions)")
    left.set_ylabel("mean of G on diagonal k\n/ mean on diagonal 0")
    left.set_title("offset kernel of the Toeplitz part", fontsize=9)
    left.legend()
    n = np.arange(len(k))
    for j, color in ((0, "C0"), (1, "C1")):
        right.plot(n, result.arrays["vectors"][:, j], color=color, lw=1.3, label=f"the table: PC{j + 1}")
        right.plot(n, result.arrays["walk_vectors"][:, j], color=color, lw=1.0, ls="--",
                   label=f"random walk: PC{j + 1}")
    right.set_xlabel("position")
    right.set_ylabel("eigenvector entry")
    right.set_title("top two principal components", fontsize=9)
    fig.legend(*right.get_legend_handles_labels(), ncols=2, loc="outside lower right")
    return fig


register(
    "toeplitz_gram", "Why a helix: offset-only structure of the position Gram matrix", toeplitz_gram,
    needs=("W_pos",), params={"n_draws": 10, "n_shared": 1000, "seed": 0, "pad": 16, "sinusoid_base": 10000.0},
    figures={"gram": plot_gram, "kernels": plot_kernels}, groups=("position table",),
)
