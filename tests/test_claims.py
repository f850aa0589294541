"""The "Claims checked" chapter and its appendix, checked statically (no weights, no Quarto).

report/appendix-claims.qmd holds one table per source document, with the columns claim, where, our value,
verdict and note; its first section, {#sec-claims}, lists the main claims inline, [claim]{claim="id"}: *verdict*, each naming
its row there by id and repeating its verdict. Every row needs one of the six verdicts; a row whose verdict is not "not
testable here" must cite at least one number from the cache ({{< var >}}) in its "our value" cell,
and that cell may hold no number typed by hand; every cited key must exist in _variables.yml; a
"not testable here" row must say what is missing; no source may lose rows; and the errors the
sources are known to make stay listed as corrected, each with the value that corrects it. The
mutation tests at the end break a copy of the chapter on purpose and check that each break is
caught.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
CHAPTER = REPO / "report" / "appendix-claims.qmd"  # the per-source tables: the one place for each claim
SUMMARY_HEADING = re.compile(r"^## The main claims and their verdicts \{#sec-claims\}\s*$", re.M)
"""The appendix's first section: the main claims inline, paired with their rows by id."""

COLUMNS = ["claim", "where", "our value", "verdict", "note"]
VERDICTS = {"confirmed", "formula holds", "reproduced with another setting", "refined", "corrected",
            "not testable here"}
NOT_TESTABLE = "not testable here"

# One table per source: its label, the citation key its caption must cite, and the fewest rows it
# may hold. Raise a minimum when rows are added; lowering one needs a reason in the commit.
SOURCES = {
    "tbl-claims-datta-similarity": ("datta2026similarity", 5),
    "tbl-claims-datta-space": ("datta2026space", 10),
    "tbl-claims-simon": ("simon2024insights", 17),
    "tbl-claims-yedidia": ("yedidia2023helix", 15),
    "tbl-claims-padova": ("padova2025frog", 44),
}

# The errors the sources are known to make: (table, a phrase of the claim, a key the row must cite
# as the correct value). Each must stay a row with the verdict "corrected".
KNOWN_ERRORS = [
    ("tbl-claims-datta-similarity", "top 10 most similar", "gpt2.similarity.top_anti_cos"),
    ("tbl-claims-simon", r"1024 \times 784", "gpt2.model.d_model"),
    ("tbl-claims-padova", r"\sigma_\text{min} / \sigma_\text{max}", "gpt2.attention_spectra.layer5_wq_condition"),
    ("tbl-claims-padova", "338.82", "gpt2.low_rank.early_late_angle3"),
    ("tbl-claims-padova", "values in $[0, 1]$", "gpt2.positional_qk.head7_antisymmetric"),
]

# Numbers a source gives that another setting reproduces exactly: (table, a phrase of the claim, the key of the
# reproducing value). Each must stay a row with the verdict "reproduced with another setting" citing that key.
REPRODUCED = [
    ("tbl-claims-padova", "$153$ components", "common.sinusoidal_components.centred_n1024_base1000"),
]

# Claims that are mathematics: each must stay a row with the verdict "formula holds", never "confirmed", which is
# kept for claims about a model.
FORMULAS = [
    ("tbl-claims-datta-space", "Fast waves serve local context"),
    ("tbl-claims-padova", "Marchenko–Pastur edge"),
    ("tbl-claims-padova", "A shift acts on the sinusoidal table as rotations"),
    ("tbl-claims-padova", "Sinusoidal rows have norm"),
    ("tbl-claims-padova", "thin outer shell"),
]

# What a "not testable here" note must name: what is missing, or what will decide the claim.
MISSING = re.compile(r"\b(needs|pending)\b", re.I)

VAR = re.compile(r"\{\{<\s*var\s+([\w.]+)\s*>\}\}")
DIV_OPEN = re.compile(r"^:::+\s*\{#(tbl-[\w-]+)[^}]*\}\s*$")
DIV_CLOSE = re.compile(r"^:::+\s*$")


