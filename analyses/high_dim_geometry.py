"""High-dimensional geometry behind adding position to token embeddings: closed forms and Monte Carlo checks.

* Near-orthogonality: the cosine t of two independent uniform unit vectors in R^D has density
  ∝ (1 − t²)^((D−3)/2), mean 0 and variance exactly 1/D, so it concentrates like N(0, 1/D);
  P(|t| ≥ a) = I_{1−a²}((D−1)/2, 1/2).
* Thin shell: the fraction of the unit d-ball within ε of its surface is 1 − (1 − ε)^d.
* Overlap of two balls of radius r with centres c apart, as a fraction of one ball:
  I_{1−c²/(4r²)}((d+1)/2, 1/2) for c < 2r, else 0 (I the regularised incomplete beta function).

Monte Carlo samples come from `np.random.default_rng(seed)`; points uniform in a ball by rejection
from the enclosing cube, which uses none of the formulas it checks.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table
from analyses.engine.sources import ModelShape


def random_cosines(d: int, n_pairs: int, rng: np.random.Generator) -> np.ndarray:
    """Cosines between the vectors of n_pairs independent pairs of uniform random directions in R^d."""
    if d < 2:
        raise ValueError(f"directions need d >= 2, got {d}")
    x, y = rng.standard_normal((2, n_pairs, d))
    return (x * y).sum(axis=1) / (np.linalg.norm(x, axis=1) * np.linalg.norm(y, axis=1))


def cosine_density(t: np.ndarray, d: int) -> np.ndarray:
    """Density of the cosine of two independent uniform directions in R^d: Γ(d/2)/(√π Γ((d−1)/2)) (1−t²)^((d−3)/2)."""
    from scipy import special

    t = np.asarray(t, dtype=np.float64)
    log_c = special.gammaln(d / 2) - special.gammaln((d - 1) / 2) - 0.5 * np.log(np.pi)
    return np.exp(log_c) * np.clip(1 - t**2, 0, None) ** ((d - 3) / 2)


def cosine_tail(a: float, d: int) -> float:
    """P(|t| ≥ a) for the cosine t of two independent uniform directions in R^d: I_{1−a²}((d−1)/2, 1/2)."""
    from scipy import special

    return float(special.betainc((d - 1) / 2, 0.5, 1 - a**2)) if a < 1 else 0.0


def cosine_sq_variance(d: int) -> float:
    """Var(t²) = E t⁴ − (E t²)² = 3/(d(d+2)) − 1/d², which sets the Monte Carlo standard error of the variance."""
    return 3 / (d * (d + 2)) - 1 / d**2


def shell_fraction(d: int | np.ndarray, eps: float) -> np.ndarray:
    """The fraction of the d-ball's volume within eps (relative to the radius) of its surface: 1 − (1 − eps)^d."""
    if not 0 <= eps <= 1:
        raise ValueError(f"eps must be in [0, 1], got {eps}")
    return 1 - (1 - eps) ** np.asarray(d, dtype=np.float64)


def uniform_in_ball(d: int, n: int, rng: np.random.Generator, batch: int = 200_000) -> np.ndarray:
    """n points uniform in the unit d-ball, by rejection from the cube [−1, 1]^d (practical for d ≲ 8)."""
    chunks, kept = [], 0
    while kept < n:
        x = rng.uniform(-1, 1, (batch, d))
        x = x[(x**2).sum(axis=1) <= 1]
        chunks.append(x)
        kept += len(x)
    return np.concatenate(chunks)[:n]


def overlap_fraction(d: int | np.ndarray, c_over_r: float | np.ndarray) -> np.ndarray:
    """Volume of the intersection of two d-balls of radius r with centres c apart, divided by one ball's volume.

    Two caps of height r − c/2: I_{1 − (c/2r)²}((d+1)/2, 1/2) when c < 2r, and 0 otherwise.
    """
    from scipy import special

    if np.any(np.asarray(d) < 1):
        raise ValueError(f"need d >= 1, got {d}")
    ratio = np.asarray(c_over_r, dtype=np.float64)
    if np.any(ratio < 0):
        raise ValueError("the distance between the centres must be non-negative")
    z = np.clip(1 - (ratio / 2) ** 2, 0, 1)
    return special.betainc((np.asarray(d) + 1) / 2, 0.5, z)


