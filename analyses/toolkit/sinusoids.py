"""Sinusoids: the sinusoidal position table of Vaswani et al. (2017), and least-squares sinusoid fits."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """ω_i = base^(-2i/D) for i = 0..D/2-1."""
    if d_model < 2 or d_model % 2:
        raise ValueError(f"the sinusoidal table needs an even dimension D >= 2, got {d_model}")
    if base <= 0:
        raise ValueError(f"base must be positive, got {base}")
    return base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)


def encode(positions: np.ndarray, d_model: int, base: float = 10000.0) -> np.ndarray:
    """PE(n) for any positions n (integers or reals, any size): a [len(positions), d_model] array (float64)."""
    angles = np.asarray(positions, dtype=np.float64).reshape(-1)[:, None] * frequencies(d_model, base)[None, :]
    table = np.empty((angles.shape[0], d_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table


def sinusoidal_table(n_positions: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The [n_positions, d_model] table with sines in even and cosines in odd columns (float64)."""
    if n_positions < 1:
        raise ValueError(f"need at least one position, got {n_positions}")
    return encode(np.arange(n_positions), d_model, base)


@dataclass(frozen=True)
class SinusoidFit:
    """z(n) ≈ offset + amplitude · cos(2π n / period + phase); `at_bound` when the period hit its upper limit."""

    period: float
    amplitude: float
    phase: float
    offset: float
    r2: float
    at_bound: bool

    def __call__(self, n: np.ndarray) -> np.ndarray:
        return self.offset + self.amplitude * np.cos(2 * np.pi * np.asarray(n, dtype=np.float64) / self.period
                                                     + self.phase)


def fit_sinusoid(n: np.ndarray, z: np.ndarray, pad: int) -> SinusoidFit:
    """Least-squares sinusoid with period in [2, 2·len(n)] tokens, started from the zero-padded FFT peak.

    Longer periods are not identifiable from len(n) samples (less than half a cycle): a fit that
    runs into that bound is flagged `at_bound`.
    """
    from scipy.optimize import least_squares

    n, z = np.asarray(n, dtype=np.float64), np.asarray(z, dtype=np.float64)
    w_min, w_max = np.pi / len(n), np.pi
    spectrum = np.abs(np.fft.rfft(z - z.mean(), n=pad * len(n)))
    w_grid = 2 * np.pi * np.fft.rfftfreq(pad * len(n))
    allowed = (w_grid >= w_min) & (w_grid <= w_max)
    w0 = w_grid[allowed][np.argmax(spectrum[allowed])]

    def design(w: float) -> np.ndarray:
        return np.column_stack([np.cos(w * n), np.sin(w * n), np.ones_like(n)])

    def residual(p: np.ndarray) -> np.ndarray:
        A = design(p[0])
        return A @ np.linalg.lstsq(A, z, rcond=None)[0] - z

    w = float(least_squares(residual, [w0], bounds=([w_min], [w_max]), x_scale=[w_min], xtol=1e-12).x[0])
    a, b, c = np.linalg.lstsq(design(w), z, rcond=None)[0]
    r2 = 1 - np.sum(residual(np.array([w])) ** 2) / np.sum((z - z.mean()) ** 2)
    return SinusoidFit(2 * np.pi / w, float(np.hypot(a, b)), float(np.arctan2(-b, a)), float(c), float(r2),
                       bool(np.isclose(w, w_min, rtol=1e-6)))


def dominant_frequency(u: np.ndarray, pad: int) -> float:
    """Cycles per len(u) of the least-squares sinusoid through u (`fit_sinusoid`, started at the peak of the
    zero-padded spectrum); at least half a cycle, the bound of that fit."""
    n = np.arange(len(u))
    return float(len(u) / fit_sinusoid(n, np.asarray(u, dtype=np.float64), pad).period)
