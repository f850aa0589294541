"""The rendered report: `quarto render` once per session, then checks of what a reader gets.

The render (HTML site and PDF, with the pre-render step that brings the cache up to date) runs
once, into the normal `_book/`, started in the background as soon as the tests are collected (it
needs mostly one core for minutes; the tests before these run beside it). Then:

- the render exits 0 and prints no WARN lines;
- every HTML page, statically: no unresolved cross-reference, no literal shortcode, no raw TeX in
  the visible text, no script, stylesheet or font from outside `_book/`, every local target there;
  every figure and table numbered in order, chapter by chapter, and titled in the sidebar;
- every page in headless Chromium, served from `_book/` over local HTTP with every other request
  blocked: no console error, math typeset (MathML), the interactive helix drawn by plotly, every
  cited number a link that lands on its key's own row of the provenance page (key, unrounded value
  and accuracy in its tooltip), every cached figure's caption linked to its entry; a full-page
  cited numbers quiet at rest (no underline, the text's colour; underlined on hover, outlined on keyboard
  focus); every printed negative number with a real minus sign, and no model id in the visible text; a full-page
  screenshot of each page (of the provenance listing, its first screen) goes to
  `_book/screenshots/<page>.png` for a person to look at;
- the PDF: the main text within its page budget (counted from the outline, per chapter), no hyphen for a
  minus sign, no
  missing glyph, every figure and table captioned in its chapter, all fonts embedded, the cited
  numbers printed in the chapters that cite them, and the provenance appendix, compact and out of
  the table of contents, listing for them the pages that print them.

Skipped, saying why, without Quarto on PATH (the browser tests without Chromium or Playwright);
the pre-render step checks the cache against GPT-2's weights, so without GPT2_WEIGHTS the render
is skipped too. CI installs all of it (.ci/run).
"""

from __future__ import annotations

import atexit
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from html import unescape
from html.parser import HTMLParser
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from conftest import expand, in_background
from test_typography import MODEL_IDS

from analyses.engine.provenance import MINUS, printed

REPO = Path(__file__).resolve().parents[1]
BOOK = REPO / "_book"
SCREENSHOTS = BOOK / "screenshots"
QUARTO = shutil.which("quarto")
CHROMIUM = os.environ.get("CHROMIUM") or shutil.which("chromium") or shutil.which("chromium-browser")
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]
RENDER_TIMEOUT_S = int(os.environ.get("RENDER_TIMEOUT_S", "900"))  # a loaded machine may need more


# --- the book, from _quarto.yml -------------------------------------------------------------

@dataclass(frozen=True)
class Chapter:
    source: Path          # the .qmd, relative to the repository
    title: str
    number: int | str | None  # None for unnumbered chapters (preface, references); A, B, … for appendices

    @property
    def page(self) -> Path:
        return self.source.with_suffix(".html")

    @property
    def name(self) -> str:
        return self.source.stem

    def heading(self) -> str:
        return self.title if self.number is None else f"{self.number} {self.title}"


@functools.cache
def chapters() -> tuple[Chapter, ...]:
    config = yaml.safe_load((REPO / "_quarto.yml").read_text())
    out, number = [], 0
    appendices = config["book"].get("appendices", [])
    for k, source in enumerate([*config["book"]["chapters"], *appendices]):
        heading = re.search(r"^# (.+?)\s*(\{[^}]*\})?\s*$", expand(REPO / source), re.M)
        assert heading, f"{source} has no level-1 heading"
        attrs = heading.group(2) or ""
        unnumbered = ".unnumbered" in attrs or attrs.replace(" ", "") == "{-}"
        if source in appendices:  # appendices are lettered A, B, … in both formats
            label = chr(ord("A") + k - len(config["book"]["chapters"]))
        elif not unnumbered:
            number += 1
            label = number
        out.append(Chapter(Path(source), heading.group(1), None if unnumbered else label))
    return tuple(out)


CHAPTER_IDS = [c.name for c in chapters()]
LISTING = "provenance-listing"
"""The listing (plain HTML beside the appendix) that every cited number and cached figure links to."""
LISTING_PAGE = Path("report") / f"{LISTING}.html"


def float_labels(text: str, kind: str) -> list[str]:
    """Labels of the top-level figures (kind 'fig') or tables ('tbl') a chapter defines, in order.

    A figure div's own label counts; labels of the panels inside it (subfigures) do not.
    """
    text = re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.S | re.M)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    labels, stack = [], []
    for line in text.splitlines():
        fence = re.match(r"^(:{3,})\s*(.*)$", line.strip())
        if fence and not fence.group(2):
            if stack:
                stack.pop()
            continue
        if fence:
            div = re.search(rf"#({kind}-[\w-]+)", fence.group(2))
            inside = any(stack)
            stack.append(bool(div))
            if div and not inside:
                labels.append(div.group(1))
            continue
        if not any(stack):
            labels += re.findall(rf"\)\{{#({kind}-[\w-]+)", line)
    return labels


def html_only(text: str) -> str:
    return re.sub(r'^::: \{\.content-visible when-format="html"\}.*?^:::\s*$', "", text, flags=re.S | re.M)


# --- the render -------------------------------------------------------------------------------

@dataclass
class Render:
    returncode: int
    log: str
    seconds: float


_RENDERING: dict[str, object] = {}
"""The session's one `quarto render`: its process, its log file and when it started."""


