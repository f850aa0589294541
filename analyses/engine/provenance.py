"""Where every cited number comes from: from a `{{< var >}}` key to the analysis, code and inputs that made it.

Built from the verified cache and the registry, never typed. `records` resolves every key of the cache;
`write` generates the book's provenance appendix (`report/provenance.qmd`: the PDF's listing), the web's listing
(`report/provenance-listing.html`, plain HTML that Quarto serves without rendering it) and the data its Lua filter
(`report/_scripts/provenance.lua`) reads to turn each cited number into a link (`report/provenance.json`);
`describe` is what `python -m analyses explain KEY` prints. A package of its own, outside the engine: it
shapes no cached byte, so it is in no analysis's code hash.
"""

from __future__ import annotations

import difflib
import hashlib
import html
import inspect
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import NamedTuple

import yaml

from analyses.engine.cache import CACHE_DIR, Cache, atomic_write
from analyses.engine.registry import all_analyses
from analyses.engine.report import FIGURE, _text_with_includes
from analyses.engine.sources import MODELS, shape_from_config

PAGE = Path("report") / "provenance.qmd"
DATA = Path("report") / "provenance.json"
LISTING = Path("report") / "provenance-listing.html"
"""The web's listing of every cited key (plain HTML, which `_quarto.yml` serves as a resource)."""
STAMP = Path(CACHE_DIR) / ".provenance-stamp"
"""The digest of what the generated files were last built from, and of the files as written (`digest`; not
committed): the pre-render step skips the rebuild while it matches."""
VAR = re.compile(r"\{\{<\s*var\s+([\w.-]+)\s*>\}\}")
ENTRY_KEYS = ("status", "reason")
"""Keys of `_variables.yml` that an entry's manifest, not its numbers.json, holds."""


@dataclass(frozen=True)
class Entry:
    """One cache entry (or a model's shape, name "model"): what computed it, from what."""

    scope: str
    name: str
    title: str
    function: str          # module.qualname
    file: str              # relative to the repository
    line: int
    code: str              # the code hash the manifest records ("" for a model's shape)
    params: dict
    inputs: dict[str, str]  # file -> sha256
    libraries: dict[str, str]
    status: str
    reason: str | None = None

    @property
    def anchor(self) -> str:
        return f"prov-{self.scope}-{self.name}".replace("_", "-")

    @property
    def label(self) -> str:
        return f"{self.scope}/{self.name}"

    @property
    def where(self) -> str:
        return f"{self.file}:{self.line}"

    def commands(self, key: str | None = None) -> list[str]:
        """The commands that recompute it: `explain --recompute` for a key, `verify` for the entry."""
        model = next((m.name for m in MODELS.values() if m.slug == self.scope), None)
        verify = "python -m analyses verify" + ("" if self.name == "model" else f" {self.name}") + (
            f" --model {model}" if model else "")
        return ([f"python -m analyses explain {key} --recompute"] if key else []) + [verify]


@dataclass(frozen=True)
class Cited:
    """One key of `_variables.yml`: its printed text, unrounded value, declared accuracy and entry."""

    key: str
    entry: Entry
    text: str
    value: object
    description: str = ""
    accuracy: dict | None = None

    @property
    def accuracy_text(self) -> str:
        return accuracy_text(self.accuracy)


def accuracy_text(accuracy: dict | None) -> str:
    """A declared accuracy in words: "exact", "±1e-09 relative", "±0.001", or both bounds."""
    if not accuracy:
        return "none: text, printed as computed"
    if str(accuracy.get("basis", "")).startswith("a bound"):
        return "a bound, not a measurement: the value stays below it"
    rel, abs_ = accuracy.get("rel") or 0, accuracy.get("abs") or 0
    parts = [f"±{rel:.3g} relative"] * bool(rel) + [f"±{abs_:.3g}"] * bool(abs_)
    return " or ".join(parts) if parts else "exact"


def _code(analysis) -> tuple[str, str, int]:
    fn = analysis.compute
    code = getattr(inspect.unwrap(fn), "__code__", None)  # its first line without tokenising the module (`status`)
    line = code.co_firstlineno if code is not None else inspect.getsourcelines(fn)[1]
    module = inspect.getmodule(fn)
    return f"{fn.__module__}.{fn.__qualname__}", module.__name__.replace(".", "/") + ".py", line


