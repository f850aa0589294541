"""Figures as a reader gets them: text no smaller than 7 pt where the PDF prints it, no labels that collide, no
title that repeats the caption.

`plotting.render`, which draws every cached figure, refuses a figure that fails `plotting.print_problems`
(checked below on figures built to fail each way), so a fresh cache holds only figures that passed it as drawn.
What the figure cannot know is the slot the book gives it (a whole line, or one of several panels): the
cached PDFs are checked against the chapters' layouts here. With GPT-2's weights, figures the report shows are
also drawn anew and checked.
"""

from __future__ import annotations

import os
import re
import zlib
from pathlib import Path

import numpy as np
import pytest
import yaml

from analyses.toolkit import plotting

ROOT = Path(__file__).resolve().parents[1]


def _figure(width=plotting.MAX_WIDTH, height=3.0, ncols=1):
    fig, axes = plotting.subplots(1, ncols, figsize=(width, height), squeeze=False)
    for ax in axes.flat:
        ax.plot([0, 1], [0, 1])
        ax.set_xlabel("x")
    return fig, axes[0]


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plotting.pyplot().close("all")


def test_a_plain_figure_has_no_problems():
    fig, axes = _figure(ncols=2)
    axes[0].set_title("panel a")
    axes[1].set_title("panel b")
    plotting.fit_to_page(fig)
    assert plotting.print_problems(fig) == []


def test_a_label_smaller_than_7_pt_fails_until_raised():
    fig, (ax,) = _figure()
    ax.set_ylabel("small", fontsize=5)
    assert any("'small' prints at 5.0 pt" in p for p in plotting.print_problems(fig))
    plotting.fit_to_page(fig)  # raises it to MIN_FONT
    assert plotting.print_problems(fig) == []


def test_tick_labels_set_small_are_raised_too():
    fig, (ax,) = _figure()
    ax.tick_params(labelsize=5)  # applies to ticks created while drawing, after any raise before a draw
    assert any("prints at 5.0 pt" in p for p in plotting.print_problems(fig))
    plotting.fit_to_page(fig)
    assert plotting.print_problems(fig) == []


def test_sub_and_superscripts_count_at_their_own_size():
    """A 9 pt label's subscript prints at 6.3 pt, a log axis's exponents at 5.6 pt: raised so they reach 7 pt."""
    fig, (ax,) = _figure()
    label = r"$\sigma_i$"
    ax.set_ylabel(label)
    ax.set_yscale("log")
    ax.set_ylim(1e-3, 1)
    problems = plotting.print_problems(fig)
    assert f"{label!r} prints at 6.3 pt" in problems
    assert any("10^{-2}" in p and "prints at 5.6 pt" in p for p in problems)
    plotting.fit_to_page(fig)
    assert plotting.print_problems(fig) == []
    assert ax.yaxis.label.get_fontsize() == pytest.approx(10.0)


def test_text_printed_smaller_by_scaling_fails():
    """8 pt ticks on a figure 4.3 in tall, shown as a stacked panel (3.2 in), print at 6 pt."""
    fig, _ = _figure(height=4.3)
    plotting.fit_to_page(fig)
    assert plotting.print_problems(fig) == []
    problems = plotting.print_problems(fig, height=plotting.PANEL_HEIGHT)
    assert "'0.0' prints at 6.0 pt" in problems and all(" prints at " in p for p in problems)


def test_a_wide_figure_is_drawn_at_the_print_width():
    fig, _ = _figure(width=9.0, height=4.0)
    plotting.fit_to_page(fig)
    np.testing.assert_allclose(fig.get_size_inches(), (plotting.MAX_WIDTH, 4.0 * plotting.MAX_WIDTH / 9.0))


def test_overlapping_annotations_fail():
    """An annotated heatmap whose cells are narrower than their numbers: '14.4' runs into '4.8'."""
    fig, (ax,) = _figure(width=2.0, height=1.5)
    ax.imshow(np.ones((2, 12)))
    for h in range(12):
        ax.text(h, 0, "14.4" if h % 2 else "4.8", ha="center", va="center")
    plotting.fit_to_page(fig)
    assert any("overlap" in p and "'14.4'" in p for p in plotting.print_problems(fig))


def test_colliding_tick_labels_fail():
    fig, (ax,) = _figure(width=2.5)
    ax.set_xticks(range(20), [f"label {i}" for i in range(20)])
    plotting.fit_to_page(fig)
    assert any("overlap" in p for p in plotting.print_problems(fig))


