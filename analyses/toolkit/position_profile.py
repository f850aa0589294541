"""The profile of a position table in six statistics, the same for any model, any window of its positions and
the sinusoidal table of its shape, so that tables are compared like with like (the cross-model comparison).

For a table X (rows: positions), centred over positions, with explained-variance ratios r₁ ≥ r₂ ≥ … (the
eigenvalues λᵢ of its Gram matrix over their sum):

* top-3 share r₁ + r₂ + r₃, and the number of components for 90 % of the variance;
* λ₂/λ₁ = r₂/r₁, how near the top two components are to a circle (1) or a line (0);
* turns: how many times the (z₁, z₂) plane's angle about the centroid goes round, over all rows;
* the Toeplitz share τ of the Gram matrix (`toolkit.gram`);
* row 0's norm over the median row norm (uncentred): whether the first row is an outlier.
"""

from __future__ import annotations

import numpy as np

from analyses.toolkit.gram import toeplitz_share
from analyses.toolkit.helix_period import bulk_phase_increments
from analyses.toolkit.linalg import components_for, explained_variance_ratio

STATISTICS = ("top3_share", "k90", "turns", "pair_ratio", "toeplitz_share", "row0_over_median")
"""The statistics of `profile`, in the order of the comparison's columns."""


def turns(X: np.ndarray) -> float:
    """How many turns the angle of the top two principal coordinates makes over every row of X."""
    return float(bulk_phase_increments(X, edge=0).sum() / (2 * np.pi))


def profile(X: np.ndarray, fraction: float = 0.9) -> dict[str, float | int]:
    """The six statistics of STATISTICS for table X (float64 throughout); `k90` counts components for `fraction`."""
    X = np.asarray(X, dtype=np.float64)
    ratios = explained_variance_ratio(X)
    norms = np.linalg.norm(X, axis=1)
    return {"top3_share": float(ratios[:3].sum()), "k90": components_for(ratios, fraction), "turns": turns(X),
            "pair_ratio": float(ratios[1] / ratios[0]), "toeplitz_share": toeplitz_share(X - X.mean(axis=0)),
            "row0_over_median": float(norms[0] / np.median(norms))}


def windows(n_positions: int, width: int, stride: int) -> list[int]:
    """The first positions of every window of `width` rows, `stride` apart, that fits in `n_positions`."""
    return list(range(0, n_positions - width + 1, stride)) if width <= n_positions else []
