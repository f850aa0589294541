"""Linear-algebra primitives that several topics share, computed in float64.

Kept in one place so that, e.g., "effective rank" or "cosine similarity by offset"
means exactly the same thing in every chapter.
"""

from __future__ import annotations

import numpy as np


def cosine_matrix(X: np.ndarray) -> np.ndarray:
    """C[i, j] = cos(x_i, x_j) for the rows x_i of X (zero rows raise)."""
    X = np.asarray(X, dtype=np.float64)
    norms = np.linalg.norm(X, axis=1)
    if np.any(norms == 0):
        raise ValueError("cosine similarity is undefined for a zero row")
    U = X / norms[:, None]
    return U @ U.T


def upper_triangle(C: np.ndarray) -> np.ndarray:
    """The n(n-1)/2 strictly-upper-triangular entries of a square matrix, exact zeros included."""
    C = np.asarray(C)
    if C.ndim != 2 or C.shape[0] != C.shape[1]:
        raise ValueError(f"need a square matrix, got shape {C.shape}")
    return C[np.triu_indices(C.shape[0], k=1)]


def mean_by_offset(C: np.ndarray, exclude: tuple[int, ...] = ()) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """For k = 1..n-1: mean and standard deviation of C[i, i+k] over i, and how many pairs were used.

    Rows/columns listed in `exclude` (e.g. position 0) are left out of every average.
    """
    C = np.asarray(C, dtype=np.float64)
    n = C.shape[0]
    keep = np.ones(n, dtype=bool)
    keep[list(exclude)] = False
    means, stds, counts = np.full(n - 1, np.nan), np.full(n - 1, np.nan), np.zeros(n - 1, dtype=int)
    for k in range(1, n):
        i = np.arange(n - k)
        mask = keep[i] & keep[i + k]
        values = C[i[mask], i[mask] + k]
        counts[k - 1] = values.size
        if values.size:
            means[k - 1], stds[k - 1] = values.mean(), values.std()
    return means, stds, counts


def explained_variance_ratio(X: np.ndarray) -> np.ndarray:
    """PCA of the rows of X (centred): the fraction of total variance along each principal axis, descending."""
    X = np.asarray(X, dtype=np.float64)
    s = np.linalg.svd(X - X.mean(axis=0), compute_uv=False)
    var = s**2
    return var / var.sum()


def components_for(ratios: np.ndarray, fraction: float) -> int:
    """The smallest k whose top-k explained-variance ratios sum to at least `fraction`."""
    cumulative = np.cumsum(ratios)
    return int(np.searchsorted(cumulative, fraction - 1e-12) + 1)


def effective_rank(singular_values: np.ndarray) -> float:
    """Roy & Vetterli's effective rank exp(H(p)), p_i = σ_i / Σσ_j, H the Shannon entropy (nats)."""
    s = np.asarray(singular_values, dtype=np.float64)
    if np.any(s < 0) or s.sum() == 0:
        raise ValueError("need non-negative singular values, not all zero")
    p = s[s > 0] / s.sum()
    return float(np.exp(-(p * np.log(p)).sum()))


def top_right_singular_vectors(X: np.ndarray, k: int, center: bool = False) -> np.ndarray:
    """The top-k right singular vectors of X (or of X with its mean row removed), as a [D, k] orthonormal basis.

    Signs are fixed so that each vector's largest-magnitude entry is positive, making results reproducible.
    """
    X = np.asarray(X, dtype=np.float64)
    if center:
        X = X - X.mean(axis=0)
    _, _, vt = np.linalg.svd(X, full_matrices=False)
    V = vt[:k].T
    signs = np.sign(V[np.abs(V).argmax(axis=0), np.arange(V.shape[1])])
    return V * signs


def gram_singular_values(X: np.ndarray) -> np.ndarray:
    """Singular values (descending) of a matrix, or of a stack [k, m, n] of matrices, from the eigenvalues of the
    smaller Gram matrix (XᵀX or XXᵀ) in float64, batched.

    Faster than an SVD but less accurate for the smallest values: their relative error is about ε·κ²
    (κ the condition number), so use it where κ ≲ 1e5 (random baselines, short blocks), not to cite the
    condition number of an ill-conditioned matrix.
    """
    X = np.asarray(X, dtype=np.float64)
    stacked = X if X.ndim == 3 else X[None]
    if stacked.ndim != 3:
        raise ValueError(f"need a matrix or a stack of matrices, got shape {X.shape}")
    T = np.swapaxes(stacked, 1, 2)
    gram = T @ stacked if stacked.shape[1] >= stacked.shape[2] else stacked @ T
    values = np.sqrt(np.clip(np.linalg.eigvalsh(gram)[:, ::-1], 0, None))
    return values if X.ndim == 3 else values[0]


def mass_support(v: np.ndarray, mass: float) -> np.ndarray:
    """The fewest indices whose squared entries hold at least `mass` of Σ v_j², sorted by index."""
    v2 = np.asarray(v, dtype=np.float64) ** 2
    order = np.argsort(-v2, kind="stable")
    count = int(np.searchsorted(np.cumsum(v2[order]), mass * v2.sum() * (1 - 1e-12)) + 1)
    return np.sort(order[:count])


def support_union(V: np.ndarray, mass: float) -> np.ndarray:
    """The indices in the union of the `mass` supports of the columns of V (sorted): where a set of sparse
    directions lives, e.g. the embedding dimensions that P's top singular vectors use."""
    V = np.asarray(V, dtype=np.float64)
    return np.unique(np.concatenate([mass_support(V[:, k], mass) for k in range(V.shape[1])]))


def centred_token_svd(E: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(S, V): all singular values of E_c = E − m 1ᵀ (m_t the mean of row t), descending, and the right
    singular vectors as the columns of V [D, D], each signed so that its largest-magnitude entry is positive.

    Computed from the D × D Gram matrix E_cᵀE_c = V diag(S²) Vᵀ in float64 (E has tens of thousands of rows),
    which resolves singular values down to about √ε·σ_max ≈ 1e-8·σ_max.
    """
    E = np.asarray(E, dtype=np.float64)
    centred = E - E.mean(axis=1, keepdims=True)
    eigenvalues, V = np.linalg.eigh(centred.T @ centred)
    order = np.argsort(eigenvalues)[::-1]
    S = np.sqrt(np.clip(eigenvalues[order], 0, None))
    return S, fix_signs(V[:, order])


def fix_signs(V: np.ndarray) -> np.ndarray:
    """V with each column signed so that its largest-magnitude entry is positive."""
    signs = np.sign(V[np.abs(V).argmax(axis=0), np.arange(V.shape[1])])
    return V * signs
