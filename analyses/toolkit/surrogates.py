"""Surrogate data: random matrices that keep one named property of a data matrix and destroy the rest.

Every function takes X with one row per sample of a sequence (e.g. a position) and one column per
variable (e.g. an embedding dimension), and a seeded `np.random.Generator`.

Phase randomisation (Theiler et al. 1992; Prichard & Theiler 1994; review: Schreiber & Schmitz
2000). With X̂[f, d] the discrete Fourier transform of column d over the N rows, a surrogate is

    X̃ = F⁻¹( X̂ ⊙ e^{iφ} ),   φ[f, d] uniform on [0, 2π) for 0 < f < N/2, φ = 0 at f = 0 and f = N/2,

with φ[−f] = −φ[f] so that X̃ is real. Because |e^{iφ}| = 1, every column keeps its power
spectrum |X̂[f, d]|² exactly, hence its mean and its circular autocovariance at every lag.

* independent phases (a separate φ[f, d] per column) keep each column's spectrum and nothing that
  ties columns together: the cross-spectrum X̂[f, a] X̂[f, b]* gets a random phase per frequency;
* shared phases (one φ[f] for all columns) also keep every cross-spectrum, i.e. every circular
  cross-covariance between columns. Then X̃ = U X with U = F⁻¹ diag(e^{iφ}) F a real orthogonal
  circulant matrix, so X̃ᵀX̃ = XᵀX exactly (all column norms and column cosines) and the singular
  values of X and of its column-centred version are kept; what changes is where along the rows
  things happen, the part of XXᵀ that is not circulant.

Both treat the rows as one period of a circular sequence: a jump between the last and the first
row is part of each column's spectrum, and the surrogates spread it along the sequence.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def random_phases(n_rows: int, n_columns: int, rng: np.random.Generator) -> np.ndarray:
    """Unit phase factors e^{iφ} for `np.fft.rfft` bins of a length-n_rows sequence: [n_rows // 2 + 1, n_columns].

    The zero-frequency bin and (for even n_rows) the Nyquist bin get factor 1: they are real for a
    real sequence, and keeping them fixed keeps the column means and makes the map orthogonal.
    """
    if n_rows < 2:
        raise ValueError(f"need at least two rows, got {n_rows}")
    n_bins = n_rows // 2 + 1
    phases = rng.uniform(0.0, 2 * np.pi, (n_bins, n_columns))
    phases[0] = 0.0
    if n_rows % 2 == 0:
        phases[-1] = 0.0
    return np.exp(1j * phases)


def phase_randomise(X: np.ndarray, rng: np.random.Generator, shared: bool) -> np.ndarray:
    """A phase-randomised surrogate of every column of X (over its rows), same shape and dtype.

    shared=False: independent phases per column (keeps each column's power spectrum);
    shared=True: one set of phases for all columns (also keeps every cross-spectrum, so XᵀX).
    """
    return phase_randomiser(X, shared)(rng)


def phase_randomiser(X: np.ndarray, shared: bool) -> Callable[[np.random.Generator], np.ndarray]:
    """`phase_randomise` for many surrogates of the same X: a function drawing one from a generator, with X's
    spectrum computed once (the same surrogates, draw for draw, as `phase_randomise` with the same generator)."""
    X = np.asarray(X)
    if X.ndim != 2:
        raise ValueError(f"need a matrix (rows: samples, columns: variables), got shape {X.shape}")
    n_rows, n_columns = X.shape
    spectrum = np.fft.rfft(X, axis=0)

    def draw(rng: np.random.Generator) -> np.ndarray:
        factors = random_phases(n_rows, 1 if shared else n_columns, rng).astype(spectrum.dtype)
        return np.fft.irfft(spectrum * factors, n=n_rows, axis=0).astype(X.dtype, copy=False)

    return draw


def power_spectrum(X: np.ndarray) -> np.ndarray:
    """|X̂[f, d]|² over the rfft bins f of every column d (float64)."""
    return np.abs(np.fft.rfft(np.asarray(X, dtype=np.float64), axis=0)) ** 2


def cross_spectrum(X: np.ndarray) -> np.ndarray:
    """S[f, a, b] = X̂[f, a] X̂[f, b]* for every rfft bin f and pair of columns (float64 complex)."""
    spectrum = np.fft.rfft(np.asarray(X, dtype=np.float64), axis=0)
    return spectrum[:, :, None] * spectrum[:, None, :].conj()


def random_walks(n_steps: int, n_walks: int, rng: np.random.Generator) -> np.ndarray:
    """n_walks independent Gaussian random walks as columns: X[n, d] = Σ_{m ≤ n} ε[m, d], ε i.i.d. N(0, 1)."""
    return np.cumsum(rng.standard_normal((n_steps, n_walks)), axis=0)
