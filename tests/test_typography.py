"""What a reader sees, checked on the sources without a render: typography, words and figures (issue 46).

- A real minus sign: the rule that turns a hyphen before a number into U+2212 (report/_scripts/provenance-pages.lua,
  run by Quarto's pandoc here on every cited value and every table the book includes from the cache) agrees with
  analyses/engine/provenance.py's `printed`, which the tooltips and the provenance appendix use, and leaves
  words, ranges, code and math alone.
- The tooltips: each cited number's tooltip prints its printed digits and an accuracy in words that is true of
  the cached value (within half its last digit, which the declared accuracy leaves fixed), and no identifier.
- No internal identifiers in the prose (model ids, tensor names, analysis and key names), outside code and math,
  with every included note of a skipped analysis (the engine writes it in words).
- No figure embedded twice in the main text, and every figure referenced from the text (a main chapter's from
  the main text).
- A caption's colour and marker words ("blue", "dashed", "dots", ...) name what the figure draws: an entry of its
  legend where the figure has one (read from the cached SVG: colour, dashes, marker shape), else some drawn line,
  patch or marker.
- At most MAX_APPENDIX_POINTERS cross-references from the main text into the appendices.

The rendered book (the same defects in the HTML and the PDF) is checked in tests/test_rendered.py.
"""

from __future__ import annotations

import colorsys
import functools
import json
import re
import shutil
import subprocess
import xml.etree.ElementTree as ElementTree
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from analyses.engine import provenance
from analyses.engine.sources import MODELS
from conftest import CACHED, expand

REPO = Path(__file__).resolve().parents[1]
REPORT = REPO / "report"
CACHE = REPORT / "_cache"
MAX_APPENDIX_POINTERS = 30
"""Issue 46: the main text points into the appendices at most this often (cross-references and links)."""


# --- the book's sources --------------------------------------------------------------------------------------

@functools.cache
def book() -> dict:
    return yaml.safe_load((REPO / "_quarto.yml").read_text(encoding="utf-8"))["book"]


def main_chapters() -> list[Path]:
    """The main text: the chapters `_quarto.yml` lists, less the references."""
    return [REPO / p for p in book()["chapters"] if Path(p).stem != "references"]


def appendices() -> list[Path]:
    """The appendices, less the generated provenance listing (identifiers are its content)."""
    return [REPO / p for p in book().get("appendices", []) if Path(p) != provenance.PAGE]


FENCE = re.compile(r"^(```|~~~).*?^\1\s*$", re.S | re.M)
ALT = re.compile(r'fig-alt="([^"]*)"')