def z_score(estimate: float, exact: float, standard_error: float) -> float:
    """(estimate − exact) / standard error."""
    return (estimate - exact) / standard_error


def near_orthogonality(*, dims: tuple[int, ...], n_pairs: int, tail_at: float, seed: int) -> Result:
    """Simulated cosines of random direction pairs against the exact moments, tail and density."""
    rng = np.random.default_rng(seed)
    rows, samples = [], {}
    for d in dims:
        t = random_cosines(d, n_pairs, rng)
        samples[d] = t
        variance = (t**2).mean()  # the mean is 0 exactly, so E t² is the variance
        se = np.sqrt(cosine_sq_variance(d) / n_pairs)
        tail = (np.abs(t) >= tail_at).mean()
        exact_tail = cosine_tail(tail_at, d)
        tail_se = np.sqrt(exact_tail * (1 - exact_tail) / n_pairs)
        rows.append((d, t.mean() * np.sqrt(d * n_pairs), variance * d, z_score(variance, 1 / d, se),
                     exact_tail, tail, z_score(tail, exact_tail, tail_se) if tail_se > 0 else 0.0))
    columns = ("D", "z of the mean", "D × mean t²", "z of mean t²", "exact P(t² ≥ a²)", "simulated P(t² ≥ a²)",
               "z of the tail")
    table = Table(columns, tuple(rows), formats={"z of the mean": ".2f", "D × mean t²": ".4f", "z of mean t²": ".2f",
                                                 "exact P(t² ≥ a²)": ".3g", "simulated P(t² ≥ a²)": ".3g",
                                                 "z of the tail": ".2f"})
    d_max = max(dims)
    numbers = {
        "n_pairs": Number(n_pairs, "d", "random pairs per dimension"),
        "seed": Number(seed, "d", "random seed"),
        "tail_at": Number(tail_at, "g", "threshold a of the tail probability"),
        "d_max": Number(d_max, "d", "largest dimension simulated"),
        "std_d_max": Number(1 / np.sqrt(d_max), ".4f", "1/√D, the standard deviation of t at the largest D"),
        "tail_d_max": Number(cosine_tail(tail_at, d_max), ".2%", "exact P(|t| ≥ a) at the largest D"),
        "tail_d3": Number(cosine_tail(tail_at, 3), ".0%", "exact P(|t| ≥ a) at D = 3"),
        "max_abs_z": Number(max(abs(v) for r in rows for v in (r[1], r[3], r[6])), ".2f",
                            "largest |z| of any Monte Carlo check in the table"),
    }
    return Result(numbers, {"cosines": table}, {f"t_{d}": t for d, t in samples.items()})


def plot_cosine_histograms(result: Result, shape: ModelShape | None):
    """Histograms of simulated cosines narrow like 1/√D; exact density (solid) and N(0, 1/D) (dashed) on top."""
    dims = sorted(int(k[2:]) for k in result.arrays)
    fig, ax = plotting.subplots()
    grid = np.linspace(-1, 1, 801)
    for colour, d in enumerate(dims):
        t = result.arrays[f"t_{d}"]
        ax.hist(t, bins=np.linspace(-1, 1, 161), density=True, color=f"C{colour}", alpha=0.35, lw=0)
        ax.plot(grid, cosine_density(grid, d), color=f"C{colour}", lw=1.2, label=f"D = {d}")
        ax.plot(grid, np.exp(-d * grid**2 / 2) * np.sqrt(d / (2 * np.pi)), color=f"C{colour}", lw=1, ls="--")
    ax.set_ylim(0, None)
    ax.set_xlabel("cosine t between two independent random directions")
    ax.set_ylabel("probability density")
    ax.legend(loc="upper right")
    return fig


register(
    "near_orthogonality", "Random directions in high dimension are nearly orthogonal", near_orthogonality,
    scope="common", params={"dims": (3, 12, 48, 192, 768), "n_pairs": 20000, "tail_at": 0.1, "seed": 0},
    figures={"histograms": plot_cosine_histograms},
    groups=("first report",),
)


