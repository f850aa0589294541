"""The profile of a position table in six statistics, the same for any model, any window of its positions and
the sinusoidal table of its shape, so that tables are compared like with like (the cross-model comparison).

For a table X (rows: positions), centred over positions, with explained-variance ratios r₁ ≥ r₂ ≥ … (the
eigenvalues λᵢ of its Gram matrix over their sum):

* top-3 share r₁ + r₂ + r₃, and the number of components for 90 % of the variance;
* λ₂/λ₁ = r₂/r₁, how near the top two components are to a circle (1) or a line (0);
* turns: how many times the (z₁, z₂) plane's angle about the helix's own axis goes round, from the first row on
  the helix to the last (`toolkit.helix_period.helix_winding`, the report's one definition; NaN: no helix);
* the Toeplitz share τ of the Gram matrix (`toolkit.gram`);
* row 0's norm over the median row norm (uncentred): whether the first row is an outlier.
"""

from __future__ import annotations

import numpy as np

from analyses.toolkit.gram import toeplitz_share
from analyses.toolkit.helix_period import helix_winding
from analyses.toolkit.linalg import components_for, explained_variance_ratio
from analyses.toolkit.sinusoids import sinusoidal_table

WINDOW, STRIDE = 512, 256
"""A longer table is also profiled in windows of GPT-1's 512 positions, 256 apart (GPT-2: three windows)."""
STATISTICS = ("top3_share", "k90", "turns", "pair_ratio", "toeplitz_share", "row0_over_median")
"""The statistics of `profile`, in the order of the comparison's columns."""
HEADERS = dict(zip(STATISTICS, ("top-3 share", "k for 90%", "turns", "λ₂/λ₁", "Toeplitz share", "row 0 / median")))
FORMATS = dict(zip(STATISTICS, (".1%", "d", ".2f", ".2f", ".0%", ".2f")))
"""Each statistic's column header and printed format (Python format spec)."""


def turns(X: np.ndarray) -> float:
    """How many turns the angle of the top two principal coordinates makes around their own axis, from the first row of
    X on the helix to the last (`helix_winding`; NaN where no row is on it)."""
    return helix_winding(X).turns


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


def compared_tables(P: np.ndarray, window: int = WINDOW, stride: int = STRIDE,
                    sinusoid_base: float = 10000.0) -> dict[str, tuple[str, np.ndarray]]:
    """key -> (label, table): the learned table `all`, its windows `w<first>` where it is longer than `window`,
    and the sinusoidal table of each of those shapes (`sinusoidal`, `sinusoidal_window`)."""
    n, d = P.shape
    out = {"all": (f"learned, positions 0–{n - 1}", P)}
    starts = windows(n, window, stride) if n > window else []
    out |= {f"w{a}": (f"learned, positions {a}–{a + window - 1}", P[a:a + window]) for a in starts}
    out["sinusoidal"] = (f"sinusoidal, {n} × {d}", sinusoidal_table(n, d, sinusoid_base))
    if starts:
        out["sinusoidal_window"] = (f"sinusoidal, {window} × {d}", sinusoidal_table(window, d, sinusoid_base))
    return out
