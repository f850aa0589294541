"""Signal subspaces of a data matrix against a Marchenko–Pastur noise edge, distances between subspaces, and
classical multidimensional scaling. One definition each, in float64.

Signal subspace. X is N × D (rows: tokens, columns: dimensions of the residual stream). Its centred version
X_c = X − 1 x̄ᵀ has m = N − 1 degrees of freedom per column and p = min(m, D) non-zero singular values
s_1 ≥ … ≥ s_p. If X_c were noise with i.i.d. entries of variance σ², its singular values would fill
[σ(√M − √P), σ(√M + √P)] as N, D grow (Marchenko–Pastur; M = max(m, D), P = min(m, D), λ = P/M), so

* the noise level is estimated from the median singular value, matched to the median of that law
  (Gavish & Donoho 2014): σ̂ = s_med / (√M · x_med(λ)), x_med the median of g_λ (`random_matrices`);
* the noise edge is the upper end σ̂(√M + √P), and a singular value counts as signal when it exceeds the
  edge by more than the fluctuation of the largest noise singular value: s_i² > σ̂²(μ + q·s), with
  μ = (√M + √P)², s = (√M + √P)(1/√M + 1/√P)^{1/3} the Tracy–Widom centring and scale of the largest
  eigenvalue (Johnstone 2001) and q = 2.0234 the 99th percentile of the Tracy–Widom law (β = 1), so that pure
  noise keeps a component about once in a hundred matrices;
* the signal subspace is spanned by the right singular vectors of the r kept values.

Distances between subspaces. For orthonormal bases A [D, a] and B [D, b] with principal angles θ_i
(min(a, b) of them), the projection (chordal) distance is d(A, B) = ‖AAᵀ − BBᵀ‖_F / √2 =
√((a + b)/2 − Σ cos² θ_i): 0 for identical subspaces, a metric for subspaces of any dimensions.

Classical MDS (Torgerson 1952). For a distance matrix Δ (n × n), B = −½ J Δ^{∘2} J with J = I − 11ᵀ/n; the
coordinates are the top-k eigenvectors of B times the square roots of their eigenvalues. Distances between
points of a k-dimensional Euclidean configuration are recovered exactly (up to a rotation or reflection).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from analyses.toolkit.random_matrices import mp_singular_quantiles
from analyses.toolkit.subspaces import principal_angles

TW_Q99 = 2.0234
"""99th percentile of the Tracy–Widom law for β = 1 (real matrices), from the tables of Tracy & Widom (1996)."""


def mp_median(ratio: float) -> float:
    """Median of the Marchenko–Pastur law of noise singular values, in units of s√max(m, n) (aspect ratio λ ≤ 1)."""
    return float(mp_singular_quantiles(ratio, 1)[0])


@dataclass(frozen=True)
class NoiseEdge:
    """The noise estimate and the edges for an m × n centred matrix (see the module docstring)."""

    sigma: float  # σ̂: the estimated noise standard deviation per entry
    edge: float  # σ̂(√M + √P): the upper end of the Marchenko–Pastur support
    threshold: float  # σ̂√(μ + q·s): the edge plus the Tracy–Widom allowance

    def keeps(self, singular_values: np.ndarray) -> np.ndarray:
        return np.asarray(singular_values) > self.threshold


def noise_edge(singular_values: np.ndarray, m: int, n: int, q: float = TW_Q99) -> NoiseEdge:
    """σ̂ from the median of the P = min(m, n) largest singular values of an m × n matrix, and the edges."""
    big, small = max(m, n), min(m, n)
    if small < 1:
        raise ValueError(f"need a non-empty matrix, got {m} × {n}")
    s = np.sort(np.asarray(singular_values, dtype=np.float64))[::-1][:small]
    if s.size < small:
        raise ValueError(f"an {m} × {n} matrix has {small} singular values, got {s.size}")
    ratio = small / big
    sigma = float(np.median(s)) / (np.sqrt(big) * mp_median(ratio))
    root = np.sqrt(big) + np.sqrt(small)
    scale = root * (1 / np.sqrt(big) + 1 / np.sqrt(small)) ** (1 / 3)
    return NoiseEdge(sigma, sigma * root, sigma * float(np.sqrt(root**2 + q * scale)))


@dataclass(frozen=True)
class SignalSubspace:
    """singular_values: all p non-zero ones of the centred matrix; basis: [D, rank] right singular vectors."""

    singular_values: np.ndarray
    noise: NoiseEdge
    basis: np.ndarray

    @property
    def rank(self) -> int:
        return self.basis.shape[1]


def signal_subspace(X: np.ndarray, q: float = TW_Q99) -> SignalSubspace:
    """The signal subspace of the rows of X (N × D, N ≥ 2): centred over rows, m = N − 1 degrees of freedom."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[0] < 2:
        raise ValueError(f"need an N × D matrix with N ≥ 2, got shape {X.shape}")
    m, n = X.shape[0] - 1, X.shape[1]
    _, s, vt = np.linalg.svd(X - X.mean(axis=0), full_matrices=False)
    s = s[:min(m, n)]
    edge = noise_edge(s, m, n, q)
    r = int(np.sum(edge.keeps(s)))
    return SignalSubspace(s, edge, vt[:r].T)