@dataclass(frozen=True)
class Row:
    table: str
    line: int
    cells: tuple[str, ...]

    def __getitem__(self, column: str) -> str:
        return self.cells[COLUMNS.index(column)]

    def where(self) -> str:
        return f"{self.table}, line {self.line}: {self['claim'][:60]!r}"


@dataclass(frozen=True)
class Table:
    label: str
    header: tuple[str, ...]
    rows: tuple[Row, ...]
    caption: str


def split_cells(line: str) -> list[str]:
    """The cells of one pipe-table row; a '|' inside math, code or a shortcode, or escaped, is not a separator."""
    cells, current, i = [], [], 0
    in_math = in_code = False
    depth = 0  # inside {{< … >}}
    body = line.strip()
    if body.startswith("|"):
        body = body[1:]
    if body.endswith("|") and not body.endswith("\\|"):
        body = body[:-1]
    while i < len(body):
        ch = body[i]
        if ch == "\\" and i + 1 < len(body):
            current.append(body[i:i + 2])
            i += 2
            continue
        if body.startswith("{{<", i):
            depth += 1
        elif body.startswith(">}}", i) and depth:
            depth -= 1
        elif ch == "`" and not in_math:
            in_code = not in_code
        elif ch == "$" and not in_code:
            in_math = not in_math
        elif ch == "|" and not (in_math or in_code or depth):
            cells.append("".join(current).strip())
            current = []
            i += 1
            continue
        current.append(ch)
        i += 1
    cells.append("".join(current).strip())
    return cells


def parse(text: str) -> dict[str, Table]:
    """Every table div of the chapter that holds a pipe table: label -> Table."""
    tables: dict[str, Table] = {}
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        opened = DIV_OPEN.match(lines[i].strip())
        if not opened:
            i += 1
            continue
        label = opened.group(1)
        i += 1
        body: list[tuple[int, str]] = []
        while i < len(lines) and not DIV_CLOSE.match(lines[i].strip()):
            body.append((i + 1, lines[i]))
            i += 1
        pipe = [(n, line) for n, line in body if line.strip().startswith("|")]
        caption = " ".join(line.strip() for _, line in body if line.strip() and not line.strip().startswith("|"))
        if pipe:
            header = tuple(c.lower() for c in split_cells(pipe[0][1]))
            rows = tuple(Row(label, n, tuple(split_cells(line))) for n, line in pipe[2:])
            tables[label] = Table(label, header, rows, caption)
        else:
            tables.setdefault(label, Table(label, (), (), caption))
        i += 1
    return tables


@cache
def variables() -> dict:
    return yaml.safe_load((REPO / "_variables.yml").read_text())


def defined(key: str, variables: dict) -> bool:
    node = variables
    for part in key.split("."):
        node = node.get(part) if isinstance(node, dict) else None
    return isinstance(node, (str, int, float))


def without_citations(cell: str) -> str:
    """A cell with its shortcodes, math, code, cross-references and citations removed."""
    cell = VAR.sub("", cell)
    cell = re.sub(r"(?<!\\)\$[^$]*?\$", "", cell)
    cell = re.sub(r"`[^`]*`", "", cell)
    cell = re.sub(r"\[-?@[\w:-]+\]|-?@[\w:-]*\w", "", cell)
    return cell