def records(root: Path) -> tuple[dict[str, Entry], dict[str, Cited]]:
    """Every verified cache entry and every key `_variables.yml` holds, resolved to its entry."""
    from analyses.engine.pipeline import cited_entries  # matplotlib with it: only when needed

    cache, registry = Cache.at(root), all_analyses()
    entries: dict[str, Entry] = {}
    cited: dict[str, Cited] = {}
    shapes: dict[str, list[tuple[dict, dict]]] = {}
    for scope, name in cited_entries(cache):
        if cache.unverifiable(scope, name):
            continue
        manifest, analysis = cache.manifest(scope, name), registry[name]
        function, file, line = _code(analysis)
        inputs = manifest["input"]
        entry = Entry(scope, name, analysis.title, function, file, line, inputs["code"], inputs.get("params") or {},
                      dict(inputs.get("weights") or {}), dict(inputs.get("libraries") or {}), manifest["status"],
                      manifest.get("reason"))
        entries[entry.label] = entry
        for key in ENTRY_KEYS:
            if key == "status" or manifest["status"] == "skipped":
                cited[f"{scope}.{name}.{key}"] = Cited(f"{scope}.{name}.{key}", entry, str(manifest[key]),
                                                       manifest[key], f"the entry's {key}")
        numbers = cache.entry(scope, name) / "numbers.json"
        for key, number in (json.loads(numbers.read_text(encoding="utf-8")) if numbers.is_file() else {}).items():
            full = f"{scope}.{name}.{key}"
            cited[full] = Cited(full, entry, number["text"], number["value"], number.get("description", ""),
                                number.get("accuracy"))
        if manifest.get("shape"):
            shapes.setdefault(scope, []).append((manifest["shape"], entry.inputs))
    for scope, found in shapes.items():
        shape, weights = found[0]
        if any(other != shape for other, _ in found):
            continue  # `_variables.yml` cites no shape for this scope either (engine.index)
        line = inspect.getsourcelines(shape_from_config)[1]
        entry = Entry(scope, "model", f"the shape of {shape.get('name', scope)}, read from its config.json",
                      f"{shape_from_config.__module__}.{shape_from_config.__qualname__}",
                      shape_from_config.__module__.replace(".", "/") + ".py", line, "", {},
                      {k: v for k, v in weights.items() if k in ("config.json", "model.safetensors")}, {}, "ok")
        entries[entry.label] = entry
        for key, value in shape.items():
            cited[f"{scope}.model.{key}"] = Cited(f"{scope}.model.{key}", entry, str(value), value,
                                                  f"{key} in config.json", {"rel": 0.0, "abs": 0.0} if isinstance(
                                                      value, int) else None)
        digest = weights.get("model.safetensors", "")
        cited[f"{scope}.model.sha256"] = Cited(f"{scope}.model.sha256", entry, digest[:12], digest,
                                               "the first 12 hex digits of model.safetensors' sha256")
    return entries, cited


def _listed(root: Path) -> list[Path]:
    """The chapters and appendices `_quarto.yml` lists, relative to `root`."""
    book = (yaml.safe_load((root / "_quarto.yml").read_text(encoding="utf-8")) or {}).get("book") or {}
    return [Path(p) for p in [*book.get("chapters", []), *book.get("appendices", [])] if isinstance(p, str)]


def book_sources(root: Path) -> list[Path]:
    """The chapters and appendices `_quarto.yml` lists, relative to `root`, less the provenance page."""
    return [p for p in _listed(root) if p != PAGE and (root / p).is_file()]


def in_book(root: Path) -> bool:
    """Whether the book includes the provenance page (whose page and data `status` then checks)."""
    return PAGE in _listed(root)


@dataclass
class Citations:
    """What the book cites: each key's citations, and each entry's figures, by chapter (with includes)."""

    keys: dict[str, Counter] = field(default_factory=dict)
    figures: dict[str, list[str]] = field(default_factory=dict)


def citations(root: Path) -> Citations:
    found = Citations()
    for source in book_sources(root):
        text = _text_with_includes(root / source)
        for key in VAR.findall(text):
            found.keys.setdefault(key, Counter())[source.as_posix()] += 1
        for scope, analysis, figure in FIGURE.findall(text):
            found.figures.setdefault(f"{scope}/{analysis}", [])
            if figure not in found.figures[f"{scope}/{analysis}"]:
                found.figures[f"{scope}/{analysis}"].append(figure)
    return found


