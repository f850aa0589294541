"""How much of a matrix lies in a subspace, how two subspaces sit relative to each other, and what a
uniformly random subspace of the same dimension would give. One definition each, in float64.

Energy fraction. For a matrix W whose rows (side "input") or columns (side "output") index R^D and an
orthonormal basis B [D, k] of a subspace with projector Π = BBᵀ,

    a(W) = ‖Bᵀ W‖²_F / ‖W‖²_F = tr(Π M) / tr(M),   M = W Wᵀ      (input side)
    a(W) = ‖W B‖²_F / ‖W‖²_F  = tr(Π M) / tr(M),   M = Wᵀ W      (output side),

the share of W's squared Frobenius norm that lies in the subspace. With W = A, another orthonormal basis
[D, k'], a(A) = ‖Bᵀ A‖²_F / k' is the mean squared cosine of the principal angles between the two
subspaces.

Random-rotation null. For symmetric D × D matrices A, B and a uniformly random (Haar) rotation Q, the
diagonal of C = Q B Qᵀ in the eigenbasis of A holds exchangeable entries whose sum tr B is fixed, each
with variance v = 2(D tr B² − (tr B)²)/(D²(D+2)); so Cov(C_ii, C_jj) = −v/(D−1) and

    E tr(A Q B Qᵀ) = tr A tr B / D,
    Var tr(A Q B Qᵀ) = 2 / ((D−1)(D+2)) · (tr A² − (tr A)²/D) (tr B² − (tr B)²/D).

With B = Π a rank-k projector (tr Π = tr Π² = k), i.e. a uniformly random k-dimensional subspace, and
A = M, the energy fraction of a fixed W has

    E a = k/D,    Var a = 2k(D−k) / (D(D−1)(D+2)) · (Σλ² / (Σλ)² − 1/D),   λ_i = σ_i(W)²,

which depends on W only through (Σλ)²/Σλ², the participation ratio of its squared singular values. A
single unit vector (one λ) gives 2k(D−k)/(D²(D+2)), the variance of a Beta(k/2, (D−k)/2) variable.
"""

from __future__ import annotations

import numpy as np


def energy_fraction(W: np.ndarray, basis: np.ndarray, side: str = "input") -> float:
    """a(W) = ‖Bᵀ W‖²/‖W‖² (side "input": rows of W index the space of B) or ‖W B‖²/‖W‖² ("output")."""
    W, basis = np.asarray(W, dtype=np.float64), np.asarray(basis, dtype=np.float64)
    part = basis.T @ W if side == "input" else W @ basis
    return float(np.sum(part**2) / np.sum(W**2))


def prefix_energy_fractions(W: np.ndarray, basis: np.ndarray, ks, side: str = "input") -> np.ndarray:
    """energy_fraction(W, basis[:, :k], side) for every k in `ks`, from one product with the whole basis: the
    energy in a prefix of an orthonormal basis is the sum of the energies along its first k directions."""
    W, basis = np.asarray(W, dtype=np.float64), np.asarray(basis, dtype=np.float64)
    part = basis.T @ W if side == "input" else (W @ basis).T
    cumulative = np.cumsum(np.sum(part**2, axis=1)) / np.sum(W**2)
    return cumulative[np.asarray(ks, dtype=int) - 1]


def _space_dimension(W: np.ndarray, side: str) -> int:
    if side not in {"input", "output"}:
        raise ValueError(f"side must be 'input' or 'output', not {side!r}")
    return W.shape[0] if side == "input" else W.shape[1]


def _gram(W: np.ndarray) -> np.ndarray:
    """The smaller of WᵀW and WWᵀ: both have the nonzero eigenvalues σ_i(W)²."""
    return W.T @ W if W.shape[1] <= W.shape[0] else W @ W.T


def _trace_moments(tr_a, tr_a2, tr_b, tr_b2, D: int):
    """Mean and standard deviation of tr(A Q B Qᵀ) over Haar Q, from the traces of A, A², B, B² (see above);
    elementwise when the traces of B are arrays."""
    mean = np.asarray(tr_a * tr_b / D, dtype=np.float64)
    if D == 1:
        return mean, np.zeros_like(mean)
    variance = 2 / ((D - 1) * (D + 2)) * (tr_a2 - tr_a**2 / D) * (tr_b2 - np.asarray(tr_b, dtype=np.float64)**2 / D)
    return mean, np.sqrt(np.clip(variance, 0.0, None))