def start_render(gpt2_weights: Path) -> None:
    """Start the render of the whole book into _book/ in the background, once per session, as `make report` renders it
    (report/_scripts/render-both.sh: the pre-render step once, then the website and the PDF side by side); the
    conftest calls this as soon as the tests are collected, so that the render runs beside the other tests."""
    if QUARTO is None or _RENDERING:
        return
    shutil.rmtree(BOOK, ignore_errors=True)
    env = os.environ | {"ANALYSES_PYTHON": sys.executable, "GPT2_WEIGHTS": str(gpt2_weights)}
    log = tempfile.TemporaryFile("w+")
    env["PATH"] = f"{Path(QUARTO).parent}{os.pathsep}{env.get('PATH', '')}"
    process = subprocess.Popen(["bash", str(REPO / "report" / "_scripts" / "render-both.sh")], cwd=REPO, env=env,
                               stdout=log, stderr=subprocess.STDOUT, text=True, preexec_fn=in_background)
    _RENDERING.update(log=log, start=time.monotonic(), process=process)
    atexit.register(lambda: process.poll() is None and process.kill())  # an interrupted session leaves no render


@pytest.fixture(scope="session")
def render(gpt2_weights) -> Render:
    """The session's render of the whole book, waited for (started at collection, or here)."""
    if QUARTO is None:
        pytest.skip("quarto is not on PATH: install Quarto 1.10.18 to render and check the report "
                    "(here: ../shared/tools/quarto/install.sh --with-tex PREFIX; see the README)")
    start_render(gpt2_weights)
    process, log = _RENDERING["process"], _RENDERING["log"]
    try:
        process.wait(timeout=RENDER_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log.seek(0)
    return Render(process.returncode, log.read(), time.monotonic() - _RENDERING["start"])


@pytest.fixture(scope="session")
def book(render) -> Path:
    if render.returncode != 0:
        pytest.skip("the render failed (see test_render_succeeds_without_warnings)")
    return BOOK


def warnings_in(log: str) -> list[str]:
    return [line.strip() for line in log.splitlines() if re.search(r"\bWARN(ING)?\b", line)]


def test_render_succeeds_without_warnings(render):
    tail = "\n".join(render.log.splitlines()[-40:])
    assert render.returncode == 0, f"quarto render exited {render.returncode}:\n{tail}"
    assert "pre-render:" in render.log, "the pre-render step (analyses cache, plotly.js) did not run"
    assert (BOOK / "index.html").is_file() and list(BOOK.glob("*.pdf")), "no HTML site or no PDF"
    warnings = warnings_in(render.log)
    assert not warnings, "warnings during the render:\n" + "\n".join(warnings)


# --- HTML, statically -------------------------------------------------------------------------

HIDDEN = {"script", "style", "annotation", "annotation-xml", "code", "pre", "title", "template"}
VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"}


class Page(HTMLParser):
    """The visible text of a page and the elements that load something."""

    def __init__(self, path: Path):
        super().__init__(convert_charrefs=True)
        self.path, self.text, self.elements, self._hidden = path, [], [], []
        self.raw = path.read_text(encoding="utf-8")
        self.feed(self.raw)

    def handle_starttag(self, tag, attrs):
        self.elements.append((tag, dict(attrs)))
        if tag in HIDDEN and tag not in VOID:
            self._hidden.append(tag)

    def handle_endtag(self, tag):
        if self._hidden and self._hidden[-1] == tag:
            self._hidden.pop()

    def handle_data(self, data):
        if not self._hidden:
            self.text.append(data)

    @property
    def visible(self) -> str:
        return " ".join(" ".join(self.text).split())

    def loads(self) -> list[tuple[str, str]]:
        """(what, url) for every script, stylesheet, image, embed, object, frame and media source."""
        out = []
        for tag, attrs in self.elements:
            if tag == "script" and attrs.get("src"):
                out.append(("script", attrs["src"]))
            elif tag == "link" and attrs.get("href") and set((attrs.get("rel") or "").split()) & {
                    "stylesheet", "preload", "modulepreload", "icon", "prefetch"}:
                out.append(("link", attrs["href"]))
            elif tag in {"img", "embed", "iframe", "source", "audio", "video"} and attrs.get("src"):
                out.append((tag, attrs["src"]))
            elif tag == "object" and attrs.get("data"):
                out.append((tag, attrs["data"]))
        return out


@functools.cache
def page(name: str) -> Page:
    chapter = next(c for c in chapters() if c.name == name)
    return Page(BOOK / chapter.page)


def is_external(url: str) -> bool:
    return bool(re.match(r"^(https?:)?//", url.strip(), re.I))


def test_every_page_exists(book):
    missing = [str(c.page) for c in chapters() if not (book / c.page).is_file()]
    assert not missing, f"pages not rendered: {missing}"


@pytest.mark.parametrize("name", CHAPTER_IDS)
def test_page_text_is_fully_resolved(book, name):
    p = page(name)
    assert "{{<" not in p.raw, "a literal shortcode '{{<' is in the page"
    text = p.visible
    unresolved = re.findall(r".{0,40}(?:\?@|\?\?).{0,40}", text)
    assert not unresolved, f"unresolved cross-references: {unresolved}"
    raw_tex = re.findall(r".{0,30}(?:\\[A-Za-z]+|\\[()\[\]]|\$\$).{0,30}", text)
    assert not raw_tex, f"raw TeX in the visible text (math not converted): {raw_tex}"


@pytest.mark.parametrize("name", CHAPTER_IDS)
def test_page_loads_nothing_from_outside_the_site(book, name):
    external = [f"<{what}> {url}" for what, url in page(name).loads() if is_external(url)]
    assert not external, "fetched from outside _book/:\n" + "\n".join(external)


def test_stylesheets_import_nothing_from_outside_the_site(book):
    remote = re.compile(r"@import\s*(?:url\()?\s*['\"]?(?:https?:)?//|url\(\s*['\"]?(?:https?:)?//", re.I)
    offending = [f"{css.relative_to(book)}: {m.group(0)}" for css in book.rglob("*.css")
                 for m in remote.finditer(css.read_text(encoding="utf-8", errors="replace"))]
    assert not offending, "stylesheets that fetch from outside _book/ (web fonts?):\n" + "\n".join(offending)


@pytest.mark.parametrize("name", CHAPTER_IDS)
def test_every_local_target_exists(book, name):
    p = page(name)
    missing = []
    for what, url in p.loads():
        if is_external(url) or url.startswith("data:"):
            continue
        target = (p.path.parent / urlsplit(url).path).resolve()
        if not target.is_file():
            missing.append(f"<{what}> {url}")
    assert not missing, "targets missing from _book/:\n" + "\n".join(missing)


def test_sidebar_lists_every_chapter_by_title(book):
    sidebar = Page(book / "index.html").raw
    sidebar = sidebar[sidebar.index('id="quarto-sidebar"'):]
    entries = []
    for href, inner in re.findall(r'<a href="\./([^"]+)" class="sidebar-item-text[^"]*">(.*?)</a>', sidebar, re.S):
        entries.append((href, " ".join(re.sub(r"<[^>]+>", " ", inner).replace("&nbsp;", " ").split())))
    expected = [(str(c.page), c.heading().replace("'", "\u2019")) for c in chapters()]  # Quarto's smart quotes
    assert entries == expected, f"sidebar entries {entries}, expected {expected}"


@pytest.mark.parametrize("name", CHAPTER_IDS)
@pytest.mark.parametrize("kind, word", [("fig", "Figure"), ("tbl", "Table")])
def test_floats_are_numbered_in_order(book, name, kind, word):
    """Every figure (table) the chapter defines is captioned on its page, numbered chapter.1, .2, ... (1, 2, ... in
    the unnumbered abstract)."""
    chapter = next(c for c in chapters() if c.name == name)
    expected = float_labels(expand(REPO / chapter.source), kind)
    raw = page(name).raw
    found = re.findall(rf'<figcaption[^>]*quarto-float-caption quarto-float-{kind}" id="({kind}-[\w-]+?)-caption'
                       rf'[^"]*">\s*{word}&nbsp;([A-Z\d.]+)', raw)
    assert [label for label, _ in found] == expected, "captions on the page differ from the labels in the source"
    prefix = "" if chapter.number is None else f"{chapter.number}."  # the abstract's figure is "Figure 1"
    assert [n for _, n in found] == [f"{prefix}{i}" for i in range(1, len(found) + 1)]


# --- HTML, in Chromium --------------------------------------------------------------------------

@dataclass
class Visit:
    console_errors: list[str] = field(default_factory=list)
    failed: list[str] = field(default_factory=list)        # local requests that failed (HTTP >= 400)
    blocked: list[str] = field(default_factory=list)       # requests for anything outside _book/
    math: int = 0                                           # <math> elements
    math_drawn: int = 0                                     # ... laid out with a non-empty box
    plots: dict[str, int] = field(default_factory=dict)    # plotly div id -> drawn svg/canvas children
    cited: list[tuple[str, str, str]] = field(default_factory=list)  # (data-key, title, href) of each a.cited
    captions: dict[str, list[str]] = field(default_factory=dict)  # float id -> hrefs of its caption's provenance links
    ids: set[str] = field(default_factory=set)             # the ids of the page's elements
    rows: dict[str, tuple[str, str]] = field(default_factory=dict)  # tr id -> (its first cell, its section's id)
    quiet: dict[str, dict] = field(default_factory=dict)  # "rest", "hover", "focus" -> a cited number's style then
    seconds: float = 0.0


class QuietHandler(SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def browser_visits(book, tmp_path_factory) -> dict[str, Visit]:
    """Each page loaded once in headless Chromium, from a local server of _book/; a screenshot each."""
    if CHROMIUM is None:
        pytest.skip("no Chromium on PATH (Debian: apt-get install chromium; or set CHROMIUM=/path)")
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        pytest.skip("Python playwright is not installed (pip install -e '.[test]')")
    server = ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(QuietHandler, directory=str(book)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    origin = f"http://127.0.0.1:{server.server_port}"
    SCREENSHOTS.mkdir(exist_ok=True)
    visits: dict[str, Visit] = {}
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900}, service_workers="block")

            def route(r):
                if r.request.url.startswith(origin + "/") or r.request.url.startswith("data:"):
                    r.continue_()
                else:
                    visits[current].blocked.append(r.request.url)
                    r.abort("blockedbyclient")

            context.route("**/*", route)
            for current, page_path in [*((c.name, c.page) for c in chapters()), (LISTING, LISTING_PAGE)]:
                visit = Visit()
                visits[current] = visit
                start = time.monotonic()
                tab = context.new_page()
                tab.on("console", lambda m, v=visit: v.console_errors.append(m.text) if m.type == "error" else None)
                tab.on("pageerror", lambda e, v=visit: v.console_errors.append(f"uncaught: {e}"))
                tab.on("response", lambda r, v=visit: v.failed.append(f"{r.status} {r.url}") if r.status >= 400 else None)
                tab.goto(f"{origin}/{page_path.as_posix()}", wait_until="load")
                if tab.query_selector(".plotly-graph-div"):
                    try:  # after 'load', plotly.js has either run or failed to load
                        tab.wait_for_function(
                            "typeof Plotly === 'undefined' || [...document.querySelectorAll('.plotly-graph-div')]"
                            ".every(d => d.querySelector('svg.main-svg, canvas'))", timeout=20_000)
                    except Exception:  # noqa: BLE001 - reported by the test through visit.plots
                        pass
                tab.wait_for_timeout(300)
                visit.math, visit.math_drawn = tab.evaluate(
                    "() => { const m = [...document.querySelectorAll('math')];"
                    " return [m.length, m.filter(e => { const r = e.getBoundingClientRect();"
                    " return r.width > 0 && r.height > 0; }).length]; }")
                visit.plots = tab.evaluate(
                    "() => Object.fromEntries([...document.querySelectorAll('.plotly-graph-div')]"
                    ".map(d => [d.id, d.querySelectorAll('svg.main-svg, canvas').length]))")
                visit.cited = [tuple(c) for c in tab.evaluate(
                    "() => [...document.querySelectorAll('a.cited')].map(a => [a.dataset.key, a.title,"
                    " a.getAttribute('href')])")]
                visit.captions = tab.evaluate(
                    "() => Object.fromEntries([...document.querySelectorAll('figcaption.quarto-float-caption')]"
                    ".map(c => [c.id.replace(/-caption-.*$/, ''), [...c.querySelectorAll('.provenance-link a')]"
                    ".map(a => a.getAttribute('href'))]))")
                visit.ids = set(tab.evaluate("() => [...document.querySelectorAll('[id]')].map(e => e.id)"))
                visit.quiet = cited_styles(tab)
                visit.rows = {k: tuple(v) for k, v in tab.evaluate(
                    "() => Object.fromEntries([...document.querySelectorAll('tr[id]')].map(r => [r.id,"
                    " [r.cells[0].innerText.trim(), (r.closest('section[id]') || {}).id || '']]))").items()}
                # the provenance listing is one long page (every cited number): its first screen is what a person
                # looks at, and a full-page capture of it took ~30 s
                tab.screenshot(path=str(SCREENSHOTS / f"{current}.png"), full_page=current != LISTING,
                               timeout=120_000)
                tab.close()
                visit.seconds = time.monotonic() - start
            browser.close()
    finally:
        server.shutdown()
    return visits


STYLE = ("() => { const a = document.querySelector('main p a.cited'); const s = getComputedStyle(a);"
         " return {decoration: s.textDecorationLine, color: s.color, parent: getComputedStyle(a.parentElement).color,"
         " outline: s.outlineStyle + ' ' + s.outlineWidth}; }")


def cited_styles(tab) -> dict[str, dict]:
    """The computed style of the page's first cited number in a paragraph, at rest, hovered and focused by the
    keyboard (Tab until it has the focus: :focus-visible applies to keyboard focus only); empty without one."""
    if not tab.query_selector("main p a.cited"):
        return {}
    styles = {"rest": tab.evaluate(STYLE)}
    tab.hover("main p a.cited")
    styles["hover"] = tab.evaluate(STYLE)
    tab.mouse.move(0, 0)
    tab.evaluate("() => { const a = document.querySelector('main p a.cited'); const before = document.createElement("
                 "'a'); before.href = '#'; before.id = 'focus-probe'; a.before(before); before.focus(); }")
    tab.keyboard.press("Tab")
    focused = tab.evaluate("() => document.activeElement === document.querySelector('main p a.cited')")
    styles["focus"] = tab.evaluate(STYLE) if focused else {}
    tab.evaluate("() => document.getElementById('focus-probe').remove()")
    return styles


def real_failures(visit: Visit) -> tuple[list[str], list[str]]:
    """Console errors and failed requests, less a missing /favicon.ico (the browser asks for one)."""
    failed = [f for f in visit.failed if not f.endswith("/favicon.ico")]
    errors = list(visit.console_errors)
    for _ in range(len(visit.failed) - len(failed)):
        for i, e in enumerate(errors):
            if e.startswith("Failed to load resource: the server responded with a status of 404"):
                del errors[i]
                break
    return errors, failed


@pytest.mark.parametrize("name", [*CHAPTER_IDS, LISTING])
def test_page_loads_in_chromium_without_errors(browser_visits, name):
    visit = browser_visits[name]
    errors, failed = real_failures(visit)
    problems = [f"console: {e}" for e in errors] + [f"request: {f}" for f in failed] + \
               [f"blocked, outside _book/: {b}" for b in visit.blocked]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("name", CHAPTER_IDS)
def test_math_is_typeset(browser_visits, name):
    chapter = next(c for c in chapters() if c.name == name)
    has_math = bool(re.search(r"(?<!\\)\$", expand(REPO / chapter.source)))
    visit = browser_visits[name]
    if has_math:
        assert visit.math > 0, "the source has math but the page has no MathML"
    assert visit.math_drawn == visit.math, f"{visit.math - visit.math_drawn} of {visit.math} formulas not laid out"


def test_interactive_helix_is_drawn_by_plotly(browser_visits):
    plots = browser_visits["low-rank-helix"].plots
    assert "helix-3d-gpt2" in plots, f"no plotly figure 'helix-3d-gpt2' on the page (found {list(plots)})"
    assert plots["helix-3d-gpt2"] > 0, "the helix's plot element has no SVG or canvas: plotly did not draw it"


PROVENANCE = "provenance"
"""The generated appendix (analyses/provenance): on the web it points to the listing."""


def _provenance_target(href: str, visits: dict[str, Visit]) -> bool:
    """A link to an entry of the provenance listing (a figure's caption links there)."""
    path, _, anchor = href.partition("#")
    return path.endswith(f"{LISTING}.html") and anchor.startswith("prov-") and anchor in visits[LISTING].ids


def _lands_on_row(key: str, href: str, visits: dict[str, Visit]) -> str | None:
    """Why a cited number's link does not land on its key's own row of the provenance listing (None if it does):
    the target must be a table row whose first cell is the key's name, in the section of the key's entry."""
    path, _, anchor = href.partition("#")
    if not path.endswith(f"{LISTING}.html"):
        return f"{key} links to {href}, not to the provenance listing"
    if anchor not in visits[LISTING].rows:
        return f"{key} links to #{anchor}, which is no row of the provenance listing"
    scope, analysis, name = key.split(".", 2)
    cell, section = visits[LISTING].rows[anchor]
    entry = f"prov-{scope}-{analysis}".replace("_", "-")
    if (cell, section) != (name, entry):
        return f"{key} lands on the row {cell!r} of section #{section}, not on {name!r} of #{entry}"
    return None


@pytest.mark.parametrize("name", [n for n in CHAPTER_IDS if n != PROVENANCE])
def test_every_cited_number_links_to_its_own_row(browser_visits, name):
    """Every key the chapter cites in its text, tables and formulas is a link on the page: its tooltip is the
    printed digits with their accuracy in words, as report/provenance.json gives it (no key, no unrounded value),
    and it lands on the key's own row of the provenance page (a formula citing several keys, on its first key's
    row)."""
    chapter = next(c for c in chapters() if c.name == name)
    source = re.sub(r'fig-alt="[^"]*"', "", expand(REPO / chapter.source))  # alt text holds no links
    expected = set(VAR.findall(source))
    links = browser_visits[name].cited
    found = {key for keys, _, _ in links for key in keys.split()}
    assert expected <= found, f"cited without a link: {sorted(expected - found)[:10]}"
    tooltips = {key: entry["title"] for key, entry in provenance_data()["keys"].items()}
    for keys, title, href in links:
        assert title == "\n".join(tooltips[k] for k in keys.split()), f"{keys}: tooltip {title!r}"
        assert "declared accuracy: ±" not in title and keys.split()[0] not in title, f"{keys}: tooltip {title!r}"
    wrong = [why for keys, _, href in links if (why := _lands_on_row(keys.split()[0], href, browser_visits))]
    assert not wrong, "\n".join(wrong[:10])


@functools.cache
def provenance_data() -> dict:
    import json
    return json.loads((REPO / "report" / "provenance.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("name", [n for n in CHAPTER_IDS if n != PROVENANCE])
def test_cited_numbers_are_quiet_at_rest(browser_visits, name):
    """Issue 46: a cited number looks like text until hovered or focused: at rest no underline and the colour of
    the text around it; hovered, underlined; focused from the keyboard, underlined and outlined."""
    quiet = browser_visits[name].quiet
    if not quiet:
        pytest.skip("no cited number in a paragraph of this page")
    rest, hover, focus = quiet["rest"], quiet["hover"], quiet["focus"]
    assert rest["decoration"] == "none" and rest["color"] == rest["parent"], f"at rest: {rest}"
    assert "underline" in hover["decoration"], f"hovered: {hover}"
    assert focus, "the keyboard does not reach the cited number"
    assert "underline" in focus["decoration"] and not focus["outline"].startswith("none"), f"focused: {focus}"


@pytest.mark.parametrize("name", [n for n in CHAPTER_IDS if n != PROVENANCE])
def test_page_prints_negative_numbers_with_a_minus_sign(book, name):
    """Every printed negative number, cited or in a table from the cache, has a real minus sign (U+2212), not a
    hyphen (report/_scripts/provenance-pages.lua); code is not visible text here."""
    hyphens = [page(name).visible[max(0, m.start() - 30):m.end() + 10] for m in MINUS.finditer(page(name).visible)]
    assert not hyphens, f"{len(hyphens)} hyphens for minus signs: {hyphens[:8]}"


@pytest.mark.parametrize("name", [n for n in CHAPTER_IDS if n != PROVENANCE])
def test_page_names_no_model_by_its_id(book, name):
    """No model id in the visible text (the notes of skipped analyses included, which provenance.lua puts in
    words): the book says "GPT-2" and "MiniLM", not "gpt2" or "minilm"."""
    text = page(name).visible
    found = [text[max(0, m.start() - 40):m.end() + 20] for m in MODEL_IDS.finditer(text)]
    assert not found, f"model ids in the visible text: {found[:8]}"


@pytest.mark.parametrize("name", [n for n in CHAPTER_IDS if n != PROVENANCE])
def test_every_cached_figure_caption_links_to_its_provenance(browser_visits, name):
    chapter = next(c for c in chapters() if c.name == name)
    text = expand(REPO / chapter.source)
    cached = [label for label in float_labels(text, "fig")
              if re.search(rf"_cache/[^)]*\)\{{#{label}\b|#{label}\b[^\n]*\n(?:(?!\n:::).)*_cache/", text, re.S)]
    captions = browser_visits[name].captions
    missing = [label for label in cached if not captions.get(label)]
    assert not missing, f"figures whose caption has no provenance link: {missing}"
    wrong = [href for label in cached for href in captions[label] if not _provenance_target(href, browser_visits)]
    assert not wrong, f"caption links to no entry of the provenance page: {wrong}"


def test_every_page_has_a_screenshot(browser_visits):
    missing = [c.name for c in chapters() if not (SCREENSHOTS / f"{c.name}.png").is_file()]
    assert not missing, f"no screenshot for {missing}"


# --- the PDF ----------------------------------------------------------------------------------

def poppler(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        pytest.skip(f"{tool} is not on PATH (Debian: apt-get install poppler-utils)")
    return path


@pytest.fixture(scope="session")
def pdf(book) -> Path:
    pdfs = list(book.glob("*.pdf"))
    assert len(pdfs) == 1, f"expected one PDF in _book/, found {pdfs}"
    return pdfs[0]


@pytest.fixture(scope="session")
def pdf_pages(pdf) -> list[str]:
    """The text of each page, whitespace collapsed."""
    out = subprocess.run([poppler("pdftotext"), "-enc", "UTF-8", str(pdf), "-"], capture_output=True,
                         text=True, check=True).stdout
    return [" ".join(p.replace("\u2019", "'").split()) for p in out.split("\f")[:-1]]  # a curly quote as typed


@pytest.fixture(scope="session")
def pdf_chapters(pdf_pages) -> dict[str, str]:
    """Each chapter's text: from the page its heading opens to the page before the next one's."""
    starts = {}
    for chapter in chapters():
        pages = [i for i, text in enumerate(pdf_pages)  # not a page of the table of contents (dot leaders)
                 if text.startswith(chapter.heading()) and ". . . . ." not in text]
        assert pages, f"no page opens with the heading {chapter.heading()!r}"
        starts[chapter.name] = pages[0]
    order = sorted(starts.items(), key=lambda kv: kv[1])
    assert [n for n, _ in order] == CHAPTER_IDS, f"chapters out of order in the PDF: {order}"
    ends = [s for _, s in order[1:]] + [len(pdf_pages)]
    return {name: " ".join(pdf_pages[s:e]) for (name, s), e in zip(order, ends)}


WORD = re.compile(r'<word xMin="([\d.]+)" yMin="([\d.]+)" xMax="([\d.]+)" yMax="([\d.]+)">([^<]*)</word>')


@pytest.fixture(scope="session")
def pdf_words(pdf) -> list[list[tuple[float, float, float, float, str]]]:
    """Each page's words with their boxes (x0, y0, x1, y1, text), in points from the top left."""
    out = subprocess.run([poppler("pdftotext"), "-bbox", str(pdf), "-"], capture_output=True, text=True,
                         check=True).stdout
    return [[(float(a), float(b), float(c), float(d), unescape(w)) for a, b, c, d, w in WORD.findall(page)]
            for page in out.split("<page ")[1:]]


def test_pdf_text_stays_in_the_text_block(pdf_words):
    """No table wider than the text block, no figure or caption running into the page number."""
    left = Counter(round(w[0]) for page in pdf_words for w in page).most_common(1)[0][0]
    right = Counter(round(w[2]) for page in pdf_words for w in page).most_common(1)[0][0]
    outside = []
    for number, page in enumerate(pdf_words, 1):
        if not page:
            continue
        footer = max(page, key=lambda w: w[3])  # the lowest word: the page number, where there is one
        for w in page:
            if w[0] < left - 6 or w[2] > right + 6:
                outside.append(f"page {number}: {w[4]!r} outside the margins ({w[0]:.0f}-{w[2]:.0f}pt, "
                               f"text block {left}-{right}pt)")
            elif w is not footer and footer[4].isdigit() and w[3] > footer[1] - 8:
                outside.append(f"page {number}: {w[4]!r} runs into the page number")
    assert not outside, "\n".join(outside[:30])


def test_pdf_page_count_is_sane(pdf_pages):
    assert 40 <= len(pdf_pages) <= 240, f"{len(pdf_pages)} pages"  # ten chapters, three appendices


PRINTED_SYMBOLS = "στλκγΣ≥≤→‖²√×≈"
"""Symbols the chapters and tables print outside math, which the PDF's text font (Latin Modern) lacks: the header
falls back to CMU Serif, STIX Two and DejaVu Sans for them, and \\tracinglostchars=3 makes a missing one an error."""


def test_pdf_prints_every_symbol_the_text_uses(pdf_pages):
    """No glyph is dropped: the symbols the text uses are in the PDF's text, and no replacement character is."""
    text = "".join(pdf_pages)
    assert "\ufffd" not in text, "a replacement character (a glyph no font had) is printed"
    assert not [c for c in PRINTED_SYMBOLS if c not in text], "symbols missing from the PDF's text"


def test_the_pdf_header_makes_a_missing_glyph_an_error():
    header = yaml.safe_load((REPO / "_quarto.yml").read_text())["format"]["pdf"]["include-in-header"]["text"]
    assert "\\tracinglostchars=3" in header and "fallback=bookfallback" in header


def test_pdf_fonts_are_all_embedded(pdf):
    out = subprocess.run([poppler("pdffonts"), str(pdf)], capture_output=True, text=True, check=True).stdout
    rows = out.splitlines()[2:]
    assert rows, "pdffonts lists no fonts"
    # columns: name type encoding emb sub uni object-id; the name may hold spaces, so count from the right
    not_embedded = [row for row in rows if row.split()[-5] != "yes"]
    assert not not_embedded, "fonts not embedded:\n" + "\n".join(not_embedded)


@pytest.mark.parametrize("name", CHAPTER_IDS)
@pytest.mark.parametrize("kind, word", [("fig", "Figure"), ("tbl", "Table")])
def test_pdf_places_every_float(pdf_chapters, name, kind, word):
    """Each chapter's PDF text holds one caption per figure (table) of the source, numbered in order."""
    chapter = next(c for c in chapters() if c.name == name)
    expected = len(float_labels(html_only(expand(REPO / chapter.source)), kind))
    if chapter.number is None:  # the unnumbered abstract: "Figure 1:"
        numbers = sorted({int(i) for i in re.findall(rf"\b{word} (\d+):", pdf_chapters[name])})
    else:
        captions = re.findall(rf"\b{word} ([A-Z]|\d+)\.(\d+):", pdf_chapters[name])
        numbers = sorted({int(i) for c, i in captions if c == str(chapter.number)})
    assert numbers == list(range(1, expected + 1)), f"{word.lower()} captions {numbers}, expected 1..{expected}"


VAR = re.compile(r"\{\{<\s*var\s+([\w.]+)\s*>\}\}")
NUMBER = re.compile(r"[-+]?[\d,]*\.?\d+(e[-+]?\d+)?%?")
"""A cited value that is a number as the text prints it: 12, 0.912, 1,024, 90.4%, 6.68e5."""


def cited(text: str) -> list[tuple[str, object]]:
    """(key, value) of every {{< var >}} in a chapter's text, values as _variables.yml holds them."""
    variables = yaml.safe_load((REPO / "_variables.yml").read_text())
    out = []
    for key in VAR.findall(text):
        node = variables
        for part in key.split("."):
            node = node.get(part) if isinstance(node, dict) else None
        out.append((key, node))
    return out


@pytest.mark.parametrize("name", CHAPTER_IDS)
def test_scientific_values_print_as_written(book, name):
    """A value such as 6.68e5 reaches the page as 6.68e5, not as a number Quarto re-formatted (668000) (with a real
    minus sign: 2.54e−41)."""
    chapter = next(c for c in chapters() if c.name == name)
    text = page(name).visible
    wrong = [f"{key} = {value}" for key, value in cited(html_only((REPO / chapter.source).read_text()))
             if isinstance(value, str) and re.fullmatch(r"[-+]?\d+(\.\d+)?e[-+]?\d+", value)
             and printed(value) not in text]
    assert not wrong, "cited values missing from the page as written:\n" + "\n".join(wrong)


def spot_checks(per_chapter: int = 2) -> list[tuple[str, str, str]]:
    """(chapter, key, value): the first cited numbers of each numbered chapter, outside math and tables, as printed
    (a real minus sign)."""
    picks = []
    for chapter in chapters():
        if chapter.number is None:
            continue
        text = html_only((REPO / chapter.source).read_text())
        text = re.sub(r"\$\$.*?\$\$|(?<!\\)\$[^$\n]+?\$|^\|.*$", "", text, flags=re.S | re.M)
        chosen = []
        for key, value in cited(text):
            if isinstance(value, str) and NUMBER.fullmatch(value) and len(value) >= 3 and value not in chosen:
                chosen.append(value)
                picks.append((chapter.name, key, printed(value)))
            if len(chosen) == per_chapter:
                break
    return picks


@pytest.mark.parametrize("name, key, value", spot_checks(), ids=lambda v: str(v))
def test_pdf_prints_cited_numbers_where_cited(pdf_chapters, name, key, value):
    assert " ".join(value.split()) in pdf_chapters[name], f"{key} = {value!r} not in the PDF text of {name}"


@pytest.fixture(scope="session")
def pdf_layout_lines(pdf) -> list[tuple[int, str]]:
    """(page number, line) of the PDF's text laid out as printed, so that a table row stays one line."""
    out = subprocess.run([poppler("pdftotext"), "-layout", "-enc", "UTF-8", str(pdf), "-"], capture_output=True,
                         text=True, check=True).stdout
    return [(number, line) for number, page in enumerate(out.split("\f"), 1) for line in page.splitlines()]


def _column_lines(words: list[tuple[float, float, float, float, str]]) -> list[str]:
    """A two-column page's lines in reading order, the left column's first: words grouped by column (a word
    across the middle belongs to neither) and by baseline, joined left to right."""
    if not words:
        return []
    middle = (min(w[0] for w in words) + max(w[2] for w in words)) / 2
    out = []
    for column in ([w for w in words if w[2] <= middle], [w for w in words if w[0] >= middle]):
        lines: list[list] = []
        for w in sorted(column, key=lambda w: (w[3], w[0])):
            if lines and abs(lines[-1][0][3] - w[3]) < 2:
                lines[-1].append(w)
            else:
                lines.append([w])
        out += [" ".join(w[4] for w in sorted(line, key=lambda w: w[0])) for line in lines]
    return out


@pytest.fixture(scope="session")
def pdf_provenance(pdf_pages, pdf_words) -> tuple[int, list[str]]:
    """The provenance appendix's first page (1-based) and its listing's lines, in reading order; a key broken
    after an underscore, a key whose value went to the next line, and a page list that went on to the next
    line, each joined into one line."""
    heading = next(c for c in chapters() if c.name == PROVENANCE).heading()
    start = next(i for i, text in enumerate(pdf_pages) if text.startswith(heading) and ". . . . ." not in text)
    lines: list[str] = []
    for page in pdf_words[start:]:
        for line in _column_lines(page):
            lone_key = re.fullmatch(r"[a-z][a-z0-9_]*", lines[-1]) and not re.fullmatch(r"[0-9a-f]{16}", lines[-1]) \
                if lines else False
            if lines and (lines[-1].endswith(("_", ",")) or lone_key):
                lines[-1] += ("" if lines[-1].endswith("_") else " ") + line
            else:
                lines.append(line)
    return start + 1, lines


@pytest.mark.parametrize("name, key, value", spot_checks(), ids=lambda v: str(v))
def test_pdf_provenance_lists_the_pages_that_print_each_number(pdf_pages, pdf_chapters, pdf_provenance, name,
                                                                key, value):
    """The appendix's line of a cited number (key, printed value, declared accuracy, pages), under its entry's
    line, names pages that print the value."""
    assert "??" not in pdf_chapters[PROVENANCE], "an unresolved page reference in the provenance appendix"
    _, lines = pdf_provenance
    scope, analysis, field = key.split(".", 2)
    entry = next((i for i, line in enumerate(lines) if line.split(" ")[0] == f"{scope}.{analysis}"), None)
    assert entry is not None, f"no entry '{scope}.{analysis}' in the provenance appendix"
    row = re.compile(rf"^{re.escape(field)} {re.escape(value)} (?:±\S+ rel\.|±\S+|exact|bound|text)"
                     rf"(?: or ±\S+)? ((?:\d+, )*\d+)$")
    rows = [m for line in lines[entry + 1:] if (m := row.match(line))]
    assert rows, f"no line '{field} {value} <accuracy> <pages>' under '{scope}.{analysis}' in the appendix"
    pages = [int(p) for p in rows[0].group(1).split(", ")]
    assert all(value in pdf_pages[p - 1] for p in pages), f"{key}: pages {pages}, not all print {value!r}"


def test_pdf_provenance_is_compact(pdf_pages, pdf_provenance):
    """The appendix lists what a reviewer needs in print, in a few pages, without a table-of-contents line per
    analysis: one line per cited key (about 1,400 of them) in two columns."""
    start, _ = pdf_provenance
    pages = len(pdf_pages) - start + 1
    assert pages <= 20, f"the provenance appendix takes {pages} pages"
    contents = " ".join(text for text in pdf_pages[:start] if ". . . . ." in text)
    assert not re.search(r"\b(gpt2|minilm|common) · ", contents), "the table of contents lists provenance entries"


@pytest.fixture(scope="session")
def pdf_outline(pdf) -> list[tuple[str, int]]:
    """The PDF's top-level bookmarks (title, first page), from poppler's XML outline; nested ones flattened
    after their parent (the appendices sit under one 'Appendices' bookmark)."""
    out = subprocess.run([poppler("pdftohtml"), "-xml", "-i", "-q", "-stdout", str(pdf)], capture_output=True,
                         text=True, check=True).stdout
    if "<outline>" not in out:
        pytest.fail("the PDF has no outline (bookmarks)")
    import xml.etree.ElementTree as ElementTree
    outline = ElementTree.fromstring(out[out.index("<outline>"):out.rindex("</outline>") + len("</outline>")])
    items, children = [], list(outline)
    for k, el in enumerate(children):
        if el.tag == "item":
            items.append((" ".join("".join(el.itertext()).split()), int(el.get("page"))))
            if items[-1][0] == "Appendices" and k + 1 < len(children) and children[k + 1].tag == "outline":
                items += [(" ".join("".join(c.itertext()).split()), int(c.get("page")))
                          for c in children[k + 1] if c.tag == "item"]
    return items


def _plain(title: str) -> str:
    return re.sub(r"[^a-z0-9]+", "", re.sub(r"[*_`$\\]", "", title.lower()))


MAIN_TEXT_PAGES = 25
"""The budget of the main text (issue 46, after issue 31's 40): from the abstract to the end of the last main
chapter."""


def test_pdf_main_text_within_its_page_budget(pdf_outline):
    """The main text, from the first chapter's first page to the page before what follows the last numbered
    chapter (the references, or the first appendix), is at most MAIN_TEXT_PAGES pages. Pages from the PDF's
    outline; the message gives each chapter's count."""
    book = chapters()
    numbered = [c for c in book if isinstance(c.number, int)]
    starts = [page for _, page in pdf_outline]
    found = {}
    for chapter in book[:book.index(numbered[-1]) + 1]:
        at = [k for k, (title, _) in enumerate(pdf_outline) if _plain(title) == _plain(chapter.title)]
        assert at, f"no bookmark {chapter.title!r} in the PDF's outline: {[t for t, _ in pdf_outline]}"
        found[chapter] = at[0]
    last = found[numbered[-1]]
    end = next((page for page in starts[last + 1:] if page > starts[last]), None)
    assert end is not None, "nothing after the last chapter in the outline"
    first = pdf_outline[found[book[0]]][1]
    counts = []
    chosen = sorted(found.items(), key=lambda kv: kv[1])
    for (chapter, k), following in zip(chosen, [*[pdf_outline[k][1] for _, k in chosen[1:]], end]):
        counts.append(f"{chapter.heading()}: {following - pdf_outline[k][1]}")
    pages = end - first
    assert pages <= MAIN_TEXT_PAGES, (f"the main text takes {pages} pages (pp. {first}-{end - 1}), over its "
                                      f"{MAIN_TEXT_PAGES}: " + "; ".join(counts))


def test_pdf_prints_negative_numbers_with_a_minus_sign(pdf_chapters):
    """In print too, every negative number has a real minus sign (U+2212), not a hyphen (the provenance appendix's
    commands and hashes aside)."""
    hyphens = {name: [text[max(0, m.start() - 30):m.end() + 10] for m in MINUS.finditer(text)]
               for name, text in pdf_chapters.items() if name != PROVENANCE}
    hyphens = {name: found for name, found in hyphens.items() if found}
    assert not hyphens, "hyphens for minus signs in the PDF:\n" + "\n".join(f"{n}: {f[:5]}" for n, f in hyphens.items())


def test_latex_reports_no_missing_character(render):
    """No glyph is missing: LaTeX's "Missing character" lines, in the render's output or in a log it kept (the
    header makes one an error, \\tracinglostchars=3, so the render would fail first)."""
    logs = [render.log] + [path.read_text(errors="replace") for path in [*REPO.glob("*.log"), *BOOK.glob("*.log")]]
    missing = [line.strip() for log in logs for line in log.splitlines() if "Missing character" in line]
    assert not missing, "\n".join(missing[:20])