class UnknownKeyError(KeyError):
    """A key that no verified cache entry holds."""


def resolve(cited: dict[str, Cited], key: str) -> Cited:
    """The key's record; an unknown key is an error that suggests keys of the same entry."""
    if key not in cited:
        near = sorted(k for k in cited if k.startswith(key))[:3] or difflib.get_close_matches(key, list(cited), 3, 0.8)
        hint = f"; did you mean {', '.join(near)}?" if near else "; keys read scope.analysis.name, as in _variables.yml"
        raise UnknownKeyError(f"unknown key {key!r}: no verified cache entry holds it{hint}")
    return cited[key]


def _numeric(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _value(value) -> str:
    return repr(value) if isinstance(value, float) else str(value)


MINUS = re.compile(r"(?:(?<![\w.])|(?<=\de))-(?=\.?\d)")
"""A hyphen that is a minus sign: before a digit, at the start of a number ("-0.49", "(s = -0.027)") or of an
exponent ("2.54e-41"); not a hyphen inside a word or a range ("GPT-2", "L6-v2", "10-20")."""


def printed(text: str) -> str:
    """Printed text as a reader sees it: each minus sign a real one (U+2212), not a hyphen. The cache stores the
    hyphen (its texts are what the code prints); report/_scripts/provenance-pages.lua applies the same rule to the
    rendered book."""
    return MINUS.sub("\u2212", text)


PRINTED_NUMBER = re.compile(r"(?P<sign>[-+]?)(?P<int>\d{1,3}(?:,\d{3})+|\d+)(?:\.(?P<frac>\d+))?"
                            r"(?:e(?P<exp>[-+]?\d+))?(?P<percent>%?)")


class Printed(NamedTuple):
    """A number as printed: its value (a percentage as a fraction), half a unit in its last printed digit (the most
    a correctly rounded print can be off by) and that half unit in words ("0.005", "0.05 percentage points",
    "5e−44")."""

    value: float
    half: float
    words: str


def read_printed(text: str) -> Printed | None:
    """The number `text` prints ("0.79", "90.4%", "2.54e-41", "1,024"); None for text that is not one number."""
    match = PRINTED_NUMBER.fullmatch(text.strip())
    if match is None:
        return None
    number = float(text.strip().replace(",", "").rstrip("%"))
    decimals = len(match["frac"] or "")
    if match["exp"] is not None:
        exponent = int(match["exp"]) - decimals - 1
        return Printed(number, 5 * 10.0 ** exponent,
                       printed(f"5e{exponent}") if exponent < 0 else str(5 * 10 ** exponent))
    half = f"{0.5 * 10.0 ** -decimals:.{decimals + 1}f}"
    if match["percent"]:
        return Printed(number / 100, float(half) / 100, f"{half} percentage points")
    return Printed(number, float(half), half)


def precision(cited: Cited) -> str:
    """How far the printed number can be from the value, in words: exact; within half its last digit (the numerical
    contract keeps every value farther than its declared accuracy from a rounding boundary, so the computation
    fixes every printed digit); a bound; or text, printed as computed."""
    accuracy = cited.accuracy or {}
    if not cited.accuracy or not _numeric(cited.value):
        return "printed as computed"
    if str(accuracy.get("basis", "")).startswith("a bound"):
        return accuracy_text(accuracy)
    found = read_printed(cited.text)
    exact = not (accuracy.get("rel") or accuracy.get("abs"))
    if exact and found is not None and abs(found.value - cited.value) <= 1e-12 * max(1.0, abs(cited.value)):
        return "exact"
    if found is None:
        return f"declared accuracy {cited.accuracy_text}"
    return f"the computation fixes it to within {found.words}"


def tooltip(cited: Cited) -> str:
    """The hover text of a cited number on the web page: the printed digits and their accuracy in words (the
    unrounded value, declared accuracy and source are on the provenance page the number links to)."""
    return f"{printed(cited.text).replace('`', '')}: {precision(cited)}. The link shows its full value and source."


def describe(cited: Cited, cites: Counter | None) -> list[str]:
    """What `explain KEY` prints (freshness and the recomputation are the command line's)."""
    e = cited.entry
    accuracy = cited.accuracy_text + (f" ({cited.accuracy['basis']})" if (cited.accuracy or {}).get("basis") else "")
    lines = [f"{cited.key} = {cited.text}",
             f"  value       {_value(cited.value)}",
             f"  accuracy    {accuracy}"]
    if cited.description:
        lines.append(f"  means       {cited.description}")
    lines += [f"  analysis    {e.label}: {e.title}",
              f"  function    {e.function}  ({e.where})"]
    if e.code:
        lines.append(f"  code sha256 {e.code}")
    if e.params:
        lines.append(f"  parameters  {json.dumps(e.params, sort_keys=True)}")
    lines += [f"  input       {file}  sha256 {digest}" for file, digest in sorted(e.inputs.items())]
    if e.libraries:
        lines.append("  libraries   " + ", ".join(f"{k} {v}" for k, v in sorted(e.libraries.items())))
    lines.append("  cited in    " + (", ".join(f"{s} ({n}×)" for s, n in sorted(cites.items())) if cites else
                                     "no chapter"))
    lines.append("  recompute   " + e.commands(cited.key)[0])
    return lines


def recompute(cited: Cited, job, cache: Cache) -> tuple[str, int]:
    """Recompute the key's analysis in memory (`job`, already planned) and compare it with the cache at the
    declared accuracy (`engine.verify.compare`): one line of verdict, and 0 (reproduced) or 1."""
    from analyses.engine.verify import check

    entry, name = cited.entry, cited.key.split(".", 2)[2]
    if entry.name == "model":
        value = job.source.fingerprint.get("model.safetensors", "")[:12] if name == "sha256" else getattr(
            job.source.shape, name)
        same = str(value) == cited.text
        source = "model.safetensors' sha256" if name == "sha256" else "config.json"
        return (f"{'reproduced' if same else 'NOT REPRODUCED'}: {cited.key} reads {value!r} from {source}, "
                f"the cache {cited.text!r}", 0 if same else 1)
    comparison, result = check(job, cache)
    problems = comparison.problems
    if result is None:
        verdict = "; ".join(problems) or "is cached as skipped, and its inputs are still missing"
        return f"{'NOT REPRODUCED' if problems else 'reproduced'}: {entry.label} {verdict}", 1 if problems else 0
    mine = [p for p in problems if p.startswith((f"{name} ", f"{name}:"))]
    if mine or name not in result.numbers:
        return f"NOT REPRODUCED: {mine[0] if mine else f'{name} is no longer computed'}", 1
    new = result.numbers[name]
    verdict = (f"reproduced: {cited.key} recomputed as {_value(new.value)}, printed {new.text!r}, within its declared "
               f"accuracy ({cited.accuracy_text}) of the cached {_value(cited.value)}")
    if problems:
        return (verdict + f"; but {len(problems)} other values of {entry.label} are not (run "
                f"`{entry.commands()[0]}`)", 1)
    return verdict + f", as is every other value of {entry.label}", 0


# --- reader-facing words for what the cache names by identifier -------------------------------------------

SCOPE_WORDS = {"gpt2": "GPT-2", "gpt1": "GPT-1", "minilm": "MiniLM", "kjv_gpt2": "trained model",
               "kjv_gpt2_seed1": "second seed", "common": "no model"}
"""A cache scope as a figure caption's provenance link names it (a model, or "no model" for the shared entries)."""

# --- the generated page and the filter's data -------------------------------------------------------------

def key_anchor(key: str) -> str:
    """The id of a cited key's row in the appendix, in both formats (a link lands on the row, not the entry)."""
    return "key-" + key.replace(".", "--").replace("_", "-")


def _chapter_href(source: str) -> str:
    target = Path(source).with_suffix(".html")
    return target.name if target.parent == PAGE.parent else "../" + target.as_posix()


def _html(text: str) -> str:
    """Printed text as HTML: escaped, minus signs real (`printed`), its `code` spans (a few printed values hold
    one) as <code>."""
    parts = html.escape(str(text), quote=True).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else printed(p) for i, p in enumerate(parts))