def thin_shell(*, dims: tuple[int, ...], epsilons: tuple[float, ...], mc_dims: tuple[int, ...], n_samples: int,
               seed: int) -> Result:
    """1 − (1 − ε)^d for several d and ε, and a Monte Carlo check by rejection sampling in low d."""
    rng = np.random.default_rng(seed)
    label = {eps: f"ε = {eps:g}" for eps in epsilons}
    volume = Table(("d", *label.values()), tuple((d, *(shell_fraction(d, e) for e in epsilons)) for d in dims),
                   formats=dict.fromkeys(label.values(), ".4f"))
    rows = []
    for d in mc_dims:
        radius = np.linalg.norm(uniform_in_ball(d, n_samples, rng), axis=1)
        for eps in epsilons:
            exact = float(shell_fraction(d, eps))
            estimate = (radius >= 1 - eps).mean()
            se = np.sqrt(exact * (1 - exact) / n_samples)
            rows.append((d, eps, exact, estimate, se, z_score(estimate, exact, se)))
    mc = Table(("d", "ε", "exact", "Monte Carlo", "standard error", "z"), tuple(rows),
               formats={"ε": "g", "exact": ".4f", "Monte Carlo": ".4f", "standard error": ".1e", "z": ".2f"})
    d_max, eps_min = max(dims), min(epsilons)
    numbers = {
        "n_samples": Number(n_samples, "d", "Monte Carlo points per dimension"),
        "seed": Number(seed, "d", "random seed"),
        "d_max": Number(d_max, "d", "largest dimension in the table"),
        "eps_min": Number(eps_min, "g", "thinnest shell"),
        "eps_max": Number(max(epsilons), "g", "thickest shell"),
        "shell_d_max_eps_min": Number(shell_fraction(d_max, eps_min), ".2%",
                                      "volume fraction in the thinnest shell at the largest d"),
        "d_for_half_eps_min": Number(int(np.ceil(np.log(0.5) / np.log(1 - eps_min))), "d",
                                     "smallest d with half the volume in the thinnest shell"),
        "d_for_99_eps_min": Number(int(np.ceil(np.log(0.01) / np.log(1 - eps_min))), "d",
                                   "smallest d with 99% of the volume in the thinnest shell"),
        "mc_d_max": Number(max(mc_dims), "d", "largest dimension checked by Monte Carlo"),
        "max_abs_z": Number(max(abs(r[5]) for r in rows), ".2f", "largest |z| of the Monte Carlo checks"),
    }
    return Result(numbers, {"volume": volume, "monte_carlo": mc},
                  {"mc": np.array([r[:4] for r in rows]), "epsilons": np.array(epsilons)})


def _plot_against_dimension(result: Result, curve, values, label: str, keep_mc=lambda mc: True):
    """One closed-form curve per parameter value against d (log x), with its Monte Carlo estimates as rings."""
    d = np.unique(np.geomspace(1, 2048, 200).astype(int))
    mc = result.arrays["mc"]
    fig, ax = plotting.subplots()
    for colour, value in enumerate(values):
        ax.plot(d, curve(d, value), color=f"C{colour}", lw=1.4, label=label.format(value))
        points = mc[(mc[:, 1] == value) & keep_mc(mc)]
        ax.plot(points[:, 0], points[:, 3], "o", color=f"C{colour}", ms=4, mfc="none")
    ax.plot([], [], "o", color="0.3", ms=4, mfc="none", label="Monte Carlo")
    ax.axvline(768, color="0.5", lw=0.8, ls=":")
    ax.set_xscale("log")
    ax.set_xlabel("dimension d (log scale)")
    return fig, ax


def plot_shell(result: Result, shape: ModelShape | None):
    """Fraction of the volume in the outer shell against d: it tends to 1, faster for thicker shells."""
    fig, ax = _plot_against_dimension(result, shell_fraction, result.arrays["epsilons"], "ε = {:g}")
    ax.annotate("D = 768 (GPT-2)", (768, 0.05), textcoords="offset points", xytext=(-4, 0), ha="right", fontsize=8)
    ax.set_ylim(0, 1.02)
    ax.set_ylabel("volume share with ‖x‖ ≥ 1 − ε")
    ax.legend(loc="upper left")
    return fig


