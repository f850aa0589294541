"""The numbers contract, checked statically (Quarto cannot run here).

Every `{{< var >}}` key exists, every figure, table and include path exists,
every cross-reference has a label, every citation is in references.bib, and no
measurement is typed into the prose by hand. These tests need no weights.
"""

from __future__ import annotations

import json

import re
from functools import cache
from pathlib import Path

import pytest
import yaml

from analyses.engine import provenance

REPO = Path(__file__).resolve().parents[1]
SHORTCODE = re.compile(r"\{\{<\s*(\w+)\s+([^>]*?)\s*>\}\}")
LABEL = re.compile(r"#((?:fig|tbl|eq|sec)-[\w-]+)")
CHUNK_LABEL = re.compile(r"^#\|\s*label:\s*((?:fig|tbl|eq|sec)-[\w-]+)", re.M)
REFERENCE = re.compile(r"(?<![\w#])@((?:fig|tbl|eq|sec)-[\w-]*\w)")
CITATION = re.compile(r"(?<![\w@#])@([A-Za-z][\w:-]*\w)")
TYPED_NUMBER = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.])|\d+(?:\.\d+)?\s?%")
# Numbers allowed in prose: version numbers of tools named in the text.
ALLOWED_NUMBERS = {"1.10", "2.13.0", "3.11"}


@cache
def quarto() -> dict:
    return yaml.safe_load((REPO / "_quarto.yml").read_text())


@cache
def variables() -> dict:
    return yaml.safe_load((REPO / "_variables.yml").read_text())


def chapters() -> list[Path]:
    """The book's chapters and appendices that exist (a missing one fails the config test, not every test)."""
    book = quarto()["book"]
    return [REPO / c for c in [*book["chapters"], *book.get("appendices", [])] if (REPO / c).is_file()]


def expand(path: Path, seen=()) -> list[tuple[Path, str]]:
    """(file, text) for a document and, recursively, every file it includes."""
    text = path.read_text()
    out = [(path, text)]
    for kind, arg in SHORTCODE.findall(text):
        target = (path.parent / arg).resolve()
        if kind == "include" and target.is_file() and target not in seen:
            out += expand(target, (*seen, path))
    return out


@cache
def documents() -> list[tuple[Path, str]]:
    return [doc for chapter in chapters() for doc in expand(chapter)]