def _keys_table(keys: list[Cited], cites: Citations) -> str:
    """The entry's cited keys, one row each with its own id: the row a cited number links to."""
    rows = []
    for c in keys:
        cited_in = ", ".join(f'<a href="{_chapter_href(s)}">{html.escape(Path(s).stem)}</a>'
                             for s in sorted(cites.keys[c.key]))
        unrounded = f"<code>{html.escape(_value(c.value))}</code>" if _numeric(c.value) else "—"
        rows.append(f'<tr id="{key_anchor(c.key)}"><td><code>{html.escape(c.key.split(".", 2)[2])}</code></td>'
                    f"<td>{_html(c.text)}</td><td>{unrounded}</td>"
                    f'<td title="{html.escape(c.accuracy_text)}">{html.escape(_short_accuracy(c.accuracy))}</td>'
                    f"<td>{cited_in}</td></tr>")
    return "\n".join(['<table class="provenance-keys">',
                      "<thead><tr><th>key</th><th>printed</th><th>unrounded value</th><th>declared accuracy</th>"
                      "<th>cited in</th></tr></thead>", "<tbody>", *rows, "</tbody></table>"])


def _code_html(text: str) -> str:
    return f"<code>{html.escape(text)}</code>"


def _entry_section(entry: Entry, keys: list[Cited], cites: Citations) -> str:
    """One entry of the web listing: what computed it from what, at a glance, with the recompute commands; the code
    hash, libraries and status folded below; then every cited key of it, one row each."""
    inputs = " and ".join(f"{_code_html(f)} (sha256 {_code_html(d)})" for f, d in sorted(entry.inputs.items()))
    params = ", ".join(_code_html(f"{k}={json.dumps(v, sort_keys=True)}") for k, v in sorted(entry.params.items()))
    example = next((c.key for c in keys if _numeric(c.value)), keys[0].key if keys else None)
    folded = []
    if entry.code:
        folded.append(f"<li><strong>Code hash</strong> (every module on its path): {_code_html(entry.code)}</li>")
    if entry.libraries:
        folded.append("<li><strong>Libraries</strong>: "
                      + html.escape(", ".join(f"{k} {v}" for k, v in sorted(entry.libraries.items()))) + "</li>")
    folded.append(f"<li><strong>Status</strong>: {html.escape(entry.status)}"
                  + (f" ({html.escape(entry.reason)})" if entry.reason else "")
                  + "; every output matches the sha256 its manifest records</li>")
    if cites.figures.get(entry.label):
        folded.append("<li><strong>Figures</strong>: " + ", ".join(map(_code_html, cites.figures[entry.label])) + "</li>")
    return "\n".join([
        f'<section id="{entry.anchor}">',
        f"<h2>{html.escape(entry.scope)} · {html.escape(entry.name)}</h2>",
        f"<p><em>{html.escape(entry.title)}.</em> Computed by {_code_html(entry.function)}, defined in "
        f"{_code_html(entry.where)}, " + (f"from {inputs}" if inputs else "from no weights")
        + (f", with {params}." if params else ".") + "</p>",
        "<pre><code>" + html.escape("\n".join(entry.commands(example))) + "</code></pre>",
        "<details><summary>Code hash, libraries and status</summary><ul>", *folded, "</ul></details>",
        *([_keys_table(keys, cites)] if keys else []), "</section>"])


