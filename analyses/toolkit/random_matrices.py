"""Random-matrix baselines: what a matrix with no structure looks like, in closed form and by sampling.

Conventions. A matrix W is m × n; p = min(m, n) is the number of singular values, N = max(m, n),
and λ = p / N ≤ 1 the aspect ratio. "Noise" is a matrix with i.i.d. entries of mean 0 and
variance s².

* Marchenko–Pastur (1967). As p, N → ∞ at fixed λ, the p singular values of noise divided by
  s√N are distributed with density

      g_λ(x) = √((b − x²)(x² − a)) / (π λ x),   a = (1 − √λ)², b = (1 + √λ)²,   √a ≤ x ≤ √b,

  the law of the square roots of the eigenvalues of (1/N) WWᵀ (or WᵀW), whose density is
  f_λ(y) = √((b − y)(y − a)) / (2π λ y) on [a, b]. For a square matrix (λ = 1) g is the quarter
  circle √(4 − x²)/π on [0, 2]. In sample-covariance language (n_samples rows, n_features
  columns, variance σ²), the eigenvalues of the covariance fill [σ²(1 − √γ)², σ²(1 + √γ)²] with
  γ = n_features / n_samples; the upper end is the noise edge above which an eigenvalue is signal.
* Effective rank (Roy & Vetterli): erank = exp H(σ/Σσ). For noise, erank/p tends to
  exp(log E[x] − E[x log x] / E[x]) under g_λ, a constant of λ alone.
* Log-volume Σ log σ_i of an N × p Gaussian matrix G with standard entries: by Bartlett's
  decomposition det(GᵀG) is a product of independent χ² variables with N, N − 1, …, N − p + 1
  degrees of freedom, so E Σ log σ_i = ½ Σ_{k=N−p+1}^{N} (ψ(k/2) + log 2) exactly, ψ the digamma
  function, with variance ¼ Σ ψ'(k/2).
* Condition number of a square real Gaussian matrix (Edelman 1988): κ/n converges in distribution
  to a law with P(κ/n ≤ x) = exp(−2/x − 2/x²), a heavy tail P(κ/n > x) ≈ 2/x: one draw in
  twenty exceeds about 40 n.

The samplers return matrices with exactly the Frobenius norm of a given one, so that scale-dependent
statistics (log-volume) compare like with like; condition number and effective rank do not depend
on the scale at all.
"""

from __future__ import annotations

import numpy as np


def aspect_ratio(shape: tuple[int, int]) -> float:
    """λ = min(m, n) / max(m, n) of an m × n matrix."""
    m, n = shape
    if min(m, n) < 1:
        raise ValueError(f"need a non-empty matrix shape, got {shape}")
    return min(m, n) / max(m, n)


def mp_eigenvalue_edges(ratio: float, variance: float = 1.0) -> tuple[float, float]:
    """Edges σ²(1 ∓ √γ)² of the Marchenko–Pastur law of the eigenvalues of a noise covariance, γ = features/samples.

    For γ > 1 the law also has a point mass at 0 (the covariance is rank-deficient); the edges still
    bound its non-zero eigenvalues.
    """
    if ratio <= 0 or variance <= 0:
        raise ValueError(f"need a positive ratio and variance, got {ratio}, {variance}")
    root = np.sqrt(ratio)
    return float(variance * (1 - root) ** 2), float(variance * (1 + root) ** 2)


def mp_singular_edges(ratio: float) -> tuple[float, float]:
    """Support [1 − √λ, 1 + √λ] of the singular values of noise in units of s√N (λ ≤ 1)."""
    _check_ratio(ratio)
    return float(1 - np.sqrt(ratio)), float(1 + np.sqrt(ratio))


def mp_singular_density(x: np.ndarray, ratio: float) -> np.ndarray:
    """g_λ(x): density of the singular values of noise in units of s√N; 0 outside the support."""
    _check_ratio(ratio)
    x = np.asarray(x, dtype=np.float64)
    a, b = (1 - np.sqrt(ratio)) ** 2, (1 + np.sqrt(ratio)) ** 2
    inside = (x**2 > a) & (x**2 < b) & (x > 0)
    out = np.zeros_like(x)
    xi = x[inside]
    out[inside] = np.sqrt((b - xi**2) * (xi**2 - a)) / (np.pi * ratio * xi)
    return out