def prose(text: str) -> str:
    """The words a reader reads: no code (fenced or inline), math, shortcodes, comments, attributes, link targets or
    cross-reference labels; the alt text of figures kept (a screen reader reads it)."""
    alts = " ".join(ALT.findall(text))
    text = FENCE.sub(" ", text)
    text = re.sub(r"<!--.*?-->", " ", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", " ", text, flags=re.S)
    text = re.sub(r"(?<![\\$])\$(?!\s)(?:[^$\n]|\n(?!\s*\n))+?(?<!\s)\$", " ", text)
    text = re.sub(r"``.*?``|`[^`\n]*`", " ", text)
    text = re.sub(r"\{\{<.*?>\}\}", " ", text, flags=re.S)
    text = re.sub(r"\]\([^)\s]*\)", "] ", text)
    text = re.sub(r"\{[#.][^}]*\}|\{-\}", " ", text)
    text = re.sub(r"-?@[\w:-]+", " ", text)
    text = re.sub(r"<[^>\n]+>", " ", text)
    text = re.sub(r"https?://\S+", " ", text)
    return text + " " + alts


# --- a real minus sign ----------------------------------------------------------------------------------------

PAGES_FILTER = REPORT / "_scripts" / "provenance-pages.lua"
RUN_FILTER = """
quarto = {doc = {is_format = function() return false end}}  -- the filter's only use of Quarto's API
local filter = dofile(arg[1])
local file = io.open(arg[2])
local doc = filter.Pandoc(pandoc.read(file:read("a"), "markdown-smart"))
local out = {}
for _, block in ipairs(doc.blocks) do table.insert(out, pandoc.utils.stringify(block)) end
io.write(table.concat(out, "\\n"))
"""


def quarto_pandoc() -> list[str]:
    quarto = shutil.which("quarto")
    if quarto is None:
        pytest.skip("quarto is not on PATH: its pandoc runs the Lua filter")
    return [quarto, "pandoc"]


def lua_minus(lines: list[str], tmp_path: Path) -> list[str]:
    """Each line (one Markdown paragraph of plain text) as the filter prints it, all in one document."""
    script, data = tmp_path / "run.lua", tmp_path / "lines.txt"
    script.write_text(RUN_FILTER)
    data.write_text("\n\n".join(lines) + "\n")
    out = subprocess.run([*quarto_pandoc(), "lua", str(script), str(PAGES_FILTER), str(data)], capture_output=True,
                         text=True, check=True).stdout
    return out.split("\n")


MINUS_CASES = {
    "-0.49": "\u22120.49", "(s = -0.027) and (s = -0.073)": "(s = \u22120.027) and (s = \u22120.073)",
    "2.54e-41": "2.54e\u221241", "-.5": "\u2212.5", "-90": "\u221290", "GPT-2": "GPT-2", "all-MiniLM-L6-v2":
    "all-MiniLM-L6-v2", "10-20": "10-20", "top-3 share": "top-3 share", "size-3": "size-3", "a - b": "a - b",
    "--weights": "--weights", "rank-500 PCA": "rank-500 PCA",
}


def test_the_minus_rule_turns_only_a_negative_numbers_hyphen():
    assert {text: provenance.printed(text) for text in MINUS_CASES} == MINUS_CASES


def cache_table_lines() -> list[str]:
    """The cells of every table the book includes from the cache, one per line."""
    cells = []
    for path in sorted(CACHE.glob("*/*/*.md")):
        for row in path.read_text(encoding="utf-8").splitlines():
            if row.startswith("|") and not re.fullmatch(r"[|:\- ]+", row):
                cells += [c.strip() for c in row.strip("|").split("|") if c.strip()]
    return cells


def test_the_filter_prints_every_negative_number_with_a_real_minus(tmp_path):
    """The filter (in Lua, on the rendered text) and `provenance.printed` (in Python, on the tooltips and the
    appendix) agree on the cases above, every cited value and every cell of the cache's tables; and after it no
    hyphen stands before a number."""
    values = json.loads((REPORT / "provenance.json").read_text(encoding="utf-8"))["keys"]
    cited = provenance.Provenance.of(REPO).cited
    texts = [*MINUS_CASES, *(cited[k].text for k in values if k in cited), *cache_table_lines()]
    # plain text only (no markup that pandoc would turn into math, emphasis or a list), spacing as pandoc prints it
    texts = [" ".join(t.split()) for t in dict.fromkeys(texts)
             if re.fullmatch(r"[^$\\*_`|<>\[\]#]+", t) and not re.match(r"\s*(?:[-+](?:\s|$)|\d+[.)](?:\s|$))", t)]
    printed = lua_minus(texts, tmp_path)
    assert len(printed) == len(texts)
    differ = [(t, p, provenance.printed(t)) for t, p in zip(texts, printed) if p != provenance.printed(t)]
    assert not differ, "the filter and provenance.printed differ:\n" + "\n".join(map(repr, differ[:10]))
    assert any("\u2212" in p for p in printed), "no negative number among the cited values and tables"
    hyphens = [p for p in printed if provenance.MINUS.search(p)]
    assert not hyphens, f"a hyphen before a number after the filter: {hyphens[:5]}"


# --- the tooltips ---------------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cited() -> dict[str, provenance.Cited]:
    found = provenance.Provenance.of(REPO)
    return {k: found.cited[k] for k in found.cites.keys if k in found.cited}


def test_each_tooltip_prints_the_printed_digits_and_a_true_accuracy(cited):
    """"0.79: the computation fixes it to within 0.005": the printed text first; where it says "within h", the
    cached value lies within h of the printed number and its declared accuracy is below h (so every printed digit
    is fixed); where it says "exact", the printed number is the value."""
    data = json.loads((REPORT / "provenance.json").read_text(encoding="utf-8"))["keys"]
    for key, c in cited.items():
        title = data[key]["title"]
        assert title.startswith(provenance.printed(c.text).replace("`", "") + ": "), f"{key}: {title!r}"
        assert key not in title and "declared accuracy: ±" not in title, f"{key}: an identifier in {title!r}"
        words = provenance.precision(c)
        assert words in title
        shown, half, _ = provenance.read_printed(c.text) or (None, None, None)
        if words.startswith("the computation fixes it to within"):
            declared = max(c.accuracy.get("abs") or 0, (c.accuracy.get("rel") or 0) * abs(c.value))
            assert abs(c.value - shown) <= half * (1 + 1e-9), f"{key}: {c.value} is not within {half} of {c.text}"
            assert declared < half, f"{key}: its declared accuracy {declared} does not fix the digit of {c.text}"
        elif words == "exact":
            assert shown == pytest.approx(c.value, rel=1e-12, abs=1e-12), f"{key}: {c.text} is not {c.value}"


def test_a_printed_number_is_read_with_half_its_last_digit():
    assert provenance.read_printed("0.79") == (0.79, 0.005, "0.005")
    assert provenance.read_printed("90.4%") == pytest.approx((0.904, 0.0005, "0.05 percentage points"))
    assert provenance.read_printed("1,024") == (1024, 0.5, "0.5")
    assert provenance.read_printed("2.54e-41")[1:] == pytest.approx((5e-44, "5e\u221244"))
    assert provenance.read_printed("6.68e5")[2] == "500"
    assert provenance.read_printed("p = 0.58") is None


# --- no internal identifiers ----------------------------------------------------------------------------------

MODEL_IDS = re.compile(r"\b(?:" + "|".join(map(re.escape, sorted(
    {n for name, spec in MODELS.items() for n in (name, spec.slug)} - {"all-MiniLM-L6-v2"} | {"openai-gpt"},
    key=len, reverse=True))) + r")(?![\w-])")
"""The models' ids and cache scopes (gpt2, kjv-gpt2, kjv_gpt2_seed1, main_ctx128, ...): the book says "GPT-2",
"MiniLM", or the short name it gives the model trained here (all-MiniLM-L6-v2 is the model's published name)."""
CODE_NAMES = re.compile(
    r"\bW_(?:in|out|pos|[A-Z])\b|\bb_(?:in|out|[A-Z])\b|\bblocks\.[\w*]|\b(?:wte|wpe|c_attn|c_fc|c_proj|lm_head|ln_f|"
    r"ln_final|E_centred|hook_\w+)\b"  # tensors
    r"|\b[a-z][a-z0-9]*_[a-z0-9_]*[a-z0-9]\b"  # snake_case: analysis, key, file and parameter names
)
"""Tensor, analysis and key names: the book says "the token embeddings", "the MLP weights" and the like."""
SPELLED_MATH = re.compile(r"\bW_[A-Z]\b")
"""A matrix of the text's math ($W_Q$) spelled out in alt text, which holds no math: a name, not an identifier."""


def identifiers_in(text: str) -> list[str]:
    """Model ids, tensor, analysis and key names in a text's prose (its alt text included); in the tables included
    from the cache, whose labels name matrices and tensors by design, model ids only."""
    parts = text.split(CACHED)
    body = "".join(parts[0::2])
    alts = " ".join(ALT.findall(body))
    found = [m.group(0) for m in MODEL_IDS.finditer(prose(body))]
    found += [m.group(0) for m in CODE_NAMES.finditer(prose(ALT.sub(" ", body))) if not MODEL_IDS.fullmatch(m.group(0))]
    found += [m.group(0) for m in CODE_NAMES.finditer(alts) if not SPELLED_MATH.fullmatch(m.group(0))]
    found += [m.group(0) for table in parts[1::2] for m in MODEL_IDS.finditer(prose(table))]
    return found


def test_the_identifier_check_finds_a_leak_and_passes_words():
    leak = "*Logit lens: not computed for gpt2, as its checkpoint lacks `blocks.*.mlp.W_in` (@sec-x).*"
    assert identifiers_in(leak) == ["gpt2"]
    assert identifiers_in("*Logit lens: not computed for GPT-2: this edition's checkpoint has no MLP weights (@sec-x).*") == []
    assert sorted(identifiers_in("the kjv_gpt2 model, W_in, blocks.0 and shift_map")) == [
        "W_in", "blocks.0", "kjv_gpt2", "shift_map"]
    assert identifiers_in("GPT-2 and MiniLM, `gpt2`, $W_E$, {{< var gpt2.helix.top3 >}}, @fig-x_y, two blocks.") == []
    assert identifiers_in(f"{CACHED}| W_Q | gpt2 |{CACHED}") == ["gpt2"]


@pytest.mark.parametrize("source", [*main_chapters(), *appendices()], ids=lambda p: p.stem)
def test_no_internal_identifiers_in_prose(source):
    found = Counter(identifiers_in(expand(source, mark_cached=True)))
    assert not found, f"identifiers in the prose of {source.name}: {dict(found.most_common(12))}"


# --- figures: embedded once, referenced -----------------------------------------------------------------------

IMAGE = re.compile(r"!\[(?P<caption>(?:[^\[\]]|\[[^\]]*\])*)\]\((?P<src>[^)\s]+)\)(?P<attrs>\{[^}]*\})?")


def images(path: Path) -> list[tuple[str, str, str]]:
    """(image path, resolved and without extension; caption; label) of each image a source embeds, includes too."""
    text = FENCE.sub("", expand(path))
    out = []
    for m in IMAGE.finditer(text):
        src = m["src"]
        target = (path.parent / src).resolve() if not src.startswith("/") else Path(src)
        label = re.search(r"#(fig-[\w-]+)", m["attrs"] or "")
        out.append((str(target.with_suffix("")), m["caption"], label.group(1) if label else ""))
    return out


def test_no_figure_is_embedded_twice_in_the_main_text():
    seen = Counter(src for chapter in main_chapters() for src, _, _ in images(chapter))
    twice = [str(Path(src).relative_to(REPO)) for src, n in seen.items() if n > 1]
    assert not twice, f"images embedded more than once in the main text: {twice}"


FIGURE_DIV = re.compile(r"^:::+\s*\{#(fig-[\w-]+)[^}]*\}\s*$(.*?)^:::+\s*$", re.M | re.S)


def defined_figures(path: Path) -> list[str]:
    """The figures a source defines: an image's label, or a figure div's (not its panels')."""
    text = re.sub(r"<!--.*?-->", "", FENCE.sub("", expand(path)), flags=re.S)
    divs = list(FIGURE_DIV.finditer(text))
    panels = {label for div in divs for label in re.findall(r"#(fig-[\w-]+)", div.group(2))}
    return [label for label in dict.fromkeys(re.findall(r"#(fig-[\w-]+)", text)) if label not in panels]


def references(paths: list[Path]) -> set[str]:
    return {m for p in paths for m in re.findall(r"@(fig-[\w-]+?)(?=[^\w-]|$)", expand(p))}


def test_every_figure_is_referenced_in_the_text():
    """A main chapter's figure is referenced from the main text; an appendix's, from anywhere in the book."""
    main, everywhere = references(main_chapters()), references([*main_chapters(), *appendices()])
    unreferenced = [f"{p.name}: {label}" for p in main_chapters() for label in defined_figures(p) if label not in main]
    unreferenced += [f"{p.name}: {label}" for p in appendices() for label in defined_figures(p)
                     if label not in everywhere]
    assert not unreferenced, "figures no text refers to:\n" + "\n".join(unreferenced)


# --- a caption's colour and marker words against the figure ---------------------------------------------------

COLOURS = ("red", "orange", "yellow", "green", "cyan", "blue", "purple", "pink", "brown", "grey", "gray", "black")
MARKS = {"dashed": {"dashed"}, "dashes": {"dashed"}, "dotted": {"dotted"}, "dots": {"circle", "dotted"},
         "circles": {"circle"}, "squares": {"square"}, "crosses": {"cross"}, "triangles": {"triangle"},
         "diamonds": {"diamond"}, "solid": {"solid"}}
"""Marker and line words, and the drawn styles each may name."""
STYLE_WORD = re.compile(rf"(?<![\w-])({'|'.join([*COLOURS, *MARKS])})(?![\w-])", re.I)
SVG = "{http://www.w3.org/2000/svg}"
XLINK = "{http://www.w3.org/1999/xlink}href"


def colour_name(hex_colour: str) -> str | None:
    """The plain name of a drawn colour: grey or black for unsaturated ones, else by hue (white: none)."""
    r, g, b = (int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5))
    hue, saturation, value = colorsys.rgb_to_hsv(r, g, b)
    if saturation < 0.15 or value < 0.15:
        return None if value > 0.95 else ("black" if value < 0.2 else "grey")
    degrees = hue * 360
    if value < 0.65 and 10 <= degrees < 45:
        return "brown"
    for name, upper in (("red", 12), ("orange", 45), ("yellow", 70), ("green", 170), ("cyan", 200), ("blue", 255),
                        ("purple", 295), ("pink", 340), ("red", 361)):
        if degrees < upper:
            return name
    return None


