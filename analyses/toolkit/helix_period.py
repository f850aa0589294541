"""The helix period, the one definition every chapter cites: tokens per turn of the position rows' top two
principal coordinates over the bulk of the context."""

from __future__ import annotations

import numpy as np

from analyses.toolkit.linalg import top_right_singular_vectors


def principal_coordinates(P: np.ndarray, k: int) -> np.ndarray:
    """z[n, i] = (p_n − p̄) · u_i for the top-k principal axes u_i (signs as in `top_right_singular_vectors`)."""
    P = np.asarray(P, dtype=np.float64)
    return (P - P.mean(axis=0)) @ top_right_singular_vectors(P, k, center=True)


EDGE = 100
"""Positions left out at each end to form the bulk (helix and every analysis that uses its period), in a context of
at least 4 × EDGE positions; a shorter context leaves out a quarter at each end (`bulk_edge`)."""


def bulk_edge(n_positions: int, edge: int = EDGE) -> int:
    """The edge a context of `n_positions` uses: `edge`, or a quarter of the context where that is less, so that the
    bulk always keeps at least half of the positions (GPT-2 and MiniLM: 100; a 256-position model: 64)."""
    return min(edge, n_positions // 4)


def bulk_phase_increments(P: np.ndarray, edge: int) -> np.ndarray:
    """|θ(n+1) − θ(n)| for n in the bulk edge … n_ctx − edge − 1, θ the unwrapped angle of (z1, z2) (radians)."""
    edge = bulk_edge(len(P), edge)
    Z = principal_coordinates(P, 2)
    theta = np.unwrap(np.arctan2(Z[:, 1], Z[:, 0]))
    increments = np.diff(theta[edge:len(P) - edge])
    return increments * np.sign(increments.sum())


def helix_period(P: np.ndarray, edge: int = EDGE) -> float:
    """The helix period: tokens per turn of (z1, z2) over the bulk, 2π / mean phase increment."""
    return float(2 * np.pi / bulk_phase_increments(P, edge).mean())