LISTING_STYLE = """\
body { font-family: system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif;
       color: #212529; line-height: 1.5; margin: 0 auto; max-width: 64rem; padding: 1rem 1.5rem 4rem; }
a { color: #2780e3; }
h1 { font-size: 1.75rem; } h2 { font-size: 1.25rem; margin: 2rem 0 0.5rem; border-top: 1px solid #dee2e6;
                              padding-top: 1rem; }
code { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 0.875em;
       overflow-wrap: anywhere; color: #9753b8; }
pre { background: #f8f9fa; padding: 0.5rem 0.75rem; white-space: pre-wrap; }
pre code { color: inherit; }
table { border-collapse: collapse; width: 100%; font-size: 0.875rem; margin: 0.5rem 0; }
th, td { border-bottom: 1px solid #dee2e6; padding: 0.25rem 0.5rem; text-align: left; vertical-align: top; }
tr:target { background: #fff3cd; }
section:target h2 { background: #fff3cd; }
nav { font-size: 0.9rem; }
"""


# --- the PDF's listing: compact, in two columns, no heading per entry ----------------------------------------

HASH_DIGITS = 16
"""The hex digits of a hash printed in the PDF (the web page and the manifests hold all 64)."""

_LATEX = {"\\": r"\textbackslash{}", "{": r"\{", "}": r"\}", "$": r"\$", "&": r"\&", "#": r"\#",
          "^": r"\^{}", "_": r"\_", "%": r"\%", "~": r"\~{}"}