def marker_shape(d: str) -> str:
    """The shape of a marker's path (matplotlib's marker definitions): circle, square, diamond, triangle, cross."""
    if "C" in d:
        return "circle"
    points = [tuple(map(float, p)) for p in re.findall(r"(-?[\d.]+) (-?[\d.]+)", d)]
    if d.count("M") > 1:
        return "cross"
    corners = {(round(x, 1), round(y, 1)) for x, y in points}
    if len(corners) == 3:
        return "triangle"
    if len(corners) == 4:
        return "diamond" if any(abs(x) < 1e-6 for x, _ in corners) else "square"
    return "other"


@dataclass(frozen=True)
class Drawn:
    """A drawn element's look: its colour names, and its line or marker styles."""

    colours: frozenset[str]
    styles: frozenset[str]


def _look(group: ElementTree.Element, markers: dict[str, str]) -> Drawn:
    colours, styles = set(), set()
    for el in group.iter():
        style = dict(p.split(":", 1) for p in (el.get("style") or "").replace(" ", "").split(";") if ":" in p)
        for prop in ("stroke", "fill"):
            if re.fullmatch(r"#[0-9a-fA-F]{6}", style.get(prop, "")) and (name := colour_name(style[prop])):
                colours.add(name)
        if el.tag == f"{SVG}path" and style.get("stroke", "none") != "none" and not el.get("id"):
            width = float(style.get("stroke-width", "1.5"))
            dashes = [float(x) for x in style.get("stroke-dasharray", "").split(",") if x]
            styles.add("solid" if not dashes else ("dotted" if dashes[0] <= 1.5 * width else "dashed"))
        if el.tag == f"{SVG}path" and not el.get("id") and "C" in (el.get("d") or "") and \
                (el.get("d") or "").rstrip().endswith("z"):
            styles.add("circle")  # a marker drawn in place (a 3-D scatter), not from a definition
        if el.get(XLINK, "")[1:] in markers:
            styles.add(marker_shape(markers[el.get(XLINK)[1:]]))
    return Drawn(frozenset(colours), frozenset(styles))