def problems(text: str, variables: dict) -> list[str]:
    """Everything wrong with the chapter's claims tables; empty when the chapter is sound."""
    out: list[str] = []
    tables = parse(text)
    for label, (key, minimum) in SOURCES.items():
        table = tables.get(label)
        if table is None:
            out.append(f"{label}: table missing")
            continue
        if list(table.header) != COLUMNS:
            out.append(f"{label}: columns {list(table.header)}, expected {COLUMNS}")
            continue
        if f"@{key}" not in table.caption:
            out.append(f"{label}: the caption does not cite @{key}")
        if len(table.rows) < minimum:
            out.append(f"{label}: {len(table.rows)} rows, fewer than the {minimum} listed")
        for row in table.rows:
            if len(row.cells) != len(COLUMNS):
                out.append(f"{row.where()}: {len(row.cells)} cells, expected {len(COLUMNS)}")
                continue
            verdict = row["verdict"].strip().lower()
            if verdict not in VERDICTS:
                out.append(f"{row.where()}: verdict {row['verdict']!r} is not one of {sorted(VERDICTS)}")
            for column in ("claim", "where", "note"):
                if not row[column].strip():
                    out.append(f"{row.where()}: empty {column!r}")
            keys = VAR.findall(row["our value"])
            if verdict in VERDICTS - {NOT_TESTABLE} and not keys:
                out.append(f"{row.where()}: verdict {verdict!r} but 'our value' cites no variable")
            if verdict == NOT_TESTABLE and not MISSING.search(row["note"]):
                out.append(f"{row.where()}: not testable, but the note does not say what it needs or what is pending")
            if verdict == "corrected" and row["note"].strip() in {"", "—"}:
                out.append(f"{row.where()}: corrected, but the note does not say what is wrong")
            if verdict != NOT_TESTABLE or row["our value"].strip() != "—":
                typed = re.findall(r"\d", without_citations(row["our value"]))
                if typed:
                    out.append(f"{row.where()}: a number typed into 'our value' (cite it with {{{{< var >}}}})")
            for cell in row.cells:
                out += [f"{row.where()}: undefined variable {k}" for k in VAR.findall(cell) if not defined(k, variables)]
    for label, phrase, key in KNOWN_ERRORS:
        table = tables.get(label)
        rows = [r for r in (table.rows if table else ()) if len(r.cells) == len(COLUMNS) and phrase in r["claim"]]
        if not rows:
            out.append(f"{label}: no row for the known error {phrase!r}")
        for row in rows:
            if row["verdict"].strip().lower() != "corrected":
                out.append(f"{row.where()}: the known error {phrase!r} is not marked corrected")
            if key not in VAR.findall(row["our value"]):
                out.append(f"{row.where()}: the known error {phrase!r} does not cite {key}")
    for label, phrase, key in REPRODUCED:
        rows = [r for r in (tables[label].rows if label in tables else ()) if len(r.cells) == len(COLUMNS)
                and phrase in r["claim"]]
        if not rows:
            out.append(f"{label}: no row for the reproduced number {phrase!r}")
        for row in rows:
            if row["verdict"].strip().lower() != "reproduced with another setting" or key not in VAR.findall(
                    row["our value"]):
                out.append(f"{row.where()}: {phrase!r} must be 'reproduced with another setting', citing {key}")
    for label, phrase in FORMULAS:
        rows = [r for r in (tables[label].rows if label in tables else ()) if len(r.cells) == len(COLUMNS)
                and phrase in r["claim"]]
        if not rows:
            out.append(f"{label}: no row for the formula {phrase!r}")
        for row in rows:
            if row["verdict"].strip().lower() != "formula holds":
                out.append(f"{row.where()}: {phrase!r} is mathematics: its verdict must be 'formula holds'")
    return out


def chapter_text() -> str:
    return CHAPTER.read_text()


def summary_text() -> str:
    """The summary section of the claims appendix, from its heading to the next section."""
    text = CHAPTER.read_text()
    start = SUMMARY_HEADING.search(text)
    assert start, "report/appendix-claims.qmd has no section {#sec-claims}"
    end = text.find("\n## ", start.end())
    return text[start.start():end if end >= 0 else len(text)]


def test_the_audit_is_an_appendix_with_its_summary_first():
    """The audit of the sources is an appendix (issue 46), not a main chapter; its summary is its first section."""
    config = yaml.safe_load((REPO / "_quarto.yml").read_text())
    for listing in (config["project"]["render"], config["book"]["chapters"]):
        assert "report/claims.qmd" not in listing
    assert "report/appendix-claims.qmd" in config["book"]["appendices"]
    assert not (REPO / "report" / "claims.qmd").exists()
    assert CHAPTER.read_text().split("\n## ", 2)[1].startswith("The main claims and their verdicts {#sec-claims}")