register(
    "thin_shell", "Volume concentrates in a thin shell", thin_shell, scope="common",
    params={"dims": (1, 2, 3, 10, 30, 100, 384, 768), "epsilons": (0.01, 0.05, 0.1), "mc_dims": (2, 3, 5, 8),
            "n_samples": 200000, "seed": 0},
    figures={"shell": plot_shell},
    groups=("first report",),
)


def ball_overlap(*, dims: tuple[int, ...], ratios: tuple[float, ...], mc_dims: tuple[int, ...], n_samples: int,
                 seed: int) -> Result:
    """Overlap of two equal balls (fraction of one) against d for several c/r, with a Monte Carlo check."""
    rng = np.random.default_rng(seed)
    label = {q: f"c/r = {q:g}" for q in ratios}
    overlap = Table(("d", *label.values()), tuple((d, *(float(overlap_fraction(d, q)) for q in ratios)) for d in dims),
                    formats=dict.fromkeys(label.values(), ".4g"))
    rows = []
    for d in mc_dims:
        x = uniform_in_ball(d, n_samples, rng)
        for q in ratios:
            exact = float(overlap_fraction(d, q))
            shifted = x.copy()
            shifted[:, 0] -= q
            estimate = ((shifted**2).sum(axis=1) <= 1).mean()
            se = np.sqrt(exact * (1 - exact) / n_samples)
            rows.append((d, q, exact, estimate, se, z_score(estimate, exact, se)))
    mc = Table(("d", "c/r", "exact", "Monte Carlo", "standard error", "z"), tuple(rows),
               formats={"c/r": "g", "exact": ".4f", "Monte Carlo": ".4f", "standard error": ".1e", "z": ".2f"})
    d_max = max(dims)
    numbers = {
        "n_samples": Number(n_samples, "d", "Monte Carlo points per dimension"),
        "seed": Number(seed, "d", "random seed"),
        "d_max": Number(d_max, "d", "largest dimension in the table"),
        "mc_d_max": Number(max(mc_dims), "d", "largest dimension checked by Monte Carlo"),
        "max_abs_z": Number(max(abs(r[5]) for r in rows), ".2f", "largest |z| of the Monte Carlo checks"),
    }
    for q in ratios:
        key = f"{q:g}".replace(".", "_")
        numbers[f"overlap_d3_ratio_{key}"] = Number(float(overlap_fraction(3, q)), ".2%", f"overlap, d = 3, c/r = {q:g}")
        numbers[f"overlap_d_max_ratio_{key}"] = Number(float(overlap_fraction(d_max, q)), "sci2",
                                                       f"overlap at the largest d, c/r = {q:g}")
    return Result(numbers, {"overlap": overlap, "monte_carlo": mc},
                  {"mc": np.array([r[:4] for r in rows]), "ratios": np.array(ratios)})


def plot_overlap(result: Result, shape: ModelShape | None):
    """Overlap fraction against d (log-log): for any fixed c/r > 0 it falls exponentially fast."""
    fig, ax = _plot_against_dimension(result, overlap_fraction, result.arrays["ratios"], "c/r = {:g}",
                                      keep_mc=lambda mc: mc[:, 3] > 0)
    ax.set_yscale("log")
    ax.set_ylim(1e-30, 1.5)
    ax.set_ylabel("intersection volume / volume of one ball")
    ax.legend(loc="lower left")
    return fig


register(
    "ball_overlap", "Overlap of two balls in d dimensions", ball_overlap, scope="common",
    params={"dims": (1, 2, 3, 5, 10, 30, 100, 384, 768), "ratios": (0.1, 0.5, 1.0, 1.5), "mc_dims": (1, 2, 3, 5),
            "n_samples": 200000, "seed": 0},
    figures={"overlap": plot_overlap},
    groups=("first report",),
)