def figure_looks(svg: Path) -> tuple[list[Drawn], list[Drawn], bool]:
    """A cached SVG's legend entries, its other drawn elements (lines, patches, markers; not text), and whether
    it holds a raster image (a colour map, whose colours no element names)."""
    root = ElementTree.fromstring(svg.read_text(encoding="utf-8"))
    markers = {el.get("id"): el.get("d") for el in root.iter(f"{SVG}path") if el.get("id") and el.get("d")}
    glyphs = {k for k in markers if re.match(r"(DejaVu|STIX|CMU|Latin)", k)}
    markers = {k: v for k, v in markers.items() if k not in glyphs}
    legend, drawn = [], []
    for group in root.iter(f"{SVG}g"):
        gid = group.get("id") or ""
        if gid.startswith("legend"):
            handle = []
            for child in group:
                cid = child.get("id") or ""
                if cid.startswith("text") and handle:
                    legend.append(Drawn(frozenset().union(*(h.colours for h in handle)),
                                        frozenset().union(*(h.styles for h in handle))))
                    handle = []
                elif not cid.startswith(("text", "patch_1")):  # patch_1 ... the legend's frame comes first
                    handle.append(_look(child, markers))
        elif re.match(r"(line2d|patch|Path3?D?Collection|Line3?D?Collection|Poly3?D?Collection|FillBetween)", gid):
            drawn.append(_look(group, markers))
    return legend, drawn, any(True for _ in root.iter(f"{SVG}image"))


