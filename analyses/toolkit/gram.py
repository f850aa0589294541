"""How far a Gram matrix G = X Xᵀ of a table X (rows: positions) depends on the offset alone: its diagonal sums, its
best Toeplitz approximation and the shares of ‖G‖²_F that the Toeplitz and circulant parts hold, computed without
forming the N × N matrix (the `toeplitz_gram` chapter's derivation; `helix_growth` follows τ over training)."""

from __future__ import annotations

import numpy as np


def diagonal_sums(X: np.ndarray) -> np.ndarray:
    """s_k = Σ_i G[i, i + k] for k = 0 … N−1, G = X Xᵀ, from the columns' autocorrelations (zero-padded FFT)."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    spectrum = np.fft.rfft(X, n=2 * n, axis=0)
    return np.fft.irfft((np.abs(spectrum) ** 2).sum(axis=1), n=2 * n)[:n]


def toeplitz_part(X: np.ndarray) -> np.ndarray:
    """T(G): the Toeplitz matrix whose k-th diagonal is the mean of the k-th diagonal of G = X Xᵀ."""
    n = len(X)
    t = diagonal_sums(X) / (n - np.arange(n))
    return t[np.abs(np.arange(n)[:, None] - np.arange(n)[None, :])]


def gram_frobenius_sq(X: np.ndarray) -> float:
    """‖X Xᵀ‖²_F, computed as ‖Xᵀ X‖²_F (the same number)."""
    return float(np.sum((X.T @ X) ** 2))


def toeplitz_share(X: np.ndarray, gram_norm_sq: float | None = None) -> float:
    """τ = ‖T(G)‖²_F / ‖G‖²_F for G = X Xᵀ (no N × N matrix formed; pass ‖G‖²_F if known)."""
    X = np.asarray(X, dtype=np.float64)
    n = len(X)
    s = diagonal_sums(X)
    toeplitz = s[0] ** 2 / n + 2 * np.sum(s[1:] ** 2 / (n - np.arange(1, n)))
    return float(toeplitz / (gram_norm_sq if gram_norm_sq is not None else gram_frobenius_sq(X)))


def circulant_share(X: np.ndarray, gram_norm_sq: float | None = None) -> float:
    """κ = Σ_f ((F G Fᴴ)_ff)² / ‖G‖²_F for G = X Xᵀ, F the unitary DFT: (FGFᴴ)_ff = Σ_d |X̂[f, d]|² / N."""
    X = np.asarray(X, dtype=np.float64)
    diagonal = (np.abs(np.fft.fft(X, axis=0)) ** 2).sum(axis=1) / len(X)
    return float(np.sum(diagonal**2) / (gram_norm_sq if gram_norm_sq is not None else gram_frobenius_sq(X)))