def rotation_trace_moments(A: np.ndarray, B: np.ndarray) -> tuple[float, float]:
    """Exact mean and standard deviation of tr(A Q B Qᵀ) over uniformly random rotations Q (A, B symmetric, D × D)."""
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    if A.shape != B.shape or A.ndim != 2 or A.shape[0] != A.shape[1]:
        raise ValueError(f"need two square matrices of one size, got {A.shape} and {B.shape}")
    mean, sd = _trace_moments(np.trace(A), np.sum(A * A.T), np.trace(B), np.sum(B * B.T), A.shape[0])
    return float(mean), float(sd)


def trace_ratio(A: np.ndarray, B: np.ndarray) -> tuple[float, float]:
    """r = D tr(A B) / (tr A tr B) for symmetric positive semi-definite D × D matrices A and B, and its exact
    standard deviation over uniformly random rotations of one of them (whose mean is exactly 1).

    With A = XᵀX and B = W Wᵀ (a map W that reads R^D through its rows) or WᵀW (one that writes into it),
    r = D ‖X W‖²_F / (‖X‖²_F ‖W‖²_F): how strongly W acts where X's energy is, relative to a W blind to X's
    geometry (any W with B ∝ I, or any W after a Haar rotation, on average). With A = EᵀE, B = PᵀP it is the
    interference of two sets of rows; with B a rank-k projector it is the enrichment a/(k/D) of A's energy.
    """
    A, B = np.asarray(A, dtype=np.float64), np.asarray(B, dtype=np.float64)
    mean, sd = rotation_trace_moments(A, B)
    return float(np.sum(A * B.T) / mean), sd / mean


def random_energy_moments(W: np.ndarray, k, side: str = "input"):
    """Exact mean k/D and standard deviation of a(W) over uniformly random k-dimensional subspaces of R^D.

    `k` may be an array of dimensions: then both are arrays, from one Gram matrix.
    """
    W = np.asarray(W, dtype=np.float64)
    D = _space_dimension(W, side)
    k_array = np.asarray(k, dtype=np.float64)
    if np.any((k_array < 0) | (k_array > D)):
        raise ValueError(f"a subspace of R^{D} cannot have dimension {k}")
    G = _gram(W)
    tr_m = float(np.trace(G))
    mean, sd = _trace_moments(tr_m, float(np.sum(G**2)), k_array, k_array, D)
    if k_array.ndim == 0:
        return float(mean) / tr_m, float(sd) / tr_m
    return mean / tr_m, sd / tr_m


def width_k(width_share: float, D: int) -> int:
    """The subspace dimension that takes `width_share` of a width-D space (at least 1), so that models of different
    widths are compared at the same fraction of their width (GPT-2's top 30 of 768 is 5 of 128)."""
    return max(1, round(width_share * D))