def embedding_layer_norm(tensors: Mapping[str, np.ndarray], shape: ModelShape):
    """The LayerNorm that first reads token + position, as a function of rows: GPT-2's ln_1 of block 0 on e + p;
    BERT's embedding LayerNorm on e + p + t₀ (t₀ the first token-type row). Float64."""
    if shape.family == "gpt2":
        gain, bias = (np.asarray(tensors[f"blocks.0.ln1.{k}"], dtype=np.float64) for k in "wb")
        offset = 0.0
    else:
        gain, bias = (np.asarray(tensors[f"embed.ln.{k}"], dtype=np.float64) for k in "wb")
        offset = np.asarray(tensors["W_token_type"][0], dtype=np.float64)

    def apply(X: np.ndarray) -> np.ndarray:
        Z = np.asarray(X, dtype=np.float64) + offset
        Z = Z - Z.mean(axis=-1, keepdims=True)
        return Z / np.sqrt((Z**2).mean(axis=-1, keepdims=True) + shape.ln_eps) * gain + bias

    return apply


def curve_distance(A: np.ndarray, B: np.ndarray) -> float:
    """min over rows a of A and b of B of ‖a − b‖: how close two curves of points ever come."""
    d2 = (A**2).sum(axis=1)[:, None] + (B**2).sum(axis=1)[None, :] - 2 * A @ B.T
    return float(np.sqrt(max(d2.min(), 0.0)))


def median_step(A: np.ndarray) -> float:
    """Median distance between consecutive rows of A (one position step along a curve)."""
    return float(np.median(np.linalg.norm(np.diff(A, axis=0), axis=1)))


def subspace_overlap(A: np.ndarray, B: np.ndarray) -> float:
    """‖AᵀB‖²_F / k for orthonormal D × k bases: the mean squared cosine of the principal angles (k/D by chance)."""
    return float(np.sum((A.T @ B) ** 2) / A.shape[1])