def test_every_claims_table_is_sound():
    found = problems(chapter_text(), variables())
    assert not found, "problems in report/appendix-claims.qmd:\n" + "\n".join(found)


def test_rows_per_source_are_not_fewer_than_listed():
    tables = parse(chapter_text())
    counts = {label: len(tables[label].rows) for label in SOURCES if label in tables}
    assert counts.keys() == SOURCES.keys()
    short = {label: (n, SOURCES[label][1]) for label, n in counts.items() if n < SOURCES[label][1]}
    assert not short, f"rows (found, listed): {short}"


def test_every_verdict_is_one_of_the_vocabulary():
    verdicts = [r["verdict"] for t in parse(chapter_text()).values() if t.label in SOURCES for r in t.rows]
    assert verdicts and set(verdicts) <= VERDICTS


@pytest.mark.parametrize("line, cells", [
    ("| a | b |", ["a", "b"]),
    ("| $\\lvert x \\rvert$ | `a|b` |", ["$\\lvert x \\rvert$", "`a|b`"]),
    ("| x \\| y | {{< var a.b >}} |", ["x \\| y", "{{< var a.b >}}"]),
    ("| $|x|$ | z |", ["$|x|$", "z"]),
])
def test_cells_split_only_on_separators(line, cells):
    assert split_cells(line) == cells


def test_typed_numbers_are_found_outside_citations():
    assert re.findall(r"\d", without_citations("{{< var gpt2.a.b_1 >}} and $0.5$ in §[-@sec-x1], @tbl-y")) == []
    assert re.findall(r"\d", without_citations("{{< var gpt2.a.b >}} or 0.5")) == ["0", "5"]


# --- one claim, one verdict: the claims tables of the topic chapters against this chapter ------------

CLAIM_ID = re.compile(r'\]\{claim="([\w -]+)"\}')
# A claim cited in prose: [claim text]{claim="id …"}: *verdict*; and a verdict given to a claim that names no id.
INLINE_CLAIM = re.compile(r'\]\{claim="([\w -]+)"\}:\s*\*([^*]+)\*')
INLINE_ORPHAN = re.compile(r'\]:\s*\*([^*]+)\*')
NO_COUNTERPART = "none"
OTHER_MODELS = {"minilm"}


def claim_ids(cell: str) -> list[str]:
    """The ids a claim cell names in its span, [claim text]{claim="id …"}."""
    found = CLAIM_ID.search(cell)
    return found.group(1).split() if found else []


def leading_verdict(cell: str) -> str | None:
    """The verdict a topic table's cell starts with (a qualifier may follow), or None."""
    text = cell.strip().lower()
    for verdict in sorted(VERDICTS, key=len, reverse=True):
        if text.startswith(verdict) and not text[len(verdict):len(verdict) + 1].isalpha():
            return verdict
    return None


SUMMARY = "the claims appendix's summary"
"""The summary section's name among the texts whose inline claims are paired with the tables."""


def topic_chapters() -> dict[str, str]:
    """Every text that names claims outside the per-source tables: each other chapter, and the summary."""
    return {SUMMARY: summary_text()} | {path.name: path.read_text() for path in sorted((REPO / "report").glob("*.qmd"))
                                         if path != CHAPTER}