def _grid(ratio: float, n_grid: int) -> np.ndarray:
    """Points of the support, denser at both edges (where the density has square-root behaviour)."""
    lo, hi = mp_singular_edges(ratio)
    u = (1 - np.cos(np.linspace(0, np.pi, n_grid))) / 2
    return lo + (hi - lo) * u


def mp_singular_quantiles(ratio: float, n_values: int, n_grid: int = 20001) -> np.ndarray:
    """The classical positions of n_values noise singular values (units of s√N), descending.

    The i-th largest sits where the upper tail of g_λ holds (i − ½)/n_values of the mass: what the
    sorted spectrum of a large noise matrix follows, rank by rank.
    """
    x = _grid(ratio, n_grid)
    density = mp_singular_density(x, ratio)
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) / 2 * np.diff(x))])
    cdf /= cdf[-1]
    levels = 1 - (np.arange(n_values) + 0.5) / n_values
    return np.interp(levels, cdf, x)


def mp_effective_rank_fraction(ratio: float, n_grid: int = 200001) -> float:
    """lim erank / p for noise: exp(log E[x] − E[x log x] / E[x]) under g_λ (trapezoid rule on an edge-dense grid)."""
    x = _grid(ratio, n_grid)
    density = mp_singular_density(x, ratio)
    weights = np.concatenate([[0.0], (x[1:] - x[:-1]) / 2]) + np.concatenate([(x[1:] - x[:-1]) / 2, [0.0]])
    mass = np.sum(weights * density)
    mean = np.sum(weights * density * x) / mass
    xlogx = np.sum(weights * density * np.where(x > 0, x * np.log(np.where(x > 0, x, 1.0)), 0.0)) / mass
    return float(np.exp(np.log(mean) - xlogx / mean))


def gaussian_log_volume_moments(shape: tuple[int, int]) -> tuple[float, float]:
    """Exact mean and variance of Σ log σ_i for an m × n matrix of i.i.d. standard normal entries (Bartlett)."""
    from scipy import special

    p, N = min(shape), max(shape)
    k = np.arange(N - p + 1, N + 1, dtype=np.float64)
    return float(0.5 * np.sum(special.digamma(k / 2) + np.log(2))), float(0.25 * np.sum(special.polygamma(1, k / 2)))


def gaussian_log_volume_mean(shape: tuple[int, int], frobenius: float) -> float:
    """E Σ log σ_i of a Gaussian matrix rescaled to Frobenius norm `frobenius`: G · frobenius / ‖G‖_F.

    Σ log σ(cG) = Σ log σ(G) + p log c, and E log ‖G‖_F = ½(ψ(mn/2) + log 2) (‖G‖²_F is χ² with mn
    degrees of freedom), so the mean is exact by linearity.
    """
    from scipy import special

    m, n = shape
    mean, _ = gaussian_log_volume_moments(shape)
    log_norm = 0.5 * (special.digamma(m * n / 2) + np.log(2))
    return float(mean + min(shape) * (np.log(frobenius) - log_norm))


def edelman_condition_cdf(x: np.ndarray) -> np.ndarray:
    """lim P(κ/n ≤ x) = exp(−2/x − 2/x²) for an n × n real Gaussian matrix (Edelman 1988); x > 0."""
    x = np.asarray(x, dtype=np.float64)
    if np.any(x <= 0):
        raise ValueError("κ/n is positive")
    return np.exp(-2 / x - 2 / x**2)


def condition_tail_probability(condition: float, n: int) -> float:
    """P(κ ≥ condition) for an n × n real Gaussian matrix, from Edelman's limit law: 1 − exp(−2/x − 2/x²), x = κ/n."""
    return float(-np.expm1(-2 * n / condition - 2 * (n / condition) ** 2))


def gaussian_like(W: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """A matrix of i.i.d. normal entries with W's shape, rescaled to exactly W's Frobenius norm (float64)."""
    G = rng.standard_normal(np.shape(W))
    return G * (np.linalg.norm(np.asarray(W, dtype=np.float64)) / np.linalg.norm(G))


def shuffled_entries(W: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """W's own entries in a random order (same shape, same multiset of values, same Frobenius norm)."""
    W = np.asarray(W)
    return rng.permutation(W.ravel()).reshape(W.shape)


def _check_ratio(ratio: float) -> None:
    if not 0 < ratio <= 1:
        raise ValueError(f"the aspect ratio min/max must lie in (0, 1], got {ratio}")
