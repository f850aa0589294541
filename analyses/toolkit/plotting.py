"""The report's one figure style, and byte-reproducible saving in SVG (web) and PDF (print).

Matplotlib is imported only when a figure is drawn, so that checking the cache
(a warm run) never pays for it. Colour maps: `DIVERGING` for signed quantities
centred on 0 (cosine similarity, raw embedding values), `SEQUENTIAL` for
magnitudes, `POSITION` for colouring points by token position.
"""

from __future__ import annotations

import io
import textwrap
from functools import cache

DIVERGING = "RdBu_r"
SEQUENTIAL = "viridis"
POSITION = "plasma"
FORMATS = ("svg", "pdf")

STYLE = {
    "figure.figsize": (6.5, 4.0),
    "figure.dpi": 100,
    # Every figure lays itself out (constrained layout) inside its own size: the PDF and the page get the
    # size drawn, and saving does not draw the figure twice to find a tight bounding box.
    "figure.constrained_layout.use": True,
    "savefig.dpi": 150,
    # Sizes for a figure drawn at the text width (MAX_WIDTH): titles and labels at 9 pt, ticks and legends at
    # 8 pt (MIN_FONT), the figure title at 10 pt.
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
    "figure.titlesize": 10,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": False,
    "legend.frameon": False,
    "image.cmap": SEQUENTIAL,
    "svg.hashsalt": "position-embeddings",  # fixed ids: reruns give identical SVG bytes
    "svg.fonttype": "path",  # text as outlines: the web page needs no font
    "pdf.fonttype": 3,  # glyphs drawn by matplotlib (fully embedded): no font subsetting, 3× faster than Type 42
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
        left = i < n_positions / 2
        ax.annotate(f"position {i}", (i, values[i]), textcoords="offset points", xytext=(6 if left else -6, 0),
                    fontsize=8, ha="left" if left else "right", va="center")


def plain_log_ticks(axis) -> None:
    """Label a log axis (or colour bar axis) at 1, 2, 5 × powers of ten in plain numbers, not as 10^n."""
    pyplot()
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    plain = FuncFormatter(lambda value, _: f"{value:g}")
    axis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    axis.set_major_formatter(plain)
    low, high = sorted(axis.get_view_interval())
    if low > 0 and high / low < 10:  # less than a decade: label the minor ticks as well
        axis.set_minor_locator(LogLocator(subs=(0.6, 0.7, 0.8, 0.9, 1.5, 3.0, 4.0)))
        axis.set_minor_formatter(plain)
    else:
        axis.set_minor_formatter(NullFormatter())


MAX_WIDTH = 6.5
"""Inches: the PDF's text width (and a comfortable web column). A wider figure is scaled down to it, its
text keeping its size in points, so nothing is printed smaller than drawn."""
MIN_FONT = 8.0
"""Points: the smallest text a figure may print."""


def fit_to_page(fig) -> None:
    """Scale a figure wider than MAX_WIDTH down to it (layout is redone at the new size) and raise any text
    smaller than MIN_FONT to it, so that every label stays readable where the figure is printed."""
    from matplotlib.text import Text

    width, height = fig.get_size_inches()
    if width > MAX_WIDTH:
        fig.set_size_inches(MAX_WIDTH, height * MAX_WIDTH / width)
    for text in fig.findobj(Text):
        if text.get_fontsize() < MIN_FONT:
            text.set_fontsize(MIN_FONT)
    title = fig._suptitle  # noqa: SLF001 - matplotlib keeps the figure title here (no public getter of the Text)
    if title is not None:  # break a long title into lines that fit the width (0.55 em per character, a safe mean)
        per_line = int(fig.get_size_inches()[0] * 72 / (0.55 * title.get_fontsize()))
        title.set_text("\n".join(textwrap.fill(line, per_line) for line in title.get_text().split("\n")))


def render(fig) -> dict[str, bytes]:
    """The figure, fitted to the page, as {extension: bytes} in every format, without dates or random ids;
    then closed."""
    metadata = {"svg": {"Date": None, "Creator": None}, "pdf": {"CreationDate": None, "ModDate": None, "Creator": None,
                                                              "Producer": None}}
    fit_to_page(fig)
    out = {}
    for ext in FORMATS:
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, metadata=metadata[ext])
        out[ext] = buffer.getvalue()
        # The layout found while drawing the first format holds for the next (same size, same fonts, both
        # vector formats at 72 dpi): keep it rather than solve it again, half the cost of a large figure.
        fig.set_layout_engine("none")
    pyplot().close(fig)
    return out