def embedding_ball_overlap(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, n_pairs: int, n_neighbours: int,
                           seed: int, n_curve_pairs: int, subspace_ks: tuple[int, ...]) -> Result:
    """Token embeddings as centres, the median position-embedding norm as radius: how much do the balls overlap?

    Each token e can be moved by adding a position embedding of norm about r, so it can land anywhere in a
    ball of radius r around e (an upper bound on the region it reaches). For random token pairs and for
    each sampled token's nearest neighbour, c = ‖e_a − e_b‖ and the overlap fraction in d = d_model is
    compared with what the same c/r would give in d = 3. Also: the cosine between random token and position
    rows against the 1/√D of random directions, and the relative size of the cross term 2e·p in ‖e + p‖².
    """
    E = np.asarray(tensors["W_E"], dtype=np.float64)
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    rng = np.random.default_rng(seed)
    d = E.shape[1]
    radius = float(np.median(np.linalg.norm(P, axis=1)))
    a, b = rng.integers(0, len(E), (2, n_pairs))
    b = np.where(a == b, (b + 1) % len(E), b)
    random_ratio = np.linalg.norm(E[a] - E[b], axis=1) / radius
    sample = rng.choice(len(E), n_neighbours, replace=False)
    sq = (E**2).sum(axis=1)
    nearest = np.empty(n_neighbours)
    nn_index = np.empty(n_neighbours, dtype=np.int64)
    for start in range(0, n_neighbours, 100):  # blocks of 100 rows keep the distance matrix small
        rows = sample[start:start + 100]
        dist2 = sq[rows, None] + sq[None, :] - 2 * E[rows] @ E.T
        dist2[np.arange(len(rows)), rows] = np.inf
        nn_index[start:start + 100] = dist2.argmin(axis=1)
        nearest[start:start + 100] = dist2[np.arange(len(rows)), nn_index[start:start + 100]]
    nn_ratio = np.sqrt(np.clip(nearest, 0, None)) / radius
    overlap = {"random": overlap_fraction(d, random_ratio), "nearest": overlap_fraction(d, nn_ratio)}
    overlap_3d = {"random": overlap_fraction(3, random_ratio), "nearest": overlap_fraction(3, nn_ratio)}

    tokens, positions = E[rng.integers(0, len(E), n_pairs)], P[rng.integers(0, len(P), n_pairs)]
    dots = (tokens * positions).sum(axis=1)
    cosines = dots / (np.linalg.norm(tokens, axis=1) * np.linalg.norm(positions, axis=1))
    cross = np.abs(2 * dots) / ((tokens**2).sum(axis=1) + (positions**2).sum(axis=1))
    numbers = {
        "radius": Number(radius, ".3f", "median norm of the position embeddings (the radius r)"),
        "token_norm_median": Number(float(np.median(np.sqrt(sq))), ".3f", "median norm of the token embeddings"),
        "n_pairs": Number(n_pairs, "d", "random token pairs (and random token-position pairs)"),
        "n_neighbours": Number(n_neighbours, "d", "sampled tokens whose nearest neighbour is found"),
        "d_model": Number(d, "d", "dimension"),
        "sqrt_d": Number(np.sqrt(d), ".2f", "√D"),
        "cos_std_times_sqrt_d": Number(cosines.std() * np.sqrt(d), ".2f",
                                       "std of cos(token, position) × √D (1 for random directions)"),
        "cos_mean": Number(cosines.mean(), ".3f", "mean cos(token, position)"),
        "cos_abs_max": Number(np.abs(cosines).max(), ".3f", "largest |cos(token, position)| in the sample"),
        "cross_term_median": Number(float(np.median(cross)), ".2%", "median of |2e·p| / (‖e‖² + ‖p‖²)"),
    }
    for key, ratio in (("random", random_ratio), ("nearest", nn_ratio)):
        touching = ratio < 2
        numbers |= {
            f"ratio_median_{key}": Number(float(np.median(ratio)), ".2f", f"median c/r ({key} pairs)"),
            f"ratio_min_{key}": Number(float(ratio.min()), ".3f", f"smallest c/r ({key} pairs)"),
            f"touching_{key}": Number(touching.mean(), ".1%", f"fraction of {key} pairs with c < 2r"),
            f"overlap_max_{key}": Number(float(overlap[key].max()), "sci2", f"largest overlap in d = D ({key} pairs)"),
            f"overlap_touching_median_{key}": Number(float(np.median(overlap[key][touching])), "sci2",
                                                     f"median overlap in d = D over {key} pairs with c < 2r"),
            f"overlap_3d_touching_median_{key}": Number(float(np.median(overlap_3d[key][touching])), ".1%",
                                                        f"median overlap the same c/r give in d = 3 ({key}, c < 2r)"),
        }
    curve_pairs = {"random": list(zip(a[:n_curve_pairs], b[:n_curve_pairs])),
                   "nearest": list(zip(sample[:n_curve_pairs], nn_index[:n_curve_pairs]))}
    numbers |= _curve_numbers(tensors, shape, E, P, curve_pairs)
    numbers["n_curve_pairs"] = Number(n_curve_pairs, "d", "token pairs of each kind whose curves are compared")
    numbers |= _subspace_numbers(E, P, subspace_ks)
    return Result(numbers, {}, {"random_ratio": random_ratio, "nn_ratio": nn_ratio})


def _curve_numbers(tensors: Mapping[str, np.ndarray], shape: ModelShape, E: np.ndarray, P: np.ndarray,
                   curve_pairs: dict[str, list]) -> dict:
    """How close the LayerNorm curves of two tokens (each token plus every position) come, per kind of pair."""
    numbers = {}
    # What confusability actually asks: can some position make token a land near token b at some position?
    # Both tokens trace a curve of n_ctx points after the LayerNorm; measure how close the two curves come,
    # in units of one position step along a curve.
    layer_norm = embedding_layer_norm(tensors, shape)
    scale = []
    for key, pairs in curve_pairs.items():
        distances, ratios = [], []
        for i, j in pairs:
            A, B = layer_norm(E[i] + P), layer_norm(E[j] + P)
            step = (median_step(A) + median_step(B)) / 2
            distance = curve_distance(A, B)
            distances.append(distance)
            ratios.append(distance / step)
            scale.append(float(np.median(np.linalg.norm(A, axis=1))))
        distances, ratios = np.array(distances), np.array(ratios)
        numbers |= {
            f"curve_distance_median_{key}": Number(float(np.median(distances)), ".2f",
                                                   f"median closest approach of the two LayerNorm curves ({key} pairs)"),
            f"curve_ratio_median_{key}": Number(float(np.median(ratios)), ".2f",
                                                f"median closest approach in position steps ({key} pairs)"),
            f"curve_ratio_min_{key}": Number(float(ratios.min()), ".2f",
                                             f"smallest closest approach in position steps ({key} pairs)"),
            f"curve_within_step_{key}": Number(float(np.mean(ratios < 1)), ".0%",
                                               f"share of {key} pairs whose curves come within one position step"),
        }
    numbers["layer_norm_scale"] = Number(float(np.median(scale)), ".2f", "median norm of a LayerNorm output row")
    return numbers