def caption_demands(caption: str) -> list[tuple[set[str], set[str]]]:
    """(colours, styles) the caption names together: a colour and a marker word side by side ("blue dots",
    "dashed red line") are one demand; a lone word, one of its own."""
    text = re.sub(r"\{\{<.*?>\}\}|\$[^$]*\$|`[^`]*`", " ", caption)
    words = [(m.group(1).lower().replace("gray", "grey"), m.start(), m.end()) for m in STYLE_WORD.finditer(text)]
    demands, used = [], set()
    for i, (word, start, end) in enumerate(words):
        if i in used:
            continue
        group = [word]
        if i + 1 < len(words) and re.fullmatch(r"[\s,]*(?:line|lines)?\s*", text[end:words[i + 1][1]]) \
                and (word in MARKS) != (words[i + 1][0] in MARKS):
            group.append(words[i + 1][0])
            used.add(i + 1)
        colours = {w for w in group if w in COLOURS}
        styles = set().union(*(MARKS[w] for w in group if w in MARKS)) if any(w in MARKS for w in group) else set()
        demands.append((colours, styles))
    return demands


def _matches(demand: tuple[set[str], set[str]], look: Drawn) -> bool:
    colours, styles = demand
    return colours <= look.colours and (not styles or bool(styles & look.styles))