def test_turned_labels_collide_only_where_their_own_rectangles_meet():
    """Labels turned 35°: their axis-aligned boxes overlap, the labels do not; squeezed closer, they do."""
    labels = [f"{h}: current + previous" for h in range(12)]
    fig, (ax,) = _figure()
    ax.set_xticks(range(12), labels, rotation=35, ha="right", rotation_mode="anchor")
    plotting.fit_to_page(fig)
    assert plotting.print_problems(fig) == []
    fig, (ax,) = _figure(width=2.0)
    ax.set_xticks(range(12), labels, rotation=35, ha="right", rotation_mode="anchor")
    plotting.fit_to_page(fig)
    assert any("overlap" in p for p in plotting.print_problems(fig))


def test_overlap_of_polygons():
    square = np.array([[0, 0], [2, 0], [2, 2], [0, 2]], dtype=float)
    assert plotting.overlap(square, square + [1.5, 0]) == pytest.approx(0.5)
    assert plotting.overlap(square, square + [3, 0]) == pytest.approx(-1)
    diamond = np.array([[0, -1], [1, 0], [0, 1], [-1, 0]], dtype=float) + [2.8, 2.8]  # their boxes overlap, not they
    assert plotting.overlap(square, diamond) < 0


def test_text_cut_off_at_the_edge_fails():
    fig, (ax,) = _figure()
    ax.annotate("far out", (1, 1), xytext=(400, 0), textcoords="offset points").set_in_layout(False)
    plotting.fit_to_page(fig)
    assert any("'far out' is cut off" in p for p in plotting.print_problems(fig))


def test_titles_that_repeat_the_caption_fail():
    fig, axes = _figure(ncols=2)
    fig.suptitle("GPT-2: the position table")
    assert any("a figure title" in p for p in plotting.print_problems(fig))
    fig, axes = _figure(ncols=2)
    axes[0].set_title("the cosine similarity of every pair of positions, position 0 left out")
    assert any("reads like a caption" in p for p in plotting.print_problems(fig))
    fig, (ax,) = _figure()
    ax.set_title("norms")  # one panel: the caption names it
    assert any("reads like a caption" in p for p in plotting.print_problems(fig))


def test_render_refuses_a_figure_with_a_problem():
    fig, _ = _figure(ncols=2)
    fig.suptitle("a title")
    with pytest.raises(plotting.FigureError, match="a figure title"):
        plotting.render(fig)
    fig, _ = _figure(ncols=2)
    fig.suptitle("a title")
    assert set(plotting.render(fig, check=False)) == set(plotting.FORMATS)  # a figure no book shows
    fig, _ = _figure(ncols=2)
    assert set(plotting.render(fig)) == set(plotting.FORMATS)


# ---------------------------------------------------------------------------
# The cached figures in the slots the book gives them

DIV = re.compile(r"^(:{3,})\s*\{(.*)\}\s*$")
FIGURE = re.compile(r"!\[[^\]]*\]\(_cache/([\w-]+/[\w-]+/[\w-]+)\)")
NCOL = re.compile(r"layout-ncol=\"?(\d+)")


def book_slots(root: Path = ROOT) -> dict[str, tuple[float, float]]:
    """{"scope/analysis/figure": (width, height) in inches} of the box the PDF scales each figure the book
    shows into: the text width and 0.8 of the text height alone; a 1/n share of the width and 0.4 of the
    height as one of several panels of a figure (`layout-ncol=n`)."""
    config = yaml.safe_load((root / "_quarto.yml").read_text())["book"]
    files = [root / f for f in (*config.get("chapters", ()), *config.get("appendices", ())) if isinstance(f, str)]
    slots = {}
    for path in files:
        if not path.is_file():
            continue
        lines = path.read_text().splitlines()
        stack: list[str] = []
        for i, line in enumerate(lines):
            div = DIV.match(line.strip())
            if div:
                stack.append(div.group(2))
            elif line.strip().startswith(":::") and stack:
                stack.pop()
            for figure in FIGURE.findall(line):
                panels = [attributes for attributes in stack if "#fig-" in attributes]
                if panels:
                    ncol = NCOL.search(panels[-1])
                    slots[figure] = (plotting.TEXT_WIDTH / (int(ncol.group(1)) if ncol else 1),
                                     plotting.PANEL_HEIGHT)
                else:
                    slots[figure] = (plotting.TEXT_WIDTH, plotting.MAX_HEIGHT)
    return slots


def pdf_size_and_fonts(data: bytes) -> tuple[tuple[float, float], list[float]]:
    """A matplotlib PDF's page size in points and the sizes of the fonts its text is set in (`Tf`)."""
    box = re.search(rb"/MediaBox \[\s*([\d.]+) ([\d.]+) ([\d.]+) ([\d.]+)\s*\]", data)
    sizes = []
    for stream in re.finditer(rb"stream\r?\n(.*?)\r?\nendstream", data, re.S):
        try:
            content = zlib.decompress(stream.group(1))
        except zlib.error:
            content = stream.group(1)
        sizes += [float(size) for size in re.findall(rb"/F\d+ ([\d.]+) Tf", content)]
    return (float(box.group(3)), float(box.group(4))), sizes