def _subspace_numbers(E: np.ndarray, P: np.ndarray, subspace_ks: tuple[int, ...]) -> dict:
    """The overlap of the token and position embeddings' top-k PCA subspaces, against random ones."""
    numbers, d = {}, E.shape[1]
    # Near-zero cosines between single vectors do not make the subspaces orthogonal: compare the subspaces.
    centred_E, centred_P = E - E.mean(axis=0), P - P.mean(axis=0)
    _, _, vt_E = np.linalg.svd(centred_E.T @ centred_E)
    _, _, vt_P = np.linalg.svd(centred_P, full_matrices=False)
    for k in subspace_ks:
        overlap = subspace_overlap(vt_E[:k].T, vt_P[:k].T)
        numbers[f"subspace_overlap_k{k}"] = Number(overlap, ".2g", f"mean cos² of the principal angles between the "
                                                   f"top-{k} PCA subspaces of the token and position embeddings")
        numbers[f"subspace_chance_k{k}"] = Number(k / d, ".3f", f"the same for random subspaces, k/D")
        numbers[f"subspace_first_cos_k{k}"] = Number(
            float(np.linalg.svd(vt_E[:k] @ vt_P[:k].T, compute_uv=False)[0]), ".2f",
            f"cosine of the smallest principal angle between those top-{k} subspaces")
    return numbers


def plot_embedding_overlap(result: Result, shape: ModelShape):
    """Distances between token embeddings in units of the position radius, and the overlap they imply."""
    d = result.numbers["d_model"].value
    fig, (left, right) = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 3.5))
    ratios = np.concatenate([result.arrays["random_ratio"], result.arrays["nn_ratio"]])
    bins = np.linspace(0, ratios.max() * 1.02, 60)
    left.hist(result.arrays["random_ratio"], bins=bins, density=True, alpha=0.6, color="C0", label="random pairs")
    left.hist(result.arrays["nn_ratio"], bins=bins, density=True, alpha=0.6, color="C1", label="nearest neighbours")
    left.axvline(2, color="0.3", lw=0.8, ls="--", label="c = 2r (balls touch)")
    left.set_xlabel("token distance c / position radius r")
    left.set_ylabel("density")
    grid = np.linspace(0, 2, 401)
    for dim, colour in ((3, "C2"), (d, "C3")):
        right.plot(grid, overlap_fraction(dim, grid), color=colour, lw=1.4, label=f"d = {dim}")
    right.axvline(result.numbers["ratio_min_nearest"].value, color="C1", lw=0.8, ls=":",
                  label="closest pair found")
    right.set_yscale("log")
    right.set_ylim(1e-12, 1.5)
    right.set_xlabel("c / r")
    right.set_ylabel("overlap (share of one ball, log scale)")
    for ax in (left, right):
        ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=2)
    return fig


register(
    "embedding_ball_overlap", "Overlap of position balls around token embeddings", embedding_ball_overlap,
    needs=("W_E", "W_pos"), params={"n_pairs": 20000, "n_neighbours": 1000, "seed": 0, "n_curve_pairs": 50,
                                    "subspace_ks": (3, 10, 30)},
    figures={"overlap": plot_embedding_overlap},
    groups=("first report",),
)