def _latex(text: str) -> str:
    """Text for LaTeX: specials escaped, minus signs real (`printed`), `code` spans in typewriter, and room to
    break inside long words (a 64-digit hash, a long key) so that nothing runs out of its column."""
    def word(w: str) -> str:
        chunks = [w[i:i + 12] for i in range(0, len(w), 12)] if len(w) > 24 else [w]
        return r"\hspace{0pt}".join("".join(_LATEX.get(ch, ch) for ch in chunk) for chunk in chunks)

    def plain(t: str) -> str:
        return " ".join(word(w) for w in t.split(" "))

    parts = str(text).split("`")
    return "".join(rf"\texttt{{{plain(p)}}}" if i % 2 else plain(printed(p)) for i, p in enumerate(parts))


def _latex_key(name: str) -> str:
    """A key or a path in typewriter, breakable after each underscore and slash (only where the column needs it)."""
    return r"\texttt{" + re.sub(r"([_/])", lambda m: _LATEX.get(m.group(1), m.group(1)) + r"\penalty200{}",
                                  "".join(_LATEX.get(ch, ch) if ch not in "_/" else ch for ch in name)) + "}"


def _short_accuracy(accuracy: dict | None) -> str:
    """A declared accuracy as the PDF's listing prints it: "±1e-9 rel.", "±5e-5", "exact", "text", "bound"."""
    if not accuracy:
        return "text"
    if str(accuracy.get("basis", "")).startswith("a bound"):
        return "bound"

    def number(x: float) -> str:
        return re.sub(r"e([-+])0*(\d)", lambda m: "e" + ("-" if m.group(1) == "-" else "") + m.group(2), f"{x:.3g}")

    rel, abs_ = accuracy.get("rel") or 0, accuracy.get("abs") or 0
    parts = [f"±{number(rel)} rel."] * bool(rel) + [f"±{number(abs_)}"] * bool(abs_)
    return " or ".join(parts) if parts else "exact"


def _hashes(inputs: dict[str, str]) -> str:
    return ", ".join(rf"{_latex(f)} \texttt{{{d[:HASH_DIGITS]}}}" for f, d in sorted(inputs.items()))


def _pdf_listing(groups: list[tuple[Entry, list[Cited]]], libraries: dict[str, str]) -> str:
    """The PDF's appendix body, in raw LaTeX: per model (scope) its shared inputs' hashes, per entry its function
    and code hash, per cited key a line with its printed value, declared accuracy and pages. The pages are
    `\\citedpagesof{KEY}`, which report/_scripts/provenance-pages.lua replaces with the pages that cite KEY; the
    macros are defined in _quarto.yml."""
    out = [r"\begingroup\scriptsize\raggedright\setlength{\parskip}{0pt}\begin{multicols}{2}\raggedcolumns"]
    if libraries:
        out.append(r"\provnote{Libraries of every entry: "
                   + _latex(", ".join(f"{k} {v}" for k, v in sorted(libraries.items()))) + ".}")
    for scope in dict.fromkeys(entry.scope for entry, _ in groups):
        mine = [(entry, keys) for entry, keys in groups if entry.scope == scope]
        shared = dict(set.intersection(*(set(e.inputs.items()) for e, _ in mine))) if len(mine) > 1 else {}
        out.append(rf"\provscope{{{_latex(scope)}}}{{" + (rf"inputs: {_hashes(shared)}" if shared else
                                                            "inputs: per entry") + "}")
        for entry, keys in mine:
            own = {f: d for f, d in entry.inputs.items() if shared.get(f) != d}
            details = ([rf"code \texttt{{{entry.code[:HASH_DIGITS]}}}"] * bool(entry.code)
                       + [_hashes(own)] * bool(own)
                       + [_latex(f"status {entry.status}" + (f" ({entry.reason})" if entry.reason else ""))]
                       * (entry.status != "ok"))
            function = entry.function.rsplit(".", 1)[1]
            where = (f"{_latex_key(function)} in " if function != entry.name else "") + _latex_key(entry.where)
            out.append(rf"\proventry{{\mbox{{{_latex(entry.scope)}.}}{_latex_key(entry.name)}}}"
                       rf"{{{'; '.join([where, *details])}}}")
            out += [rf"\provkey{{{key_anchor(c.key)}}}{{{_latex_key(c.key.split('.', 2)[2])}}}{{{_latex(c.text)}}}"
                    rf"{{{_latex(_short_accuracy(c.accuracy))}}}{{\citedpagesof{{{c.key}}}}}" for c in keys]
    out.append(r"\end{multicols}\endgroup")
    return "\n".join(["```{=latex}", *out, "```", ""])