def mean_angle(A: np.ndarray, B: np.ndarray) -> float:
    """The average (not the sum) of the min(a, b) principal angles between span A and span B, in degrees: it lies in
    [0, 90], 0 for identical subspaces and 90 for orthogonal ones. NaN when either subspace is empty."""
    if not (A.shape[1] and B.shape[1]):
        return float("nan")
    return float(np.degrees(principal_angles(A, B)).mean())


def projection_distance(A: np.ndarray, B: np.ndarray) -> float:
    """‖AAᵀ − BBᵀ‖_F / √2 = √((a + b)/2 − Σ cos² θ_i) for orthonormal bases A [D, a], B [D, b] (Σ cos² θ_i = ‖AᵀB‖²_F,
    the squared singular values of AᵀB); √(b/2) when A is empty."""
    cos2 = float(np.sum((np.asarray(A, dtype=np.float64).T @ np.asarray(B, dtype=np.float64)) ** 2))
    return float(np.sqrt(max((A.shape[1] + B.shape[1]) / 2 - cos2, 0.0)))


def union_rank(bases: list[np.ndarray], tol: float = 1e-8) -> int:
    """The dimension of the sum of subspaces: singular values of the concatenated orthonormal bases above `tol`.

    Exact in the linear-algebra sense: two subspaces at any non-zero angle count as two directions.
    """
    bases = [b for b in bases if b.shape[1]]
    if not bases:
        return 0
    s = np.linalg.svd(np.concatenate(bases, axis=1), compute_uv=False)
    return int(np.sum(s > tol))


def shared_rank(bases: list[np.ndarray], level: float = 0.5) -> int:
    """How many directions the subspaces share: eigenvalues of the mean projector Π̄ = (1/S) Σ_s B_s B_sᵀ above
    `level`. An eigenvalue is the mean over the S subspaces of cos² of its direction's angle to each, so with
    level ½ a direction counts when it lies, on average, more than half inside the subspaces (two orthogonal
    subspaces share none, S identical ones all their directions)."""
    if not bases:
        return 0
    D = bases[0].shape[0]
    mean = sum(b @ b.T for b in bases) / len(bases) if any(b.shape[1] for b in bases) else np.zeros((D, D))
    return int(np.sum(np.linalg.eigvalsh(mean) > level + 1e-12))


def classical_mds(distances: np.ndarray, k: int = 2) -> tuple[np.ndarray, np.ndarray]:
    """(coordinates [n, k], all eigenvalues of B in descending order) of classical MDS.

    The sign of each coordinate axis is fixed so that its largest-magnitude entry is positive. The share of a
    k-dimensional map, Σ_{i≤k} max(λ_i, 0) / Σ_i |λ_i|, says how much of the configuration it shows.
    """
    Dist = np.asarray(distances, dtype=np.float64)
    if Dist.ndim != 2 or Dist.shape[0] != Dist.shape[1] or not np.allclose(Dist, Dist.T):
        raise ValueError("need a symmetric square distance matrix")
    n = Dist.shape[0]
    J = np.eye(n) - 1.0 / n
    B = -0.5 * J @ (Dist**2) @ J
    values, vectors = np.linalg.eigh((B + B.T) / 2)
    order = np.argsort(values)[::-1]
    values, vectors = values[order], vectors[:, order]
    coords = vectors[:, :k] * np.sqrt(np.clip(values[:k], 0, None))
    signs = np.sign(coords[np.abs(coords).argmax(axis=0), np.arange(coords.shape[1])])
    return coords * np.where(signs == 0, 1.0, signs), values


def mds_share(eigenvalues: np.ndarray, k: int = 2) -> float:
    """Σ_{i≤k} max(λ_i, 0) / Σ_i |λ_i|: the part of the configuration a k-dimensional MDS map shows."""
    lam = np.asarray(eigenvalues, dtype=np.float64)
    total = np.abs(lam).sum()
    return float(np.clip(lam[:k], 0, None).sum() / total) if total > 0 else 1.0