def random_basis(D: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """An orthonormal basis [D, k] of a uniformly random (Haar) k-dimensional subspace of R^D.

    QR of a Gaussian matrix with the signs of R's diagonal made positive; the first j columns of the
    result span a uniformly random j-dimensional subspace too, so one draw serves every j ≤ k.
    """
    if not 0 < k <= D:
        raise ValueError(f"need 0 < k <= D, got k = {k}, D = {D}")
    Q, R = np.linalg.qr(rng.standard_normal((D, k)))
    return Q * np.where(np.diag(R) < 0, -1.0, 1.0)


def sampled_energy_fractions(W: np.ndarray, ks, n_draws: int, rng: np.random.Generator,
                             side: str = "input") -> np.ndarray:
    """a(W) on n_draws uniformly random subspaces: [n_draws, len(ks)].

    Exact, not approximate: with M = U diag(λ) Uᵀ, a = Σ_i λ_i ‖Yᵀ u_i‖² / Σλ for a Haar frame Y, and UᵀY is
    again a Haar frame, so each draw needs only a random frame Z and Σ_i λ_i Z_ij² per direction j. One
    frame per draw serves every k: the span of its first k columns is a uniformly random k-subspace, and so
    is the orthogonal complement of the span of its first D − k, whose energy is 1 minus theirs. A frame of
    max(min(k, D − k)) columns therefore suffices (at most D/2: the QR that makes it is the cost).
    """
    W = np.asarray(W, dtype=np.float64)
    D = _space_dimension(W, side)
    ks = np.asarray(ks, dtype=int)
    if np.any((ks < 1) | (ks > D)):
        raise ValueError(f"need 1 <= k <= {D}, got {ks.min()}..{ks.max()}")
    M = W @ W.T if side == "input" else W.T @ W
    lam = np.clip(np.linalg.eigvalsh(M), 0, None)
    complement = ks > D - ks
    columns = int(np.max(np.where(complement, D - ks, ks)))
    out = np.empty((n_draws, ks.size))
    for i in range(n_draws):
        frame = random_basis(D, max(columns, 1), rng)
        cumulative = np.concatenate([[0.0], np.cumsum(lam @ frame**2) / lam.sum()])
        out[i] = np.where(complement, 1 - cumulative[np.minimum(D - ks, columns)], cumulative[np.minimum(ks, columns)])
    return out


def prefix_overlaps(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """energy_fraction(A[:, :k], B[:, :k]) for k = 1 … min(k_A, k_B), A and B orthonormal: the mean cos² of the
    principal angles between their first-k subspaces, ‖Bₖᵀ Aₖ‖²_F / k, from one product and cumulative sums."""
    k = min(A.shape[1], B.shape[1])
    squares = (np.asarray(B, dtype=np.float64)[:, :k].T @ np.asarray(A, dtype=np.float64)[:, :k]) ** 2
    return np.diagonal(np.cumsum(np.cumsum(squares, axis=0), axis=1)) / np.arange(1, k + 1)


def _orthonormal(X: np.ndarray) -> np.ndarray:
    """An orthonormal basis of the column space of X (independent columns): X itself when its columns are
    orthonormal to 1e-12, else by QR."""
    X = np.asarray(X, dtype=np.float64)
    if X.ndim != 2 or X.shape[1] > X.shape[0]:
        raise ValueError(f"need a [D, k] matrix with k <= D, got shape {X.shape}")
    if np.abs(X.T @ X - np.eye(X.shape[1])).max() <= 1e-12:
        return X
    Q, R = np.linalg.qr(X)
    if np.abs(np.diag(R)).min() <= 1e-10 * np.abs(np.diag(R)).max():
        raise ValueError("the columns are linearly dependent: they do not span a k-dimensional subspace")
    return Q


def principal_angles(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """Principal angles (radians, ascending) between the column spaces of A [D, k_A] and B [D, k_B].

    min(k_A, k_B) angles. Each matrix is first orthonormalised (QR; its columns must be independent), so
    nearly orthonormal input, e.g. unit vectors stored in float32, gives the angles of its exact span. cos θ_i are the singular values of AᵀB and sin θ_i those of (I − AAᵀ)B (for
    k_B ≤ k_A); as in Knyazev & Argentati's algorithm (and scipy.linalg.subspace_angles), angles with
    cos² θ > 1/2 are taken from the sines, which keeps small angles accurate where arccos is not.
    """
    A, B = _orthonormal(A), _orthonormal(B)
    if A.shape[1] < B.shape[1]:
        A, B = B, A
    M = A.T @ B
    cos = np.clip(np.linalg.svd(M, compute_uv=False), 0.0, 1.0)  # descending: ascending angles
    angles = np.arccos(cos)
    small = cos**2 > 0.5
    if small.any():
        sin = np.clip(np.linalg.svd(B - A @ M, compute_uv=False), 0.0, 1.0)[::-1]  # ascending: the same order
        angles[small] = np.arcsin(sin[small])
    return angles


def captured(vectors: np.ndarray, basis: np.ndarray) -> np.ndarray:
    """For each unit column v_j of `vectors`: vⱼᵀ Π vⱼ = ‖Bᵀ vⱼ‖², the share of it that lies in the subspace."""
    return np.sum((np.asarray(basis, dtype=np.float64).T @ np.asarray(vectors, dtype=np.float64)) ** 2, axis=0)