def pairing_problems(claims_text: str, topics: dict[str, str]) -> list[str]:
    """Every row of a topic chapter's claims table (a table whose first column is a claim and which has a
    verdict column) names its row in this chapter by id, or says it has none; a paired row's verdict starts
    with the verdict of its row here. Rows about another model (a "model" cell naming MiniLM) test the claim
    elsewhere and are not paired; a row with an empty claim cell continues the claim above it."""
    out: list[str] = []
    here: dict[str, str] = {}
    for table in parse(claims_text).values():
        if table.label not in SOURCES:
            continue
        for row in table.rows:
            for cid in claim_ids(row.cells[0]):
                if cid in here:
                    out.append(f"{row.where()}: claim id {cid!r} used twice in the claims chapter")
                here[cid] = row["verdict"].strip().lower()
    for name, text in topics.items():
        for table in parse(text).values():
            header = table.header
            if not header or not header[0].startswith("claim") or "verdict" not in header:
                continue
            verdict_at, model_at = header.index("verdict"), header.index("model") if "model" in header else None
            ids: list[str] = []
            for row in table.rows:
                where = f"{name}, {table.label}, line {row.line}"
                if len(row.cells) != len(header):
                    out.append(f"{where}: {len(row.cells)} cells, expected {len(header)}")
                    continue
                other = model_at is not None and row.cells[model_at].strip().lower() in OTHER_MODELS
                if row.cells[0].strip():
                    ids = claim_ids(row.cells[0])
                    if not ids and not other:
                        out.append(f"{where}: the claim names no row of the claims chapter "
                                   f'(add {{claim="id"}}, or {{claim="{NO_COUNTERPART}"}})')
                if other:
                    continue
                for cid in ids:
                    if cid == NO_COUNTERPART:
                        continue
                    if cid not in here:
                        out.append(f"{where}: claim id {cid!r} is not in the claims chapter")
                    elif leading_verdict(row.cells[verdict_at]) != here[cid]:
                        out.append(f"{where}: verdict {row.cells[verdict_at]!r}, but the claims chapter says "
                                   f"{here[cid]!r} for {cid!r}")
    for name, text in topics.items():
        flat = " ".join(text.split())
        for found in INLINE_CLAIM.finditer(flat):
            for cid in found.group(1).split():
                if cid not in here:
                    out.append(f"{name}: claim id {cid!r} is not in the claims chapter")
                elif leading_verdict(found.group(2)) != here[cid]:
                    out.append(f"{name}: verdict {found.group(2)!r}, but the claims chapter says {here[cid]!r} for {cid!r}")
        out += [f"{name}: the verdict {found.group(1)!r} is given to a claim that names no row of the claims chapter"
                for found in INLINE_ORPHAN.finditer(flat) if leading_verdict(found.group(1))]
    return out


def test_every_claim_in_a_topic_chapter_has_the_verdict_of_the_claims_chapter():
    found = pairing_problems(chapter_text(), topic_chapters())
    assert not found, "claims whose verdicts disagree or are not paired:\n" + "\n".join(found)


def test_the_pairing_covers_the_chapter_s_list_of_main_claims():
    """A guard against a parser that finds nothing: the chapter's main claims are seen and paired."""
    assert len(INLINE_CLAIM.findall(" ".join(summary_text().split()))) >= 20


def test_the_summary_names_a_claim_of_every_source():
    """The chapter's list cites each source and links to its table, one list item per source."""
    items = [item for item in re.split(r"\n(?=- )", summary_text()) if 'claim="' in item]
    assert len(items) == len(SOURCES)
    for item, (label, (key, _)) in zip(items, SOURCES.items()):
        assert f"[@{key}]" in item and f"@{label.replace('tbl-', 'sec-')}" in item


def _inline(topics: dict[str, str], old: str, new: str) -> dict[str, str]:
    text = topics[SUMMARY]
    assert old in text
    return topics | {SUMMARY: text.replace(old, new, 1)}


def break_topic_verdict(claims, topics):
    return claims, _inline(topics, '{claim="simon-p-perp-e"}: *confirmed*', '{claim="simon-p-perp-e"}: *refined*')


def break_claims_verdict(claims, topics):
    row = next(r for t in parse(claims).values() if t.label in SOURCES for r in t.rows
               if claim_ids(r.cells[0]) == ["simon-p-perp-e"])
    return replace_row(claims, row, with_cell(row, "verdict", "refined")), topics


def break_drop_an_id(claims, topics):
    return claims, _inline(topics, '{claim="simon-sinusoids"}', "")


def break_unknown_id(claims, topics):
    return claims, _inline(topics, '{claim="padova-mp-edge"}', '{claim="padova-no-such"}')