HEADER = """\
<!-- Generated by `python -m analyses provenance` from report/_cache and the registry: do not edit by hand. -->

# Provenance of the cited numbers {#sec-provenance}

Every number this book cites comes from one cache entry, computed by one analysis from the inputs listed
below; nothing is typed by hand. `python -m analyses explain KEY --recompute` recomputes any of them and
compares the result with the cache at the value's declared accuracy; `python -m analyses verify` does so for
every entry.

::: {.content-visible when-format="html"}
The listing is [a page of its own](provenance-listing.html), written from the cache with the book (one
page of plain HTML, not rendered by Quarto, which would spend seconds on its thousands of rows). For each
entry: the function that computed it (its module, and its file and line in the repository, which has no
public remote, so the path is relative to it), its parameters, the SHA-256 of every input file, the commands
that recompute it, and, folded, the hash of its code, the library versions and its status; then every key
the book cites from it, with its printed and unrounded value, its declared accuracy and the chapters that
cite it (accuracies: rel., relative to the value; text, printed as computed; bound, the value stays below
it). Every cited number in the book links to its key's row there, and its tooltip gives the printed digits
and their accuracy in words.
:::

::: {.content-visible when-format="pdf"}
Below, per model, the inputs its entries share (file and the first HASH_DIGITS hex digits of its SHA-256);
per entry, its key prefix, the function that computed it with its file and line, and the first HASH_DIGITS
hex digits of its code hash; per cited key, its printed value, declared accuracy (rel.: relative to the
value; text: printed as computed; bound: the value stays below it) and the pages that print it (a number
inside a formula counts on the formula's page). The web version of this appendix holds the full hashes,
parameters, library versions and unrounded values.
:::
""".replace("HASH_DIGITS", str(HASH_DIGITS))


@dataclass(frozen=True)
class Provenance:
    """The verified entries, the keys they hold, and what the book cites, read once."""

    entries: dict[str, Entry]
    cited: dict[str, Cited]
    cites: Citations

    @classmethod
    def of(cls, root: Path) -> Provenance:
        entries, cited = records(root)
        return cls(entries, cited, citations(root))

    def unresolved(self) -> list[str]:
        """Keys the book cites that no verified entry holds, and cited figures of no verified entry."""
        return sorted([k for k in self.cites.keys if k not in self.cited]
                      + [f for f in self.cites.figures if f not in self.entries])

    def _groups(self) -> list[tuple[Entry, list[Cited]]]:
        """Each entry the book cites (numbers or figures), in order, with the keys it cites from it."""
        wanted = {self.cited[k].entry.label for k in self.cites.keys if k in self.cited} | (
            set(self.cites.figures) & set(self.entries))
        order = sorted(self.entries.items(), key=lambda item: (item[1].scope, item[1].name != "model", item[0]))
        keys_of: dict[int, list[Cited]] = {}
        for key in sorted(k for k in self.cites.keys if k in self.cited):
            keys_of.setdefault(id(self.cited[key].entry), []).append(self.cited[key])
        return [(entry, keys_of.get(id(entry), [])) for label, entry in order if label in wanted]

    def page(self) -> str:
        """The provenance appendix: on the web a pointer to the listing (`listing`), in print the listing itself."""
        groups = self._groups()
        libraries = [set(entry.libraries.items()) for entry, _ in groups if entry.libraries]
        parts = [HEADER, _pdf_listing(groups, dict(set.intersection(*libraries)) if libraries else {})]
        return "\n".join(parts).rstrip() + "\n"

    def listing(self) -> str:
        """The web's listing, a page of plain HTML beside the appendix: one section per entry the book cites (its id
        the entry's anchor), one row per cited key (its id `key_anchor`), which every cited number links to."""
        sections = [_entry_section(entry, keys, self.cites) for entry, keys in self._groups()]
        return "\n".join([
            "<!DOCTYPE html>", '<html lang="en">', "<head>", '<meta charset="utf-8">',
            '<meta name="viewport" content="width=device-width, initial-scale=1">',
            "<title>Provenance of the cited numbers – Where GPT-2 Keeps Position</title>",
            f"<style>\n{LISTING_STYLE}</style>", "</head>", "<body>",
            "<!-- Generated by `python -m analyses provenance` from report/_cache and the registry: do not edit. -->",
            '<nav><a href="../index.html">Where GPT-2 Keeps Position</a> · '
            '<a href="provenance.html">the provenance appendix</a></nav>',
            "<h1>Provenance of the cited numbers</h1>",
            "<p>Every number the book cites comes from one cache entry, computed by one analysis from the inputs listed "
            "below. <code>python -m analyses explain KEY --recompute</code> recomputes any of them and compares the "
            "result with the cache at the value's declared accuracy; <code>python -m analyses verify</code> does so "
            "for every entry. Accuracies: rel., relative to the value; text, printed as computed; bound, the value "
            "stays below it.</p>",
            *sections, "</body>", "</html>"]) + "\n"

    def data(self) -> str:
        """What the Lua filters need: each cited key's row anchor and tooltip; each figure entry's anchor, tooltip
        and model in words; and each skipped analysis's note in words, by the text of the note it replaces."""
        keys = {k: {"anchor": key_anchor(k), "title": tooltip(self.cited[k])}
                for k in sorted(self.cites.keys) if k in self.cited}
        if len({v["anchor"] for v in keys.values()}) < len(keys):
            raise ValueError("two cited keys share a row anchor (provenance.key_anchor)")
        figures = {}
        for label in sorted(self.cites.figures):
            if label in self.entries:
                entry = self.entries[label]
                name = SCOPE_WORDS.get(entry.scope, entry.scope)
                model = "" if entry.scope == "common" else f", for {name}"
                title = f"Drawn by the analysis “{entry.title}”{model}: the link shows its code, parameters, inputs"
                figures[label] = {"anchor": entry.anchor, "name": name, "title": title}
        return json.dumps({"keys": keys, "figures": figures}, indent=1, sort_keys=True,
                          ensure_ascii=False) + "\n"

    @cached_property
    def files(self) -> dict[Path, str]:
        """The generated files' texts by path, built once per read of the cache."""
        return {PAGE: self.page(), LISTING: self.listing(), DATA: self.data()}


