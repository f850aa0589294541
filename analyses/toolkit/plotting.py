"""The report's one figure style, and byte-reproducible saving in SVG (web) and PDF (print).

Matplotlib is imported only when a figure is drawn, so that checking the cache
(a warm run) never pays for it. Colour maps: `DIVERGING` for signed quantities
centred on 0 (cosine similarity, raw embedding values), `SEQUENTIAL` for
magnitudes, `POSITION` for colouring points by token position.
"""

from __future__ import annotations

import io
import re
from functools import cache

import numpy as np

DIVERGING = "RdBu_r"
SEQUENTIAL = "viridis"
POSITION = "plasma"
FORMATS = ("svg", "pdf")

TEXT_WIDTH = 446.76 / 72.27
"""Inches: the width of the PDF's text block (scrreprt, letter paper, DIV=11: 446.76 TeX points), to which the
PDF scales every figure (`\\pandocbounded` in _quarto.yml); a comfortable column on the web too."""
TEXT_HEIGHT = 582.2 / 72.27
"""Inches: the height of the PDF's text block."""
MAX_WIDTH = TEXT_WIDTH
"""Inches: the widest a figure is drawn, so that it prints at the size drawn, its text at the points set."""
MAX_HEIGHT = 0.8 * TEXT_HEIGHT
"""Inches: the tallest a figure is drawn; the PDF scales a taller one down to it, to leave room for the caption."""
HALF_WIDTH = 0.5 * TEXT_WIDTH
"""Inches: the widest a figure may be drawn that the book shows as one of two panels side by side."""
PANEL_HEIGHT = 0.4 * TEXT_HEIGHT
"""Inches: the tallest a figure may be drawn that the book shows as one of two panels stacked in one figure
(the PDF scales each panel to this height), so that its text prints at the size set."""
MIN_FONT = 8.0
"""Points: the smallest text a figure is drawn with; smaller text is raised to it."""
MIN_PRINTED_FONT = 7.0
"""Points: the smallest text may print, after the PDF has scaled the figure to its box."""
SCRIPT = 0.7
"""Mathtext's size for a sub- or superscript (an exponent of a log axis's tick label), relative to its text."""
MATH_SCRIPT = re.compile(r"\$[^$]*[_^][^$]*\$")
"""Text with mathtext sub- or superscripts."""
MAX_TITLE = 40
"""Characters: the longest line of a panel's title (a panel's name, not a sentence: the caption says that)."""
OVERLAP = 0.5
"""Points: two texts whose rectangles overlap by more than this collide."""