def caption_mismatches(caption: str, svgs: list[Path]) -> list[str]:
    """What the caption names that no legend entry and no drawn element of the figure is: a colour and a marker
    word side by side must be one element ("blue dots": blue circles or a blue dotted line, not a blue dashed
    line); a colour alone, in a figure with a colour map, may be the map's and is not checked."""
    looks = [figure_looks(svg) for svg in svgs]
    candidates = [entry for entries, _, _ in looks for entry in entries] + [e for _, drawn, _ in looks for e in drawn]
    colour_map = any(raster for _, _, raster in looks)
    wrong = []
    for colours, styles in caption_demands(caption):
        if colour_map and not styles:
            continue
        if not any(_matches((colours, styles), look) for look in candidates):
            wrong.append(f"nothing drawn is {' '.join(sorted(colours))}{' and ' if colours and styles else ''}"
                         f"{' or '.join(sorted(styles))}")
    return wrong


def cached_figures() -> list[tuple[str, str, list[Path]]]:
    """(source: label, caption, SVG files) of every cached figure of the book, a figure div's panels with it."""
    out = []
    for path in [*main_chapters(), *appendices()]:
        text = FENCE.sub("", expand(path))
        divs = {m.start(): m for m in FIGURE_DIV.finditer(text)}
        inside = [(m.start(), m.end()) for m in divs.values()]
        for m in divs.values():
            body = m.group(2)
            svgs = [_svg(path, src) for _, src in re.findall(r"!\[((?:[^\[\]]|\[[^\]]*\])*)\]\(([^)\s]+)\)", body)]
            caption = IMAGE.sub(" ", body)
            out.append((f"{path.name}: {m.group(1)}", caption, [s for s in svgs if s]))
        for m in IMAGE.finditer(text):
            svg = _svg(path, m["src"])
            if svg and not any(a <= m.start() < b for a, b in inside):
                label = re.search(r"#(fig-[\w-]+)", m["attrs"] or "")
                out.append((f"{path.name}: {label.group(1) if label else m['src']}", m["caption"], [svg]))
    return [(name, caption, svgs) for name, caption, svgs in out if svgs]