def strip_code(text: str) -> str:
    text = re.sub(r"^(```|~~~).*?^\1\s*$", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def prose(text: str) -> str:
    """The text a reader reads as prose: no front matter, code, math, shortcodes, attributes, URLs or comments."""
    text = re.sub(r"\A---\n.*?\n---\n", "", text, flags=re.S)
    text = strip_code(text)
    text = re.sub(r"<!--.*?-->", "", text, flags=re.S)
    text = re.sub(r"\$\$.*?\$\$", "", text, flags=re.S)
    text = re.sub(r"(?<!\\)\$[^$\n]+?\$", "", text)
    text = SHORTCODE.sub("", text)
    text = re.sub(r"\{[#.][^}\n]*\}|\{[^}\n]*=[^}\n]*\}", "", text)
    return re.sub(r"\]\([^)\s]*\)", "]", text)


def image_paths(text: str) -> list[str]:
    """Targets of markdown images ![caption](path), captions with nested brackets allowed."""
    paths, i = [], 0
    while (i := text.find("![", i)) >= 0:
        depth, j = 0, i + 1
        while j < len(text):
            depth += {"[": 1, "]": -1}.get(text[j], 0)
            if depth == 0:
                break
            j += 1
        match = re.match(r"\(([^)\s]+)", text[j + 1:])
        if match:
            paths.append(match.group(1))
        i = j
    return paths


def test_quarto_config_parses_and_lists_existing_chapters():
    config = quarto()
    assert config["project"]["type"] == "book"
    assert config["book"]["chapters"][0] == "index.qmd"  # a book's index must sit beside _quarto.yml
    book = [*config["book"]["chapters"], *config["book"].get("appendices", [])]
    assert config["project"]["render"] == book
    missing = [c for c in book if not (REPO / c).is_file()]
    assert not missing, f"chapters listed in _quarto.yml but absent: {missing}"
    assert config["format"]["html"]["default-image-extension"] == "svg"
    assert config["format"]["pdf"]["default-image-extension"] == "pdf"
    assert (REPO / config["bibliography"]).is_file()


def test_every_var_key_is_defined():
    undefined = []
    for path, text in documents():
        for kind, arg in SHORTCODE.findall(strip_code(text)):
            if kind != "var":
                continue
            node = variables()
            for part in arg.split("."):
                node = node.get(part) if isinstance(node, dict) else None
            if not isinstance(node, (str, int, float)):
                undefined.append(f"{path.relative_to(REPO)}: {arg}")
    assert not undefined, "undefined {{< var >}} keys:\n" + "\n".join(undefined)


def test_no_line_of_prose_reads_as_one_block_shortcode():
    """Quarto's include pass reads a line that starts with `{{<` and ends with `>}}` as one block shortcode; a quote
    between two inline shortcodes on such a line then breaks the whole render ("Invalid Shortcode"). Such a line
    must be reflowed."""
    risky = [f"{path.relative_to(REPO)}: {line[:60]}…" for path, text in documents()
             for line in strip_code(text).splitlines()
             if line.startswith("{{<") and line.rstrip().endswith(">}}") and line.count("{{<") > 1
             and re.search(r"['\"’]", line)]
    assert not risky, "lines Quarto would read as one shortcode:\n" + "\n".join(risky)


def test_every_include_and_figure_path_exists():
    formats = quarto()["format"]
    extensions = {formats[f]["default-image-extension"] for f in ("html", "pdf")}
    broken = []
    # An include's path is relative to the file that includes it; an image's, to the chapter being
    # rendered, whichever file the image's markdown sits in (Quarto pastes includes in verbatim).
    for chapter in chapters():
        for path, text in expand(chapter):
            text = strip_code(text)
            for kind, arg in SHORTCODE.findall(text):
                if kind == "include" and not (path.parent / arg).is_file():
                    broken.append(f"{path.relative_to(REPO)}: include {arg}")
            for target in image_paths(text):
                if target.startswith("http"):
                    continue
                candidates = [chapter.parent / target] if Path(target).suffix else \
                    [chapter.parent / f"{target}.{ext}" for ext in extensions]
                broken += [f"{path.relative_to(REPO)}: image {c.name}" for c in candidates if not c.is_file()]
    assert not broken, "missing files:\n" + "\n".join(broken)


def test_every_figure_has_alt_text():
    lacking = [f"{p.relative_to(REPO)}: {m}" for p, t in documents()
               for m in re.findall(r"\{#fig-[^}]*\}", strip_code(t)) if "fig-alt=" not in m]
    assert not lacking, "figures without fig-alt:\n" + "\n".join(lacking)


def test_every_cross_reference_has_a_unique_label():
    labels: list[str] = []
    for _, text in documents():
        body = strip_code(text)
        labels += LABEL.findall(re.sub(r"(?<![\w#])@", " ", body)) + CHUNK_LABEL.findall(text)
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    assert not duplicates, f"labels defined twice: {duplicates}"
    dangling = [f"{p.relative_to(REPO)}: @{ref}" for p, t in documents()
                for ref in REFERENCE.findall(strip_code(t)) if ref not in labels]
    assert not dangling, "references without a label:\n" + "\n".join(dangling)


def test_every_citation_is_in_the_bibliography():
    keys = set(re.findall(r"^@\w+\{([^,\s]+),", (REPO / "references.bib").read_text(), flags=re.M))
    unknown = []
    for path, text in documents():
        body = re.sub(r"\A---\n.*?\n---\n", "", strip_code(text), flags=re.S)
        body = re.sub(r"\S+@\S+\.\w+", "", body)  # e-mail addresses
        for key in CITATION.findall(body):
            if not key.startswith(("fig-", "tbl-", "eq-", "sec-")) and key not in keys:
                unknown.append(f"{path.relative_to(REPO)}: @{key}")
    assert not unknown, "citation keys not in references.bib:\n" + "\n".join(unknown)


def test_no_measurement_is_typed_into_the_prose():
    typed = []
    for path, text in documents():
        if "_cache" in path.parts or path == REPO / provenance.PAGE:
            continue  # generated from the cache (fragments, the provenance appendix): numbers by construction
        for line_no, line in enumerate(prose(text).splitlines(), 1):
            typed += [f"{path.relative_to(REPO)}: {m!r} in {line.strip()[:80]!r}"
                      for m in TYPED_NUMBER.findall(line) if m not in ALLOWED_NUMBERS]
    assert not typed, "numbers typed by hand (cite them with {{< var >}}):\n" + "\n".join(typed)


@pytest.mark.parametrize("text, found", [
    ("the mean norm is 3.39 here", ["3.39"]),
    ("about 90% of the variance", ["90%"]),
    ("cited {{< var gpt2.position_matrix.norm_mean >}} and $\\sqrt{384} \\approx 19.6$", []),
    ("code `x = 0.5` and ![a](b/c){#fig-x fig-alt='1.5'}", []),
    ("Quarto 1.10 renders it", ["1.10"]),
])
def test_typed_number_detector(text, found):
    assert TYPED_NUMBER.findall(prose(text)) == found


def test_image_path_parser_handles_nested_brackets():
    assert image_paths("![A [@cite] caption {{< var a.b >}}.](x/y){#fig-z}") == ["x/y"]


def test_variables_file_is_generated_from_the_cache():
    """Each value of _variables.yml (the keys the book cites) is its cache entry's: a number's printed text, or the
    entry's status and skip reason from its manifest."""
    assert (REPO / "_variables.yml").read_text().startswith("# Generated by `python -m analyses run`")
    for scope, analyses in variables().items():
        for name, entry in analyses.items():
            if name == "model":
                continue
            directory = REPO / "report" / "_cache" / scope / name
            manifest = json.loads((directory / "manifest.json").read_text())
            numbers = json.loads((directory / "numbers.json").read_text()) if (directory / "numbers.json").is_file() else {}
            for key, text in entry.items():
                expected = manifest[key] if key in ("status", "reason") else numbers[key]["text"]
                assert str(text) == str(expected), f"{scope}.{name}.{key}"
