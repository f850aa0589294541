"""The report's one figure style, and byte-reproducible saving in SVG (web) and PDF (print).

Matplotlib is imported only when a figure is drawn, so that checking the cache
(a warm run) never pays for it. Colour maps: `DIVERGING` for signed quantities
centred on 0 (cosine similarity, raw embedding values), `SEQUENTIAL` for
magnitudes, `POSITION` for colouring points by token position.
"""

from __future__ import annotations

import io
from functools import cache

DIVERGING = "RdBu_r"
SEQUENTIAL = "viridis"
POSITION = "plasma"
FORMATS = ("svg", "pdf")

STYLE = {
    "figure.figsize": (6.4, 4.0),
    "figure.dpi": 100,
    "savefig.dpi": 150,
    "savefig.bbox": "tight",
    "font.size": 10,
    "axes.titlesize": 10,
    "axes.labelsize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "legend.frameon": False,
    "image.cmap": SEQUENTIAL,
    "svg.hashsalt": "position-embeddings",  # fixed ids: reruns give identical SVG bytes
    "svg.fonttype": "path",
    "pdf.fonttype": 42,
    "path.simplify": False,
}


@cache
def pyplot():
    """matplotlib.pyplot with the Agg backend and the report style applied."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcParams.update(STYLE)
    return plt


def subplots(nrows: int = 1, ncols: int = 1, **kwargs):
    """plt.subplots in the report style; returns (figure, axes)."""
    return pyplot().subplots(nrows, ncols, **kwargs)


def colorbar(fig, mappable, ax, label: str):
    """A labelled colour bar beside `ax`."""
    bar = fig.colorbar(mappable, ax=ax, fraction=0.046, pad=0.04)
    bar.set_label(label)
    return bar


def mark_positions(ax, positions, values, n_positions: int) -> None:
    """Mark and label points of a curve over positions, labels placed away from the nearer edge."""
    for i in positions:
        ax.plot([i], [values[i]], "o", color="C3", ms=4)
        ax.annotate(f"position {i}", (i, values[i]), textcoords="offset points", xytext=(6, 0), fontsize=8,
                    ha="left" if i < n_positions / 2 else "right", va="center")


def render(fig) -> dict[str, bytes]:
    """The figure as {extension: bytes} in every format, without dates or random ids, then closed."""
    metadata = {"svg": {"Date": None, "Creator": None}, "pdf": {"CreationDate": None, "ModDate": None, "Creator": None,
                                                              "Producer": None}}
    out = {}
    for ext in FORMATS:
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, metadata=metadata[ext])
        out[ext] = buffer.getvalue()
    pyplot().close(fig)
    return out