@pytest.mark.parametrize("mutate", [break_topic_verdict, break_claims_verdict, break_drop_an_id, break_unknown_id],
                         ids=lambda f: f.__name__.removeprefix("break_"))
def test_a_disagreement_between_chapters_is_caught(mutate):
    claims, topics = chapter_text(), topic_chapters()
    assert not pairing_problems(claims, topics), "the chapters must agree for this test to mean anything"
    assert pairing_problems(*mutate(claims, topics)), f"{mutate.__name__} was not caught"


# --- mutations: each break must be caught -----------------------------------------------------

def first_row(text: str, verdict: str, label: str | None = None) -> Row:
    tables = parse(text)
    return next(r for t in tables.values() if t.label in SOURCES and (label is None or t.label == label)
                for r in t.rows if r["verdict"] == verdict)


def replace_row(text: str, row: Row, cells: list[str] | None) -> str:
    """The text with one table row replaced by new cells, or deleted (cells None)."""
    lines = text.splitlines()
    if cells is None:
        del lines[row.line - 1]
    else:
        lines[row.line - 1] = "| " + " | ".join(cells) + " |"
    return "\n".join(lines) + "\n"


def with_cell(row: Row, column: str, value: str) -> list[str]:
    cells = list(row.cells)
    cells[COLUMNS.index(column)] = value
    return cells


def mutate_delete_verdict(text):
    row = first_row(text, "confirmed")
    return replace_row(text, row, with_cell(row, "verdict", ""))


def mutate_misspell_verdict(text):
    row = first_row(text, "refined")
    return replace_row(text, row, with_cell(row, "verdict", "partly confirmed"))


def mutate_drop_variables(text):
    row = first_row(text, "confirmed")
    return replace_row(text, row, with_cell(row, "our value", "see the chapter"))


def mutate_type_a_number(text):
    row = first_row(text, "refined")
    return replace_row(text, row, with_cell(row, "our value", row["our value"] + " (about 0.5)"))


def mutate_unknown_key(text):
    row = first_row(text, "confirmed")
    return replace_row(text, row, with_cell(row, "our value", "{{< var gpt2.no_such_analysis.value >}}"))


def mutate_delete_row(text):
    return replace_row(text, first_row(text, "not testable here", "tbl-claims-padova"), None)


def mutate_silent_not_testable(text):
    row = first_row(text, "not testable here")
    return replace_row(text, row, with_cell(row, "note", "Left open."))


def mutate_uncorrect_known_error(text):
    tables = parse(text)
    row = next(r for r in tables["tbl-claims-simon"].rows if r"1024 \times 784" in r["claim"])
    return replace_row(text, row, with_cell(row, "verdict", "confirmed"))


def mutate_confirm_a_formula(text):
    row = next(r for r in parse(text)["tbl-claims-padova"].rows if "thin outer shell" in r["claim"])
    return replace_row(text, row, with_cell(row, "verdict", "confirmed"))


def mutate_correct_a_reproduced_number(text):
    row = next(r for r in parse(text)["tbl-claims-padova"].rows if "$153$ components" in r["claim"])
    return replace_row(text, row, with_cell(row, "verdict", "corrected"))


def mutate_drop_a_cell(text):
    row = first_row(text, "corrected")
    return replace_row(text, row, list(row.cells[:-1]))


MUTATIONS = [mutate_delete_verdict, mutate_misspell_verdict, mutate_drop_variables, mutate_type_a_number,
             mutate_unknown_key, mutate_delete_row, mutate_silent_not_testable, mutate_uncorrect_known_error,
             mutate_confirm_a_formula, mutate_correct_a_reproduced_number, mutate_drop_a_cell]


@pytest.mark.parametrize("mutate", MUTATIONS, ids=lambda f: f.__name__.removeprefix("mutate_"))
def test_a_broken_chapter_is_caught(mutate):
    text = chapter_text()
    assert not problems(text, variables()), "the chapter itself must be sound for this test to mean anything"
    broken = mutate(text)
    assert broken != text
    assert problems(broken, variables()), f"{mutate.__name__} was not caught"
