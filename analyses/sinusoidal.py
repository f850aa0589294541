"""The sinusoidal position encoding of Vaswani et al. (2017).

PE(n, 2i) = sin(n ω_i), PE(n, 2i+1) = cos(n ω_i), with ω_i = L^(-2i/D), L = 10000.
"""

from __future__ import annotations

import numpy as np


def frequencies(d_model: int, base: float = 10000.0) -> np.ndarray:
    """ω_i = base^(-2i/D) for i = 0..D/2-1."""
    if d_model < 2 or d_model % 2:
        raise ValueError(f"the sinusoidal table needs an even dimension D >= 2, got {d_model}")
    if base <= 0:
        raise ValueError(f"base must be positive, got {base}")
    return base ** (-np.arange(0, d_model, 2, dtype=np.float64) / d_model)


def sinusoidal_table(n_positions: int, d_model: int, base: float = 10000.0) -> np.ndarray:
    """The [n_positions, d_model] table with sines in even and cosines in odd columns (float64)."""
    if n_positions < 1:
        raise ValueError(f"need at least one position, got {n_positions}")
    angles = np.arange(n_positions, dtype=np.float64)[:, None] * frequencies(d_model, base)[None, :]
    table = np.empty((n_positions, d_model))
    table[:, 0::2] = np.sin(angles)
    table[:, 1::2] = np.cos(angles)
    return table