def printed_font_problems(slots: dict[str, tuple[float, float]], cache: Path) -> list[str]:
    problems = []
    for figure, (width, height) in sorted(slots.items()):
        pdf = cache / f"{figure}.pdf"
        if not pdf.is_file():
            continue  # a figure its analysis could not draw (skipped): the cache tests report that
        (w, h), sizes = pdf_size_and_fonts(pdf.read_bytes())
        scale = min(1.0, 72 * width / w, 72 * height / h)
        if sizes and min(sizes) * scale < plotting.MIN_PRINTED_FONT - 1e-6:
            problems.append(f"{figure}: {min(sizes):g} pt text drawn {w / 72:.2f} × {h / 72:.2f} in prints at "
                            f"{min(sizes) * scale:.1f} pt in its {width:.2f} × {height:.2f} in slot")
    return problems


def test_book_slots_read_the_layouts(tmp_path):
    (tmp_path / "report").mkdir()
    (tmp_path / "_quarto.yml").write_text("book:\n  chapters: [report/a.qmd]\n  appendices: [report/b.qmd]\n")
    (tmp_path / "report" / "a.qmd").write_text(
        "![Alone.](_cache/gpt2/x/one){#fig-one}\n\n::: {#fig-two layout-ncol=2}\n\n"
        "![A.](_cache/gpt2/x/left){#fig-two-a}\n\n![B.](_cache/minilm/x/left){#fig-two-b}\n\nBoth.\n:::\n")
    (tmp_path / "report" / "b.qmd").write_text("::: {#fig-three layout-ncol=1}\n![](_cache/gpt2/y/top)\n:::\n")
    assert book_slots(tmp_path) == {"gpt2/x/one": (plotting.TEXT_WIDTH, plotting.MAX_HEIGHT),
                                    "gpt2/x/left": (plotting.TEXT_WIDTH / 2, plotting.PANEL_HEIGHT),
                                    "minilm/x/left": (plotting.TEXT_WIDTH / 2, plotting.PANEL_HEIGHT),
                                    "gpt2/y/top": (plotting.TEXT_WIDTH, plotting.PANEL_HEIGHT)}


def test_pdf_fonts_are_read_and_a_figure_too_big_for_its_slot_fails(tmp_path):
    fig, (ax,) = _figure(height=4.3)
    (tmp_path / "gpt2" / "x").mkdir(parents=True)
    (tmp_path / "gpt2" / "x" / "f.pdf").write_bytes(plotting.render(fig)["pdf"])
    (size, sizes) = pdf_size_and_fonts((tmp_path / "gpt2" / "x" / "f.pdf").read_bytes())
    assert size == pytest.approx((72 * plotting.MAX_WIDTH, 72 * 4.3), abs=0.1) and min(sizes) == plotting.MIN_FONT
    assert printed_font_problems({"gpt2/x/f": (plotting.TEXT_WIDTH, plotting.MAX_HEIGHT)}, tmp_path) == []
    [problem] = printed_font_problems({"gpt2/x/f": (plotting.TEXT_WIDTH, plotting.PANEL_HEIGHT)}, tmp_path)
    assert "prints at 6.0 pt" in problem


def test_every_cached_figure_prints_at_7_pt_or_more_in_its_slot():
    slots = book_slots()
    assert slots, "the book shows no figure"
    assert printed_font_problems(slots, ROOT / "report" / "_cache") == []


# ---------------------------------------------------------------------------
# Figures drawn anew from the weights: those the issue found unreadable, and the shared cumulative-variance axes

DRAWN = {"gpt2": {"similarity": ("dimensions_extremes", "offset", "trajectories"), "low_rank": ("cumulative_variance",),
                  "position_profile": ("cumulative",)}}


@pytest.mark.skipif(not os.environ.get("GPT2_WEIGHTS"), reason="needs GPT2_WEIGHTS (GPT-2's weights)")
@pytest.mark.parametrize("analysis", sorted(DRAWN["gpt2"]))
def test_figures_drawn_from_gpt2_have_no_problems(analysis):
    from analyses.engine.registry import all_analyses
    from analyses.engine.sources import open_source

    source = open_source("gpt2")
    item = all_analyses()[analysis]
    result = item.run(source.tensors, source.shape)
    slots = book_slots()
    for name in DRAWN["gpt2"][analysis]:
        fig = item.figures[name](result, source.shape)
        plotting.fit_to_page(fig)
        width, height = slots.get(f"gpt2/{analysis}/{name}", (plotting.TEXT_WIDTH, plotting.MAX_HEIGHT))
        assert plotting.print_problems(fig, width, height) == [], name
