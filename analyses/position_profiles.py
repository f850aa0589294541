"""One model's position table in the six statistics of the cross-model comparison (`toolkit.position_profile`):
the whole table, each window of `window` positions where the table is longer (GPT-2's 1,024 positions hold
three 512-windows, 256 apart), and the sinusoidal table of each of those shapes. Each model's rows are its own
entry; the chapter sets the models' rows side by side."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.toolkit import plotting
from analyses.toolkit.linalg import explained_variance_ratio
from analyses.toolkit.table_shape import NO_HELIX, shown_turns
from analyses.toolkit.position_profile import FORMATS, HEADERS, STATISTICS, STRIDE, WINDOW, compared_tables, profile
from analyses.engine.registry import register
from analyses.engine.results import Number, Result, Table, Text
from analyses.engine.sources import ModelShape

DESCRIPTIONS = {"top3_share": "variance share of the top 3 principal components",
                "k90": "principal components needed for 90% of the variance",
                "turns": "turns of the top two principal coordinates' angle about the helix's own axis, from the first row "
                         "on the helix to the last",
                "pair_ratio": "λ₂/λ₁ of the centred Gram matrix",
                "toeplitz_share": "Toeplitz share τ of the centred Gram matrix",
                "row0_over_median": "norm of the first row over the median row norm"}


def position_profile(tensors: Mapping[str, np.ndarray], shape: ModelShape, *, window: int, stride: int,
                     sinusoid_base: float) -> Result:
    """The six statistics of the whole table, of its windows and of the sinusoidal tables of the same shapes."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    numbers = {"window": Number(window, "d", "positions per window where the table is longer"),
               "stride": Number(stride, "d", "positions between the starts of consecutive windows")}
    rows, arrays, compared = [], {}, compared_tables(P, window, stride, sinusoid_base)
    for key, (label, X) in compared.items():
        stats = profile(X)
        numbers |= {f"{key}_{s}": Number(stats[s], FORMATS[s], f"{label}: {DESCRIPTIONS[s]}") if np.isfinite(stats[s])
                    else Text(NO_HELIX, f"{label}: no row on the helix") for s in STATISTICS}
        rows.append((label, len(X), *(shown_turns(stats[s]) if s == "turns" else stats[s] for s in STATISTICS)))
        arrays[f"cumulative_{key}"] = np.cumsum(explained_variance_ratio(X))[:64]
    numbers["n_windows"] = Number(sum(key.startswith("w") for key in compared), "d",
                                  f"windows of {window} positions in a longer learned table")
    table = Table(("table", "positions", *HEADERS.values()), tuple(rows),
                  formats={HEADERS[s]: FORMATS[s] for s in STATISTICS})
    return Result(numbers, {"profile": table}, arrays)


def plot_cumulative(result: Result, shape: ModelShape):
    """Cumulative variance share of the top k components of each table of the profile, k up to 64 (log x)."""
    fig, ax = plotting.subplots(figsize=(plotting.HALF_WIDTH, plotting.PANEL_HEIGHT))
    labels = result.tables["profile"].column("table")
    for i, (key, label) in enumerate(zip((k[len("cumulative_"):] for k in result.arrays), labels)):
        curve = result.arrays[f"cumulative_{key}"]
        sinusoidal = key.startswith("sinusoidal")
        ax.plot(np.arange(1, len(curve) + 1), curve, color="0.35" if sinusoidal else f"C{i}",
                ls="--" if key == "sinusoidal_window" else ":" if sinusoidal else "-", lw=1.4,
                label=label.removeprefix("learned, "))  # a half-width panel: the legend stays off the curves
    plotting.cumulative_variance_axes(ax)
    return fig


register(
    "position_profile", "The position table in six statistics, beside its windows and the sinusoidal table",
    position_profile, needs=("W_pos",), params={"window": WINDOW, "stride": STRIDE, "sinusoid_base": 10000.0},
    figures={"cumulative": plot_cumulative}, groups=("position table",),
)