def _svg(source: Path, src: str) -> Path | None:
    target = (source.parent / src).resolve()
    svg = target if target.suffix == ".svg" else target.with_name(target.name + ".svg")
    return svg if svg.is_file() else None


def test_the_caption_check_reads_a_legend():
    """On a cached figure with a legend of a red line, a dashed grey line and a dashed blue line: "red", "dashed"
    and "blue dashes" pass, "blue dots" and "green" fail."""
    svg = CACHE / "gpt2" / "position_token_subspaces" / "energy.svg"
    legend, _, _ = figure_looks(svg)
    assert Drawn(frozenset({"red"}), frozenset({"solid"})) in legend
    assert not caption_mismatches("P (red) against k/D (dashed); the second run (blue dashes)", [svg])
    assert caption_mismatches("the second run (blue dots)", [svg]) == ["nothing drawn is blue and circle or dotted"]
    assert not caption_mismatches("least-squares fits; a red dotted line", [svg])
    assert caption_mismatches("a green line", [svg])


@pytest.mark.parametrize("name, caption, svgs", cached_figures(), ids=lambda v: v if isinstance(v, str) and
                         ": fig-" in v else "")
def test_caption_colour_and_marker_words_name_what_the_figure_draws(name, caption, svgs):
    wrong = caption_mismatches(caption, svgs)
    assert not wrong, f"{name}: the caption names what the figure does not draw: {wrong}"


# --- pointers into the appendices -----------------------------------------------------------------------------

def appendix_labels() -> set[str]:
    """Every cross-reference label an appendix defines (sections, figures, tables, equations)."""
    return {label for p in [*appendices(), REPO / provenance.PAGE]
            for label in re.findall(r"#((?:sec|fig|tbl|eq)-[\w-]+)", expand(p))}


def appendix_pointers(text: str, labels: set[str]) -> list[str]:
    """The cross-references (@label) to an appendix's labels and the links to an appendix page in a text."""
    text = re.sub(r"<!--.*?-->", "", FENCE.sub("", text), flags=re.S)
    refs = [m for m in re.findall(r"@((?:sec|fig|tbl|eq)-[\w-]+?)(?=[^\w-]|$)", text) if m in labels]
    links = re.findall(r"\]\(((?:\.\./)?(?:report/)?(?:appendix-[\w-]+|provenance)\.(?:qmd|html)[^)]*)\)", text)
    return refs + links


def test_the_main_text_points_into_the_appendices_at_most_30_times():
    labels = appendix_labels()
    counts = {p.name: len(appendix_pointers(expand(p), labels)) for p in main_chapters()}
    total = sum(counts.values())
    assert total <= MAX_APPENDIX_POINTERS, (f"{total} pointers from the main text into the appendices, over "
                                            f"{MAX_APPENDIX_POINTERS}: {counts}")
