"""What the position-content analyses share: the usable ks, where E's directions come from, enrichment against
random subspaces, the bases of P and E, and the reading heatmaps."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from analyses.engine.sources import ModelShape
from analyses.toolkit import plotting
from analyses.toolkit.attention import VARIANTS, column_label
from analyses.toolkit.linalg import top_right_singular_vectors
from analyses.toolkit.subspaces import prefix_energy_fractions, random_energy_moments


BAND = (2.5, 97.5)
"""Percentiles of the random draws that bound the plotted bands and the reported lower tail."""


def usable_ks(ks, available: int, d_model: int) -> tuple[int, ...]:
    """The ks that the available token directions allow and that are proper subspaces (k < D)."""
    out = tuple(int(k) for k in ks if 0 < k <= available and k < d_model)
    if not out:
        raise ValueError(f"none of k = {tuple(ks)} fits {available} token directions in D = {d_model}")
    return out


def enrichment_and_z(W: np.ndarray, bases: list[np.ndarray], ks, side: str) -> np.ndarray:
    """[basis, k, (a, a/(k/D), z)]: W's energy share in the subspace of the first k columns of each basis, and
    against uniformly random subspaces of dimension k (whose moments depend on W and k only: computed once)."""
    mean, sd = random_energy_moments(W, list(ks), side)
    a = np.array([prefix_energy_fractions(W, basis, ks, side) for basis in bases])
    z = np.where(sd > 0, (a - mean) / np.where(sd > 0, sd, 1.0), 0.0)
    return np.stack([a, a / mean, z], axis=-1)


def random_capture_sd(k: int, D: int) -> float:
    """Standard deviation of one unit vector's capture by a uniformly random k-subspace (Beta(k/2, (D−k)/2))."""
    return random_energy_moments(np.eye(D, 1), k, "input")[1]


SUBSPACES = ("P", "E")


def subspace_bases(tensors: Mapping[str, np.ndarray], k_max: int) -> dict[str, np.ndarray]:
    """P's (uncentred) and E's (row-centred) top-k_max right singular vectors, [D, k_max] each."""
    P = np.asarray(tensors["W_pos"], dtype=np.float64)
    return {"P": top_right_singular_vectors(P, k_max), "E": np.asarray(tensors["E_centred.V"])[:, :k_max]}


def reading_heatmaps(ratios: np.ndarray, names: tuple[str, str], bar_label: str, title: str, shape: ModelShape):
    """Two heatmaps [layer, column] of ratios to 1 (log colour, white = 1), one per subspace, values written in."""
    plotting.pyplot()
    from matplotlib.colors import LogNorm

    top = float(np.ceil(np.abs(np.log10(ratios)).max() * 10) / 10)
    norm = LogNorm(vmin=10**-top, vmax=10**top)
    fig, axes = plotting.subplots(1, 2, figsize=(plotting.MAX_WIDTH, 0.25 * ratios.shape[0] + 2.4), sharey=True)
    labels = [column_label(*v).replace(f"W_{v[0]}", f"$W_{v[0]}$") for v in VARIANTS]
    for s, (ax, name) in enumerate(zip(axes, names)):
        image = ax.imshow(ratios[:, :, s], cmap=plotting.DIVERGING, norm=norm, aspect="auto", interpolation="nearest")
        for (layer, c), value in np.ndenumerate(ratios[:, :, s]):
            ax.text(c, layer, f"{value:.2f}", ha="center", va="center", fontsize=plotting.MIN_FONT,
                    color="white" if abs(np.log10(value)) > 0.6 * top else "black")
        ax.set_xticks(range(len(VARIANTS)), labels, rotation=90)
        ax.set_title(name)
    axes[0].set_ylabel("layer")
    axes[0].set_yticks(range(ratios.shape[0]))
    bar = fig.colorbar(image, ax=list(axes), fraction=0.04, pad=0.02)
    bar.set_label(bar_label)
    plotting.plain_log_ticks(bar.ax.yaxis)
    return fig