STYLE = {
    "figure.figsize": (MAX_WIDTH, PANEL_HEIGHT),  # fits a whole line and a stacked panel's slot alike
    "figure.dpi": 100,
    # Every figure lays itself out (constrained layout) inside its own size: the PDF and the page get the
    # size drawn, and saving does not draw the figure twice to find a tight bounding box.
    "figure.constrained_layout.use": True,
    "savefig.dpi": 150,
    # Sizes for a figure drawn at the text width (MAX_WIDTH), which prints at the size drawn: panel titles and
    # labels at 9 pt, ticks and legends at 8 pt (MIN_FONT).
    "font.size": 9,
    "axes.titlesize": 9,
    "axes.labelsize": 9,
    "xtick.labelsize": 8,
    "ytick.labelsize": 8,
    "legend.fontsize": 8,
    "legend.title_fontsize": 8,
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


def cumulative_variance_axes(ax) -> None:
    """Dress axes on which cumulative explained-variance curves are drawn: the number of components on a log axis
    in plain numbers, the share from 0 to 1 with the 90 % line marked, and the legend."""
    ax.axhline(0.9, color="0.6", lw=0.8)
    ax.annotate("90%", (0, 0.9), xycoords=("axes fraction", "data"), xytext=(3, 1), textcoords="offset points",
                color="0.4", va="bottom")
    ax.set_xscale("log")
    plain_log_ticks(ax.xaxis)
    ax.set_ylim(0, 1.01)
    ax.set_xlabel("principal components k (log scale)")
    ax.set_ylabel("cumulative share of variance")
    ax.legend(loc="lower right")


class FigureError(ValueError):
    """A figure that would print unreadably: text too small, texts that collide or leave the figure, a title
    that repeats the caption."""


def smallest_size(text) -> float:
    """Points: the smallest glyphs of a text, its size or, with mathtext sub- or superscripts, SCRIPT of it."""
    return text.get_fontsize() * (SCRIPT if MATH_SCRIPT.search(text.get_text()) else 1.0)


def fit_to_page(fig, height: float = MAX_HEIGHT) -> None:
    """Scale a figure larger than MAX_WIDTH × `height` down into it, keeping its text's sizes in points, and
    raise any text smaller than MIN_FONT to it, text with sub- or superscripts so far that they reach
    MIN_PRINTED_FONT (tick labels included: the figure is laid out once first)."""
    from matplotlib.text import Text

    width, tall = fig.get_size_inches()
    factor = min(1.0, MAX_WIDTH / width, height / tall)
    if factor < 1.0:
        fig.set_size_inches(width * factor, tall * factor)
    fig.draw_without_rendering()  # creates the tick labels the axes will draw
    for text in fig.findobj(Text):
        floor = max(MIN_FONT, MIN_PRINTED_FONT / SCRIPT) if MATH_SCRIPT.search(text.get_text()) else MIN_FONT
        if text.get_fontsize() < floor:
            text.set_fontsize(floor)


def _corners(text, renderer, scale: float) -> np.ndarray:
    """The four corners (points) of a text's own rectangle, turned with the text: a turned label's box (the
    axis-aligned box around it, with the same centre) is wider than the label."""
    box = text.get_window_extent(renderer)
    angle = np.radians(text.get_rotation())
    if np.isclose(np.sin(2 * angle), 0.0):  # upright or a quarter turn: the box is the rectangle
        return scale * np.array([[box.x0, box.y0], [box.x1, box.y0], [box.x1, box.y1], [box.x0, box.y1]])
    rotation = text.get_rotation()
    text.set_rotation(0)
    flat = text.get_window_extent(renderer)
    text.set_rotation(rotation)
    half = np.array([[-1, -1], [1, -1], [1, 1], [-1, 1]]) * [flat.width / 2, flat.height / 2]
    turn = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    return scale * (np.array([(box.x0 + box.x1) / 2, (box.y0 + box.y1) / 2]) + half @ turn.T)


def overlap(a: np.ndarray, b: np.ndarray) -> float:
    """How far two convex polygons (corners in order) overlap, in points: the least, over the directions across
    their edges, of the overlap of their shadows on that direction (≤ 0: they do not meet)."""
    least = np.inf
    for polygon in (a, b):
        for edge in np.diff(np.vstack([polygon, polygon[:1]]), axis=0):
            normal = np.array([-edge[1], edge[0]]) / np.hypot(*edge)
            pa, pb = a @ normal, b @ normal
            least = min(least, min(pa.max(), pb.max()) - max(pa.min(), pb.min()))
    return least


def drawn_texts(fig) -> list[tuple[object, np.ndarray]]:
    """(text, its rectangle's corners in points) of every non-empty text a drawing of the figure prints, in
    drawing order."""
    from matplotlib.text import Text

    drawn = []
    original = Text.draw

    def recording(text, renderer):
        original(text, renderer)
        if text.get_visible() and text.get_text().strip() and (
                not hasattr(text, "_check_xy") or text._check_xy(renderer)):  # noqa: SLF001 - annotation clipped away
            drawn.append((text, _corners(text, renderer, 72.0 / fig.dpi)))

    Text.draw = recording
    try:
        fig.draw_without_rendering()
    finally:
        Text.draw = original
    return drawn


def print_problems(fig, width: float = MAX_WIDTH, height: float = MAX_HEIGHT) -> list[str]:
    """What would make the figure hard to read once the PDF scales it into a box `width` × `height` (inches):
    a figure title, a panel's title longer than a name (or any on a one-panel figure: the caption says it),
    text printed below MIN_PRINTED_FONT, texts whose boxes collide, text cut off at the figure's edge."""
    problems = []
    if fig._suptitle is not None and fig._suptitle.get_text().strip():  # noqa: SLF001 - no public getter
        problems.append(f"a figure title ({fig._suptitle.get_text()!r}): the caption says it")  # noqa: SLF001
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.get_visible()]
    for ax in panels:
        for title in (ax.title, ax._left_title, ax._right_title):  # noqa: SLF001 - the three title slots
            text = title.get_text().strip()
            if text and (len(panels) == 1 or max(map(len, text.split("\n"))) > MAX_TITLE):
                problems.append(f"a title that reads like a caption ({text!r})")
    W, H = fig.get_size_inches()
    scale = min(1.0, width / W, height / H)
    texts = drawn_texts(fig)
    for text, _ in texts:
        if smallest_size(text) * scale < MIN_PRINTED_FONT - 1e-9:
            problems.append(f"{text.get_text()!r} prints at {smallest_size(text) * scale:.1f} pt")
    for text, corners in texts:
        if (corners < -OVERLAP).any() or (corners > np.array([72 * W, 72 * H]) + OVERLAP).any():
            problems.append(f"{text.get_text()!r} is cut off at the figure's edge")
    for i, (a, corners_a) in enumerate(texts):
        for b, corners_b in texts[i + 1:]:
            if overlap(corners_a, corners_b) > OVERLAP:
                problems.append(f"{a.get_text()!r} and {b.get_text()!r} overlap")
    return problems


def render(fig, check: bool = True) -> dict[str, bytes]:
    """The figure, fitted to the page and, if `check`, checked (`print_problems`; a FigureError names what is
    wrong), as {extension: bytes} in every format, without dates or random ids; then closed. Unchecked: a
    figure no book shows (a test's tiny model, whose figures need not read well)."""
    metadata = {"svg": {"Date": None, "Creator": None}, "pdf": {"CreationDate": None, "ModDate": None, "Creator": None,
                                                              "Producer": None}}
    fit_to_page(fig)
    problems = print_problems(fig)  # lays the figure out at its final fonts, checked or not
    if check and problems:
        pyplot().close(fig)
        raise FigureError("; ".join(problems))
    # The layout found by the check holds for every format (same size, same fonts, vector formats at 72 dpi):
    # keep it rather than solve it again, a third of the cost of a large figure.
    fig.set_layout_engine("none")
    out = {}
    for ext in FORMATS:
        buffer = io.BytesIO()
        fig.savefig(buffer, format=ext, metadata=metadata[ext])
        out[ext] = buffer.getvalue()
    pyplot().close(fig)
    return out
