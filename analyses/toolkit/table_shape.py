"""The shape of a position table in six numbers, the definitions every chapter cites, and the tables that give
them a scale: Gaussian random walks and i.i.d. Gaussian tables of the same shape.

For a table P (positions × width), centred over positions, with λ_i the variances along its principal axes:

* `top3`, `pc1`: Σ_{i≤3} λ_i / Σ λ_i and λ_1 / Σ λ_i;
* `pair_ratio`: λ_2 / λ_1 (near 1 for a helix, whose cosine and sine carry equal variance; near 0 for a ramp);
* `turns`: turns of (z1, z2) around the helix's own axis from the first row on the helix to the last (`helix_winding`,
  origin-free), NaN ("no helix") where no row has most of its offset from the axis in the (z1, z2) plane;
* `period`: tokens per turn over the bulk (`helix_winding`), NaN ("undefined") where the bulk holds less than one
  turn: an angle that has not come round once has no period;
* `toeplitz`: the Toeplitz share τ of the Gram matrix (`toolkit.gram`).

Across contexts, `power_law_slope` says how a measure scales with the number of positions n: the turns of a table
that winds a fixed number of turns per context do not grow with n (slope 0); those of a helix of fixed period grow
in proportion (slope 1). `power_law_intervals` gives that slope's confidence interval and the prediction interval of
the fit at another n (ordinary least squares on the logs, Student's t with n − 2 degrees of freedom): a slope from
four points at three contexts is wide, and a value carried beyond the fitted contexts wider still.
"""

from __future__ import annotations

import numpy as np

from analyses.toolkit.gram import toeplitz_share
from analyses.toolkit.helix_period import EDGE, helix_winding
from analyses.toolkit.linalg import explained_variance_ratio
from analyses.toolkit.surrogates import random_walks

MEASURES = ("top3", "pc1", "pair_ratio", "turns", "period", "toeplitz")
LABELS = {"top3": "top-3 share", "pc1": "PC1 share", "pair_ratio": "λ2/λ1", "turns": "turns",
          "period": "period (tokens/turn)", "toeplitz": "Toeplitz share"}
FORMATS = {"top3": ".1%", "pc1": ".1%", "pair_ratio": ".3f", "turns": ".2f", "period": ".0f", "toeplitz": ".0%"}


NO_HELIX = "no helix"
"""What a table or sentence prints for the turns of a table with no row on the helix (NaN turns)."""


def shown_turns(turns: float) -> float | str:
    """A table cell for a turn count: the count, or NO_HELIX where the table has no helix (NaN)."""
    return turns if np.isfinite(turns) else NO_HELIX


def bulk_turns(n_rows: int, edge: int, period: float) -> float:
    """Turns the bulk (rows edge … n_rows − edge − 1) holds at `period` tokens per turn."""
    return (n_rows - 2 * edge - 1) / period


def defined_period(period: float, n_rows: int, edge: int) -> float:
    """`period`, or NaN where the bulk holds less than one turn at it (an angle that has not come round once has no
    period): the one rule for printing a period "undefined"."""
    return period if np.isfinite(period) and bulk_turns(n_rows, edge, period) >= 1 else float("nan")


def table_shape(P: np.ndarray, edge: int = EDGE) -> dict[str, float]:
    """The six numbers of the module docstring for the table P."""
    P = np.asarray(P, dtype=np.float64)
    ratios = explained_variance_ratio(P)
    winding = helix_winding(P, edge=edge)
    period = defined_period(winding.period, winding.n_rows, winding.edge)
    return {"top3": float(ratios[:3].sum()), "pc1": float(ratios[0]), "pair_ratio": float(ratios[1] / ratios[0]),
            "turns": float(winding.turns), "period": float(period),
            "toeplitz": toeplitz_share(P - P.mean(axis=0))}


def run_shapes(W: np.ndarray, edge: int = EDGE) -> np.ndarray:
    """[S, len(MEASURES)]: `table_shape` of each snapshot W[s] of a position table."""
    return np.array([[table_shape(P, edge)[m] for m in MEASURES] for P in np.asarray(W, dtype=np.float64)])


def reference_shapes(shape: tuple[int, int], n_draws: int, seed: int, edge: int = EDGE) -> dict[str, np.ndarray]:
    """{"walk", "gaussian"}: [n_draws, len(MEASURES)] of `table_shape` for Gaussian random walks (independent
    columns) and i.i.d. Gaussian tables of `shape`, seeded draws (the two references share one generator)."""
    rng = np.random.default_rng(seed)
    out = {"walk": np.empty((n_draws, len(MEASURES))), "gaussian": np.empty((n_draws, len(MEASURES)))}
    for i in range(n_draws):
        for key, table in (("walk", random_walks(shape[0], shape[1], rng)), ("gaussian", rng.standard_normal(shape))):
            numbers = table_shape(table, edge)
            out[key][i] = [numbers[m] for m in MEASURES]
    return out


def pair_ratio(P: np.ndarray) -> float:
    """λ2/λ1 of the row-centred table P: 0 for a straight ramp, 1 for a helix's equal cosine and sine."""
    ratios = explained_variance_ratio(np.asarray(P, dtype=np.float64))
    return float(ratios[1] / ratios[0])


def half_way_index(values: np.ndarray) -> int:
    """The first index at which `values` have covered at least half of their change from the first to the last
    value (a fall for a loss, a rise for a share)."""
    values = np.asarray(values, dtype=np.float64) * np.sign(values[0] - values[-1])
    return int(np.flatnonzero(values <= values[0] - 0.5 * (values[0] - values[-1]))[0])


def power_law_slope(n: np.ndarray, values: np.ndarray) -> tuple[float, float]:
    """(b, a) of the least-squares line log value = a + b log n: value ∝ n^b (b = 0: the same at every n; b = 1:
    in proportion to n)."""
    b, a = np.polyfit(np.log(np.asarray(n, dtype=np.float64)), np.log(np.asarray(values, dtype=np.float64)), 1)
    return float(b), float(a)


def power_law_intervals(n: np.ndarray, values: np.ndarray, at: float, level: float = 0.95) -> dict[str, float]:
    """The least-squares fit log value = a + b log n with its intervals at `level`: {"b", "b_low", "b_high"} (the
    confidence interval of b, b ± t·s/√Sxx) and {"at", "at_low", "at_high"} (the fitted value at n = `at` and its
    prediction interval for a new point there, exp(a + b log at ± t·s·√(1 + 1/m + (log at − mean log n)²/Sxx))),
    with s² the residual variance over m − 2 degrees of freedom and t Student's quantile."""
    from scipy.stats import t as student

    x, y = np.log(np.asarray(n, dtype=np.float64)), np.log(np.asarray(values, dtype=np.float64))
    if len(x) < 3 or np.ptp(x) == 0:
        raise ValueError("an interval of a power law needs at least three points at two or more n")
    b, a = power_law_slope(n, values)
    residual = y - (a + b * x)
    s = np.sqrt(residual @ residual / (len(x) - 2))
    sxx = float(np.sum((x - x.mean()) ** 2))
    q = float(student.ppf(0.5 + level / 2, len(x) - 2))
    x0 = np.log(at)
    spread = q * s * np.sqrt(1 + 1 / len(x) + (x0 - x.mean()) ** 2 / sxx)
    fitted = a + b * x0
    return {"b": b, "b_low": b - q * s / np.sqrt(sxx), "b_high": b + q * s / np.sqrt(sxx),
            "at": float(np.exp(fitted)), "at_low": float(np.exp(fitted - spread)), "at_high": float(np.exp(fitted + spread))}