def outdated(root: Path, provenance: Provenance) -> list[str]:
    """The generated files (relative paths) that differ from what the cache gives now."""
    return [str(path) for path, text in provenance.files.items()
            if not (root / path).is_file() or (root / path).read_text(encoding="utf-8") != text]


def digest(root: Path) -> str:
    """sha256 over every byte the generated files are built from and over the files as they are now: `_quarto.yml`,
    the book's sources with their includes, each cache entry's manifest and numbers, the package's code (which
    places each analysis's function and registers the analyses) and the three generated files. Reading these costs
    milliseconds where building the files costs about a second."""
    cache, package = Cache.at(root), Path(__file__).resolve().parents[1]
    parts: list[tuple[str, bytes]] = [("_quarto.yml", (root / "_quarto.yml").read_bytes())]
    parts += [(source.as_posix(), _text_with_includes(root / source).encode()) for source in book_sources(root)]
    for scope, name in cache.entries():
        entry = cache.entry(scope, name)
        parts += [(f"{scope}/{name}/{f}", (entry / f).read_bytes()) for f in ("manifest.json", "numbers.json")
                  if (entry / f).is_file()]
    parts += [(path.relative_to(package).as_posix(), path.read_bytes()) for path in sorted(package.rglob("*.py"))]
    parts += [(str(path), (root / path).read_bytes() if (root / path).is_file() else b"missing")
              for path in (PAGE, LISTING, DATA)]
    sha = hashlib.sha256()
    for name, data in parts:
        sha.update(f"{name}\0{len(data)}\0".encode())
        sha.update(data)
    return sha.hexdigest()


def unchanged(root: Path) -> bool:
    """Whether nothing the generated files are built from, nor the files themselves, changed since the last build
    recorded its `digest` (in `STAMP`)."""
    try:
        return (root / STAMP).read_text(encoding="utf-8").strip() == digest(root)
    except (OSError, UnicodeDecodeError):
        return False


def stamp(root: Path) -> None:
    """Record the `digest` of the files just built; where it cannot be written (a read-only checkout), the next
    pre-render step builds them again."""
    try:
        atomic_write(root / STAMP, (digest(root) + "\n").encode())
    except OSError:
        pass


def write(root: Path, provenance: Provenance) -> list[str]:
    """Write the page and the filter's data where they differ from the cache's; the paths written."""
    written = outdated(root, provenance)
    for path, text in provenance.files.items():
        if str(path) in written:
            atomic_write(root / path, text.encode())
    return written
